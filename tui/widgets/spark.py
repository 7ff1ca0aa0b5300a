"""A sparkline as text: it fits in a table cell and survives NO_COLOR."""

from __future__ import annotations

BLOCKS = "▁▂▃▄▅▆▇█"
WIDTH = 10


def sparkline(values: list[float], width: int = WIDTH) -> str:
    """The last ``width`` values scaled to their maximum; unmeasured (negative) values are blanks."""
    values = values[-width:]
    if not values:
        return ""
    top = max(values)
    out = []
    for v in values:
        if v < 0:
            out.append(" ")
        elif top <= 0:
            out.append(BLOCKS[0])
        else:
            out.append(BLOCKS[min(len(BLOCKS) - 1, int(v / top * (len(BLOCKS) - 1) + 0.5))])
    return "".join(out).rjust(width)
