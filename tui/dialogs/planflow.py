"""The plan-then-apply flow the Add mirror and Add TAP dialogs share.

Both forms end the same way: Plan (F5) shows what would change and nothing
else; Apply (^S) commits exactly the rule whose plan was shown, in one
transaction; any edit after a plan makes it stale; Esc cancels unless an apply
is in flight (it is one transaction: it finishes first).  The subclass says
what its form means (:meth:`rule_to_plan`), how to plan and apply it, and
what to call it; engine calls run in thread workers.
"""

from __future__ import annotations

from typing import Any

from textual import on, work
from textual.binding import Binding
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Static

from appliance.core.errors import HvnetError
from tui.backend.plans import plan_lines, refusal_lines, result_lines

STALE = "the form changed: Plan (F5) again before applying"


class PlanApplyDialog(ModalScreen[str | None]):
    """Dismisses with a one-line summary of what was applied, or None when cancelled.

    Subclasses compose ``#plan-text`` (a :class:`~tui.widgets.literal.Literal`:
    refusals are shown literally) and the ``#plan-button``/``#apply-button``/
    ``#cancel-button`` buttons.
    """

    BINDINGS = [
        Binding("escape", "cancel", "Cancel"),
        Binding("f5", "plan", "Plan"),
        Binding("ctrl+s", "apply", "Apply"),
    ]
    WHAT = "rule"  # how the summary names what was applied ("mirror", "TAP")

    def __init__(self) -> None:
        super().__init__()
        self.planned: Any = None  # the rule whose plan is shown (Apply confirms it)
        self.generation = 0  # bumped on every edit: a plan for an older form is stale
        self.busy = False

    # -- what a subclass says ------------------------------------------------------

    def rule_to_plan(self) -> Any | None:
        """The rule the form means now, or None after saying why there is none."""
        raise NotImplementedError

    def plan_call(self, rule: Any) -> Any:
        """The service's plan for ``rule`` (runs in a worker thread)."""
        raise NotImplementedError

    def apply_option(self) -> Any:
        """How to apply, read from the form on the UI thread (e.g. a confirm window); None by default."""
        return None

    def apply_call(self, rule: Any, option: Any) -> tuple[Any, Any]:
        """Apply ``rule``: (the service's result, anything :meth:`after_apply` needs) (worker thread)."""
        raise NotImplementedError

    def after_apply(self, extra: Any) -> None:
        """On the UI thread after an apply, with :meth:`apply_call`'s second value."""

    # -- shared state and text -------------------------------------------------------

    def forget_plan(self) -> None:
        """An edit: the plan shown was for another form."""
        self.generation += 1
        if self.planned is not None:
            self.planned = None
            self._say([STALE])

    def _buttons(self) -> None:
        self.query_one("#plan-button", Button).disabled = self.busy  # enabled: pressing it names what is missing
        self.query_one("#apply-button", Button).disabled = self.planned is None or self.busy

    def _say(self, lines: list[str]) -> None:
        self.query_one("#plan-text", Static).update("\n".join(lines))

    def message_text(self) -> str:
        """The plan or refusal shown (what tests and screen readers read)."""
        return str(self.query_one("#plan-text", Static).render())

    # -- plan, then apply ----------------------------------------------------------

    @on(Input.Submitted)
    def _submitted(self) -> None:
        self.action_plan()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        event.stop()
        {"plan-button": self.action_plan, "apply-button": self.action_apply, "cancel-button": self.action_cancel}[
            event.button.id or "cancel-button"
        ]()

    def action_plan(self) -> None:
        if self.busy:
            return
        rule = self.rule_to_plan()
        if rule is None:
            return
        self.busy = True
        self._buttons()
        self._say(["planning..."])
        self.run_plan(rule, self.generation)

    @work(thread=True, exclusive=True, group="dialog-plan")
    def run_plan(self, rule: Any, generation: int) -> None:
        try:
            plan = self.plan_call(rule)
        except HvnetError as exc:
            self.app.call_from_thread(self._planned, None, generation, refusal_lines(exc))
            return
        lines = ["Plan (nothing is applied until you confirm):", *plan_lines(plan, by_target=True)]
        if plan.changes:
            lines.append("Apply (^S) to make this change in one transaction; Esc to cancel")
        self.app.call_from_thread(self._planned, rule if plan.changes else None, generation, lines)

    def _planned(self, rule: Any, generation: int, lines: list[str]) -> None:
        self.busy = False
        if generation != self.generation:  # edited while planning: that plan is for another form
            self._say([STALE])
        else:
            self.planned = rule
            self._say(lines)
        self._buttons()

    def action_apply(self) -> None:
        if self.planned is None or self.busy:
            if self.planned is None:
                self._say(["Plan (F5) first: nothing is applied before you have seen the plan"])
            return
        self.busy = True
        self._buttons()
        self._say(["applying..."])
        self.run_apply(self.planned, self.apply_option())

    @work(thread=True, exclusive=True, group="dialog-apply")
    def run_apply(self, rule: Any, option: Any) -> None:
        try:
            result, extra = self.apply_call(rule, option)
        except HvnetError as exc:
            self.app.call_from_thread(self._applied, None, refusal_lines(exc), None)
            return
        lines = result_lines(result)
        summary = f"{self.WHAT} {rule.name} on {rule.bridge}: {lines[0]}" if result.ok else None
        self.app.call_from_thread(self._applied, summary, lines, extra)

    def _applied(self, summary: str | None, lines: list[str], extra: Any) -> None:
        self.busy = False
        self.planned = None
        self.after_apply(extra)
        if summary is not None:
            self.dismiss(summary)
            return
        self._say(lines)
        self._buttons()

    def action_cancel(self) -> None:
        if not self.busy:  # an apply in flight finishes (it is one transaction) before the dialog closes
            self.dismiss(None)
