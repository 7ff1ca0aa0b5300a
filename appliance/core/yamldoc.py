"""YAML documents that remember where each value came from.

Topology, policy, suite and scenario files are validated before anything is
touched, and every error names ``file:line`` and the field.  PyYAML's node
graph carries line numbers; this module turns it into plain Python values plus
a side table from the value's path (``("guests", 2, "tag")``) to its line.
Duplicate keys, which PyYAML silently accepts, are reported as errors.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

import yaml

from appliance.core import trusted as trusted_files
from appliance.core import validate
from appliance.core.errors import ConfigError, Problem

# (typing forms: this module is evaluated at run time on Python 3.9 too)
PathKey = tuple[Union[str, int], ...]


@dataclass
class Document:
    """A parsed YAML file: its data and the line of every value in it."""

    file: str
    data: Any
    lines: dict[PathKey, int] = field(default_factory=dict)
    # Duplicate keys found while parsing (only when parsed with strict=False).
    problems: list[Problem] = field(default_factory=list)

    def line(self, path: PathKey) -> int | None:
        """Line of ``path`` (1-based), falling back to the nearest parent."""
        p = tuple(path)
        while p:
            if p in self.lines:
                return self.lines[p]
            p = p[:-1]
        return self.lines.get((), None)

    def problem(self, path: PathKey, message: str) -> Problem:
        """A :class:`Problem` located at ``path`` in this document."""
        return Problem(self.file, self.line(path), dotted(path), message)

    def unknown_keys(self, mapping: dict[str, Any], path: PathKey, allowed: set[str]) -> list[Problem]:
        """One problem per key of ``mapping`` (found at ``path``) not in ``allowed``."""
        listed = ", ".join(sorted(allowed))
        return [self.problem((*path, k), f"unknown key; allowed: {listed}") for k in mapping if k not in allowed]


def dotted(path: PathKey) -> str:
    """``("guests", 2, "tag")`` -> ``guests[2].tag`` (the field in messages)."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        else:
            out += f".{part}" if out else str(part)
    return out or "(document)"


# Bounds on what a file may make hvnet do before anything is validated: a few
# hundred bytes of nested aliases ("billion laughs") otherwise expand to
# millions of values, a recursive alias or deep nesting ends in RecursionError.
MAX_BYTES = 8 * 1024 * 1024  # a 1000-VIF policy is about 150 KB
MAX_VALUES = 100_000  # values after alias expansion (a 1000-VIF policy has ~10,000)
MAX_DEPTH = 64
PLAIN_TAGS = frozenset(
    f"tag:yaml.org,2002:{t}" for t in ("str", "int", "float", "bool", "null", "seq", "map")
)  # anything else (``!!python/...``, ``!!binary``, local tags) is refused


class _Budget:
    """What one conversion may still spend, and the nodes being converted (to catch recursive aliases)."""

    def __init__(self) -> None:
        self.values = 0
        self.open: set[int] = set()


class _Stop(Exception):
    """The document exceeded a bound: one problem, and nothing else is worth reading."""

    def __init__(self, problem: Problem) -> None:
        self.problem = problem


def _convert(node: yaml.Node, path: PathKey, doc: Document, problems: list[Problem], budget: _Budget) -> Any:
    line = node.start_mark.line + 1
    budget.values += 1
    if budget.values > MAX_VALUES:
        raise _Stop(Problem(doc.file, line, dotted(path), f"more than {MAX_VALUES:,} values (aliases expand); "
                            "hvnet files need no aliases of this size"))  # fmt: skip
    if len(path) > MAX_DEPTH:
        raise _Stop(Problem(doc.file, line, dotted(path[:MAX_DEPTH]), f"nested deeper than {MAX_DEPTH} levels"))
    if id(node) in budget.open:
        raise _Stop(Problem(doc.file, line, dotted(path), "recursive alias: a value that contains itself"))
    if node.tag not in PLAIN_TAGS:
        problems.append(Problem(doc.file, line, dotted(path), f"unsupported tag {node.tag!r}; allowed: plain YAML"))
        return None
    doc.lines[path] = line
    budget.open.add(id(node))
    try:
        if isinstance(node, yaml.MappingNode):
            return _mapping(node, path, doc, problems, budget)
        if isinstance(node, yaml.SequenceNode):
            return [_convert(item, (*path, i), doc, problems, budget) for i, item in enumerate(node.value)]
        return _scalar(node, path, doc, problems)
    finally:
        budget.open.discard(id(node))


def _mapping(node: yaml.MappingNode, path: PathKey, doc: Document, problems: list[Problem], budget: _Budget) -> Any:
    result: dict[Any, Any] = {}
    for key_node, value_node in node.value:
        key = _scalar(key_node, path, doc, problems, key=True) if isinstance(key_node, yaml.ScalarNode) else None
        if not isinstance(key, (str, int, float, bool)) or key is None:
            problems.append(Problem(doc.file, key_node.start_mark.line + 1, dotted(path), "keys must be plain scalars"))
            continue
        key = str(key)
        if key in result:
            problems.append(
                Problem(
                    doc.file,
                    key_node.start_mark.line + 1,
                    dotted((*path, key)),
                    f"duplicate key (first given on line {doc.lines[(*path, key)]})",
                )
            )
            continue
        result[key] = _convert(value_node, (*path, key), doc, problems, budget)
        doc.lines[(*path, key)] = key_node.start_mark.line + 1
    return result


def _scalar(node: yaml.ScalarNode, path: PathKey, doc: Document, problems: list[Problem], key: bool = False) -> Any:
    """A plain scalar's value; a number out of range or not finite, or text holding control characters
    (:func:`validate.no_control`), is a problem, not an exception."""
    line = node.start_mark.line + 1
    if node.tag not in PLAIN_TAGS:
        problems.append(Problem(doc.file, line, dotted(path), f"unsupported tag {node.tag!r}; allowed: plain YAML"))
        return None
    try:
        value = yaml.SafeLoader.construct_object(_LOADER, node, deep=True)
    except (yaml.YAMLError, ValueError, OverflowError) as exc:
        problems.append(Problem(doc.file, line, dotted(path), f"cannot read {node.value[:40]!r}: {exc}"[:200]))
        return None
    if isinstance(value, float) and not math.isfinite(value):
        problems.append(Problem(doc.file, line, dotted(path), f"{node.value[:40]!r} is not a finite number"))
        return None
    if isinstance(value, str):
        try:  # a key is a name (a mirror's, a bridge's): no tab nor newline either
            validate.no_control(value, allow="" if key else validate.TEXT_ALLOWS)
        except ValueError as exc:  # the value is kept: the file's own checks go on without a second complaint
            problems.append(Problem(doc.file, line, dotted(path), str(exc)))
    return value


# libyaml's parser when PyYAML was built with it (3x faster on a 1000-VIF policy).
_Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class _Loader(_Base):  # type: ignore[misc,valid-type]
    """SafeLoader with YAML 1.2 scalars.

    YAML 1.1 reads ``52:54:00:12:34:56`` as a base-60 integer and ``no`` or
    ``off`` as booleans; both are traps in files full of MACs and flags.
    """


_Loader.yaml_implicit_resolvers = {
    first: [
        (tag, rx)
        for tag, rx in resolvers
        if tag not in ("tag:yaml.org,2002:bool", "tag:yaml.org,2002:int", "tag:yaml.org,2002:float")
    ]
    for first, resolvers in yaml.SafeLoader.yaml_implicit_resolvers.items()
}
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:bool", re.compile(r"^(?:true|True|TRUE|false|False|FALSE)$"), list("tTfF")
)
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:int", re.compile(r"^(?:[-+]?[0-9]+|0x[0-9a-fA-F]+)$"), list("-+0123456789")
)
_Loader.add_implicit_resolver(
    "tag:yaml.org,2002:float",
    re.compile(r"^(?:[-+]?(?:[0-9][0-9]*)?\.[0-9]+(?:[eE][-+]?[0-9]+)?|[-+]?[0-9]+(?:\.[0-9]*)?[eE][-+]?[0-9]+)$"),
    list("-+0123456789."),
)


_LOADER = _Loader("")


def parse(text: str, file: str, *, strict: bool = True) -> Document:
    """Parse YAML ``text`` (named ``file`` in errors) into a :class:`Document`.

    Duplicate keys raise at once when ``strict``; otherwise they are left in
    ``Document.problems`` for the caller to report with its own findings.
    """
    doc = Document(file=file, data=None)
    if len(text) > MAX_BYTES:
        raise ConfigError([Problem(file, None, "(file)", f"{len(text):,} characters; at most {MAX_BYTES:,}")])
    try:
        root = yaml.compose(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        reason = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([Problem(file, line, "(syntax)", f"YAML syntax error: {reason}")]) from None
    except RecursionError:
        raise ConfigError([Problem(file, None, "(syntax)", f"nested deeper than {MAX_DEPTH} levels")]) from None
    if root is None:
        doc.data = None
        return doc
    problems: list[Problem] = []
    try:
        doc.data = _convert(root, (), doc, problems, _Budget())
    except _Stop as stop:
        raise ConfigError([*problems, stop.problem]) from None
    if problems and strict:
        raise ConfigError(problems)
    doc.problems = problems
    return doc


def load(path: str | Path, *, strict: bool = True, trusted: str | None = None) -> Document:
    """Read and parse the YAML file at ``path``.

    ``trusted`` says what the file is ("the host inventory") when it decides
    what hvnet does as root: it is then read only if no other user could have
    written it (:func:`appliance.core.trusted.read`, checked on the opened descriptor).
    """
    p = Path(path)
    try:
        if trusted is not None:
            text = trusted_files.read(p, trusted, max_bytes=MAX_BYTES)[0]
        elif p.stat().st_size > MAX_BYTES:
            raise ConfigError([Problem(str(p), None, "(file)", f"{p.stat().st_size:,} bytes; at most {MAX_BYTES:,}")])
        else:
            text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([Problem(str(p), None, "(file)", f"cannot read: {exc.strerror}")]) from None
    except UnicodeDecodeError:
        raise ConfigError([Problem(str(p), None, "(file)", "not UTF-8 text")]) from None
    return parse(text, str(p), strict=strict)
