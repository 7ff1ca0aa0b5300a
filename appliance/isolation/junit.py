"""An isolation check's (or audit's) result as JUnit XML: a test case per method and ordered pair.

Each cell of the matrix -- does LISTENER hear SENDER, by METHOD -- is one
case: as expected, a pass; a leak or an unexpected block, a failure with its
evidence (the same line the terminal report prints); a cell no method could
decide, skipped with the reason; every cell of a method that could not run,
an error naming why.  Never a pass for what was not measured.
"""

from __future__ import annotations

from datetime import datetime, timezone
from typing import Optional

from appliance.core import junit
from appliance.isolation.check import CheckResult
from appliance.isolation.report import problem_lines


def cases(result: CheckResult) -> list[junit.Case]:
    """One case per method and ordered pair, in the matrix's order."""
    out = []
    problems = problem_lines(result)
    for method, mr in result.methods.items():
        verdicts = result.verdicts(method)
        for (listener, sender), verdict in sorted(verdicts.items()):
            name, classname = f"{listener} hears {sender}?", f"isolation.{result.scenario}.{method}"
            expected = result.expected.cells[(listener, sender)]
            if mr.error:
                out.append(junit.Case(name, classname, junit.ERROR, f"{method} could not run: {mr.error}"))
            elif verdict == "unknown":
                why = mr.reasons.get((listener, sender), "not decided")
                out.append(junit.Case(name, classname, junit.SKIPPED, f"not decided: {why}"))
            elif verdict == "ok":
                out.append(junit.Case(name, classname))
            else:
                word = "LEAK" if verdict == "leak" else "UNEXPECTED BLOCK"
                out.append(junit.Case(name, classname, junit.FAILURE, f"{word}: expected {expected}",
                                      _evidence(problems, method, listener, sender, verdict)))  # fmt: skip
    return out


def _evidence(problems: list[str], method: str, listener: str, sender: str, verdict: str) -> str:
    """The terminal report's line for this cell (exactly this pair: VM1 is not VM10)."""
    if verdict == "blocked":
        line = f"{method}: UNEXPECTED BLOCK: {listener} does not hear {sender}"
        return line if line in problems else ""
    head = f"{method}: LEAK: {listener} hears {sender}"
    return next((x for x in problems if x == head or x.startswith(f"{head}: ")), "")


def document(result: CheckResult, timestamp: Optional[datetime] = None) -> str:
    """The whole result as one JUnit test suite named after the scenario; its time the check's."""
    return junit.document(f"isolation {result.scenario}", cases(result), time_s=result.duration_s,
                          timestamp=timestamp or datetime.now(timezone.utc))  # fmt: skip
