"""The report's monitoring parts: ovs-vswitchd's CPU per thread (every suite), the monitoring-cost
tables in the CloudNet 2018 study's shape, and phased runs as time series.

The study's shape: sampling rate across (no monitoring first, then 1-in-1024
down to 1-in-1, the heaviest last); throughput, CPU per thread and the
collector's load down; one table per series (sFlow, IPFIX, IPFIX without
its cache, and any sFlow polling/header variant).  Everything is recomputed
from ``results.json``; a figure not measured prints ``-``.
"""

from __future__ import annotations

from collections import Counter, OrderedDict
from typing import Any, Callable, Optional

from appliance.core import render
from appliance.netperf.define.monitoring import combine, ratio_verdict, thread_summary
from appliance.netperf.figures import stats
from appliance.netperf.store.records import Figure, StepResult, SuiteResult

Row = tuple[str, Callable[[StepResult], str]]


def _fmt(x: Optional[float], digits: int = 1) -> str:
    return "-" if x is None else f"{x:,.{digits}f}"


def _pm(fig: Optional[dict[str, Any]], digits: int = 1) -> str:
    if not fig or fig.get("mean") is None:
        return "-"
    ci = fig.get("ci95")
    return _fmt(fig["mean"], digits) + ("" if ci is None else f" ±{ci:,.{digits}f}")


def threads(step: StepResult) -> dict[str, Any]:
    """The step's per-thread CPU (saved, or recomputed for runs saved before it was)."""
    return step.vswitchd_threads or thread_summary(step.repetitions) or {}


def thread_rows(steps: list[StepResult]) -> list[Row]:
    """One row per ovs-vswitchd thread group that did any work in these steps (% of one core, ±95% CI)."""
    busy: dict[str, float] = {}
    for s in steps:
        for g, fig in threads(s).items():
            busy[g] = max(busy.get(g, 0.0), (fig or {}).get("mean") or 0.0)
    rows: list[Row] = []
    for g in sorted(busy, key=lambda g: (-busy[g], g)):
        if busy[g] < 0.05:
            continue
        name = "main" if g == "ovs" else g
        rows.append((f"  ovs-vswitchd {name} (% of a core)", lambda st, g=g: _pm(threads(st).get(g))))
    return rows


def collector(step: StepResult) -> Optional[dict[str, Any]]:
    return step.collector or combine([r.collector for r in step.repetitions if r.collector])


def _ratio(step: StepResult) -> str:
    c = collector(step)
    if not c or c.get("ratio") is None:
        return "-"
    lo, hi = c.get("ratio_ci95") or (None, None)
    return f"{c['ratio']:.3f} [{_fmt(lo, 3)}, {_fmt(hi, 3)}]"


def _series_key(step: StepResult, usual: dict[str, tuple[Any, Any]]) -> str:
    m = step.monitor or {}
    label = str(m.get("variant"))
    settings = (m.get("polling"), m.get("header"))
    if m.get("kind") == "sflow" and settings != usual.get(label):
        label += f" polling {m.get('polling') or 30} s header {m.get('header') or 128} B"
    if step.cpus:  # a pinned case is its own series (the study's Fig. 5), not a second point of the same rate
        label += " pinned " + ", ".join(f"{k} {v}" for k, v in (step.cpus.get("asked") or {}).items())
    return label


def monitoring_series(doc: SuiteResult, test: str) -> tuple[Optional[StepResult], OrderedDict[str, list[StepResult]]]:
    """A test's no-monitoring step and its monitored steps by series (1-in-1024 first, 1-in-1 last)."""
    monitored = [s for s in doc.steps if s.monitor and s.monitor.get("kind") and s.summary]
    usual: dict[str, tuple[Any, Any]] = {}
    for variant in {str(s.monitor.get("variant")) for s in monitored if s.monitor}:
        counts = Counter((s.monitor.get("polling"), s.monitor.get("header")) for s in monitored
                         if s.monitor and s.monitor.get("variant") == variant)  # fmt: skip
        usual[variant] = counts.most_common(1)[0][0]
    base = next((s for s in doc.steps if s.test == test and not s.monitor and s.summary), None)
    series: OrderedDict[str, list[StepResult]] = OrderedDict()
    for s in monitored:
        if s.test == test:
            series.setdefault(_series_key(s, usual), []).append(s)
    for steps in series.values():
        steps.sort(key=lambda s: -int((s.monitor or {}).get("sampling") or 400))
    return base, series


def monitoring_cost(doc: SuiteResult) -> list[str]:
    """The study's tables, one per series and test; empty when no step monitored."""
    tests = OrderedDict.fromkeys(s.test for s in doc.steps if s.monitor and s.monitor.get("kind") and s.summary)
    if not tests:
        return []
    out = ["", "monitoring cost (sampling rate across: 1 in N packets; no monitoring first)"]
    for test in tests:
        base, series = monitoring_series(doc, test)
        for label, steps in series.items():
            out += _cost_table(test, label, base, steps)
    return out


def _cost_table(test: str, label: str, base: Optional[StepResult], steps: list[StepResult]) -> list[str]:
    cols = ([base] if base else []) + steps
    headers = [
        f"{test}: {label}",
        *(("off" if s is base else f"1-in-{(s.monitor or {}).get('sampling')}") for s in cols),
    ]
    base_sum = base.summary.mean_of("sum") if base and base.summary else None

    def tput(st: StepResult) -> str:
        fig = st.summary.figure("sum") if st.summary else None
        if not isinstance(fig, Figure):
            return "-"
        return _fmt(fig.mean, 1) + ("" if fig.ci95 is None else f" ±{fig.ci95:,.1f}")

    def ratio(st: StepResult) -> str:
        v = st.summary.mean_of("sum") if st.summary else None
        return "-" if v is None or not base_sum else f"{v / base_sum:.3f}"

    def col(key: str, digits: int = 0) -> Callable[[StepResult], str]:
        return lambda st: "-" if st is base or not collector(st) else _pm((collector(st) or {}).get(key), digits)

    rows: list[Row] = [
        (f"throughput ({steps[0].units})", tput),
        ("throughput ÷ off", ratio),
        ("ovs-vswitchd (% of a core)", lambda st: _pm(_rep_ci(st, "vswitchd_pct_of_core"))),
        *thread_rows(cols),
        ("ovs-vswitchd per Gbit/s (% of a core)", lambda st: _pm(cpu_per_gbit(st))),
        ("host CPU (%)", lambda st: _fmt(st.summary.cpu_host_pct if st.summary else None)),
        ("collector: samples/s", col("received_per_s")),
        ("collector: traffic accounted (kB/s)", lambda st: "-" if st is base else _kb(collector(st))),
        ("received ÷ expected [95%]", lambda st: "-" if st is base else _ratio(st)),
        ("collector socket drops", lambda st: "-" if st is base else _drops(collector(st))),
        ("lost (of started)", lambda st: f"{st.summary.lost}/{st.summary.instances}" if st.summary else "-"),
    ]
    out = ["", render.table(headers, [[name, *[fn(s) for s in cols]] for name, fn in rows])]
    for s in steps:
        verdict = ratio_verdict(collector(s))
        if verdict != "as expected":
            out.append(f"  received ÷ expected at 1-in-{(s.monitor or {}).get('sampling')}: {verdict}")
    return out


def _rep_ci(step: StepResult, key: str) -> Optional[dict[str, Any]]:
    """A CPU figure across the step's repetitions, mean ± 95% CI."""
    interval = stats.ci([r.cpu[key] for r in step.repetitions if r.cpu.get(key) is not None])
    return None if interval is None else {"mean": interval.mean, "ci95": interval.half_width}


def cpu_per_gbit(step: StepResult) -> Optional[dict[str, Any]]:
    """ovs-vswitchd's CPU per Gbit/s carried, per repetition, mean ± 95% CI: its cost with the traffic's
    own variation taken out (on a shared machine a step's throughput moves, and the CPU with it)."""
    xs = []
    for r in step.repetitions:
        cpu, rate = r.cpu.get("vswitchd_pct_of_core"), r.aggregate.sum
        if cpu is not None and rate and step.units == "Mbit/s":
            xs.append(cpu / (rate / 1000.0))
    interval = stats.ci(xs)
    return None if interval is None else {"mean": interval.mean, "ci95": interval.half_width, "n": interval.n}


def _kb(c: Optional[dict[str, Any]]) -> str:
    fig = (c or {}).get("accounted_bytes_per_s")
    if not fig or fig.get("mean") is None:
        return "-"
    return _pm({"mean": fig["mean"] / 1000, "ci95": None if fig.get("ci95") is None else fig["ci95"] / 1000}, 0)


def _drops(c: Optional[dict[str, Any]]) -> str:
    d = (c or {}).get("socket_drops")
    return "-" if d is None else f"{d:,}"


# -- phased runs ---------------------------------------------------------------------------------------------


def _phase_label(p: dict[str, Any]) -> str:
    m = p.get("monitor")
    what = "off" if not m else f"{m.get('variant')} 1-in-{m.get('sampling') or 400}"
    return f"{p['at']} s: {what}"


def phases(doc: SuiteResult) -> list[str]:
    """Each phased step: a table per phase (across repetitions), then each repetition's throughput by second
    with the phase boundaries marked ``|``."""
    out: list[str] = []
    for step in doc.steps:
        reps = [r for r in step.repetitions if r.phases]
        if not step.phases or not reps:
            continue
        n = len(step.phases)
        out += ["", f"{step.test}: case {step.case}, {step.duration} s per run, {len(reps)} run(s), phases:"]
        cols = [_phase_label(p) for p in step.phases]
        per = [[r.phases[i] for r in reps if i < len(r.phases or [])] for i in range(n)]

        def mean(vals: list[Any]) -> Optional[float]:
            xs = [v for v in vals if v is not None]
            return sum(xs) / len(xs) if xs else None

        groups = sorted({g for ps in per for p in ps for g in (p.get("vswitchd_threads_pct") or {})})
        rows = [
            ["applied at (s, mean)", *[_fmt(mean([p.get("applied_s") for p in ps]), 2) for ps in per]],
            [
                "switch acknowledged",
                *["/".join(sorted({(p.get("ack") or {}).get("status", "-") for p in ps})) for ps in per],
            ],
            [f"throughput ({step.units}, mean)", *[_fmt(mean([p.get("throughput") for p in ps])) for ps in per]],
        ]
        for g in groups:
            vals = [mean([(p.get("vswitchd_threads_pct") or {}).get(g) for p in ps]) for ps in per]
            if any(v and v >= 0.05 for v in vals):
                rows.append([f"  ovs-vswitchd {'main' if g == 'ovs' else g} (%)", *[_fmt(v) for v in vals]])
        colls = [combine([p.get("collector") for p in ps if p.get("collector")]) for ps in per]
        rows.append(["collector: samples/s", *[_pm((c or {}).get("received_per_s"), 0) for c in colls]])
        rows.append(["received ÷ expected [95%]", *[_ratio_of(c) for c in colls]])
        out.append(render.table(["phase", *cols], rows))
        for r in reps:
            out.append(
                f"  run {r.repetition} throughput by second: {_timeline(r.throughput_series or [], step.phases)}"
            )
    return out


def _ratio_of(c: Optional[dict[str, Any]]) -> str:
    if not c or c.get("ratio") is None:
        return "-"
    lo, hi = c.get("ratio_ci95") or (None, None)
    return f"{c['ratio']:.3f} [{_fmt(lo, 3)}, {_fmt(hi, 3)}]"


def _timeline(series: list[Optional[float]], plan: list[dict[str, Any]]) -> str:
    starts = {p["at"] for p in plan if p["at"]}
    parts = []
    for i, v in enumerate(series):
        if i in starts:
            parts.append("|")
        parts.append("-" if v is None else f"{v:.0f}")
    return " ".join(parts) if parts else "not measured"
