"""A small terminal scatter chart: a figure against concurrency, one series per test.

Operators read this over SSH, often without colour (NO_COLOR), so every
series has its own point glyph and a legend names it; colour only repeats
what the glyph already says.  The drawing is a pure function of the data
and the size (:func:`render_lines`), so it is unit-tested without a
terminal; the widget only re-renders it on resize and on new data.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from rich.text import Text
from textual.widget import Widget

GLYPHS = ("*", "o", "+", "x", "@", "%", "$", "=", "~", "^")
OVERLAP = "&"  # two series on one cell: neither glyph would be honest
COLOURS = ("cyan", "magenta", "yellow", "green", "red", "blue", "bright_white", "bright_cyan", "bright_magenta")
Y_LABEL_WIDTH = 7
MIN_PLOT_ROWS = 3
MIN_PLOT_COLS = 10


@dataclass(frozen=True)
class Series:
    """One line of the legend: a name and its measured (x, y) points (nothing invented)."""

    name: str
    points: tuple[tuple[float, float], ...]


def nice_ceiling(value: float) -> float:
    """The smallest 1/2/2.5/5 x 10^k at or above ``value``, so axis ticks are round numbers."""
    if value <= 0 or not math.isfinite(value):
        return 1.0
    exp = math.floor(math.log10(value))
    for step in (1.0, 2.0, 2.5, 5.0, 10.0):
        top = step * 10.0**exp
        if top >= value * (1 - 1e-9):
            return top
    return 10.0 ** (exp + 1)


def compact(value: float) -> str:
    """A tick label in at most 6 characters: 0, 950, 2.5k, 12k, 1.2M."""
    a = abs(value)
    for div, suffix in ((1e9, "G"), (1e6, "M"), (1e3, "k")):
        if a >= div:
            v = value / div
            text = f"{v:.1f}".rstrip("0").rstrip(".") if abs(v) < 10 else f"{v:.0f}"
            return text + suffix
    if a == 0 or a >= 10:
        return f"{value:.0f}"
    return f"{value:.2f}".rstrip("0").rstrip(".")


def _x_column(x: float, xs: Sequence[float], cols: int) -> int:
    lo, hi = min(xs), max(xs)
    if hi == lo:
        return cols // 2
    return round((x - lo) / (hi - lo) * (cols - 1))


def _y_row(y: float, top: float, rows: int) -> int:
    """Row 0 is the top of the plot; 0 sits on the bottom row."""
    frac = max(0.0, min(1.0, y / top)) if top > 0 else 0.0
    return rows - 1 - round(frac * (rows - 1))


def _legend(series: Sequence[Series], width: int, overlap: bool) -> list[str]:
    items = [f"{GLYPHS[i % len(GLYPHS)]} {s.name}" for i, s in enumerate(series)]
    if overlap:
        items.append(f"{OVERLAP} several")
    lines: list[str] = []
    line = ""
    for item in items:
        candidate = f"{line}  {item}" if line else item
        if line and len(candidate) > width:
            lines.append(line)
            line = item
        else:
            line = candidate
    if line:
        lines.append(line)
    return lines


@dataclass(frozen=True)
class Drawing:
    """The chart's lines, and which of them are plot rows (the widget colours glyphs only there)."""

    lines: list[str]
    plot_first: int = 0  # index of the first plot row in ``lines``
    plot_rows: int = 0
    legend_first: int = 0


def _grid(series: Sequence[Series], xs: list[float], top: float, rows: int, cols: int) -> tuple[list[list[str]], bool]:
    grid = [[" "] * cols for _ in range(rows)]
    overlap = False
    for i, s in enumerate(series):
        glyph = GLYPHS[i % len(GLYPHS)]
        for x, y in s.points:
            if not (math.isfinite(x) and math.isfinite(y)):
                continue
            r, c = _y_row(y, top, rows), _x_column(x, xs, cols)
            if grid[r][c] not in (" ", glyph):
                grid[r][c] = OVERLAP
                overlap = True
            else:
                grid[r][c] = glyph
    return grid, overlap


def draw(
    series: Sequence[Series], width: int, height: int, *, y_label: str, x_label: str = "concurrent instances"
) -> Drawing:
    """The chart in ``height`` lines of at most ``width`` characters (legend included).

    The y axis starts at 0 (a cut axis would exaggerate differences between
    throughputs); the x axis spans the measured concurrencies, each labelled
    where the labels fit.
    """
    width = max(width, Y_LABEL_WIDTH + 2 + MIN_PLOT_COLS)
    points = [(x, y) for s in series for x, y in s.points if math.isfinite(x) and math.isfinite(y)]
    if not points:
        lines = [f"no measured {y_label} yet: run a suite or open a past run"]
        return Drawing((lines + [""] * height)[:height])
    cols = width - Y_LABEL_WIDTH - 2
    xs = sorted({x for x, _ in points})
    top = nice_ceiling(max(y for _, y in points))
    legend = _legend(series, width, overlap=False)
    rows = max(MIN_PLOT_ROWS, height - 4 - len(legend))
    grid, overlap = _grid(series, xs, top, rows, cols)
    if overlap:  # the legend says what the overlap glyph means; that may cost a plot row
        legend = _legend(series, width, overlap=True)
        fewer = max(MIN_PLOT_ROWS, height - 4 - len(legend))
        if fewer != rows:
            rows = fewer
            grid, _ = _grid(series, xs, top, rows, cols)
    lines = _assemble(grid, xs, top, width, y_label, x_label, legend, height)
    return Drawing(lines, 1, rows, rows + 4)


def render_lines(
    series: Sequence[Series], width: int, height: int, *, y_label: str, x_label: str = "concurrent instances"
) -> list[str]:
    """Just the text of :func:`draw`."""
    return draw(series, width, height, y_label=y_label, x_label=x_label).lines


def _assemble(
    grid: list[list[str]],
    xs: list[float],
    top: float,
    width: int,
    y_label: str,
    x_label: str,
    legend: list[str],
    height: int,
) -> list[str]:
    rows, cols = len(grid), len(grid[0])
    ticks = {0: top, rows - 1: 0.0}
    if rows >= 5:
        ticks[(rows - 1) // 2] = top * (1 - ((rows - 1) // 2) / (rows - 1))
    lines = [y_label[:width]]
    for r, cells in enumerate(grid):
        label = compact(ticks[r]).rjust(Y_LABEL_WIDTH - 1) + " " if r in ticks else " " * Y_LABEL_WIDTH
        axis = "┤" if r in ticks else "│"
        lines.append(f"{label}{axis} {''.join(cells)}".rstrip())
    lines.append(" " * Y_LABEL_WIDTH + "└" + "─" * (cols + 1))
    tick_line = [" "] * (Y_LABEL_WIDTH + 2 + cols + 6)
    last_end = -1
    for x in xs:
        text = compact(x)
        c = Y_LABEL_WIDTH + 2 + _x_column(x, xs, cols)
        start = max(0, c - len(text) // 2)
        if start <= last_end:  # would overwrite the previous label: leave this one out
            continue
        tick_line[start : start + len(text)] = text
        last_end = start + len(text)
    lines.append("".join(tick_line).rstrip()[:width])
    lines.append(x_label.rjust(width)[:width])
    lines += legend
    return (lines + [""] * height)[:height]


class Chart(Widget):
    """Renders :func:`render_lines` at the widget's size; colours follow the series, glyphs carry the meaning."""

    DEFAULT_CSS = """
    Chart {
        height: 1fr;
        min-height: 8;
    }
    """

    def __init__(self, *, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.series: list[Series] = []
        self.y_label = "Mbit/s"
        self.x_label = "concurrent instances"

    def set_data(self, series: Sequence[Series], y_label: str, x_label: str = "concurrent instances") -> None:
        self.series = list(series)
        self.y_label = y_label
        self.x_label = x_label
        self.refresh()

    @property
    def point_count(self) -> int:
        return sum(len(s.points) for s in self.series)

    def render(self) -> Text:
        d = draw(self.series, self.size.width, self.size.height, y_label=self.y_label, x_label=self.x_label)
        styles = {GLYPHS[i % len(GLYPHS)]: COLOURS[i % len(COLOURS)] for i in range(len(self.series))}
        text = Text(no_wrap=True, overflow="crop")
        for n, line in enumerate(d.lines):
            if n:
                text.append("\n")
            in_plot = d.plot_first <= n < d.plot_first + d.plot_rows
            if not (in_plot or n >= d.legend_first) or not d.plot_rows:
                text.append(line)
                continue
            for k, ch in enumerate(line):
                # in the plot every glyph is a point; in the legend only the glyph before each name
                is_glyph = (in_plot and k > Y_LABEL_WIDTH) or (not in_plot and (k == 0 or line[k - 2 : k] == "  "))
                text.append(ch, styles.get(ch, "") if is_glyph else "")
        return text
