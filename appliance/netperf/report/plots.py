"""Plots of saved runs (matplotlib, Agg backend: no display needed): PNG files or SVG for the HTML report.

One figure per test: the primary figure (total throughput or transaction
rate) against concurrency -- or against message size when the test sweeps
sizes at one concurrency -- with 95% error bars and one line per case, the
lost instances, and CPU (host and ovs-vswitchd); and one figure comparing two
runs step by step.  Imported only when plots are asked for: matplotlib takes
a second to import.
"""

from __future__ import annotations

import io
from collections import OrderedDict
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from appliance.netperf.figures.compare import Result, Row
from appliance.netperf.store.records import Figure, StepResult, SuiteResult, Summary

PLOTS_DIR = "plots"
# Plotting libraries are a package of their own on an RPM install (about 170 MB hvnet does without).
MISSING = "plots not drawn: matplotlib is not installed (RPM install: dnf install hvnet-plots; --no-plots skips them)"


def available() -> bool:
    """Whether matplotlib can be imported here (without importing it: that takes a second)."""
    from importlib.util import find_spec

    return find_spec("matplotlib") is not None


def _x(step: StepResult, x_key: str) -> float:
    """The step's position on the x axis: its message size or its concurrency."""
    return (step.message_size if x_key == "message_size" else step.concurrency) or 0


def _series(
    steps: list[StepResult], xpos: Callable[[StepResult], float], figure: str
) -> tuple[list[float], list[float], list[float]]:
    xs, ys, es = [], [], []
    for s in sorted(steps, key=xpos):
        v = (s.summary or Summary()).figure(figure)
        if isinstance(v, Figure):
            xs.append(xpos(s))
            ys.append(v.mean)
            es.append(v.ci95 or 0.0)
    return xs, ys, es


def pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend (no display); ImportError where matplotlib is not installed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def label(text: object) -> str:
    """Text from a run file (names of suites, tests, cases) as matplotlib draws it verbatim: no mathtext."""
    return str(text).replace("$", r"\$")


def write(doc: SuiteResult, run_dir: Path) -> list[Path]:
    """One PNG per test in ``RUN/plots``."""
    plt = pyplot()
    out_dir = Path(run_dir) / PLOTS_DIR
    out_dir.mkdir(exist_ok=True)
    written = []
    for test, fig in figures(doc, plt):
        path = out_dir / f"{test}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        written.append(path)
    from appliance.netperf.report import plots_monitoring

    written += plots_monitoring.write(plt, doc, out_dir)
    return written


def svgs(doc: SuiteResult) -> list[tuple[str, str]]:
    """(test, SVG document) per test: the PNG plots' figures, for a report that carries its own pictures."""
    plt = pyplot()
    out = []
    for test, fig in figures(doc, plt):
        out.append((test, svg_text(fig)))
        plt.close(fig)
    return out


def svg_text(fig: Any) -> str:
    """A figure as an SVG document: text as text (a reader can select and search it; matplotlib
    escapes it), and no date in it (the same run gives the same bytes)."""
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.fonttype": "none"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    return buf.getvalue()


def figures(doc: SuiteResult, plt: Any) -> Iterator[tuple[str, Any]]:
    """One figure per test: the primary figure, lost instances and CPU against concurrency or message size."""
    by_test: OrderedDict[str, list[StepResult]] = OrderedDict()
    for s in doc.steps:
        if s.summary:
            by_test.setdefault(s.test, []).append(s)
    for test, steps in by_test.items():
        if steps[0].frame_size is not None:  # a packet-rate test: packets/s by frame size or offered rate
            from appliance.netperf.report import plots_pps

            yield test, plots_pps.figure(doc.meta.suite.name, test, steps, plt, label)
            continue
        yield test, _figure(doc, test, steps, plt)


def _figure(doc: SuiteResult, test: str, steps: list[StepResult], plt: Any) -> Any:
    sizes = {s.message_size for s in steps}
    conc = {s.concurrency for s in steps}
    cases = list(dict.fromkeys(s.case for s in steps))
    x_key = "message_size" if len(conc) == 1 and len(sizes) > 1 else "concurrency"
    if len(conc) == 1 and len(sizes) == 1 and len(cases) > 1:
        x_key = "case"  # a sweep of cases (policing rates, mirror counts) at one point: the cases are the x axis
    x_label = {"message_size": "message size (bytes)", "case": "case"}.get(x_key, "concurrent instances")

    def xpos(st: StepResult) -> float:
        return float(cases.index(st.case)) if x_key == "case" else float(_x(st, x_key))

    lines: OrderedDict[str, list[StepResult]] = OrderedDict()
    for s in steps:
        if x_key == "case":
            name = test if None in sizes else f"-m {s.message_size}"
        else:
            name = s.case if x_key == "message_size" or len(sizes) == 1 else f"{s.case} -m {s.message_size}"
        lines.setdefault(label(name), []).append(s)
    unit = steps[0].units
    fig, (ax, ax_lost, ax_cpu) = plt.subplots(
        3, 1, figsize=(8, 9), sharex=True, gridspec_kw={"height_ratios": [3, 1, 1.4]}
    )
    for name, ss in lines.items():
        xs, ys, es = _series(ss, xpos, "sum")
        ax.errorbar(xs, ys, yerr=es, marker="o", capsize=4, label=name)
        lost = [(xpos(st), _summary(st).lost) for st in ss]
        ax_lost.bar(
            [x for x, _ in lost],
            [n for _, n in lost],
            alpha=0.6,
            label=name,
            width=_bar_width([x for x, _ in lost]),
        )
        cpu = [
            (xpos(st), _summary(st).cpu_host_pct, _summary(st).cpu_vswitchd_pct_of_core) for st in sorted(ss, key=xpos)
        ]
        ax_cpu.plot(
            [c[0] for c in cpu if c[1] is not None],
            [c[1] for c in cpu if c[1] is not None],
            marker="s",
            label=f"{name}: host %",
        )
        ax_cpu.plot(
            [c[0] for c in cpu if c[2] is not None],
            [c[2] for c in cpu if c[2] is not None],
            marker="^",
            linestyle="--",
            label=f"{name}: ovs-vswitchd % of a core",
        )
    kind = "transaction rate" if unit == "transactions/s" else "throughput"
    ax.set_title(label(f"{doc.meta.suite.name} / {test} ({steps[0].type}, {steps[0].duration} s)"))
    ax.set_ylabel(f"total {kind} ({label(unit)})")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")
    ax_lost.set_ylabel("lost instances")
    ax_lost.set_ylim(bottom=0, top=max(1, *(_summary(s).lost for s in steps)) * 1.15)
    ax_lost.grid(True, alpha=0.3)
    ax_cpu.set_ylabel("CPU %")
    ax_cpu.set_xlabel(x_label)
    if x_key == "case":
        ax_cpu.set_xticks(range(len(cases)))
        ax_cpu.set_xticklabels([label(c) for c in cases], rotation=20, ha="right", fontsize="small")
    ax_cpu.grid(True, alpha=0.3)
    ax_cpu.legend(fontsize="x-small")
    fig.tight_layout()
    return fig


def _summary(step: StepResult) -> Summary:
    return step.summary or Summary()


def _bar_width(xs: list[float]) -> float:
    ordered = sorted(set(xs))
    gaps = [b - a for a, b in zip(ordered, ordered[1:])]
    return 0.6 * (min(gaps) if gaps else 1.0)


VERDICT_COLOURS = {"regression": "#c0392b", "no result": "#c0392b", "improvement": "#1e8449"}
COMPARE_TITLES = {"sum": "total throughput or transaction rate (higher is better)",
                  "latency_mean_us": "mean latency (lower is better)"}  # fmt: skip


def compare_svg(result: Result) -> str:
    """Per step, baseline against candidate as % of the baseline's mean, each with its 95% interval.

    Steps measure different things in different units; scaled to their own
    baseline they share one axis, and the threshold is one band around 100%.
    A side without an interval (one repetition) is drawn as a bare point.
    """
    plt = pyplot()
    by_figure = {f: [r for r in result.rows if r.figure == f and r.base and r.new and r.base.mean]
                 for f in COMPARE_TITLES}  # fmt: skip
    shown = [f for f, rows in by_figure.items() if rows]
    if not shown:
        raise ValueError("no step has a result in both runs")
    heights = [max(2.0, 0.32 * len(by_figure[f]) + 1.0) for f in shown]
    fig, axes = plt.subplots(len(shown), 1, figsize=(9, sum(heights)), gridspec_kw={"height_ratios": heights})
    for ax, f in zip(axes if len(shown) > 1 else [axes], shown):
        _compare_axis(ax, by_figure[f], result.threshold_pct, COMPARE_TITLES[f])
    fig.tight_layout()
    svg = svg_text(fig)
    plt.close(fig)
    return svg


def _compare_axis(ax: Any, rows: list[Row], threshold: float, title: str) -> None:
    ys = list(range(len(rows)))[::-1]
    ax.axvspan(100 - threshold, 100 + threshold, color="#999999", alpha=0.15, label=f"±{threshold:g}% threshold")
    ax.axvline(100, color="#555555", linewidth=0.8)
    for y, r in zip(ys, rows):
        assert r.base is not None and r.new is not None
        scale = 100.0 / r.base.mean
        ax.errorbar([100.0], [y + 0.15], xerr=[(r.base.half_width or 0.0) * scale], fmt="o", color="#7f8c8d",
                    capsize=3, label="baseline" if y == ys[0] else None)  # fmt: skip
        ax.errorbar([r.new.mean * scale], [y - 0.15], xerr=[(r.new.half_width or 0.0) * scale], fmt="s",
                    color=VERDICT_COLOURS.get(r.verdict, "#2e86c1"), capsize=3,
                    label="candidate" if y == ys[0] else None)  # fmt: skip
    ax.set_yticks(ys)
    ax.set_yticklabels([label(r.key) for r in rows], fontsize="small")
    ax.set_xlabel("% of the baseline's mean (bars: 95% interval)")
    ax.set_title(title, fontsize="medium")
    ax.grid(True, axis="x", alpha=0.3)
    ax.legend(fontsize="x-small", loc="best")
