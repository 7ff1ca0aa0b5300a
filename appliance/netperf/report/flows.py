"""Many-flows steps (TCP_IPERF) in the text and HTML reports: one row per offered rate and concurrency.

For each test and case, a table: what the flows received together and each
flow's share (mean, min, max), Jain's index over every flow of the step,
retransmits, and -- when paced -- received ÷ offered (did the path carry
what was offered) and sent ÷ offered (did iperf3 keep the pace).  Recomputed
from ``results.json``; a figure that was not measured prints ``-``, never 0.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Callable, Optional

from appliance.netperf.report import pairs as report_pairs
from appliance.netperf.store.records import Figure, StepResult, SuiteResult, Summary

Cell = Callable[[StepResult], str]
Built = tuple[str, list[str], list[list[str]], list[str], str, str]  # title, headers, rows, notes, test, case


def is_flows(step: StepResult) -> bool:
    return step.flows is not None


def _s(step: StepResult) -> Summary:
    return step.summary or Summary()


def _mean(step: StepResult, key: str) -> Optional[float]:
    return _s(step).mean_of(key)


def _fmt(x: Optional[float], digits: int = 1) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def _pm(step: StepResult, key: str, digits: int = 1) -> str:
    v = _s(step).figure(key)
    if not isinstance(v, Figure) or v.mean is None:
        return "-"
    return f"{v.mean:,.{digits}f}" + ("" if v.ci95 is None else f" ±{v.ci95:,.{digits}f}")


def offered_text(step: StepResult) -> str:
    o = step.offered
    if not isinstance(o, dict):
        return "unpaced"
    return f"{o.get('value', 0):g} Mbit/s per flow ({o.get('mbps', 0):,.0f} in all)"


def point(step: StepResult) -> str:
    """The step's point: instances x flows each, at the offered rate."""
    return f"{step.concurrency} x {step.flows} flows @ {offered_text(step)}"


_COLUMNS: list[tuple[str, Cell]] = [
    ("received Mbit/s", lambda st: _pm(st, "received_mbps")),
    ("sent Mbit/s", lambda st: _pm(st, "sent_mbps")),
    ("per flow mean/min/max", lambda st: "/".join(_fmt(_mean(st, f"flow_{k}_mbps")) for k in ("mean", "min", "max"))),
    ("fairness over flows (Jain)", lambda st: _fmt(_mean(st, "flow_jain"), 3)),
    ("retransmits", lambda st: _fmt(_mean(st, "retransmissions"), 0)),
    ("lost (of started)", lambda st: f"{_s(st).lost}/{_s(st).instances}"),
]
_PACED: list[tuple[str, Cell]] = [
    ("received ÷ offered", lambda st: _fmt(_mean(st, "achieved_ratio"), 3)),
    ("sent ÷ offered", lambda st: _fmt(_mean(st, "paced_ratio"), 3)),
]
_CPU: list[tuple[str, Cell]] = [
    ("host CPU %", lambda st: _fmt(_s(st).cpu_host_pct, 0)),
    ("ovs-vswitchd % of a core", lambda st: _fmt(_s(st).cpu_vswitchd_pct_of_core, 0)),
]


def tables(doc: SuiteResult) -> list[Built]:
    """Every many-flows table of the run, in run order."""
    by: OrderedDict[tuple[str, str], list[StepResult]] = OrderedDict()
    for st in doc.steps:
        if is_flows(st) and st.summary:
            by.setdefault((st.test, st.case), []).append(st)
    out: list[Built] = []
    for (test, case), steps in by.items():
        cols = _COLUMNS + (_PACED if any(st.offered for st in steps) else []) + _CPU
        s0 = steps[0]
        reps = max(_s(s).repetitions for s in steps)
        title = (f"{test}: {s0.type} ({s0.generator or 'iperf3'}), {s0.flows} flows per instance, {s0.duration} s, "
                 f"{reps} repetition(s), case {case}")  # fmt: skip
        rows = [[point(st), *[fn(st) for _, fn in cols]] for st in steps]
        notes = ["Mbit/s of TCP payload (iperf3's receiver); fairness: Jain's index over every flow of the step, "
                 "1 = even, 1/n = one flow took it all"]  # fmt: skip
        for st in steps:
            notes += report_pairs.step_notes(st, point(st), "Mbit/s received")
            for reason, n in _s(st).lost_reasons.items():
                notes.append(f"lost at {point(st)}: {n} x {reason}")
            for rep in st.repetitions:
                notes += [f"note at {point(st)} (rep {rep.repetition}): {n}" for n in rep.notes]
        out.append((title, ["instances x flows @ offered", *[c for c, _ in cols]], rows, notes, test, case))
    return out
