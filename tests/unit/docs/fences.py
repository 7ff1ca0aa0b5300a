"""The manual's fenced blocks, as the docs checks read them: command lines and file examples.

Conventions (docs/index.md's writers follow them):

* In a ```` ```sh ```` (``bash``, ``shell``) fence every line is a command; in ```` ```console ````
  only the lines after a ``$ `` or ``# `` prompt are (the rest is output).  A command line that
  starts with ``hvnet``, ``.venv/bin/hvnet`` or ``sudo hvnet`` (after ``VAR=value`` assignments)
  must parse with hvnet's own parser; a trailing ``\\`` continues it on the next line.  Synopsis
  notation is read as such: ``[--json]`` is checked as ``--json`` (the fullest form), and a line
  with a bare ``...`` (arguments left out) is a sketch, not checked.
* A fence is a file example when the line right before it is ``<!-- example: KIND -->``: KIND is
  one of :data:`KINDS` (validated by hvnet's loader for it) or ``fragment`` (deliberately partial,
  not validated).  A ``yaml`` fence with neither marker is an error: an example nobody checks
  goes stale.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Iterator
from dataclasses import dataclass

KINDS = ("policy", "suite", "scenario", "inventory", "topology", "vms", "conf")
SHELLS = ("sh", "bash", "shell", "console")
_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*(\S*)")
_MARKER = re.compile(r"^\s*<!--\s*example:\s*([A-Za-z-]+)\s*-->\s*$")
_PROMPT = re.compile(r"^(?:\$|#)\s+")
_ASSIGNMENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*=")
_HVNET = ("hvnet", ".venv/bin/hvnet", "./.venv/bin/hvnet", "/usr/bin/hvnet")


@dataclass(frozen=True)
class Fence:
    """One fenced block: where its first content line is, its language, the marker before it, its text."""

    line: int  # 1-based line of the opening fence
    lang: str
    marker: str | None
    body: str


@dataclass(frozen=True)
class Command:
    line: int
    text: str  # as written (continuations joined)
    argv: list[str]  # hvnet's arguments
    problem: str = ""  # why the line is not a command a shell would run (unbalanced quotes)


def fences(text: str) -> Iterator[Fence]:
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        m = _FENCE.match(lines[i])
        if not m:
            i += 1
            continue
        indent, ticks, lang = m.groups()
        prev = _MARKER.match(lines[i - 1]) if i else None
        j = i + 1
        while j < len(lines) and not (
            lines[j].strip().startswith(ticks[0] * len(ticks)) and not lines[j].strip().strip(ticks[0])
        ):
            j += 1
        body = "\n".join(ln[len(indent) :] if ln.startswith(indent) else ln.lstrip() for ln in lines[i + 1 : j])
        yield Fence(i + 1, lang.lower(), prev.group(1) if prev else None, body + "\n" if body else "")
        i = j + 1


def _logical_lines(fence: Fence) -> Iterator[tuple[int, str]]:
    """(line, command) of a shell fence: prompts removed, output lines of a console fence dropped,
    continuations joined."""
    pending: tuple[int, str] | None = None
    for n, raw in enumerate(fence.body.splitlines(), fence.line + 1):
        if pending is not None:
            start, text = pending
        else:
            prompted = _PROMPT.match(raw)
            if fence.lang == "console" and not prompted:
                continue
            start, text, raw = n, "", raw[prompted.end() :] if prompted else raw
        if raw.rstrip().endswith("\\"):
            pending = (start, text + raw.rstrip()[:-1] + " ")
            continue
        pending = None
        yield start, (text + raw).strip()


def _unbracket(words: list[str]) -> list[str]:
    """``[--method group]`` -> ``--method group``: an optional part of a synopsis, checked as given.

    Only a bracket opening on an option (``[-``) is synopsis; ``[fe80::1]:6640`` is an argument."""
    out, inside = [], False
    for w in words:
        if not inside and w.startswith("[-"):
            w, inside = w[1:], True
        if inside and w.endswith("]"):
            w, inside = w[:-1], False
        if w:
            out.append(w)
    return out


def commands(fence: Fence) -> Iterator[Command]:
    """The hvnet command lines of a shell fence, each with the arguments hvnet would get."""
    if fence.lang not in SHELLS:
        return
    for n, text in _logical_lines(fence):
        try:
            lex = shlex.shlex(text, posix=True, punctuation_chars="|&;<>()")
            lex.whitespace_split = True
            lex.commenters = "#"
            words = list(lex)
        except ValueError as exc:  # unbalanced quotes: wrong if it is hvnet's line, else not ours
            if re.match(r"^(sudo\s+)?(\S*/)?hvnet(\s|$)", text):
                yield Command(n, text, [], f"not a shell command line: {exc}")
            continue
        while words and _ASSIGNMENT.match(words[0]):
            words.pop(0)
        if words[:1] == ["sudo"]:
            words.pop(0)
            while words and (words[0].startswith("-") or _ASSIGNMENT.match(words[0])):
                words.pop(0)
        if not words or words[0] not in _HVNET:
            continue
        if "..." in words:
            continue  # a sketch: arguments left out
        argv: list[str] = []
        for w in _unbracket(words[1:]):
            if w and not w.strip("|&;<>()"):  # the shell's: a pipe, a list, a redirection
                if w[0] in "<>" and argv[-1:] in (["1"], ["2"]):
                    argv.pop()  # 2>/dev/null: the 2 was the redirection's
                break
            argv.append(w)
        yield Command(n, text, argv)
