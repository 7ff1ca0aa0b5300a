"""Steps with several client -> server pairs in the text report: the pairs in the header, and per-pair rows
under each step's total (see :mod:`appliance.netperf.figures.pairs`)."""

from __future__ import annotations

from typing import Any, Callable, Optional

from appliance.netperf.store.records import StepResult, SuiteResult

Row = tuple[str, Callable[[StepResult], str]]


def run_pairs(doc: SuiteResult) -> list[dict[str, Any]]:
    """The pairs the run's steps ran ([]: a single pair's run)."""
    return next((s.pairs for s in doc.steps if s.pairs), [])


def header_line(doc: SuiteResult) -> Optional[str]:
    """The endpoints of a run of pairs (None: one pair, told by the usual client -> server line)."""
    found = run_pairs(doc)
    if not found:
        return None
    said = ", ".join(f"{p['client']} -> {p['server']}" for p in found)
    return f"  {len(found)} pairs, each running a step's concurrency, all at once: {said} (netservers started by hvnet)"


def rows(steps: list[StepResult], unit: str) -> list[Row]:
    """Each pair's total and mean (± 95% CI across repetitions) and its lost instances, per step."""
    found = next((s.pairs for s in steps if s.pairs), None)
    if not found:
        return []
    out: list[Row] = []
    for k, p in enumerate(found):
        name = f"pair {p['client']} -> {p['server']}"
        out += [
            (f"  {name}: total ({unit})", _figure(k, "sum")),
            (f"  {name}: avg ({unit})", _figure(k, "mean")),
            (f"  {name}: lost", _lost(k)),
        ]
    return out


def _pair(step: StepResult, k: int) -> Optional[dict[str, Any]]:
    got = step.summary.pairs if step.summary is not None else None
    return got[k] if got and k < len(got) else None


def _figure(k: int, key: str) -> Callable[[StepResult], str]:
    def fn(step: StepResult) -> str:
        fig = (_pair(step, k) or {}).get(key)
        if not fig or fig.get("mean") is None:
            return "-"
        ci = fig.get("ci95")
        return f"{fig['mean']:,.2f}" + ("" if ci is None else f" ±{ci:,.2f}")

    return fn


def _lost(k: int) -> Callable[[StepResult], str]:
    def fn(step: StepResult) -> str:
        row = _pair(step, k)
        return "-" if row is None else f"{row.get('lost', 0)}/{row.get('instances', 0)}"

    return fn


def step_notes(step: StepResult, at: str, unit: str) -> list[str]:
    """Each pair's figures as lines under a table whose rows are steps (packet-rate and many-flows tables)."""
    out = []
    for k, p in enumerate(step.pairs or []):
        got = _figure(k, "sum")(step), _figure(k, "mean")(step), _lost(k)(step)
        out.append(f"at {at}: pair {p['client']} -> {p['server']}: {got[0]} {unit} in all, {got[1]} per instance, "
                   f"lost {got[2]}")  # fmt: skip
    return out
