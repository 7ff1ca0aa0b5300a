"""The report's ``perf stat`` parts: ovs-vswitchd's counted events per step, and what was not measured.

Each event's row is its mean over the step's repetitions that counted it;
an event no repetition counted prints ``-``, and the report's notes say why
(perf's ``<not supported>``, perf missing on the host, permission refused).
When hardware events were asked for and not counted, the notes say that the
question they answer -- why a mirror costs cycles, its CPI -- needs a host
that exposes hardware counters.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from appliance.netperf.define.perfstat import HARDWARE_EVENTS
from appliance.netperf.parse.perfstat import HARDWARE_NOTE
from appliance.netperf.store.records import StepResult, SuiteResult

Row = tuple[str, Callable[[StepResult], str]]


def _records(step: StepResult) -> list[dict[str, Any]]:
    return [r.perf_stat for r in step.repetitions if r.perf_stat]


def _mean(xs: list[float]) -> Optional[float]:
    return sum(xs) / len(xs) if xs else None


def _cell(x: Optional[float], digits: int) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def event_mean(step: StepResult, event: str) -> Optional[float]:
    """The event's count on ovs-vswitchd, mean over the repetitions that counted it (None: none did)."""
    counts = [c for rec in _records(step) if (c := (rec.get("events", {}).get(event) or {}).get("count")) is not None]
    return _mean(counts)


def cpi_mean(step: StepResult) -> Optional[float]:
    return _mean([rec["cpi"] for rec in _records(step) if rec.get("cpi") is not None])


def rows(steps: list[StepResult]) -> list[Row]:
    """One row per event the steps' repetitions asked perf for, and CPI when cycles and instructions were."""
    events: dict[str, str] = {}
    for s in steps:
        for rec in _records(s):
            for event, got in (rec.get("events") or {}).items():
                if got.get("unit") or event not in events:
                    events[event] = got.get("unit") or ""
    out: list[Row] = []
    for event, unit in events.items():
        label = f"perf {event} ({unit}), ovs-vswitchd" if unit else f"perf {event}, ovs-vswitchd"
        out.append((label, lambda st, e=event, d=2 if unit else 0: _cell(event_mean(st, e), d)))
    if "cycles" in events and "instructions" in events:
        out.append(("perf CPI (cycles ÷ instructions)", lambda st: _cell(cpi_mean(st), 3)))
    return out


def notes(doc: SuiteResult) -> list[str]:
    """Why events were not measured (each reason once), and what a hardware-counter question needs."""
    missing: dict[str, list[str]] = {}  # reason -> events
    counted: set[str] = set()
    for step in doc.steps:
        for rec in _records(step):
            for event, got in (rec.get("events") or {}).items():
                if got.get("count") is not None:
                    counted.add(event)
                elif got.get("not_measured"):
                    events = missing.setdefault(got["not_measured"], [])
                    if event not in events:
                        events.append(event)
    out = []
    hardware_missing = False
    for reason, events in missing.items():
        never = [e for e in events if e not in counted]
        some = [e for e in events if e in counted]
        if never:
            out.append(f"note: perf did not measure {', '.join(never)} on ovs-vswitchd: {reason}")
            hardware_missing = hardware_missing or any(e in HARDWARE_EVENTS for e in never)
        if some:
            out.append(f"note: perf did not measure {', '.join(some)} in some repetitions: {reason}")
    if hardware_missing:
        out.append(f"note: {HARDWARE_NOTE}")
    return out
