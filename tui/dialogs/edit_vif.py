"""Edit VIF: VLAN mode/tag/trunks, ingress policing, egress shaping -- validated as typed.

The form's fields go through the same field rules as ``hvnet vif set`` and
``hvnet qos set`` (the service's :class:`VifForm`, named by :mod:`tui.backend`),
so the dialog accepts and refuses exactly what the CLI does.  Every valid edit
is planned in a worker and shown as before -> after; applying needs a second,
explicit confirm and is one engine apply: one transaction, verified, audited
-- or nothing.  Both go through the console's backend.
With "roll back unless confirmed" ticked the apply is recorded pending and
undone after the window (:data:`Backend.confirm_within_s`) unless the
operator keeps it (ctrl+o, here or anywhere in the console).
"""

from __future__ import annotations

from typing import Any

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.message import Message
from textual.screen import ModalScreen
from textual.widgets import Button, Checkbox, Input, Label, Select, Static

from appliance.core.errors import ConfigError, HvnetError
from tui.backend import State, VifForm, VifRule, vif_form_rule
from tui.backend.plans import ApplyResult, Pending, Plan, pending_line, plan_lines, result_lines
from tui.backend.vifs import Vif
from tui.widgets.banner import ConnectionBanner
from tui.widgets.literal import Literal

# form field -> (input id, label)
FIELDS = {
    "mode": ("mode", "VLAN mode"),
    "tag": ("tag", "Tag (0..4094)"),
    "trunks": ("trunks", "Trunks (10,20-30 | all)"),
    "ingress rate": ("ingress-rate", "Ingress kbit/s (10mbit)"),
    "ingress burst": ("ingress-burst", "Ingress burst kbit"),
    "egress rate": ("egress-rate", "Egress kbit/s"),
}


class Loaded(Message):
    def __init__(self, state: State | None, error: str | None, vif: Vif | None = None) -> None:
        super().__init__()
        self.state = state
        self.error = error
        self.vif = vif  # the inventory's view: the domain's state and interface when libvirt knows them


class Planned(Message):
    def __init__(self, serial: int, plan: Plan | None, error: str | None) -> None:
        super().__init__()
        self.serial = serial
        self.plan = plan
        self.error = error


class Applied(Message):
    def __init__(self, result: ApplyResult | None, error: str | None, pending: Pending | None = None) -> None:
        super().__init__()
        self.result = result
        self.error = error
        self.pending = pending  # set when the apply rolls back unless confirmed


class EditVifDialog(ModalScreen[None]):
    """One VIF's details and its editable settings."""

    CSS_PATH = "edit_vif.tcss"
    BINDINGS = [
        Binding("escape", "close", "Close / back"),
        Binding("ctrl+s", "apply", "Apply…"),
        Binding("ctrl+y", "confirm", "Confirm", show=False),
        Binding("ctrl+o", "keep", "Keep change", show=False),
    ]

    def __init__(self, port: str) -> None:
        super().__init__()
        self.port = port
        self.state: State | None = None
        self.rule: VifRule | None = None
        self.plan: Plan | None = None
        self.serial = 0
        self.confirming = False
        self.busy = False
        self.watching: str | None = None  # the id of the unconfirmed apply made here

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Literal(f"Edit VIF {self.port}", id="title")
            yield ConnectionBanner()
            with VerticalScroll(id="body"):
                yield Literal("reading the switch...", id="details")
                with Horizontal(classes="row"):
                    yield Label(FIELDS["mode"][1])
                    yield Select([(m, m) for m in VifForm.MODES], id="mode", allow_blank=False, compact=True)
                for key in ("tag", "trunks", "ingress rate", "ingress burst", "egress rate"):
                    ident, label = FIELDS[key]
                    with Horizontal(classes="row"):
                        yield Label(label)
                        yield Input(id=ident, compact=True)
                with Horizontal(classes="row"):
                    yield Label("")
                    yield Checkbox(self._rollback_label(), id="auto-rollback", compact=True)
                yield Literal("", id="problems")
                yield Literal("", id="plan")
                yield Literal("", id="result")
                yield Literal("", id="pending")
            with Horizontal(id="buttons"):
                yield Button("Apply… ^s", id="apply", variant="primary", disabled=True)
                yield Button("Confirm ^y", id="confirm", variant="warning")
                yield Button("Keep ^o", id="keep", variant="success")
                yield Button("Close esc", id="close")

    def on_mount(self) -> None:
        self.backend = self.app.backend  # type: ignore[attr-defined]
        self.query_one("#confirm", Button).display = False
        self.query_one("#keep", Button).display = False
        self.set_interval(1.0, self.pending_changed)
        self.load()

    # -- loading -------------------------------------------------------------

    @work(thread=True, exclusive=True, group="edit-load")
    def load(self) -> None:
        try:
            state = self.backend.snapshot()
        except HvnetError as exc:
            self.post_message(Loaded(None, str(exc)))
            return
        try:
            vif = self.backend.inventory_snapshot().vif_by_port(self.port)
        except HvnetError:
            vif = None  # only the details' libvirt line is missing; the form works without it
        self.post_message(Loaded(state, None, vif))

    def on_loaded(self, message: Loaded) -> None:
        if message.state is None or self.port not in message.state.ports:
            self.query_one("#details", Static).update(message.error or f"✗ {self.port} is no longer on the switch")
            return
        self.state = message.state
        port = message.state.ports[self.port]
        self.query_one("#details", Static).update(self._details(port, message.vif))
        form = VifForm.of(port)
        with self.prevent(Input.Changed, Select.Changed):
            self.query_one("#mode", Select).value = form.mode
            for key, value in (
                ("tag", form.tag),
                ("trunks", form.trunks),
                ("ingress rate", form.ingress_rate),
                ("ingress burst", form.ingress_burst),
                ("egress rate", form.egress_rate),
            ):
                self.query_one(f"#{FIELDS[key][0]}", Input).value = value
        self.validate()
        self.query_one("#tag", Input).focus()

    def _details(self, port: Any, vif: Vif | None = None) -> str:
        police = port.police.effective()
        shaping = port.qos.effective() if port.qos else None
        state, domain = "", []
        if vif is not None and vif.vm_state:  # libvirt knows the domain
            state = f" ({vif.vm_state})"
            domain = [f"libvirt interface {vif.vm_interface or 'none with this MAC'}"]
        return "\n".join(
            [
                f"VM {port.vm_name or (vif.vm_name if vif else None) or '-'}{state}  uuid {port.vm_uuid or '-'}",
                *domain,
                f"bridge {port.bridge}  interface {port.interface} ({port.iface_type or 'system'})  "
                f"ofport {port.ofport if port.ofport is not None else '-'}  MAC {port.mac or '-'}",
                f"now: {port.vlan.effective().describe()}; ingress "
                f"{police.describe() if police else 'none'}; egress {shaping.describe() if shaping else 'none'}"
                + (f"\n✗ interface error: {port.error}" if port.error else ""),
            ]
        )

    # -- validating and planning -----------------------------------------------

    def form(self) -> VifForm:
        mode = self.query_one("#mode", Select).value
        return VifForm(
            mode=str(mode) if mode is not Select.BLANK else "",
            **{
                key.replace(" ", "_"): self.query_one(f"#{FIELDS[key][0]}", Input).value
                for key in ("tag", "trunks", "ingress rate", "ingress burst", "egress rate")
            },
        )

    @on(Input.Changed)
    @on(Select.Changed)
    def _changed(self) -> None:
        if self.state is not None:
            self.confirming = False
            self.validate()

    def validate(self) -> None:
        """Validate the whole form as typed; plan it (in a worker) when it is valid."""
        assert self.state is not None
        for ident, _ in FIELDS.values():
            self.query_one(f"#{ident}").remove_class("invalid")
        problems = self.query_one("#problems", Static)
        try:
            self.rule = vif_form_rule(self.state.ports[self.port], self.form())
        except ConfigError as exc:
            self.rule = self.plan = None
            lines = []
            for p in exc.problems:
                ident = FIELDS.get(p.field, ("mode", ""))[0]
                self.query_one(f"#{ident}").add_class("invalid")
                lines.append(f"✗ {FIELDS.get(p.field, (None, p.field))[1]}: {p.message}")
            problems.update("\n".join(lines))
            self.query_one("#plan", Static).update("")
            self._buttons()
            return
        problems.update("")
        self.serial += 1
        self.plan = None
        self._buttons()
        self.plan_it(self.serial, self.rule)

    @work(thread=True, exclusive=True, group="edit-plan")
    def plan_it(self, serial: int, rule: VifRule) -> None:
        try:
            self.post_message(Planned(serial, self.backend.plan_vif(rule), None))
        except ConfigError as exc:
            self.post_message(Planned(serial, None, "\n".join(f"✗ {p.field}: {p.message}" for p in exc.problems)))
        except HvnetError as exc:
            self.post_message(Planned(serial, None, f"✗ {exc}"))

    def on_planned(self, message: Planned) -> None:
        if message.serial != self.serial:
            return  # planned for an edit that has since changed
        self.plan = message.plan
        text = message.error or "plan:\n" + "\n".join(plan_lines(message.plan))  # type: ignore[arg-type]
        self.query_one("#plan", Static).update(text)
        self._buttons()

    def _buttons(self) -> None:
        can = self.plan is not None and bool(self.plan.changes) and not self.busy
        self.query_one("#apply", Button).disabled = not can
        self.query_one("#confirm", Button).display = self.confirming and can

    # -- applying ------------------------------------------------------------

    def action_apply(self) -> None:
        """First step: show what will change and ask for the confirm."""
        if self.plan is None or not self.plan.changes or self.busy:
            return
        self.confirming = True
        self.query_one("#result", Static).update(
            f"Apply these {len(self.plan.changes)} change(s) to {self.port} in one transaction? "
            "Confirm (ctrl+y) or keep editing."
        )
        self._buttons()
        self.query_one("#confirm", Button).focus()

    def action_confirm(self) -> None:
        if not self.confirming or self.rule is None or self.busy:
            return
        self.confirming = False
        self.busy = True
        self._buttons()
        self.query_one("#result", Static).update("applying (one transaction, then verification)...")
        window = self.backend.confirm_within_s if self.query_one("#auto-rollback", Checkbox).value else None
        self.apply_it(self.rule, window)

    def _rollback_label(self) -> str:
        return f"roll back in {self.app.backend.confirm_within_s:g} s unless confirmed"  # type: ignore[attr-defined]

    @work(thread=True, exclusive=True, group="edit-apply")
    def apply_it(self, rule: VifRule, confirm_within: float | None) -> None:
        try:
            result = self.backend.edit_vif(self.port, rule, confirm_within)
            pending = self.backend.pending() if confirm_within is not None and result.record_id else None
            self.post_message(Applied(result, None, pending if pending and pending.id == result.record_id else None))
        except ConfigError as exc:
            self.post_message(Applied(None, "\n".join(f"✗ {p.field}: {p.message}" for p in exc.problems)))
        except HvnetError as exc:
            self.post_message(Applied(None, f"✗ {exc}"))

    def on_applied(self, message: Applied) -> None:
        self.busy = False
        if message.result is None:
            self.query_one("#result", Static).update(f"{message.error}\nnothing was applied")
        else:
            self.query_one("#result", Static).update("\n".join(result_lines(message.result)))
        if message.pending is not None:
            self.watching = message.pending.id
            self.app.watch_pending(message.pending)  # type: ignore[attr-defined]
            self.pending_changed()
        self.load()  # the form now shows what the switch has

    # -- the unconfirmed apply ---------------------------------------------------

    def pending_changed(self) -> None:
        """Show the countdown and the Keep button; once kept or rolled back, show what the switch has."""
        if self.watching is None:
            return
        pending = getattr(self.app, "pending", None)
        mine = pending if pending is not None and pending.id == self.watching else None
        self.query_one("#keep", Button).display = mine is not None
        if mine is not None:
            self.query_one("#pending", Static).update(pending_line(mine))
            return
        self.query_one("#pending", Static).update("")
        self.watching = None
        self.load()  # kept or rolled back: the form shows the switch again

    def action_keep(self) -> None:
        self.app.action_keep_change()  # type: ignore[attr-defined]

    @on(Button.Pressed, "#apply")
    def _apply_pressed(self) -> None:
        self.action_apply()

    @on(Button.Pressed, "#confirm")
    def _confirm_pressed(self) -> None:
        self.action_confirm()

    @on(Button.Pressed, "#keep")
    def _keep_pressed(self) -> None:
        self.action_keep()

    @on(Button.Pressed, "#close")
    def _close_pressed(self) -> None:
        self.action_close()

    def action_close(self) -> None:
        if self.confirming:
            self.confirming = False
            self.query_one("#result", Static).update("not applied")
            self._buttons()
            return
        if not self.busy:
            self.dismiss(None)
