"""A run comparison (``suite compare``) as JUnit XML: a test case per compared step and figure.

A significant regression beyond the threshold, or a step that gave a result
before and none now, is a failure; a change that is an improvement, not
significant or within the threshold passes; what could not be judged -- one
repetition a side (significance untestable), a result the base run lacked,
a step only one run has -- is skipped with the reason, never a pass.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Optional

from appliance.core import junit
from appliance.netperf.figures.compare import Result, Row

OUTCOME = {
    "regression": junit.FAILURE,
    "no result": junit.FAILURE,
    "improvement": junit.PASSED,
    "not significant": junit.PASSED,
    "within threshold": junit.PASSED,
    "untestable": junit.SKIPPED,
    "new result": junit.SKIPPED,
}


def _message(row: Row) -> str:
    change = "" if row.change_pct is None else f" {row.change_pct:+.1f}%"
    p = "" if row.p_value is None else f" (p={row.p_value:.4f})"
    return f"{row.verdict}{change}{p}" + (f": {row.detail}" if row.detail else "")


def cases(result: Result, suite: str) -> list[junit.Case]:
    """One case per compared step and figure, then one skipped case per step only one run has."""
    classname = f"suite.compare.{suite}"
    out = [
        junit.Case(f"{row.key} {row.figure}", classname, OUTCOME.get(row.verdict, junit.SKIPPED), _message(row))
        for row in result.rows
    ]
    out += [junit.Case(k, classname, junit.SKIPPED, "only in the base run: not run in the new one")
            for k in result.only_base]  # fmt: skip
    out += [junit.Case(k, classname, junit.SKIPPED, "only in the new run: nothing to compare with")
            for k in result.only_new]  # fmt: skip
    return out


def document(result: Result, suite: str, timestamp: Optional[datetime] = None) -> str:
    """The comparison as one JUnit test suite; its warnings (different suite files, a partial run) as its
    output.  A comparison is computed, not run: its time is 0."""
    return junit.document(f"suite compare {suite} (threshold {result.threshold_pct:g}%)", cases(result, suite),
                          time_s=0.0, timestamp=timestamp or datetime.now(timezone.utc),
                          system_out="\n".join(result.warnings))  # fmt: skip
