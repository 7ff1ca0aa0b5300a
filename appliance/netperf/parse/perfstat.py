"""``perf stat -x, --per-thread`` on ovs-vswitchd: its command line, and its output read into a record.

perf's CSV lines (on stderr) are ``THREAD-TID,VALUE,UNIT,EVENT,RUN_NS,PCT,METRIC,METRIC_UNIT`` per
thread (without ``--per-thread`` the first field is missing).  VALUE is a
number, ``<not supported>`` (the host has no such counter: hardware events
on a VM without a virtual PMU) or ``<not counted>`` (the event never ran on
that thread: it was idle, or the counters were multiplexed out).  PCT below
100 means perf multiplexed the counter and scaled its count.

The record says, for every event asked, its count summed over the threads
or why it was not measured -- never a number perf did not print -- and the
cycles-per-instruction ratio (CPI) when both were counted.  Per thread
group (``main``, ``handler``, ``revalidator``, ``pmd``, ...) the counted
values are kept too: which threads a mirror's cost lands on.
"""

from __future__ import annotations

import re
from typing import Any, Optional

from appliance.netperf.define.perfstat import HARDWARE_EVENTS

NOT_SUPPORTED = "<not supported>"
NOT_COUNTED = "<not counted>"
HARDWARE_NOTE = (
    "a hardware-counter question (cycles, instructions, cache misses, CPI: where a mirror's cost goes) "
    "needs a host that exposes hardware counters (bare metal, or a VM with a virtual PMU)"
)
_FIELDS = 7  # after the thread column: value, unit, event, run time, percentage, metric, metric unit


def argv(perf: str, events: tuple[str, ...], pid: int, seconds: float) -> list[str]:
    """Count ``events`` on every thread of ``pid`` for ``seconds`` (perf's ``--timeout``); SIGINT ends it sooner
    and perf still prints what it counted (a ``-- sleep N`` workload would keep it waiting for the sleep)."""
    ms = max(10, round(seconds * 1000))  # perf's minimum timeout is 10 ms
    return [perf, "stat", "-x", ",", "--per-thread", "-e", ",".join(events), "-p", str(pid), "--timeout", str(ms)]


def thread_group(thread: str) -> str:
    """``handler12-7819`` -> ``handler``, ``ovs-vswitchd-7784`` -> ``main``: the thread's role."""
    comm = re.sub(r"-\d+$", "", thread)
    if comm == "ovs-vswitchd":
        return "main"
    return re.sub(r"[-\d].*$", "", comm) or comm


def lines(text: str) -> list[tuple[Optional[str], str, str, str, Optional[float]]]:
    """perf's count lines: (thread or None, value, unit, event, percentage running); other lines are skipped."""
    out = []
    for line in text.splitlines():
        parts = line.split(",")
        if len(parts) < _FIELDS:
            continue
        thread = ",".join(parts[: len(parts) - _FIELDS]) or None
        value, unit, event, _run, pct = parts[len(parts) - _FIELDS : len(parts) - 2]
        if not event or not (value in (NOT_SUPPORTED, NOT_COUNTED) or _number(value) is not None):
            continue
        out.append((thread, value, unit, event, _number(pct)))
    return out


def _number(text: str) -> Optional[float]:
    try:
        return float(text)
    except ValueError:
        return None


def failure(text: str, returncode: Optional[int], pid: int, where: str) -> str:
    """Why perf printed no counts at all, from what it said instead."""
    m = re.search(r"perf_event_paranoid setting is (-?\d+)", text)
    if m or re.search(r"No permission|Permission denied|Access to performance monitoring", text):
        level = f" (perf_event_paranoid is {m.group(1)})" if m else ""
        return f"permission denied on {where}{level}: run hvnet as root, or lower kernel.perf_event_paranoid"
    if "Problems finding threads" in text or "No such process" in text:
        return f"ovs-vswitchd (pid {pid}) is gone on {where}"
    if not text.strip() and returncode in (-2, 130):  # SIGINT before perf had attached
        return f"perf stat was stopped on {where} before it counted (the repetition ended as it started)"
    said = [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.startswith(" ")]
    last = said[-1] if said else "no output"
    return f"perf stat failed on {where} (exit {returncode}): {last}"


def not_measured(events: tuple[str, ...], reason: str) -> dict[str, Any]:
    """The record when perf counted nothing: every event, with the reason."""
    return {
        "events": {e: {"count": None, "not_measured": reason} for e in events},
        "cpi": None,
        "cpi_not_measured": reason,
        "threads": {},
    }


def parse(text: str, events: tuple[str, ...], returncode: Optional[int], pid: int, where: str) -> dict[str, Any]:
    """perf's output (stderr) into the repetition's record (see the module's docstring)."""
    found = lines(text)
    if not found:
        return not_measured(events, failure(text, returncode, pid, where))
    per_event: dict[str, list[tuple[Optional[str], str, str, Optional[float]]]] = {}
    for thread, value, unit, event, pct in found:
        per_event.setdefault(event, []).append((thread, value, unit, pct))
    totals = {event: _total(event, per_event.get(event, [])) for event in events}
    threads: dict[str, dict[str, Any]] = {}
    for event in events:
        for thread, value, _unit, _pct in per_event.get(event, []):
            n = _number(value)
            if n is not None and thread is not None:
                group = threads.setdefault(thread_group(thread), {})
                group[event] = _round(group.get(event, 0.0) + n)
    for group in threads.values():
        if group.get("instructions") and "cycles" in group:
            group["cpi"] = round(group["cycles"] / group["instructions"], 4)
    ratio, why = cpi(totals)
    return {"events": totals, "cpi": ratio, "cpi_not_measured": why, "threads": threads}


def _total(event: str, rows: list[tuple[Optional[str], str, str, Optional[float]]]) -> dict[str, Any]:
    """One event over every thread: the counted values summed, or why none was counted."""
    counted = [(n, unit, pct) for _t, value, unit, pct in rows if (n := _number(value)) is not None]
    if counted:
        rec: dict[str, Any] = {"count": _round(sum(n for n, _u, _p in counted))}
        if counted[0][1]:
            rec["unit"] = counted[0][1]  # task-clock's msec; counts have none
        running = [p for _n, _u, p in counted if p is not None]
        if running and min(running) < 100.0:
            rec["running_pct"] = min(running)  # multiplexed: perf scaled the count
        return rec
    values = {value for _t, value, _u, _p in rows}
    if NOT_SUPPORTED in values:
        why = "perf: <not supported>"
        if event in HARDWARE_EVENTS:
            why += ": this host exposes no such hardware counter"
        return {"count": None, "not_measured": why}
    if NOT_COUNTED in values:
        return {"count": None, "not_measured": "perf: <not counted>: no thread of ovs-vswitchd ran it"}
    return {"count": None, "not_measured": "perf printed no line for it"}


def cpi(events: dict[str, Any]) -> tuple[Optional[float], Optional[str]]:
    """Cycles per instruction over the repetition, or why there is none."""
    cycles, instructions = events.get("cycles"), events.get("instructions")
    if cycles is None or instructions is None:
        return None, "cycles and instructions were not both asked for"
    if cycles.get("count") is None or instructions.get("count") is None:
        why = cycles.get("not_measured") or instructions.get("not_measured")
        return None, f"cycles or instructions not measured ({why})"
    if not instructions["count"]:
        return None, "no instruction was counted"
    return round(cycles["count"] / instructions["count"], 4), None


def _round(x: float) -> float | int:
    """Counts stay integers; task-clock's milliseconds keep two decimals."""
    return int(x) if float(x).is_integer() else round(x, 3)
