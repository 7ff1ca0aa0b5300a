"""YAML documents that remember where each value came from.

Topology, policy, suite and scenario files are validated before anything is
touched, and every error names ``file:line`` and the field.  PyYAML's node
graph carries line numbers; this module turns it into plain Python values plus
a side table from the value's path (``("guests", 2, "tag")``) to its line.
Duplicate keys, which PyYAML silently accepts, are reported as errors.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Union

import yaml

from .errors import ConfigError, Problem

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


def _convert(node: yaml.Node, path: PathKey, doc: Document, problems: list[Problem]) -> Any:
    doc.lines[path] = node.start_mark.line + 1
    if isinstance(node, yaml.MappingNode):
        result: dict[Any, Any] = {}
        for key_node, value_node in node.value:
            key = yaml.SafeLoader.construct_object(_LOADER, key_node, deep=True)
            if not isinstance(key, (str, int, float, bool)) or key is None:
                problems.append(
                    Problem(doc.file, key_node.start_mark.line + 1, dotted(path), "keys must be plain scalars")
                )
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
            result[key] = _convert(value_node, (*path, key), doc, problems)
            doc.lines[(*path, key)] = key_node.start_mark.line + 1
        return result
    if isinstance(node, yaml.SequenceNode):
        return [_convert(item, (*path, i), doc, problems) for i, item in enumerate(node.value)]
    return yaml.SafeLoader.construct_object(_LOADER, node, deep=True)


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
    try:
        root = yaml.compose(text, Loader=_Loader)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else None
        reason = getattr(exc, "problem", None) or str(exc)
        raise ConfigError([Problem(file, line, "(syntax)", f"YAML syntax error: {reason}")]) from None
    if root is None:
        doc.data = None
        return doc
    problems: list[Problem] = []
    doc.data = _convert(root, (), doc, problems)
    if problems and strict:
        raise ConfigError(problems)
    doc.problems = problems
    return doc


def load(path: str | Path, *, strict: bool = True) -> Document:
    """Read and parse the YAML file at ``path``."""
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError([Problem(str(p), None, "(file)", f"cannot read: {exc.strerror}")]) from None
    except UnicodeDecodeError:
        raise ConfigError([Problem(str(p), None, "(file)", "not UTF-8 text")]) from None
    return parse(text, str(p), strict=strict)
