"""Plots of ovs-vswitchd's threads (every suite), the monitoring cost and phased runs (matplotlib, Agg).

``<test>-threads.png``: each step's CPU per thread group (stacked, % of one
core).  ``<test>-monitoring-cost.png``: throughput, ovs-vswitchd CPU and the
collector's samples/s against the sampling rate, one line per series, no
monitoring as a dashed line.  ``<test>-<case>-phases.png``: a phased run's
throughput by second and ovs-vswitchd's threads over time, with the phase
boundaries drawn.  Called by :func:`.plots.write` with pyplot imported.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path
from typing import Any

from appliance.netperf.report.monitoring import collector, cpu_per_gbit, monitoring_series, threads
from appliance.netperf.store.records import StepResult, SuiteResult


def write(plt: Any, doc: SuiteResult, out_dir: Path) -> list[Path]:
    by_test: OrderedDict[str, list[StepResult]] = OrderedDict()
    for s in doc.steps:
        if s.summary:
            by_test.setdefault(s.test, []).append(s)
    written = []
    for test, steps in by_test.items():
        path = _threads(plt, doc, test, steps, out_dir)
        if path:
            written.append(path)
        path = _cost(plt, doc, test, steps, out_dir)
        if path:
            written.append(path)
        for s in steps:
            if s.phases and any(r.phases for r in s.repetitions):
                written.append(_phases(plt, doc, s, out_dir))
    return written


def _threads(plt: Any, doc: SuiteResult, test: str, steps: list[StepResult], out_dir: Path) -> Path | None:
    groups = sorted({g for s in steps for g, f in threads(s).items() if f and (f.get("mean") or 0) >= 0.05})
    if not groups:
        return None
    labels = [f"{s.case}\nc{s.concurrency}" + (f" m{s.message_size}" if s.message_size else "") for s in steps]
    fig, ax = plt.subplots(figsize=(max(6, 0.7 * len(steps) + 2), 4.5))
    bottom = [0.0] * len(steps)
    for g in groups:
        ys = [(threads(s).get(g) or {}).get("mean") or 0.0 for s in steps]
        ax.bar(range(len(steps)), ys, bottom=bottom, label="main" if g == "ovs" else g)
        bottom = [b + y for b, y in zip(bottom, ys)]
    ax.set_xticks(range(len(steps)), labels, fontsize="x-small", rotation=90)
    ax.set_ylabel("ovs-vswitchd CPU (% of a core)")
    ax.set_title(f"{doc.meta.suite.name} / {test}: ovs-vswitchd by thread")
    ax.legend(fontsize="small")
    ax.grid(True, axis="y", alpha=0.3)
    fig.tight_layout()
    path = out_dir / f"{test}-threads.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _cost(plt: Any, doc: SuiteResult, test: str, steps: list[StepResult], out_dir: Path) -> Path | None:
    base, series = monitoring_series(doc, test)
    if not series:
        return None
    fig, (ax, ax_cpu, ax_gbit, ax_col) = plt.subplots(4, 1, figsize=(8, 12), sharex=True)
    for label, ss in series.items():
        xs = [int((s.monitor or {}).get("sampling") or 400) for s in ss]
        ys = [s.summary.mean_of("sum") if s.summary else None for s in ss]
        fig_sum = [s.summary.figure("sum") if s.summary else None for s in ss]
        es = [getattr(f, "ci95", None) or 0.0 for f in fig_sum]
        ax.errorbar(xs, [y or 0 for y in ys], yerr=es, marker="o", capsize=3, label=label)
        cpu = [s.summary.cpu_vswitchd_pct_of_core if s.summary else None for s in ss]
        ax_cpu.plot(xs, [c or 0 for c in cpu], marker="^", label=f"{label}: all threads")
        for g in sorted({g for s in ss for g in threads(s)}):
            ys = [(threads(s).get(g) or {}).get("mean") or 0.0 for s in ss]
            if g != "ovs" and max(ys) >= 0.5:  # the main thread is most of "all threads" with the userspace datapath
                ax_cpu.plot(xs, ys, linestyle=":", marker=".", label=f"{label}: {g}")
        per = [cpu_per_gbit(s) or {} for s in ss]
        ax_gbit.errorbar(xs, [p.get("mean") or 0 for p in per], yerr=[p.get("ci95") or 0 for p in per],
                         marker="D", capsize=3, label=label)  # fmt: skip
        rate = [((collector(s) or {}).get("received_per_s") or {}).get("mean") for s in ss]
        shown = [(x, r) for x, r in zip(xs, rate) if r]  # log scale: a rate not measured is left out
        ax_col.plot([x for x, _ in shown], [r for _, r in shown], marker="s", label=label)
    if base is not None and base.summary:
        base_gbit = (cpu_per_gbit(base) or {}).get("mean")
        lines = (
            (ax, base.summary.mean_of("sum")),
            (ax_cpu, base.summary.cpu_vswitchd_pct_of_core),
            (ax_gbit, base_gbit),
        )
        for a, v in lines:
            if v is not None:
                a.axhline(v, linestyle="--", color="grey", label="no monitoring")
    ax.set_xscale("log", base=2)
    ax.invert_xaxis()  # 1-in-1024 first: sampling grows to the right, as in the study
    ax.set_title(f"{doc.meta.suite.name} / {test}: the cost of sFlow and IPFIX")
    ax.set_ylabel(f"throughput ({steps[0].units})")
    ax_cpu.set_ylabel("ovs-vswitchd (% of a core)")
    ax_gbit.set_ylabel("ovs-vswitchd per Gbit/s\n(% of a core)")
    ax_col.set_ylabel("collector samples/s")
    ax_col.set_yscale("log")
    ax_col.set_xlabel("sampling: 1 in N packets")
    for a in (ax, ax_cpu, ax_gbit, ax_col):
        a.grid(True, alpha=0.3)
        a.legend(fontsize="x-small")
    fig.tight_layout()
    path = out_dir / f"{test}-monitoring-cost.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path


def _phases(plt: Any, doc: SuiteResult, step: StepResult, out_dir: Path) -> Path:
    fig, (ax, ax_cpu) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    for r in step.repetitions:
        tput = r.throughput_series or []
        ax.plot([i + 0.5 for i in range(len(tput))], [v if v is not None else float("nan") for v in tput],
                marker=".", label=f"run {r.repetition}")  # fmt: skip
        points = r.cpu.get("vswitchd_threads_series") or []
        groups = sorted({g for _, gs in points for g in gs})
        for g in groups:
            ys = [gs.get(g, 0.0) for _, gs in points]
            if max(ys or [0]) >= 0.5:
                ax_cpu.plot([t for t, _ in points], ys, label=f"run {r.repetition} {'main' if g == 'ovs' else g}")
    for p in step.phases or []:
        m = p.get("monitor")
        what = "off" if not m else f"{m.get('variant')} 1-in-{m.get('sampling') or 400}"
        for a in (ax, ax_cpu):
            a.axvline(p["at"], color="grey", linestyle=":")
        ax.annotate(what, (p["at"], 1), xycoords=("data", "axes fraction"), fontsize="x-small",
                    rotation=90, va="top", ha="right")  # fmt: skip
    ax.set_title(f"{doc.meta.suite.name} / {step.test}: case {step.case}, phases")
    ax.set_ylabel(f"throughput ({step.units})")
    ax_cpu.set_ylabel("ovs-vswitchd (% of a core)")
    ax_cpu.set_xlabel("seconds into the run")
    for a in (ax, ax_cpu):
        a.grid(True, alpha=0.3)
        a.legend(fontsize="x-small")
    fig.tight_layout()
    path = out_dir / f"{step.test}-{step.case}-phases.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return path
