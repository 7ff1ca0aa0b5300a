"""Which saved suite runs ``hvnet suite prune`` removes: a pure decision, one reason per run.

A run is removed only when every rule given says so:

* ``--keep N``: it is not among the N newest runs of its suite (compare
  needs a base of the same suite, so each suite keeps its own history);
* ``--older-than D``: it started more than D ago.

Whatever the rules say, a run is kept when it is *pinned* (a ``pinned`` file
in its directory, written by ``hvnet suite pin``), when it is still
``running`` (or was killed while running: hvnet cannot tell, so a person
decides), or when its start time is unknown.  ``compare`` takes two paths and
records nothing, so hvnet cannot know which runs a script uses as its
baseline: a baseline is pinned, and pruning never touches it.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Optional

PIN_FILE = "pinned"
_UNITS = {"m": 60, "h": 3600, "d": 86400, "w": 7 * 86400}


def parse_age(text: str) -> timedelta:
    """``30d``, ``12h``, ``90m``, ``2w`` -> a duration; ValueError saying what is allowed."""
    m = re.match(r"^([0-9]{1,6})([mhdw])$", text.strip())
    if not m or int(m.group(1)) == 0:
        raise ValueError(f"{text!r} is not an age; allowed: a positive whole number and m, h, d or w (30d, 12h)")
    return timedelta(seconds=int(m.group(1)) * _UNITS[m.group(2)])


@dataclass(frozen=True)
class SavedRun:
    """What the decision needs of a run directory."""

    path: Path
    suite: str
    started: Optional[datetime]  # None: not recorded or not readable
    state: str
    pinned: bool


@dataclass(frozen=True)
class Decision:
    run: SavedRun
    remove: bool
    reason: str


def decide(
    runs: list[SavedRun], *, keep: Optional[int] = None, older_than: Optional[timedelta] = None, now: datetime
) -> list[Decision]:
    """A decision per run, newest first (see the module docstring for the rules)."""
    if keep is None and older_than is None:
        raise ValueError("give --keep N, --older-than AGE or both")
    ordered = sorted(runs, key=lambda r: (r.started is not None, r.started or now), reverse=True)
    rank: dict[Path, int] = {}
    seen: dict[str, int] = defaultdict(int)
    for r in ordered:
        rank[r.path] = seen[r.suite]
        seen[r.suite] += 1
    return [Decision(r, *_one(r, rank[r.path], keep, older_than, now)) for r in ordered]


def _one(
    r: SavedRun, rank: int, keep: Optional[int], older_than: Optional[timedelta], now: datetime
) -> tuple[bool, str]:
    if r.pinned:
        return False, "pinned ('hvnet suite unpin' releases it)"
    if r.state == "running":
        return False, "running, or killed while running: remove it by hand if it is not running"
    if r.started is None:
        return False, "start time unknown"
    age = now - r.started
    if keep is not None and rank < keep:
        return False, f"the newest of {r.suite}" if keep == 1 else f"one of the {keep} newest of {r.suite}"
    if older_than is not None and age <= older_than:
        return False, f"started {_age_text(age)} ago, not more than {_age_text(older_than)}"
    why = [f"started {_age_text(age)} ago"]
    if keep is not None:
        why.append(f"{_ordinal(rank + 1)} newest of {r.suite}")
    return True, ", ".join(why)


def _age_text(age: timedelta) -> str:
    s = max(0, int(age.total_seconds()))
    days, hours, minutes = s // 86400, s % 86400 // 3600, s % 3600 // 60
    if days:
        return f"{days} d {hours} h" if hours else f"{days} d"
    return f"{hours} h {minutes} min" if hours else f"{minutes} min"


def _ordinal(n: int) -> str:
    suffix = "th" if 10 <= n % 100 <= 20 else {1: "st", 2: "nd", 3: "rd"}.get(n % 10, "th")
    return f"{n}{suffix}"
