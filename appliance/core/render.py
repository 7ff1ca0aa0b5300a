"""Plain-text rendering for the CLI: aligned tables and human units.

Every number carries its unit; a value that was not measured is shown as
``-`` (never as 0).  Text from outside (VM, port, mirror and logical port
names, audit lines, tool output, error messages) goes through
:func:`terminal` before it reaches a terminal; ``--json`` stays exact.
"""

from __future__ import annotations

import json
import re
import sys
from collections.abc import Sequence
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any

# What a terminal obeys or reorders instead of showing: C0 (ESC included), DEL and C1 (0x9b is CSI on
# some terminals), the line and paragraph separators, the bidirectional marks, embeddings, overrides and
# isolates, and lone surrogates (which cannot even be encoded to write them).
_UNSHOWN = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")


def _escape(m: re.Match[str]) -> str:
    code = ord(m.group(0))
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def terminal(text: str, keep: str = "") -> str:
    """``text`` with every character a terminal would act on shown as an escape (``\\x1b``, ``\\u202e``).

    A VM named ``"\\x1b[2J"`` must not clear the operator's screen nor set the window title: the
    operator sees the name is odd.  ``keep``: characters left as they are (``"\\n"`` for whole
    blocks of text whose lines hvnet itself made).
    """
    if not _UNSHOWN.search(text):
        return text
    if keep:
        return "".join(
            terminal(part) if part not in keep else part for part in re.split(f"([{re.escape(keep)}])", text)
        )
    return _UNSHOWN.sub(_escape, text)


def lines(parts: Sequence[str]) -> str:
    """Lines joined, each :func:`terminal`-safe: a line end inside one (from a name) is shown, not obeyed."""
    text = "\n".join(parts)
    plain = text.count("\n") == len(parts) - 1 and not _UNSHOWN.search(text.replace("\n", ""))
    return text if plain else "\n".join(map(terminal, parts))


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns separated by two spaces (no trailing blanks); every cell :func:`terminal`-safe."""
    if _UNSHOWN.search("".join(headers) + "".join("".join(r) for r in rows)):  # one pass when all is plain
        headers = [terminal(h) for h in headers]
        rows = [[terminal(c) for c in row] for row in rows]
    widths = [len(h) for h in headers]
    for row in rows:
        for i, cell in enumerate(row):
            widths[i] = max(widths[i], len(cell))
    lines = []
    for row in [list(headers), *[list(r) for r in rows]]:
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
    return "\n".join(lines)


def si(value: float | None, unit: str, precision: int = 1) -> str:
    """``1234567, "bit/s"`` -> ``1.2 Mbit/s``; ``None`` -> ``-``."""
    if value is None:
        return "-"
    for factor, prefix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if abs(value) >= factor:
            return f"{value / factor:.{precision}f} {prefix}{unit}"
    return f"{value:.0f} {unit}"


def count(value: int | None) -> str:
    """Packet/byte counts, compact: ``13015`` -> ``13.0k``."""
    if value is None:
        return "-"
    for factor, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if value >= factor:
            return f"{value / factor:.1f}{suffix}"
    return str(value)


def kbps(value: float | None) -> str:
    """A rate configured in kbit/s, shown in kbit/s (the unit OVS takes)."""
    if not value:
        return "-"
    return f"{value:g} kbit/s"


class TerminalStream:
    """A text stream that shows what it is given through :func:`terminal` (line ends kept).

    The command line wraps stdout and stderr in it, so no message, table or
    note of any command -- whatever names it quotes -- can steer the
    terminal.  What must stay exact (``--json``, an exported policy) is
    written to :attr:`exact`, the stream underneath.
    """

    def __init__(self, stream: Any) -> None:
        self.exact = stream

    def write(self, text: str) -> int:
        self.exact.write(terminal(text, keep="\n"))
        return len(text)

    def __getattr__(self, name: str) -> Any:  # flush, fileno, isatty, encoding...: the stream's own
        return getattr(self.exact, name)


def exact_stdout() -> Any:
    """Standard output as given, even when the command line shows text through :class:`TerminalStream`."""
    return getattr(sys.stdout, "exact", sys.stdout)


def print_json(obj: Any) -> None:
    """``--json`` output: indented, key order kept, anything unusual as text; exact (never escaped).

    Encoded whole, then written once: ``json.dump`` to a stream writes every
    token separately (200,000 writes for a 1000-VIF host).
    """
    exact_stdout().write(indented_json(obj) + "\n")


def indented_json(obj: Any) -> str:
    """``json.dumps(obj, indent=2, default=str)``, the same bytes, in half the time.

    With ``indent`` the standard library encodes in pure Python, token by
    token (40 ms for a 1000-VIF status); its C encoder only writes compact
    JSON.  But the C encoder takes any item separator: given a comma, a line
    end and the indent of one depth, it writes a container whose items hold
    no further containers exactly as ``indent`` would, between the brackets.
    So each container is written by it, the ones nested in it replaced by a
    marker first and then spliced back in at their own depth.  Anything that
    does not fit (a marker found in the data itself, no C encoder) is left to
    ``json.dumps``.
    """
    if c_make_encoder is None or not (isinstance(obj, _CONTAINERS) and obj):
        return json.dumps(obj, indent=2, default=str)
    try:
        return _container(obj, 0)
    except _Unusual:
        return json.dumps(obj, indent=2, default=str)


_CONTAINERS = (dict, list, tuple)  # what json writes as an object or an array
_SCALARS = frozenset({str, int, float, bool, type(None)})
_MARKER = "\x00hvnet:nested\x00"  # stands for a nested container while its parent is encoded
_MARKER_JSON = json.dumps(_MARKER)
_flat_encoders: dict[int, Any] = {}


class _Unusual(Exception):
    """The data holds the marker: :func:`indented_json` leaves it to ``json.dumps``."""


def _flat_encoder(depth: int) -> Any:
    """The C encoder of a container at ``depth`` whose items are all scalars (or empty containers)."""
    encoder = _flat_encoders.get(depth)
    if encoder is None:
        separator = ",\n" + "  " * (depth + 1)
        encoder = c_make_encoder(None, str, encode_basestring_ascii, None, ": ", separator, False, False, True)
        _flat_encoders[depth] = encoder
    return encoder


def _container(obj: Any, depth: int) -> str:
    """A non-empty dict, list or tuple at ``depth``, as ``json.dumps(indent=2)`` writes it there."""
    items = obj.values() if isinstance(obj, dict) else obj
    flat = obj
    nested = []
    if not _SCALARS.issuperset(map(type, items)):
        keys = [
            k for k, v in (obj.items() if isinstance(obj, dict) else enumerate(obj)) if isinstance(v, _CONTAINERS) and v
        ]
        if keys:
            flat = dict(obj) if isinstance(obj, dict) else list(obj)
            for k in keys:
                nested.append(_container(flat[k], depth + 1))
                flat[k] = _MARKER
    text = "".join(_flat_encoder(depth)(flat, 0))
    if nested:
        parts = text.split(_MARKER_JSON)
        if len(parts) != len(nested) + 1:
            raise _Unusual
        text = "".join([part for pair in zip(parts, nested) for part in pair]) + parts[-1]
    return f"{text[0]}\n{'  ' * (depth + 1)}{text[1:-1]}\n{'  ' * depth}{text[-1]}"
