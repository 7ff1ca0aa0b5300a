"""Plain-text rendering for the CLI: aligned tables and human units.

Every number carries its unit; a value that was not measured is shown as
``-`` (never as 0).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Sequence
from typing import Any


def table(headers: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns separated by two spaces (no trailing blanks)."""
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


def print_json(obj: Any) -> None:
    """``--json`` output: indented, key order kept, anything unusual as text.

    Encoded whole, then written once: ``json.dump`` to a stream writes every
    token separately (200,000 writes for a 1000-VIF host).
    """
    sys.stdout.write(json.dumps(obj, indent=2, sort_keys=False, default=str) + "\n")
