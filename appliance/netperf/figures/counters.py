"""A switch's port counters between two readings.  Pure."""

from __future__ import annotations

from typing import Any


def deltas(before: dict[str, Any], after: dict[str, Any]) -> dict[str, dict[str, int]]:
    """Each port's increments (ports in both readings, counters both have): a port added between the
    readings, or a counter one reading lacks, has no delta rather than a made-up one."""
    out = {}
    for port, b in after.items():
        a = before.get(port)
        if a is not None:
            out[port] = {k: b[k] - a[k] for k in b if b.get(k) is not None and a.get(k) is not None}
    return out
