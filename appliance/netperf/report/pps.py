"""Packet-rate steps (UDP_PPS) in the text and HTML reports: one row per point, then the cases side by side.

For each test and case, a table with one row per frame size / offered rate /
concurrency: packets/s and Mbit/s sent and received, loss, achieved ÷ offered
(received) and sent ÷ offered (did the generator keep the pace), what each
monitor port was sent (the switch's counters) and what a capture kept of what
was offered to it.  With several cases, a table puts them side by side per
point: received packets/s and its change against the first case (the cost of
the copy), monitor packets/s and captured ÷ offered.  A case whose copies go
over GRE/ERSPAN to a collector guest adds what arrived there (its interface's
receive counters) and arrived ÷ mirrored.  Recomputed from
``results.json``; a figure that was not measured prints ``-``, never 0.
"""

from __future__ import annotations

from collections import OrderedDict
from typing import Any, Callable, Optional

from appliance.netperf.report import pairs as report_pairs
from appliance.netperf.report import perfstat as report_perfstat
from appliance.netperf.store.records import Figure, StepResult, SuiteResult, Summary

Cell = Callable[[StepResult], str]
Built = tuple[str, list[str], list[list[str]], list[str], str, str]  # title, headers, rows, notes, test, case


def is_pps(step: StepResult) -> bool:
    return step.frame_size is not None


def _s(step: StepResult) -> Summary:
    return step.summary or Summary()


def _mean(step: StepResult, key: str) -> Optional[float]:
    return _s(step).mean_of(key)


def _pm(step: StepResult, key: str, digits: int = 0) -> str:
    v = _s(step).figure(key)
    if not isinstance(v, Figure) or v.mean is None:
        return "-"
    return f"{v.mean:,.{digits}f}" + ("" if v.ci95 is None else f" ±{v.ci95:,.{digits}f}")


def _fmt(x: Optional[float], digits: int = 2, suffix: str = "") -> str:
    return "-" if x is None else f"{x:,.{digits}f}{suffix}"


def offered_text(step: StepResult) -> str:
    o = step.offered
    if not isinstance(o, dict):
        return "unpaced"
    other = f"{o.get('pps', 0):,.0f} pps" if o.get("unit") == "Mbit/s" else f"{o.get('mbps', 0):,.1f} Mbit/s"
    return f"{o.get('value', 0):g} {o.get('unit')} ({other})"


def point(step: StepResult) -> str:
    """The step's point within its test and case: frame size, offered rate, concurrency."""
    conc = f", {step.concurrency} senders" if step.concurrency != 1 else ""
    return f"{step.frame_size} B @ {offered_text(step)}{conc}"


def _copies(step: StepResult) -> str:
    """The copies the case made of the client's traffic: mirrors and TAPs (with their method), or none."""
    kinds = [{"tap-flows": "TAP (flows)", "tap-group": "TAP (group)"}.get(m.kind or "", "mirror") for m in step.mirrors]
    return ", ".join(f"{m.name}: {k} -> {m.output_port}" for m, k in zip(step.mirrors, kinds)) or "none"


def _drops(step: StepResult) -> str:
    drops = [r.aggregate.capture_dropped for r in step.repetitions if r.aggregate.capture_dropped is not None]
    return f"{sum(drops):,}" if drops else "-"


def _limits(step: StepResult) -> dict[str, Any]:
    return (step.capture or {}).get("limits") or {}


def _limit(step: StepResult, key: str) -> str:
    """One of the step's capture limits (see figures.pps.capture_limits): what tcpdump did not report is said."""
    limits = _limits(step)
    if not limits:
        return "-"
    value = limits.get(key)
    if key == "dropped_by_interface" and value is None:
        return "not reported"
    if key == "tcpdump_cpu_pct":
        return "not measured" if value is None else f"{value:.1f}"
    if key == "snaplen":
        return ", ".join("all" if v is None else str(v) for v in value or [None])
    if key == "buffer":
        return ", ".join("default" if v is None else f"{v} KiB" for v in limits.get("buffer_kib") or [None])
    return "-" if value is None else f"{value:,}"


def _limit_notes(steps: list[StepResult]) -> list[str]:
    """Each point's reading of what limited its captures, and what the buffer and CPU columns are."""
    notes = [f"capture at {point(st)}: {_limits(st)['reading']}" for st in steps if _limits(st).get("reading")]
    if notes:
        buffers = sorted({b for st in steps for b in _limits(st).get("buffer") or []})
        notes.append("capture buffer: " + "; ".join(buffers) + ". dropped by kernel: tcpdump's count (its ring was "
                     "full); dropped by interface: not reported = tcpdump printed no such line (it prints it only "
                     "when not 0); tcpdump % of a core: its user + system time over its life")  # fmt: skip
    why = next((_limits(st).get("tcpdump_cpu_reason") for st in steps if _limits(st).get("tcpdump_cpu_reason")), None)
    if why:
        notes.append(f"tcpdump's CPU: {why}")
    return notes


def _columns(steps: list[StepResult]) -> list[tuple[str, Cell]]:
    """The figures a test's table shows: monitor and capture columns only where some case measured them."""
    cols: list[tuple[str, Cell]] = [
        ("sent pps", lambda st: _pm(st, "sent_pps")),
        ("received pps", lambda st: _pm(st, "received_pps")),
        ("sent/received Mbit/s", lambda st: f"{_fmt(_mean(st, 'sent_mbps'), 1)}/{_fmt(_mean(st, 'received_mbps'), 1)}"),
        ("loss %", lambda st: _fmt(_mean(st, "udp_loss_pct"), 2)),
    ]
    if any(st.offered for st in steps):
        cols += [
            ("achieved ÷ offered", lambda st: _fmt(_mean(st, "achieved_ratio"), 3)),
            ("sent ÷ offered", lambda st: _fmt(_mean(st, "paced_ratio"), 3)),
        ]
    if any(_mean(st, "monitor_pps") is not None for st in steps):
        cols += [
            ("monitor pps", lambda st: _pm(st, "monitor_pps")),
            ("monitor Mbit/s", lambda st: _fmt(_mean(st, "monitor_mbps"), 1)),
            ("monitor ÷ sent", lambda st: _ratio(_mean(st, "monitor_pps"), _mean(st, "sent_pps"))),
        ]
    if any(_mean(st, "captured_ratio") is not None or st.capture for st in steps):
        cols += [
            ("captured pps", lambda st: _pm(st, "captured_pps")),
            ("captured ÷ offered", lambda st: _fmt(_mean(st, "captured_ratio"), 3)),
            ("captured ÷ sent to port", lambda st: _fmt(_mean(st, "captured_port_ratio"), 3)),
            ("capture drops", _drops),
            ("dropped by kernel", lambda st: _limit(st, "dropped_by_kernel")),
            ("dropped by interface", lambda st: _limit(st, "dropped_by_interface")),
            ("capture buffer", lambda st: _limit(st, "buffer")),
            ("snaplen", lambda st: _limit(st, "snaplen")),
            ("tcpdump % of a core", lambda st: _limit(st, "tcpdump_cpu_pct")),
        ]
    if any(st.collector_guest for st in steps):
        cols += [
            ("mirrored pps", lambda st: _pm(st, "mirrored_pps")),
            ("mirrored Mbit/s", lambda st: _fmt(_mean(st, "mirrored_mbps"), 1)),
            ("arrived pps", lambda st: _pm(st, "arrived_pps")),
            ("arrived Mbit/s encap./decap.", lambda st: f"{_fmt(_mean(st, 'arrived_mbps'), 1)}/"
                                                       f"{_fmt(_mean(st, 'arrived_inner_mbps'), 1)}"),
            ("arrived ÷ mirrored", lambda st: _fmt(_mean(st, "arrived_ratio"), 3)),
        ]  # fmt: skip
    cols += [
        ("host CPU %", lambda st: _fmt(_s(st).cpu_host_pct, 0)),
        ("ovs-vswitchd % of a core", lambda st: _fmt(_s(st).cpu_vswitchd_pct_of_core, 0)),
    ]
    return cols + report_perfstat.rows(steps)  # a column per event perf counted on ovs-vswitchd, and CPI


def _ratio(a: Optional[float], b: Optional[float]) -> str:
    return "-" if a is None or not b else f"{a / b:.3f}"


def tables(doc: SuiteResult) -> list[Built]:
    """Every packet-rate table of the run, in run order."""
    by: OrderedDict[tuple[str, str], list[StepResult]] = OrderedDict()
    for st in doc.steps:
        if is_pps(st) and st.summary:
            by.setdefault((st.test, st.case), []).append(st)
    out: list[Built] = []
    for (test, case), steps in by.items():
        same_test = [s for (t, _), ss in by.items() if t == test for s in ss]
        cols = _columns(same_test)
        s0 = steps[0]
        reps = max(_s(s).repetitions for s in steps)
        title = (f"{test}: {s0.type} ({s0.generator or 'iperf3'}), {s0.duration} s, {reps} repetition(s), "
                 f"case {case}; copies: {_copies(s0)}")  # fmt: skip
        rows = [[point(st), *[fn(st) for _, fn in cols]] for st in steps]
        notes = _arrival_notes(steps) + _limit_notes(steps)
        for st in steps:
            notes += report_pairs.step_notes(st, point(st), "packets/s received")
            for reason, n in _s(st).lost_reasons.items():
                notes.append(f"lost at {point(st)}: {n} x {reason}")
            for rep in st.repetitions:
                notes += [f"note at {point(st)} (rep {rep.repetition}): {n}" for n in rep.notes]
        out.append((title, ["frame @ offered", *[c for c, _ in cols]], rows, notes, test, case))
    out += _side_by_side(by)
    return out


def _side_by_side(by: OrderedDict[tuple[str, str], list[StepResult]]) -> list[Built]:
    """Per test with several cases: each point's received and monitor pps per case, against the first case."""
    out: list[Built] = []
    tests = list(dict.fromkeys(t for t, _ in by))
    for test in tests:
        cases = [c for t, c in by if t == test]
        if len(cases) < 2:
            continue
        first = cases[0]
        at = {c: {(s.frame_size, _okey(s), s.concurrency): s for s in by[(test, c)]} for c in cases}
        points = list(dict.fromkeys(k for c in cases for k in at[c]))
        monitored = [c for c in cases if any(_mean(s, "monitor_pps") is not None for s in by[(test, c)])]
        captured = [c for c in cases if any(s.capture for s in by[(test, c)])]
        remote = [c for c in cases if any(s.collector_guest for s in by[(test, c)])]
        headers = ["frame @ offered", *[f"{c}: received pps" for c in cases]]
        headers += [f"{c}: monitor pps" for c in monitored] + [f"{c}: captured ÷ offered" for c in captured]
        headers += [f"{c}: captured ÷ sent to port" for c in captured]
        headers += [f"{c}: {h}" for c in remote for h in ("mirrored Mbit/s", "arrived Mbit/s", "arrived ÷ mirrored")]
        rows = []
        for key in points:
            any_step = next(at[c][key] for c in cases if key in at[c])
            base = _mean(at[first][key], "received_pps") if key in at[first] else None
            row = [point(any_step)]
            for c in cases:
                st = at[c].get(key)
                got = _mean(st, "received_pps") if st else None
                change = "" if c == first or got is None or not base else f" ({100.0 * (got - base) / base:+.1f}%)"
                row.append(_fmt(got, 0) + change)
            row += [_fmt(_mean(at[c][key], "monitor_pps"), 0) if key in at[c] else "-" for c in monitored]
            for fig in ("captured_ratio", "captured_port_ratio"):
                row += [_fmt(_mean(at[c][key], fig), 3) if key in at[c] else "-" for c in captured]
            for c in remote:
                st = at[c].get(key)
                row += [_fmt(_mean(st, f), d) if st else "-" for f, d in _REMOTE]
            rows.append(row)
        notes = [f"received pps change is against case {first} (the cost of the copies)"]
        if monitored:
            notes.append("monitor pps: per output port, what the switch sent it (its counters)")
        if captured:
            notes.append("captured ÷ offered: the captures' packets over the packets the switch selected for "
                         "the copies they listen on; ÷ sent to port: over what it sent their ports (the rest "
                         "of the loss is copies the switch never made)")  # fmt: skip
        if remote:
            notes.append("mirrored: what the mirror selected (its ports' counters); arrived: the collector's "
                         "interface, encapsulated (as its uplink carried it); ÷ in packets")  # fmt: skip
        out.append((f"{test}: cases side by side", headers, rows, notes, test, ""))
    return out


_REMOTE = (("mirrored_mbps", 1), ("arrived_mbps", 1), ("arrived_ratio", 3))


def _arrival_notes(steps: list[StepResult]) -> list[str]:
    """What a remote collector's figures are: where they were counted and how big a packet is there."""
    st = next((s for s in steps if s.collector_guest), None)
    if st is None:
        return []
    rec = next((r.arrival for s in steps for r in s.repetitions if r.arrival), None) or {}
    encap, extra = rec.get("encapsulation") or "the tunnel", rec.get("overhead_bytes")
    size = f"less {extra} B of outer headers per packet (computed)" if extra else "not known (mixed tunnels)"
    return [
        "mirrored: the packets the mirror selected for the tunnel (its selected ports' counters; a TAP's: the "
        "tunnel port's tx), Mbit/s of those frames before encapsulation",
        f"monitor pps/Mbit/s: the {encap} tunnel port's own tx counters -- OVS's userspace datapath counts each "
        "tunnelled packet there twice (about 2x mirrored): not what was sent",
        f"arrived: {st.collector_guest}'s {rec.get('interface', 'eth0')} receive counters (read "
        f"after its uplink's queue drained); encap. = as the uplink carried it, decap. = {size}",
    ]


def _okey(step: StepResult) -> str:
    o = step.offered
    return f"{o.get('value')}{o.get('unit')}" if isinstance(o, dict) else "-"
