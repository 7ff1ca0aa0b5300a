"""Compare two runs step by step: is the new build slower, and is that more than noise?

Steps are matched by their key (test / case / message size / concurrency).
For each, the primary figure (total throughput or transaction rate: higher
is better) and, for request/response tests, the mean latency (lower is
better) are compared across repetitions with Welch's t-test.  A
*regression* is a change in the bad direction beyond the threshold that is
also significant at 95%; with one repetition a side significance cannot be
tested, which is reported (run ``regression.yaml``: it repeats each step).
A step that produced a result before and none now is a regression outright.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from appliance.netperf.figures import aggregate, stats
from appliance.netperf.store.records import SuiteResult

FIGURES = (
    ("sum", "higher"),
    ("latency_mean_us", "lower"),
    ("monitor_pps", "higher"),
    ("captured_ratio", "higher"),
    ("arrived_ratio", "higher"),
)


@dataclass
class Row:
    key: str
    figure: str
    base: Optional[stats.Interval]
    new: Optional[stats.Interval]
    change_pct: Optional[float]
    p_value: Optional[float]
    # "regression" | "improvement" | "not significant" | "within threshold" | "untestable" | "no result" | "new result"
    verdict: str
    detail: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "key": self.key,
            "figure": self.figure,
            "base": self.base.to_json() if self.base else None,
            "new": self.new.to_json() if self.new else None,
            "change_pct": None if self.change_pct is None else round(self.change_pct, 2),
            "p_value": None if self.p_value is None else round(self.p_value, 5),
            "verdict": self.verdict,
            "detail": self.detail,
        }


@dataclass
class Result:
    threshold_pct: float
    rows: list[Row] = field(default_factory=list)
    only_base: list[str] = field(default_factory=list)
    only_new: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)

    @property
    def regressions(self) -> list[Row]:
        """Rows that fail the comparison; a step without a result counts once, not once per figure."""
        out, seen = [], set()
        for r in self.rows:
            if r.verdict == "regression" or (r.verdict == "no result" and r.key not in seen):
                out.append(r)
                seen.add(r.key)
        return out

    def to_json(self) -> dict[str, Any]:
        return {
            "threshold_pct": self.threshold_pct,
            "regressions": len(self.regressions),
            "rows": [r.to_json() for r in self.rows],
            "only_in_base": self.only_base,
            "only_in_new": self.only_new,
            "warnings": self.warnings,
        }


def compare(base: SuiteResult, new: SuiteResult, *, threshold_pct: float = 5.0, alpha: float = 0.05) -> Result:
    out = Result(threshold_pct)
    bs_, ns_ = base.meta.suite, new.meta.suite
    if bs_.sha256 != ns_.sha256:
        out.warnings.append(
            f"the runs used different suite files ({bs_.name} {bs_.sha256[:12]} "
            f"vs {ns_.name} {ns_.sha256[:12]}): only matching steps compared"
        )
    for doc, name in ((base, "base"), (new, "new")):
        if doc.partial:
            reason = "incomplete" if doc.partial_reason is None else doc.partial_reason
            out.warnings.append(f"the {name} run is partial ({reason})")
    # a step with no finished repetition (a run stopped early) was not run: not a "no result"
    b_steps = {s.key: s for s in base.steps if s.repetitions}
    n_steps = {s.key: s for s in new.steps if s.repetitions}
    out.only_base = [k for k in b_steps if k not in n_steps]
    out.only_new = [k for k in n_steps if k not in b_steps]
    for key, bs in b_steps.items():
        ns = n_steps.get(key)
        if ns is None:
            continue
        if (bs.duration, bs.message_size) != (ns.duration, ns.message_size):
            out.warnings.append(f"{key}: the runs used different durations ({bs.duration} s vs {ns.duration} s)")
        for figure, better in FIGURES:
            bv, nv = aggregate.values_for(bs, figure), aggregate.values_for(ns, figure)
            if not bv:
                if nv:
                    out.rows.append(
                        Row(
                            key,
                            figure,
                            None,
                            stats.ci(nv),
                            None,
                            None,
                            "new result",
                            "the base run produced no result for this step",
                        )
                    )
                continue
            out.rows.append(_row(key, figure, better, bv, nv, threshold_pct, alpha))
    return out


def _row(key: str, figure: str, better: str, bv: list[float], nv: list[float], threshold: float, alpha: float) -> Row:
    bi = stats.ci(bv)
    if not nv:
        return Row(key, figure, bi, None, None, None, "no result", "the new run produced no result for this step")
    ni = stats.ci(nv)
    c = stats.welch(bv, nv, alpha)
    change = c.change_pct
    worse = change is not None and (change < -threshold if better == "higher" else change > threshold)
    better_by = change is not None and (change > threshold if better == "higher" else change < -threshold)
    if c.significant is None:
        verdict = "untestable" if (worse or better_by) else "within threshold"
        detail = f"{c.method}; run more repetitions to test significance"
    elif worse and c.significant:
        verdict, detail = "regression", c.method
    elif better_by and c.significant:
        verdict, detail = "improvement", c.method
    elif worse or better_by:
        verdict, detail = "not significant", f"{c.method}: beyond the threshold but within the noise"
    else:
        verdict, detail = "within threshold", c.method
    return Row(key, figure, bi, ni, change, c.p_value, verdict, detail)


HEADERS = ("step", "figure", "base", "new", "change", "p", "verdict")


def interval_text(i: Optional[stats.Interval]) -> str:
    """``mean ±half width (n=N)``; ``-`` for a side that has no result."""
    if i is None:
        return "-"
    return f"{i.mean:,.2f}" + ("" if i.half_width is None else f" ±{i.half_width:,.2f}") + f" (n={i.n})"


def table_rows(result: Result) -> list[list[str]]:
    """One row per compared figure, as the text and HTML reports show it (``HEADERS``)."""
    return [
        [
            r.key,
            r.figure,
            interval_text(r.base),
            interval_text(r.new),
            "-" if r.change_pct is None else f"{r.change_pct:+.1f}%",
            "-" if r.p_value is None else f"{r.p_value:.3f}",
            r.verdict.upper() if r.verdict in ("regression", "no result") else r.verdict,
        ]
        for r in result.rows
    ]


def closing_lines(result: Result) -> list[str]:
    """Steps only one run has, untestable changes, and the verdict line."""
    lines = [*(f"only in base: {k}" for k in result.only_base), *(f"only in new: {k}" for k in result.only_new)]
    untestable = sum(1 for r in result.rows if r.verdict == "untestable")
    if untestable:
        lines.append(
            f"{untestable} change(s) beyond {result.threshold_pct:g}% could not be tested for significance "
            "(one repetition): not counted as regressions"
        )
    n = len(result.regressions)
    lines.append(
        f"{n} significant regression(s) beyond {result.threshold_pct:g}%"
        if n
        else f"no significant regression beyond {result.threshold_pct:g}%"
    )
    return lines


def text(result: Result) -> str:
    from appliance.core import render

    lines = [*(f"warning: {w}" for w in result.warnings)]
    lines.append(render.table(list(HEADERS), table_rows(result)))
    return "\n".join(lines + closing_lines(result))
