"""Plans, apply results and refusals as the console's dialogs print them (pure).

One wording for every dialog, with a text marker on each outcome (``✓``,
``✗``, ``!``) so it reads the same without colour.
"""

from __future__ import annotations

from appliance.core.errors import ConfigError, HvnetError
from appliance.services.confirm import Pending
from appliance.services.policy import ApplyResult, Plan


def plan_lines(plan: Plan, *, by_target: bool = False) -> list[str]:
    """Each change as ``setting: before → after`` (``target: ...`` with ``by_target``), then notes and warnings."""
    if not plan.changes:
        lines = ["no changes: the switch already has these settings"]
    else:
        lines = [
            f"{c.target if by_target else c.kind}: {c.describe(c.before)} → {c.describe(c.after)}" for c in plan.changes
        ]
        lines += [f"  note: {c.note}" for c in plan.changes if c.note]
    return lines + [f"warning: {w}" for w in plan.warnings]


def result_lines(result: ApplyResult) -> list[str]:
    """What an apply did: the outcome, how each limit is enforced, problems, isolated ports."""
    n = len(result.plan.changes)
    if result.status == "applied":
        head = f"✓ applied {n} change{'s' if n != 1 else ''} in one transaction"
    elif result.status == "unchanged":
        head = "nothing to apply: the switch already had these settings"
    else:
        head = f"✗ {result.status}: nothing of this change is left on the switch"
    lines = [head]
    lines += [f"{e.kind}: {e.verdict} by {e.mechanism}: {e.detail}" for e in result.enforcement]
    lines += [f"✗ problem: {p}" for p in result.problems]
    lines += [f"! isolated {port}: {why}" for port, why in result.isolated.items()]
    return lines


def refusal_lines(exc: HvnetError) -> list[str]:
    """A refusal as plain lines, ending with what it means: nothing was applied."""
    if isinstance(exc, ConfigError):
        lines = [f"✗ refused: {p.field}: {p.message}" if p.field else f"✗ refused: {p.message}" for p in exc.problems]
    else:
        lines = [f"✗ refused: {exc.message}"]
        if exc.hint:
            lines.append(f"  hint: {exc.hint}")
    return [*lines, "nothing was applied"]


def pending_line(pending: Pending | None) -> str:
    """The countdown of an unconfirmed apply ("" when none is waiting)."""
    if pending is None:
        return ""
    left = pending.seconds_left
    if left <= 0:
        return "! not confirmed in time: rolling back"
    return f"! not confirmed: rolls back in {left:.0f} s unless you keep it (ctrl+o)"
