"""A run beside a study: the study's table, hvnet's figure in the study's unit, and their ratio;
each of the study's conclusions held, not held, or not comparable here.

A conclusion is decided only from what the run measured: a step that is missing,
has no finished repetition, lacks the figure, or lost instances (its mean is
then over survivors) makes it "not comparable", with the reason; so does a
difference between two steps their repetitions cannot tell from noise (Welch's
t-test at 95%, as ``suite compare``).  Nothing here reads the study's numbers to
decide a conclusion: they are shown beside it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from appliance.core import render
from appliance.netperf.define.studies import Conclusion, Key, Study, Table
from appliance.netperf.figures import stats
from appliance.netperf.store.records import StepResult, SuiteResult

HOLDS, FAILS, NOT_COMPARABLE = "holds", "does not hold", "not comparable here"


@dataclass
class Cell:
    study: Optional[float]
    hvnet: Optional[float]  # in the study's unit (hvnet's figure x the column's scale)
    ratio: Optional[float]  # hvnet / study

    def to_json(self) -> dict[str, Any]:
        return {"study": self.study, "hvnet": self.hvnet, "ratio": self.ratio}


@dataclass
class Line:
    """One of the study's rows and the run's step it matched (``step`` None: not in this run)."""

    key: Key
    label: str
    step: Optional[str]
    cells: list[Cell]
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {"key": self.key, "label": self.label, "step": self.step, "cells": [c.to_json() for c in self.cells],
                "note": self.note}  # fmt: skip


@dataclass
class Side:
    table: Table
    lines: list[Line]

    def to_json(self) -> dict[str, Any]:
        t = self.table
        return {"id": t.id, "title": t.title, "where": t.where, "suite": t.suite,
                "columns": [c.to_json() for c in t.columns], "rows": [x.to_json() for x in self.lines]}  # fmt: skip


@dataclass
class Judgement:
    conclusion: Conclusion
    status: str
    figures: str  # the run's figures that decide it, or why it cannot be decided

    def to_json(self) -> dict[str, Any]:
        c = self.conclusion
        return {"claim": c.claim, "study_figures": c.study_figures, "kind": c.kind, "figure": c.figure,
                "status": self.status, "run_figures": self.figures}  # fmt: skip


@dataclass
class Against:
    study: Study
    run_suite: str
    tables: list[Side] = field(default_factory=list)
    not_in_study: list[str] = field(default_factory=list)
    conclusions: list[Judgement] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        s = self.study
        return {
            "study": {"name": s.name, "title": s.title, "year": s.year, "source": s.source},
            "run_suite": self.run_suite,
            "tables": [t.to_json() for t in self.tables],
            "not_in_study": self.not_in_study,
            "conclusions": [j.to_json() for j in self.conclusions],
        }

    def text(self) -> str:
        return text(self)


# -- matching ------------------------------------------------------------------------------------


def step_field(step: StepResult, name: str) -> Any:
    if name == "offered_mbps":
        o = step.offered
        if not isinstance(o, dict):
            return None
        return o.get("value") if o.get("unit") == "Mbit/s" else o.get("mbps")
    return getattr(step, name, None)


def _equal(have: Any, want: Any) -> bool:
    if isinstance(want, list):
        return any(_equal(have, w) for w in want)
    if isinstance(want, (int, float)) and isinstance(have, (int, float)) and not isinstance(have, bool):
        return abs(float(have) - float(want)) <= 1e-9 * max(1.0, abs(float(want)))
    return bool(have == want)


def matches(step: StepResult, key: Key) -> bool:
    return all(_equal(step_field(step, k), v) for k, v in key.items())


def describe(key: Key) -> str:
    def one(v: Any) -> str:
        return "unpaced" if v is None else str(v)

    return " ".join(f"{k}={','.join(map(one, v)) if isinstance(v, list) else one(v)}" for k, v in key.items())


def select(steps: list[StepResult], key: Key) -> tuple[list[StepResult], Optional[str]]:
    """The steps ``key`` selects, and why that is not all it names (a listed value with no step)."""
    found = [s for s in steps if matches(s, key)]
    if not found:
        return [], f"no step with {describe(key)} in this run"
    for k, v in key.items():
        for one in v if isinstance(v, list) else []:
            if not any(_equal(step_field(s, k), one) for s in found):
                return found, f"no step with {describe({**key, k: one})} in this run"
    return found, None


# -- figures -------------------------------------------------------------------------------------


def figure(step: StepResult, name: str) -> tuple[Optional[float], str]:
    """A step's figure (mean across repetitions; ``lost``: instances lost per repetition), or why none."""
    s = step.summary
    if s is None:
        return None, f"{step.key}: no finished repetition"
    if name == "lost":
        return s.lost / max(1, s.repetitions), ""
    value = s.figure(name) if name.startswith("cpu_") else s.mean_of(name)
    if value is None:
        return None, f"{step.key}: {name} not measured"
    return float(value), ""


def _lost_note(step: StepResult) -> str:
    s = step.summary
    return f"{s.lost} of {s.instances} instances lost" if s is not None and s.lost else ""


def compare_table(table: Table, steps: list[StepResult]) -> Side:
    lines = []
    for row in table.rows:
        found = [s for s in steps if matches(s, row.key)]
        if len(found) != 1:
            note = "not in this run" if not found else f"{len(found)} steps match: " + ", ".join(s.key for s in found)
            lines.append(Line(row.key, row.label, None, [Cell(v, None, None) for v in row.values], note))
            continue
        step = found[0]
        cells = []
        for col, study in zip(table.columns, row.values):
            value, _ = figure(step, col.figure)
            hv = None if value is None else value * col.scale
            ratio = hv / study if hv is not None and study else None
            cells.append(Cell(study, hv, ratio))
        note = "no finished repetition" if step.summary is None else _lost_note(step)
        lines.append(Line(row.key, row.label, step.key, cells, note))
    return Side(table, lines)


# -- conclusions ---------------------------------------------------------------------------------


def _values(steps: list[StepResult], name: str) -> tuple[list[float], Optional[str]]:
    out = []
    for step in steps:
        if name != "lost" and step.summary is not None and step.summary.lost:
            return [], f"{step.key}: {_lost_note(step)} (its {name} is over the survivors)"
        value, why = figure(step, name)
        if value is None:
            return [], why
        out.append(value)
    return out, None


def _lost(steps: list[StepResult]) -> tuple[Optional[tuple[int, int]], str]:
    lost = total = 0
    for step in steps:
        if step.summary is None:
            return None, f"{step.key}: no finished repetition"
        lost, total = lost + step.summary.lost, total + step.summary.instances
    return (lost, total), ""


def spread(values: list[float]) -> Optional[float]:
    """(max - min) / mean: how far a figure moves over a set of steps, as a fraction of its level."""
    mean = sum(values) / len(values)
    return (max(values) - min(values)) / mean if len(values) >= 2 and mean else None


def judge(c: Conclusion, steps: list[StepResult]) -> Judgement:
    sides = []
    for name, key in (("a", c.a), ("b", c.b)):
        if key is None:
            continue
        found, why = select(steps, key)
        if why:
            return Judgement(c, NOT_COMPARABLE, f"{name}: {why}")
        sides.append(found)
    if c.kind in ("no_loss", "fewer_lost"):
        counts = []
        for found in sides:
            n, why = _lost(found)
            if n is None:
                return Judgement(c, NOT_COMPARABLE, why)
            counts.append(n)
        text = " vs ".join(f"{lost} of {total} instances lost" for lost, total in counts)
        if c.kind == "no_loss":
            return Judgement(c, HOLDS if counts[0][0] == 0 else FAILS, text)
        frac = [lost / total if total else None for lost, total in counts]
        if None in frac:
            return Judgement(c, NOT_COMPARABLE, f"{text}: no instance ran")
        return Judgement(c, HOLDS if frac[0] < frac[1] else FAILS, text)  # type: ignore[operator]
    vals = []
    for found in sides:
        v, why = _values(found, c.figure)
        if why:
            return Judgement(c, NOT_COMPARABLE, why)
        vals.append(v)
    judged = _decide(c, vals[0], vals[1])
    if c.kind in ("lower", "higher") and len(sides[0]) == len(sides[1]) == 1:
        return _noise(judged, _samples(sides[0][0], c.figure), _samples(sides[1][0], c.figure))
    return judged


def _samples(step: StepResult, name: str) -> list[float]:
    """A step's figure in each repetition (what its mean is the mean of)."""
    raw = [r.cpu.get(name[4:]) if name.startswith("cpu_") else r.aggregate.figure(name) for r in step.repetitions]
    return [float(x) for x in raw if isinstance(x, (int, float)) and not isinstance(x, bool)]


def _noise(j: Judgement, a: list[float], b: list[float]) -> Judgement:
    """A difference between two steps that their repetitions do not tell from noise decides nothing."""
    if not a or not b:
        return j
    test = stats.welch(b, a)
    if test.significant is None:
        return Judgement(j.conclusion, j.status, f"{j.figures} (one repetition a side: not tested against noise)")
    if not test.significant:
        p = f"p={test.p_value:.2f}" if test.p_value is not None else "no p"
        return Judgement(j.conclusion, NOT_COMPARABLE, f"{j.figures}: not significant at 95% "
                         f"({test.method}, {p}; {len(a)} and {len(b)} repetitions)")  # fmt: skip
    return j


def _decide(c: Conclusion, a: list[float], b: list[float]) -> Judgement:
    if c.kind == "steadier":
        sa, sb = spread(a), spread(b)
        if sa is None or sb is None:
            return Judgement(c, NOT_COMPARABLE, f"{c.figure}: a spread needs two steps and a non-zero mean")
        text = (f"{c.figure} spread (max-min)/mean: a {sa:.3f} ({min(a):.4g}..{max(a):.4g}) vs "
                f"b {sb:.3f} ({min(b):.4g}..{max(b):.4g})")  # fmt: skip
        return Judgement(c, HOLDS if sa < sb else FAILS, text)
    ma, mb = sum(a) / len(a), sum(b) / len(b)
    text = f"{c.figure}: a {ma:.4g} vs b {mb:.4g}"
    if c.kind == "lower":
        return Judgement(c, HOLDS if ma < mb else FAILS, text)
    if c.kind == "higher":
        return Judgement(c, HOLDS if ma > mb else FAILS, text)
    if not mb:  # within
        return Judgement(c, NOT_COMPARABLE, f"{text}: b is 0, no relative difference")
    diff = ma / mb - 1
    tol = c.tolerance or 0.0
    return Judgement(c, HOLDS if abs(diff) <= tol + 1e-9 else FAILS, f"{text} ({diff:+.1%}; within {tol:.0%} asked)")


# -- the whole ----------------------------------------------------------------------------------


def against(doc: SuiteResult, study: Study) -> Against:
    steps = doc.steps
    out = Against(study, doc.meta.suite.name)
    out.tables = [compare_table(t, steps) for t in study.tables]
    if study.tables:
        out.not_in_study = [s.key for s in steps if not any(matches(s, r.key) for t in study.tables for r in t.rows)]
    out.conclusions = [judge(c, steps) for c in study.conclusions]
    return out


def num(x: Optional[float], digits: int = 4) -> str:
    return "-" if x is None else f"{x:.{digits}g}"


def text(result: Against) -> str:
    s = result.study
    year = s.year or "year not given"
    out = [f"{s.title} ({year}; seeds/{s.source}) against a run of suite {result.run_suite or '?'}"]
    for side in result.tables:
        t = side.table
        out += ["", f"{t.title}  [{t.where}; hvnet suite: {t.suite}]"]
        headers = ["row", "step"]
        for col in t.columns:
            headers += [col.heading, "hvnet", "hvnet/study"]
        rows = []
        for line in side.lines:
            cells = [x for c in line.cells for x in (num(c.study, 12), num(c.hvnet), num(c.ratio, 3))]
            rows.append([line.label, line.step or line.note, *cells])
        out.append(render.table(headers, rows))
        for col in t.columns:
            conv = "" if col.scale == 1 else f", x{col.scale:g} into the study's unit"
            out.append(f"  {col.heading}: the study's unit: {col.unit}; hvnet: {col.figure} in {col.hvnet_unit}{conv}"
                       + (f" ({col.note})" if col.note else ""))  # fmt: skip
        out += [f"  {x.label}: {x.note}" for x in side.lines if x.step and x.note]
    if not result.tables:
        out += ["", "the study prints no table of numbers (its figures are plots): its conclusions only"]
    if result.not_in_study:
        out += ["", "not in the study: " + ", ".join(result.not_in_study)]
    if result.conclusions:
        out += ["", "conclusions (decided from this run's measured figures):"]
        for j in result.conclusions:
            out += [f"- {j.conclusion.claim}: {j.status.upper()}", f"    study: {j.conclusion.study_figures}",
                    f"    run:   {j.figures}"]  # fmt: skip
    return "\n".join(out)
