"""Text reports of a saved run, in the 2010 study's shape: metrics down, concurrency across.

Everything is recomputed from ``results.json``; nothing here measures.
Figures carry their units; a figure that was not measured prints ``-``,
never a configured value.  Policing steps add what was achieved against
what was configured (with the burst and the enforcing mechanism, or that it
was NOT enforced); mirror steps add the mirror delivery ratio; suites with
several cases add each case's change against the first.
"""

from __future__ import annotations

import dataclasses
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from appliance.core import render
from appliance.netperf.figures import verdict
from appliance.netperf.report import flows as report_flows
from appliance.netperf.report import monitoring as report_monitoring
from appliance.netperf.report import pairs as report_pairs
from appliance.netperf.report import path
from appliance.netperf.report import perfstat as report_perfstat
from appliance.netperf.report import pps as report_pps
from appliance.netperf.store.records import Figure, StepResult, SuiteResult, Summary

Row = tuple[str, Callable[[StepResult], str]]


def _summary(step: StepResult) -> Summary:
    """The step's summary; a step no repetition finished has none, and reads as nothing measured."""
    return step.summary or Summary()


def _fig(summary: Summary, key: str) -> Optional[float]:
    return summary.mean_of(key)


def _fmt(x: Optional[float], digits: int = 2) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def _pm(summary: Summary, key: str, digits: int = 2) -> str:
    v = summary.figure(key)
    if not isinstance(v, Figure):
        return "-"
    ci = v.ci95
    return _fmt(v.mean, digits) + ("" if ci is None else f" ±{ci:,.{digits}f}")


SWEEP = "sweep"  # group key of a message-size sweep at one concurrency: sizes become the columns


def groups(doc: SuiteResult) -> OrderedDict[tuple[str, str, Any], list[StepResult]]:
    """Steps grouped into tables, in run order: one per (test, case, message size), columns = concurrency;
    a test that sweeps message sizes at one concurrency gets one table per case, columns = sizes."""
    shape: dict[tuple[str, str], tuple[set[Any], set[int]]] = {}
    for step in doc.steps:
        sizes, conc = shape.setdefault((step.test, step.case), (set(), set()))
        sizes.add(step.message_size)
        conc.add(step.concurrency)
    out: OrderedDict[tuple[str, str, Any], list[StepResult]] = OrderedDict()
    for step in doc.steps:
        sizes, conc = shape[(step.test, step.case)]
        size = SWEEP if len(conc) == 1 and len(sizes) > 1 else step.message_size
        out.setdefault((step.test, step.case, size), []).append(step)
    return out


def achieved_ratio(step: StepResult) -> Optional[float]:
    """Received Mbit/s over the policed rate (streams only): 1.0 = the limit was reached exactly."""
    pol = step.policing
    if not pol or not pol.rate_kbps or step.type not in ("TCP_STREAM", "UDP_STREAM"):
        return None  # (a rate of 0 in a hand-edited file: nothing to divide by)
    s = _summary(step)
    got = _fig(s, "received_mbps") if step.type == "UDP_STREAM" else _fig(s, "sum")
    return None if got is None else got * 1000.0 / pol.rate_kbps


def delivery_ratio(step: StepResult) -> Optional[tuple[float, float]]:
    """Mirror copies sent ÷ packets on the selected ports, (mean, min) over the step's mirrors and repetitions."""
    ratios = []
    for rep in step.repetitions:
        counters = rep.counters
        for m in step.mirrors:
            out = counters.get(m.output_port or "", {}).get("tx_packets")
            selected = sum(counters.get(p, {}).get("rx_packets", 0) for p in m.src) + sum(
                counters.get(p, {}).get("tx_packets", 0) for p in m.dst
            )
            if out is not None and selected:
                ratios.append(out / selected)
    if not ratios:
        return None
    return sum(ratios) / len(ratios), min(ratios)


def _rows(step_type: str, steps: list[StepResult]) -> list[Row]:
    """The figures down a table; a step of several pairs gets each pair's rows under its total."""
    rr = step_type in ("TCP_RR", "TCP_CRR", "UDP_RR")
    unit = "trans/s" if rr else "Mbit/s"
    name = "transaction rate" if rr else "throughput"
    rows: list[Row] = [
        (f"avg {name} ({unit})", lambda st: _pm(_summary(st), "mean")),
        (f"total {name} ({unit})", lambda st: _pm(_summary(st), "sum")),
        *report_pairs.rows(steps, unit),
        (
            f"min/max per instance ({unit})",
            lambda st: f"{_fmt(_fig(_summary(st), 'min'), 1)}/{_fmt(_fig(_summary(st), 'max'), 1)}",
        ),
        ("fairness (Jain, 1 = even)", lambda st: _fmt(_fig(_summary(st), "jain"), 3)),
        ("lost (of started)", lambda st: f"{_summary(st).lost}/{_summary(st).instances}"),
    ]
    if step_type.startswith("TCP"):
        rows.append(("TCP retransmissions", lambda st: _fmt(_fig(_summary(st), "retransmissions"), 0)))
    if step_type == "UDP_STREAM":
        rows += [
            ("UDP sent (Mbit/s)", lambda st: _pm(_summary(st), "sent_mbps")),
            ("UDP received (Mbit/s)", lambda st: _pm(_summary(st), "received_mbps")),
            ("UDP loss (%)", lambda st: _fmt(_fig(_summary(st), "udp_loss_pct"), 1)),
        ]
    if rr:
        rows += [
            ("latency mean (µs)", lambda st: _fmt(_fig(_summary(st), "latency_mean_us"), 1)),
            (
                "latency p50/p90/p99 (µs)",
                lambda st: "/".join(_fmt(_fig(_summary(st), f"latency_{p}_us"), 0) for p in ("p50", "p90", "p99")),
            ),
        ]
    rows += [
        (
            "host CPU (%) / busiest core (%)",
            lambda st: f"{_fmt(_summary(st).cpu_host_pct, 0)}/{_fmt(_summary(st).cpu_busiest_core_pct, 0)}",
        ),
        ("ovs-vswitchd (% of a core)", lambda st: _fmt(_summary(st).cpu_vswitchd_pct_of_core, 0)),
        (
            "netperf/netserver (% of a core)",
            lambda st: (
                f"{_fmt(_summary(st).cpu_netperf_pct_of_core, 0)}/{_fmt(_summary(st).cpu_netserver_pct_of_core, 0)}"
            ),
        ),
        ("start spread (ms)", lambda st: _fmt(_summary(st).start_spread_ms_max, 1)),
        ("switch drops, all ports (pkts, total)", _drops),
    ]
    return rows


def _drops(step: StepResult) -> str:
    total = 0
    seen = False
    for rep in step.repetitions:
        for c in rep.counters.values():
            for k in ("rx_dropped", "tx_dropped"):
                if c.get(k) is not None:
                    seen = True
                    total += c[k]
    return f"{total:,}" if seen else "-"


def _vm_cpu(step: StepResult) -> str:
    """Each real VM's busy share of its vCPUs (its own /proc/stat), averaged over the repetitions."""
    out = []
    for role in ("client", "server"):
        xs = [v for r in step.repetitions if (v := (r.cpu.get("vms") or {}).get(role, {}).get("busy_pct_of_vm"))
              is not None]  # fmt: skip
        out.append(_fmt(sum(xs) / len(xs), 0) if xs else "-")
    return "/".join(out)


def _capture_drops(step: StepResult) -> str:
    drops = [r.aggregate.capture_dropped for r in step.repetitions if r.aggregate.capture_dropped is not None]
    return f"{sum(drops):,}" if drops else "-"


# A step's captures beside what limits them (step.capture["limits"], see figures.pps.capture_limits).
CAPTURE_LIMIT_ROWS = (
    ("dropped by kernel", "dropped_by_kernel"),
    ("dropped by interface", "dropped_by_interface"),
    ("buffer", "buffer"),
    ("snaplen (B)", "snaplen"),
    ("tcpdump % of a core", "tcpdump_cpu_pct"),
    ("reading", "reading"),
)


def _limit(key: str) -> Callable[[StepResult], str]:
    def cell(step: StepResult) -> str:
        limits = (step.capture or {}).get("limits") or {}
        value = limits.get(key)
        if key == "dropped_by_interface" and value is None and limits:
            return "not reported"
        if key == "snaplen" and isinstance(value, list):
            return ", ".join("all" if v is None else str(v) for v in value)
        if key == "tcpdump_cpu_pct" and value is None and limits:
            return str(limits.get("tcpdump_cpu_reason") or "-")
        if isinstance(value, list):
            return ", ".join(str(v) for v in value)
        return "-" if value is None else f"{value:,}" if isinstance(value, int) else str(value)

    return cell


def _meter_drops(step: StepResult) -> str:
    drops = [r.meter_drops for r in step.repetitions if r.meter_drops is not None]
    return f"{sum(drops):,}" if drops else "-"


def header(doc: SuiteResult) -> str:
    m = doc.meta
    srv = m.server
    managed = "netserver started by hvnet" if srv.managed else "netserver not managed by hvnet"
    lines = [
        f"suite {m.suite.name}: {doc.state}"
        + (f" ({doc.partial_reason})" if doc.partial and doc.partial_reason else ""),
        f"  started {m.started}, finished {m.finished or '-'}",
        f"  hvnet {m.hvnet_version}, OVS {m.ovs_version or '?'} ({', '.join(m.datapath_types)}), "
        f"netperf {m.netperf_version or '?'}, kernel {m.kernel}, host {m.host}",
        report_pairs.header_line(doc)
        or f"  client {m.client.guest} ({m.client.address}) -> server {srv.guest or ''} "
        f"{srv.address}:{srv.port} ({managed})",
    ]
    if m.path is not None:
        lines.append(f"  {path.describe(m.path, m.client.guest or 'client', srv.guest or srv.address)}")
    lines += [f"  {n}" for n in notes(doc)]
    return "\n".join(lines)


def notes(doc: SuiteResult) -> list[str]:
    """What a reader must know before trusting the figures: guests in QEMU, the run's warnings."""
    m = doc.meta
    out = []
    in_vm = [f"{side} {ep.guest}" for side, ep in (("client", m.client), ("server", m.server)) if ep.runs_in == "qemu"]
    if in_vm:
        # A TCG guest's figures measure the emulator as much as the switch: say so next to them.
        out.append(
            f"note: {' and '.join(in_vm)} run{'s' if len(in_vm) == 1 else ''} in a QEMU guest: rates include the "
            "VM's own cost (emulated under TCG unless KVM); netperf CPU is the guest's own accounting, "
            "netserver CPU in a guest is not sampled"
        )
    real = [f"{side} {ep.guest}" for side, ep in (("client", m.client), ("server", m.server))
            if (ep.runs_in or "").startswith("vm-")]  # fmt: skip
    if real:
        out.append(
            f"note: {' and '.join(real)} {'is a' if len(real) == 1 else 'are'} real VM{'s' if len(real) > 1 else ''}: "
            "rates are what the VMs get (their virtio/netback, vCPUs and firewall included); per-process CPU is "
            "not measured, each VM's whole CPU is (cpu.vms)"
        )
    out += [f"warning: {w}" for w in m.warnings]
    return out + report_perfstat.notes(doc)


@dataclass
class Table:
    """One group's table as the text and HTML reports show it: every cell already formatted."""

    title: str
    headers: list[str]
    rows: list[list[str]]
    notes: list[str] = field(default_factory=list)  # lost reasons and netperf's notes, one line each
    test: str = ""
    case: str = ""


def tables(doc: SuiteResult) -> list[Table]:
    """One table per (test, case, message size) that has a measured step, in run order."""
    doc = with_verdicts(doc)
    out = []
    by_group = groups(doc)
    first_case = doc.steps[0].case if doc.steps else None
    for (test, case, size), steps in by_group.items():
        steps = [s for s in steps if s.summary and not report_pps.is_pps(s) and not report_flows.is_flows(s)]
        if steps:
            out.append(_table(steps, by_group, first_case, test, case, size))
    built = report_pps.tables(doc) + report_flows.tables(doc)
    out += [Table(title, headers, rows, notes, test, case) for title, headers, rows, notes, test, case in built]
    return out


def text(doc: SuiteResult) -> str:
    """The whole report: header, then one table per (test, case, message size)."""
    out = [header(doc)]
    for t in tables(doc):
        out += ["", t.title, render.table(t.headers, t.rows), *(f"  {n}" for n in t.notes)]
    if not doc.steps:
        out.append("\nno step was measured")
    out += report_monitoring.monitoring_cost(doc) + report_monitoring.phases(doc)
    return "\n".join(out)


def _table(steps: list[StepResult], by_group: Any, first_case: Optional[str], test: str, case: str, size: Any) -> Table:
    """One group's title, table, lost reasons and notes."""
    s0 = steps[0]
    if size == SWEEP:
        what = f"concurrency {s0.concurrency}"
    elif size:
        what = f"-m {size}"
    else:
        what = f"-r {s0.request_size},{s0.response_size}" if s0.request_size else "default size"
    reps = max(_summary(s).repetitions for s in steps)
    title = f"{test}: {s0.type} {what}, {s0.duration} s, {reps} repetition(s), case {case}{cpus_note(s0.cpus)}"
    rows = (
        _rows(s0.type, steps)
        + report_monitoring.thread_rows(steps)
        + report_perfstat.rows(steps)
        + _extra_rows(steps, by_group, first_case, test, case, size)
        + observer_rows()
    )
    if size == SWEEP:
        headers = ["message size (bytes)", *[str(s.message_size) for s in steps]]
    else:
        headers = ["concurrent instances", *[str(s.concurrency) for s in steps]]
    notes = []
    for s in steps:
        at = f"-m {s.message_size}" if size == SWEEP else str(s.concurrency)
        for reason, n in _summary(s).lost_reasons.items():
            notes.append(f"lost at {at}: {n} x {reason}")
        for rep in s.repetitions:
            for note in rep.notes:
                notes.append(f"note at {at} (rep {rep.repetition}): {note}")
        notes += verdict_lines(s, at)
    return Table(title, headers, [[label, *[fn(s) for s in steps]] for label, fn in rows], notes, test, case)


def with_verdicts(doc: SuiteResult) -> SuiteResult:
    """The run with every measured step's verdict: the one it recorded, or (an older run) computed now.
    A copy: the caller's document is not changed."""
    facts = doc.meta.preflight.get("facts") or {}
    steps = []
    for step in doc.steps:
        found = verdict.stored_or_computed(step, facts, doc.meta.client.vif)
        steps.append(dataclasses.replace(step, verdict=found.to_json() if found else None))
    return dataclasses.replace(doc, steps=steps)


def _verdict_of(step: StepResult) -> Optional[verdict.Verdict]:
    return verdict.Verdict.from_json(step.verdict) if step.verdict else None


def observer_rows() -> list[Row]:
    """What the measuring itself cost (hvnet's own process) and where the step's bottleneck was."""
    return [
        ("hvnet's own CPU (% of a core)", lambda st: _fmt(_summary(st).cpu_hvnet_pct_of_core, 1)),
        ("bottleneck (see below)", lambda st: v.verdict if (v := _verdict_of(st)) else "-"),
    ]


def verdict_lines(step: StepResult, at: str) -> list[str]:
    """The bottleneck's evidence, and whom the lost instances are put down to."""
    v = _verdict_of(step)
    if v is None:
        return []
    out = [f"bottleneck at {at}: {v.verdict}: {'; '.join(v.evidence) or 'no evidence recorded'}"]
    if v.lost:
        out.append(f"lost at {at} attributed to {v.lost['verdict']}: {'; '.join(v.lost['evidence'])}")
    return out


def _extra_rows(
    steps: list[StepResult], by_group: Any, first_case: Optional[str], test: str, case: str, size: Any
) -> list[Row]:
    rows: list[Row] = []
    if any(r.cpu.get("vms") for s in steps for r in s.repetitions):
        rows.append(("VM CPU client/server (% of the VM)", _vm_cpu))
    if any(s.policing for s in steps):

        def policed(st: StepResult) -> str:
            p = st.policing
            if not p:
                return "-"
            enforced = {True: "", False: " NOT ENFORCED", None: " unverified"}[p.verified]
            return f"{p.rate_kbps}/{p.burst_kbit} {p.mechanism}{enforced}"

        rows.append(("policing kbit/s / burst kbit", policed))
        rows.append(("achieved ÷ configured", lambda st: _fmt(achieved_ratio(st), 2)))
        rows.append(("policer drops (pkts, total)", _meter_drops))
    if any(s.mirrors for s in steps):

        def mirrors(st: StepResult) -> str:
            r = delivery_ratio(st)
            return "-" if r is None else f"{r[0]:.3f} (min {r[1]:.3f})"

        rows.append(("mirrors on the client VIF", lambda st: str(len(st.mirrors))))
        rows.append(("mirror delivery (copies ÷ pkts)", mirrors))
    if any(s.capture for s in steps):
        rows.append(
            ("listeners (captures on the monitor ports)", lambda st: str(len((st.capture or {}).get("ports", []))))
        )
        rows.append(("captured ÷ offered", lambda st: _fmt(_fig(_summary(st), "captured_ratio"), 3)))
        rows.append(("captured ÷ sent to port", lambda st: _fmt(_fig(_summary(st), "captured_port_ratio"), 3)))
        rows.append(("capture drops (pkts, total)", _capture_drops))
        rows += [(f"capture {label}", _limit(key)) for label, key in CAPTURE_LIMIT_ROWS]
    policed_differently = any(s.policing for s in steps)  # a rate sweep: "vs first case" says nothing
    if (
        first_case is not None
        and case != first_case
        and (test, first_case, size) in by_group
        and not policed_differently
    ):
        base = {(s.message_size, s.concurrency): s for s in by_group[(test, first_case, size)] if s.summary}

        def change(key: str) -> Callable[[StepResult], str]:
            def fn(st: StepResult) -> str:
                b = base.get((st.message_size, st.concurrency))
                a0 = _fig(_summary(b), key) if b else None
                a1 = _fig(_summary(st), key)
                return "-" if not a0 or a1 is None else f"{100.0 * (a1 - a0) / a0:+.1f}%"

            return fn

        rows.append((f"total vs case {first_case}", change("sum")))
        if steps[0].type in ("TCP_RR", "TCP_CRR", "UDP_RR"):
            rows.append((f"latency mean vs case {first_case}", change("latency_mean_us")))
    return rows


def cpus_note(cpus: Optional[dict[str, Any]]) -> str:
    """A pinned case's placement for its title: what was asked, and what the kernel reported once set
    (``ovs-vswitchd on CPU 0 (kernel: 0)``); empty for a case without ``cpus:``."""
    if not cpus:
        return ""
    parts = []
    for key, asked in (cpus.get("asked") or {}).items():
        got = sorted({a for r in (cpus.get("read_back") or {}).get(key, []) for a in r.get("affinity", [])})
        parts.append(f"{key} on CPU {asked}" + (f" (kernel: {' / '.join(got)})" if got else ""))
    return ", " + ", ".join(parts) if parts else ""
