"""PNG plots of a saved run (matplotlib, Agg backend: no display needed).

One figure per test: the primary figure (total throughput or transaction
rate) against concurrency -- or against message size when the test sweeps
sizes at one concurrency -- with 95% error bars and one line per case, the
lost instances, and CPU (host and ovs-vswitchd).  Imported only when plots
are asked for: matplotlib takes a second to import.
"""

from __future__ import annotations

from collections import OrderedDict
from pathlib import Path

from .records import Figure, StepResult, SuiteResult, Summary

PLOTS_DIR = "plots"


def _x(step: StepResult, x_key: str) -> float:
    """The step's position on the x axis: its message size or its concurrency."""
    return (step.message_size if x_key == "message_size" else step.concurrency) or 0


def _series(steps: list[StepResult], x_key: str, figure: str) -> tuple[list[float], list[float], list[float]]:
    xs, ys, es = [], [], []
    for s in sorted(steps, key=lambda st: _x(st, x_key)):
        v = (s.summary or Summary()).figure(figure)
        if isinstance(v, Figure):
            xs.append(_x(s, x_key))
            ys.append(v.mean)
            es.append(v.ci95 or 0.0)
    return xs, ys, es


def write(doc: SuiteResult, run_dir: Path) -> list[Path]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    out_dir = Path(run_dir) / PLOTS_DIR
    out_dir.mkdir(exist_ok=True)
    by_test: OrderedDict[str, list[StepResult]] = OrderedDict()
    for s in doc.steps:
        if s.summary:
            by_test.setdefault(s.test, []).append(s)
    written = []
    for test, steps in by_test.items():
        sizes = {s.message_size for s in steps}
        conc = {s.concurrency for s in steps}
        x_key = "message_size" if len(conc) == 1 and len(sizes) > 1 else "concurrency"
        x_label = "message size (bytes)" if x_key == "message_size" else "concurrent instances"
        lines: OrderedDict[str, list[StepResult]] = OrderedDict()
        for s in steps:
            label = s.case if x_key == "message_size" or len(sizes) == 1 else f"{s.case} -m {s.message_size}"
            lines.setdefault(label, []).append(s)
        unit = steps[0].units
        fig, (ax, ax_lost, ax_cpu) = plt.subplots(
            3, 1, figsize=(8, 9), sharex=True, gridspec_kw={"height_ratios": [3, 1, 1.4]}
        )
        for label, ss in lines.items():
            xs, ys, es = _series(ss, x_key, "sum")
            ax.errorbar(xs, ys, yerr=es, marker="o", capsize=4, label=label)
            lost = [(_x(st, x_key), _summary(st).lost) for st in ss]
            ax_lost.bar(
                [x for x, _ in lost],
                [n for _, n in lost],
                alpha=0.6,
                label=label,
                width=_bar_width([x for x, _ in lost]),
            )
            cpu = [
                (_x(st, x_key), _summary(st).cpu_host_pct, _summary(st).cpu_vswitchd_pct_of_core)
                for st in sorted(ss, key=lambda st: _x(st, x_key))
            ]
            ax_cpu.plot(
                [c[0] for c in cpu if c[1] is not None],
                [c[1] for c in cpu if c[1] is not None],
                marker="s",
                label=f"{label}: host %",
            )
            ax_cpu.plot(
                [c[0] for c in cpu if c[2] is not None],
                [c[2] for c in cpu if c[2] is not None],
                marker="^",
                linestyle="--",
                label=f"{label}: ovs-vswitchd % of a core",
            )
        kind = "transaction rate" if unit == "transactions/s" else "throughput"
        ax.set_title(f"{doc.meta.suite.name} / {test} ({steps[0].type}, {steps[0].duration} s)")
        ax.set_ylabel(f"total {kind} ({unit})")
        ax.grid(True, alpha=0.3)
        ax.legend(fontsize="small")
        ax_lost.set_ylabel("lost instances")
        ax_lost.set_ylim(bottom=0, top=max(1, *(_summary(s).lost for s in steps)) * 1.15)
        ax_lost.grid(True, alpha=0.3)
        ax_cpu.set_ylabel("CPU %")
        ax_cpu.set_xlabel(x_label)
        ax_cpu.grid(True, alpha=0.3)
        ax_cpu.legend(fontsize="x-small")
        fig.tight_layout()
        path = out_dir / f"{test}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        written.append(path)
    from . import plots_monitoring

    written += plots_monitoring.write(plt, doc, out_dir)
    return written


def _summary(step: StepResult) -> Summary:
    return step.summary or Summary()


def _bar_width(xs: list[float]) -> float:
    ordered = sorted(set(xs))
    gaps = [b - a for a, b in zip(ordered, ordered[1:])]
    return 0.6 * (min(gaps) if gaps else 1.0)
