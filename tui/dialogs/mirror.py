"""Add a mirror: the form, validated as typed, then its plan, then one confirmed apply.

The fields are ``hvnet mirror add``'s flags and go through the same
``intents.mirror_rule`` (the service's :class:`MirrorForm`, via
:mod:`tui.backend.mirrors`), so the dialog refuses what the CLI refuses in
the same words.  Nothing is written until the operator has seen the plan
and pressed Apply; a form edited after its plan must be planned again.
"Roll back unless confirmed" applies it pending: undone after the console's
window unless kept (ctrl+o).  Engine calls run in thread workers.
"""

from __future__ import annotations

from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, Checkbox, Input, Label, Select, SelectionList, Static

from appliance.core.errors import HvnetError
from tui.backend import mirrors as mb
from tui.backend.mirrors import MirrorRule
from tui.backend.plans import Pending, refusal_lines
from tui.dialogs.planflow import PlanApplyDialog
from tui.widgets.footer import Footer
from tui.widgets.literal import Literal

FIELDS = ("bridge", "name", "sources", "vlans", "output", "key")
# The form field each widget edits (errors show once a field is touched, or all on Plan).
FIELD_OF_WIDGET = {
    "bridge": "bridge",
    "name": "name",
    "sources": "sources",
    "direction": "sources",
    "vlans": "vlans",
    "output-kind": "output",
    "output-port": "output",
    "output-value": "output",
    "key": "key",
}
OUTPUT_HINTS = {
    "port": "",
    "vlan": "VLAN id, e.g. 999",
    "gre": "collector IP, e.g. 192.0.2.10",
    "erspan": "collector IP, e.g. 192.0.2.10",
}


# Toggle glyphs differ only by colour: the label says the state in words (NO_COLOR).
ALLOW_LABEL = "allow isolation exception (a VM receives the copies): {}"


class MirrorDialog(PlanApplyDialog):
    """Dismisses with a one-line summary of what was applied, or None when cancelled."""

    CSS_PATH = "mirror.tcss"
    WHAT = "mirror"

    def __init__(self) -> None:
        super().__init__()
        self.choices: mb.Choices | None = None
        self.rule: MirrorRule | None = None  # the valid rule the form means now
        self.touched: set[str] = set()  # fields edited so far: a fresh form is not all red
        self.show_all = False  # set by Plan: every bad field is shown

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static("Add mirror", id="dialog-title")
            with VerticalScroll(id="form"):
                yield from self._row("Bridge", Select([], prompt="choose a bridge", id="bridge", compact=True))
                yield from self._row("Name", Input(placeholder="mirror name", id="name", compact=True))
                yield from self._row("Sources", SelectionList[str](id="sources", compact=True))
                yield Literal("selected: none", id="sources-chosen", classes="note")
                directions = [(text, key) for key, text in mb.MirrorForm.DIRECTIONS.items()]
                yield from self._row(
                    "Direction", Select(directions, value="both", allow_blank=False, id="direction", compact=True)
                )
                yield from self._row("VLANs", Input(placeholder="e.g. 10,20-30 (empty: any)", id="vlans", compact=True))
                kinds = [(text, key) for key, text in mb.MirrorForm.OUTPUT_KINDS.items()]
                with Horizontal(classes="row"):
                    yield Label("Output", classes="label")
                    yield Select(kinds, value="port", allow_blank=False, id="output-kind", compact=True)
                    yield Select([], prompt="output port", id="output-port", compact=True)
                    yield Input(id="output-value", compact=True)
                yield Literal("", id="error-output", classes="error")
                yield from self._row(
                    "Tunnel key", Input(placeholder="GRE/ERSPAN key (optional)", id="key", compact=True, disabled=True)
                )
                with Horizontal(classes="row"):
                    yield Label("", classes="label")
                    yield Checkbox("allow isolation exception (a VM receives the copies)", id="allow", compact=True)
                with Horizontal(classes="row"):
                    yield Label("", classes="label")
                    window = self.app.backend.confirm_within_s  # type: ignore[attr-defined]
                    yield Checkbox(f"roll back in {window:g} s unless confirmed", id="auto-rollback", compact=True)
            yield VerticalScroll(Literal("", id="plan-text"), id="plan")
            with Horizontal(id="buttons"):
                yield Button("Plan (F5)", id="plan-button", compact=True)
                yield Button("Apply (^S)", id="apply-button", variant="primary", compact=True, disabled=True)
                yield Button("Cancel (Esc)", id="cancel-button", compact=True)
            yield Footer()

    def _row(self, label: str, widget: Any) -> ComposeResult:
        with Horizontal(classes="row"):
            yield Label(label, classes="label")
            yield widget
        yield Literal("", id=f"error-{widget.id}", classes="error")

    # -- loading -----------------------------------------------------------------

    def on_mount(self) -> None:
        self.query_one("#output-value", Input).display = False
        self._say(["loading bridges and ports..."])
        self.load_choices()

    @work(thread=True, exclusive=True, group="mirror-choices")
    def load_choices(self) -> None:
        try:
            found = mb.choices(self.app.backend)
        except HvnetError as exc:
            self.app.call_from_thread(self._say, refusal_lines(exc))
            return
        self.app.call_from_thread(self._loaded, found)

    def _loaded(self, found: mb.Choices) -> None:
        self.choices = found
        bridge = self.query_one("#bridge", Select)
        bridge.set_options([(b, b) for b in found.bridges])
        if found.bridges:
            bridge.value = next(iter(found.bridges))
        self._fill_ports()
        self._say(["fill in the form, then Plan (F5) to see what would change"])
        self.query_one("#name", Input).focus()
        self._validate()

    def _fill_ports(self) -> None:
        ports = self.choices.bridges.get(self._bridge(), []) if self.choices else []
        sources = self.query_one("#sources", SelectionList)
        keep = set(sources.selected)
        sources.clear_options()
        sources.add_options([(p.label, p.port, p.port in keep) for p in ports])
        if ports:
            sources.highlighted = 0
        out = self.query_one("#output-port", Select)
        current = out.value
        out.set_options([(p.label, p.port) for p in ports])
        if any(p.port == current for p in ports):
            out.value = current

    # -- the form ----------------------------------------------------------------

    def _bridge(self) -> str:
        value = self.query_one("#bridge", Select).value
        return value if isinstance(value, str) else ""

    def form(self) -> mb.MirrorForm:
        kind = self.query_one("#output-kind", Select).value
        kind = kind if isinstance(kind, str) else "port"
        if kind == "port":
            port = self.query_one("#output-port", Select).value
            value = port if isinstance(port, str) else ""
        else:
            value = self.query_one("#output-value", Input).value
        direction = self.query_one("#direction", Select).value
        return mb.MirrorForm(
            bridge=self._bridge(),
            name=self.query_one("#name", Input).value,
            sources=tuple(self.query_one("#sources", SelectionList).selected),
            direction=direction if isinstance(direction, str) else "both",
            vlans=self.query_one("#vlans", Input).value,
            output_kind=kind,
            output_value=value,
            key=self.query_one("#key", Input).value,
            allow_isolation_exception=self.query_one("#allow", Checkbox).value,
        )

    @on(Input.Changed)
    @on(Select.Changed)
    @on(SelectionList.SelectedChanged)
    @on(Checkbox.Changed)
    def _edited(self, event: Any) -> None:
        """Any edit: re-validate, and forget a plan shown for the previous form."""
        control = getattr(event, "control", None)
        widget_id = getattr(control, "id", None)
        if widget_id == "auto-rollback":
            return  # how to apply, not what: the plan shown still holds
        if widget_id == "bridge":
            self._fill_ports()
        if widget_id == "output-kind":
            self._output_kind_changed()
        if widget_id == "allow":
            allow = self.query_one("#allow", Checkbox)
            allow.label = ALLOW_LABEL.format("yes" if allow.value else "no")
        if widget_id in ("sources", "bridge"):
            chosen = self.query_one("#sources", SelectionList).selected
            text = ", ".join(chosen) if chosen else "none"
            self.query_one("#sources-chosen", Static).update(f"selected: {text}")
        # only the operator's edits (on the focused widget) count, not the form filling itself in
        if widget_id in FIELD_OF_WIDGET and getattr(control, "has_focus_within", False):
            self.touched.add(FIELD_OF_WIDGET[widget_id])
        self.forget_plan()
        self._validate()

    def _output_kind_changed(self) -> None:
        kind = self.query_one("#output-kind", Select).value
        is_port = kind == "port"
        self.query_one("#output-port", Select).display = is_port
        value = self.query_one("#output-value", Input)
        value.display = not is_port
        value.placeholder = OUTPUT_HINTS.get(str(kind), "")
        self.query_one("#key", Input).disabled = kind not in ("gre", "erspan")

    def _validate(self) -> None:
        """Show each bad field's message under it (with a text marker, not only colour)."""
        if self.choices is None:
            return
        form = self.form()
        errors = mb.mirror_form_errors(form, self.choices.existing)
        for field in FIELDS:
            box = self.query_one(f"#error-{field}", Static)
            text = errors.get(field, "") if self.show_all or field in self.touched else ""
            box.update(f"✗ {text}" if text else "")
            box.set_class(bool(text), "visible")
        self.rule = None if errors else mb.mirror_form_rule(form, self.choices.existing)
        self._buttons()

    def error_text(self, field: str) -> str:
        """The message shown under ``field`` ("" when none): what tests and screen readers read."""
        return str(self.query_one(f"#error-{field}", Static).render()).removeprefix("✗ ")

    # -- plan, then apply ----------------------------------------------------------

    def rule_to_plan(self) -> MirrorRule | None:
        if not self.show_all:
            self.show_all = True
            self._validate()
        if self.rule is None:
            self._say(["✗ fix the fields marked ✗ first; nothing was planned"])
        return self.rule

    def plan_call(self, rule: MirrorRule) -> Any:
        return mb.plan_add(self.app.backend, rule)

    def apply_option(self) -> float | None:
        """The console's confirm window when "roll back unless confirmed" is ticked."""
        if not self.query_one("#auto-rollback", Checkbox).value:
            return None
        return self.app.backend.confirm_within_s  # type: ignore[attr-defined]

    def apply_call(self, rule: MirrorRule, option: float | None) -> tuple[Any, Pending | None]:
        backend = self.app.backend  # type: ignore[attr-defined]
        result = mb.apply_add(backend, rule, option)
        pending = backend.pending() if option is not None and result.record_id else None
        return result, pending if pending is not None and pending.id == result.record_id else None

    def after_apply(self, pending: Pending | None) -> None:
        if pending is not None:
            self.app.watch_pending(pending)  # type: ignore[attr-defined]
