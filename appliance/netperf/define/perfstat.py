"""A suite's ``perf_stat:`` key: which ``perf stat`` events to count on ovs-vswitchd during each repetition.

The vTAP study (2024) explained a mirror's cost from ovs-vswitchd's
cycles, instructions, cache misses and their ratio (CPI), counted by
``perf stat -p PID``.  A suite asks for the same with::

    perf_stat:
      events: [task-clock, context-switches, page-faults, cycles, instructions, cache-misses]

(``perf_stat: true`` asks for :data:`DEFAULT_EVENTS`).  A case may carry its
own ``perf_stat:`` (or ``perf_stat: false``), which replaces the suite's for
that case only: perf attached to ovs-vswitchd costs a little itself, so a
study may count the cases it wants to explain and leave its baseline alone.
The key is not
``counters``: in a run's results that word already means the switch's port
counters.  Events come from a fixed list, so what reaches perf's command line
is known; software events are counted by the kernel everywhere, hardware
ones only where the host exposes a PMU (many VMs do not: perf then says
``<not supported>``, and the run records that, never a number).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

SOFTWARE_EVENTS = (
    "task-clock",
    "cpu-clock",
    "context-switches",
    "cpu-migrations",
    "page-faults",
    "minor-faults",
    "major-faults",
)
HARDWARE_EVENTS = (
    "cycles",
    "instructions",
    "branches",
    "branch-misses",
    "cache-references",
    "cache-misses",
    "LLC-loads",
    "LLC-load-misses",
    "LLC-stores",
    "LLC-store-misses",
    "L1-dcache-loads",
    "L1-dcache-load-misses",
    "L1-dcache-stores",
)
EVENTS = SOFTWARE_EVENTS + HARDWARE_EVENTS
DEFAULT_EVENTS = ("task-clock", "context-switches", "page-faults", "cycles", "instructions", "cache-misses")
_KEYS = {"events"}


@dataclass(frozen=True)
class PerfStatSpec:
    """The events ``perf stat`` counts on ovs-vswitchd's threads over each measured repetition."""

    events: tuple[str, ...] = DEFAULT_EVENTS

    @property
    def hardware(self) -> tuple[str, ...]:
        return tuple(e for e in self.events if e in HARDWARE_EVENTS)


def parse(value: Any, bad: Callable[[tuple[Any, ...], str], None], path: tuple[Any, ...]) -> Optional[PerfStatSpec]:
    """``perf_stat: true`` or ``{events: [...]}``; every problem through ``bad(path, message)``."""
    if value is True:
        return PerfStatSpec()
    if not isinstance(value, dict):
        bad(path, f"must be true or {{events: [EVENT, ...]}}, not {value!r}")
        return None
    for key in value:
        if key not in _KEYS:
            bad((*path, key), f"unknown key; allowed: {', '.join(sorted(_KEYS))}")
    raw = value.get("events")
    if not isinstance(raw, list) or not raw:
        bad((*path, "events"), f"a non-empty list of perf events, not {raw!r}; allowed: {', '.join(EVENTS)}")
        return None
    ok = True
    for i, event in enumerate(raw):
        if not isinstance(event, str) or event not in EVENTS:
            bad((*path, "events", i), f"unknown perf event {event!r}; allowed: {', '.join(EVENTS)}")
            ok = False
    if ok and len(set(raw)) != len(raw):
        bad((*path, "events"), "an event is listed twice")
        ok = False
    return PerfStatSpec(tuple(raw)) if ok else None
