"""Add a flow TAP: the form, its plan, then one confirmed apply.

The fields are ``hvnet tap add``'s flags (a policy file's ``taps.NAME``) and go
through the same service code (:mod:`tui.backend.taps`): a refusal is the
CLI's text, shown literally (never read as markup), and nothing is applied.
Nothing is written until the operator has seen the plan and pressed Apply; a
form edited after its plan must be planned again.  Engine calls run in
thread workers.
"""

from __future__ import annotations

from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.widgets import Button, Checkbox, Input, Label, Select, Static

from appliance.core.errors import HvnetError
from tui.backend import taps as tb
from tui.backend.plans import refusal_lines
from tui.dialogs.planflow import PlanApplyDialog
from tui.widgets.footer import Footer
from tui.widgets.literal import Literal

PLACEHOLDERS = {
    "src_mac": "src MAC",
    "dst_mac": "dst MAC",
    "src_ip": "src IP or prefix",
    "dst_ip": "dst IP or prefix",
    "vlan": "VLAN 0..4094",
    "protocol": "tcp, udp, icmp, icmp6, 0..255",
    "src_port": "src L4 port",
    "dst_port": "dst L4 port",
}
# Toggle glyphs differ only by colour: the label says the state in words (NO_COLOR).
ALLOW_LABEL = "allow isolation exception (a VM receives the copies): {}"
OUTPUT_HINTS = {"port": "output port, e.g. vif3.0", "gre": "collector IP", "erspan": "collector IP"}


class TapDialog(PlanApplyDialog):
    """Dismisses with a one-line summary of what was applied, or None when cancelled."""

    CSS_PATH = "tap.tcss"
    WHAT = "TAP"

    def __init__(self) -> None:
        super().__init__()
        self.bridges: list[str] | None = None

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static("Add flow TAP", id="dialog-title")
            with VerticalScroll(id="form"):
                yield from self._row("Bridge", Select([], prompt="choose a bridge", id="bridge", compact=True))
                yield from self._row("Name", Input(placeholder="TAP name", id="name", compact=True))
                vifs = Input(placeholder="vif1.0 vm:VM2 ... (selectors)", id="vifs", compact=True)
                yield from self._row("VIFs", vifs)
                directions = [(text, key) for key, text in tb.TapForm.DIRECTIONS.items()]
                yield from self._row(
                    "Direction", Select(directions, value="both", allow_blank=False, id="direction", compact=True)
                )
                for a, b in zip(tb.TapForm.MATCH_FIELDS[::2], tb.TapForm.MATCH_FIELDS[1::2]):
                    with Horizontal(classes="row"):
                        yield Label("Match" if a == "src_mac" else "", classes="label")
                        for key in (a, b):
                            yield Input(placeholder=PLACEHOLDERS[key], id=key.replace("_", "-"), compact=True)
                kinds = [(text, key) for key, text in tb.TapForm.OUTPUT_KINDS.items()]
                with Horizontal(classes="row"):
                    yield Label("Output", classes="label")
                    yield Select(kinds, value="port", allow_blank=False, id="output-kind", compact=True)
                    yield Input(placeholder=OUTPUT_HINTS["port"], id="output-value", compact=True)
                yield from self._row(
                    "Tunnel key", Input(placeholder="GRE/ERSPAN key (optional)", id="key", compact=True, disabled=True)
                )
                methods = [(text, key) for key, text in tb.TapForm.METHODS.items()]
                yield from self._row(
                    "Method", Select(methods, value="flows", allow_blank=False, id="method", compact=True)
                )
                with Horizontal(classes="row"):
                    yield Label("", classes="label")
                    yield Checkbox(ALLOW_LABEL.format("no"), id="allow", compact=True)
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

    # -- loading -----------------------------------------------------------------

    def on_mount(self) -> None:
        self._say(["loading bridges..."])
        self.load_bridges()

    @work(thread=True, exclusive=True, group="tap-bridges")
    def load_bridges(self) -> None:
        try:
            found = tb.bridges(self.app.backend)
        except HvnetError as exc:
            self.app.call_from_thread(self._say, refusal_lines(exc))
            return
        self.app.call_from_thread(self._loaded, found)

    def _loaded(self, found: list[str]) -> None:
        self.bridges = found
        bridge = self.query_one("#bridge", Select)
        bridge.set_options([(b, b) for b in found])
        if found:
            bridge.value = found[0]
        self._say(["fill in the form, then Plan (F5) to see what would change"])
        self.query_one("#name", Input).focus()

    # -- the form ----------------------------------------------------------------

    def _value(self, selector: str, default: str) -> str:
        value = self.query_one(selector, Select).value
        return value if isinstance(value, str) else default

    def form(self) -> tb.TapForm:
        return tb.TapForm(
            bridge=self._value("#bridge", ""),
            name=self.query_one("#name", Input).value,
            vifs=self.query_one("#vifs", Input).value,
            direction=self._value("#direction", "both"),
            match={k: self.query_one(f"#{k.replace('_', '-')}", Input).value for k in tb.TapForm.MATCH_FIELDS},
            output_kind=self._value("#output-kind", "port"),
            output_value=self.query_one("#output-value", Input).value,
            key=self.query_one("#key", Input).value,
            method=self._value("#method", "flows"),
            allow_isolation_exception=self.query_one("#allow", Checkbox).value,
        )

    @on(Input.Changed)
    @on(Select.Changed)
    @on(Checkbox.Changed)
    def _edited(self, event: Any) -> None:
        """Any edit forgets a plan shown for the previous form."""
        widget_id = getattr(getattr(event, "control", None), "id", None)
        if widget_id == "allow":
            allow = self.query_one("#allow", Checkbox)
            allow.label = ALLOW_LABEL.format("yes" if allow.value else "no")
        if widget_id == "output-kind":
            kind = self._value("#output-kind", "port")
            self.query_one("#output-value", Input).placeholder = OUTPUT_HINTS.get(kind, "")
            self.query_one("#key", Input).disabled = kind == "port"
        self.forget_plan()
        self._buttons()

    # -- plan, then apply (the flow is :class:`PlanApplyDialog`'s) -----------------

    def rule_to_plan(self) -> Any | None:
        if self.bridges is None:
            return None
        try:
            return tb.tap_form_rule(self.form())
        except HvnetError as exc:  # the service's words, as the CLI prints them
            self._say(refusal_lines(exc))
            return None

    def plan_call(self, rule: Any) -> Any:
        return tb.plan_add(self.app.backend, rule)

    def apply_call(self, rule: Any, option: Any) -> tuple[Any, Any]:
        return tb.apply_add(self.app.backend, rule), None
