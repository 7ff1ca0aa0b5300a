"""Helpers for the console's Pilot tests: waiting, reading cells, text snapshots.

Snapshots are the screen's text (what an operator over SSH reads), compared
with a file in ``tests/tui/snapshots/``.  Live figures (rates, CPU, times,
counters, the host's name) differ from run to run, so they are masked before
comparing: every number becomes ``#``, bar and sparkline glyphs become ``▮``,
and runs of spaces collapse (column widths follow the numbers).  What is left
-- titles, labels, column headings, VIF names, VLANs, bindings in the footer,
where things are cut at 80 columns -- must match exactly.

``HVNET_UPDATE_SNAPSHOTS=1`` rewrites the files instead of comparing (review
the diff before committing); a missing file is a failure, never a silent pass.
"""

from __future__ import annotations

import difflib
import os
import re
import socket
import time
from pathlib import Path
from typing import Any, Callable

from textual.app import App

SNAPSHOTS = Path(__file__).parent / "snapshots"
SIZES = ((80, 24), (120, 40))

_TIME = re.compile(r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d(:\d\d(\.\d+)?)?(Z|[+-]\d\d:?\d\d)?|\b\d\d:\d\d(:\d\d)?\b")
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
_GLYPHS = re.compile(r"[▁▂▃▄▅▆▇█▏▎▍▌▋▊▉■▪▮░━╸╺⣀-⣿]+")
_SPACES = re.compile(r"  +")
_TARGET = re.compile(r"(hvnet — ).*")
_SOCKET = re.compile(r"unix:\S+?\.sock|(?:/var/lib/hvnet|/var/tmp|/tmp)/\S+")
_PREFIX = re.compile(r"# ?[kMGTPKi]*(?=bit/s|B\b|pkt|pps)")


async def wait_until(pilot: Any, predicate: Callable[[], bool], timeout: float = 5.0) -> bool:
    """Let the app run until ``predicate()`` holds (True) or ``timeout`` passes (its last value)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        await pilot.pause(0.05)
    return predicate()


def screen_text(app: App) -> str:
    """The current screen as plain text lines (modal dialogs included)."""
    strips = app.screen._compositor.render_strips()
    return "\n".join(s.text.rstrip() for s in strips)


def normalize(text: str, extra: tuple[str, ...] = ()) -> str:
    host = socket.gethostname()
    out = []
    for line in text.splitlines():
        if host:
            line = re.sub(rf"(?<![\w-]){re.escape(host)}(?![\w-])", "HOST", line)
        line = _TARGET.sub(r"\1TARGET", line)  # the header's subtitle: cut at a length that varies
        line = _SOCKET.sub("PATH", line)
        for word in extra:
            if word:
                line = line.replace(word, "…")
        line = _TIME.sub("TIME", line)
        line = _NUMBER.sub("#", line)
        line = _PREFIX.sub("# ", line)
        line = _GLYPHS.sub("▮", line)
        line = _SPACES.sub(" ", line).rstrip()
        out.append(line)
    return "\n".join(out).rstrip() + "\n"


async def assert_snapshot(pilot: Any, app: App, name: str, extra: tuple[str, ...] = (), settle: float = 5.0) -> None:
    """Compare the screen with ``snapshots/<name>-<cols>x<rows>.txt`` once it has settled.

    On a loaded machine a screen can be captured before its last widgets (the footer) are
    painted; the comparison is retried for up to ``settle`` seconds, and a real difference
    still fails with its diff.
    """
    if os.environ.get("HVNET_UPDATE_SNAPSHOTS") != "1":
        cols, rows = app.size
        path = SNAPSHOTS / f"{name}-{cols}x{rows}.txt"
        want = path.read_text() if path.exists() else None
        await wait_until(pilot, lambda: normalize(screen_text(app), extra) == want, settle)
    else:
        await pilot.pause(0.3)
    compare_snapshot(app, name, extra)


def compare_snapshot(app: App, name: str, extra: tuple[str, ...] = ()) -> None:
    """Compare the current screen with ``snapshots/<name>-<cols>x<rows>.txt`` (or rewrite it)."""
    cols, rows = app.size
    path = SNAPSHOTS / f"{name}-{cols}x{rows}.txt"
    text = screen_text(app)
    got = normalize(text, extra)
    assert len(text.split("\n")) == rows, f"screen has {len(text.split(chr(10)))} lines, expected {rows}"
    if os.environ.get("HVNET_UPDATE_SNAPSHOTS") == "1":
        SNAPSHOTS.mkdir(exist_ok=True)
        path.write_text(got)
        return
    assert path.exists(), f"no snapshot {path.name}: run with HVNET_UPDATE_SNAPSHOTS=1 and review it\n{text}"
    want = path.read_text()
    if got != want:
        diff = "\n".join(difflib.unified_diff(want.splitlines(), got.splitlines(), "snapshot", "screen", lineterm=""))
        raise AssertionError(f"screen {name} at {cols}x{rows} differs from {path.name}:\n{diff}\n\nscreen:\n{text}")
