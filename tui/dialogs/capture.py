"""Start a capture on a port: ``hvnet capture start --port``'s fields, started by the same service.

Every field is checked before anything starts (the port, the limits, the
filter by tcpdump itself); a refusal is shown literally -- a BPF filter or a
name holding ``[b]`` is text, not markup -- and nothing is started.
"""

from __future__ import annotations

from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical, VerticalScroll
from textual.screen import ModalScreen
from textual.widgets import Button, Input, Label, Select, Static

from appliance.core.errors import HvnetError
from tui.backend import captures as cb
from tui.widgets.footer import Footer
from tui.widgets.literal import Literal

FIELDS = (
    ("name", "Name", "default: PORT-TIME"),
    ("bpf", "Filter", "tcpdump filter, e.g. icmp (checked by tcpdump)"),
    ("snaplen", "Snaplen", "bytes kept per packet, 14..262144 (default all)"),
    ("duration", "Duration", "seconds, then it stops (default: until stopped)"),
    ("count", "Limit", "packets, then it stops"),
)


class CaptureDialog(ModalScreen[str | None]):
    """Dismisses with a one-line summary of the capture started, or None when cancelled."""

    CSS_PATH = "capture.tcss"
    BINDINGS = [Binding("escape", "cancel", "Cancel"), Binding("ctrl+s", "start", "Start")]

    def __init__(self) -> None:
        super().__init__()
        self.loaded = False
        self.busy = False

    def compose(self) -> ComposeResult:
        with Vertical(id="dialog"):
            yield Static("Start capture", id="dialog-title")
            with VerticalScroll(id="form"):
                with Horizontal(classes="row"):
                    yield Label("Port", classes="label")
                    yield Select([], prompt="a VIF, or a mirror's or TAP's output port", id="port", compact=True)
                for key, label, hint in FIELDS:
                    with Horizontal(classes="row"):
                        yield Label(label, classes="label")
                        yield Input(placeholder=hint, id=key, compact=True)
            yield VerticalScroll(Literal("", id="message"), id="plan")
            with Horizontal(id="buttons"):
                yield Button("Start (^S)", id="start-button", variant="primary", compact=True)
                yield Button("Cancel (Esc)", id="cancel-button", compact=True)
            yield Footer()

    def on_mount(self) -> None:
        self._say("loading ports...")
        self.load_ports()

    @work(thread=True, exclusive=True, group="capture-ports")
    def load_ports(self) -> None:
        try:
            found = cb.ports(self.app.backend)
        except HvnetError as exc:
            self.app.call_from_thread(self._say, f"✗ {exc.message}")
            return
        self.app.call_from_thread(self._loaded, found)

    def _loaded(self, found: list[tuple[str, str]]) -> None:
        self.query_one("#port", Select).set_options(found)
        self.loaded = True
        self._say("choose a port; every field is checked before the capture starts")
        self.query_one("#port", Select).focus()

    def form(self) -> cb.CaptureForm:
        port = self.query_one("#port", Select).value
        values = {key: self.query_one(f"#{key}", Input).value for key, _, _ in FIELDS}
        return cb.CaptureForm(port=port if isinstance(port, str) else "", **values)

    def _say(self, text: str) -> None:
        self.query_one("#message", Static).update(text)

    def message_text(self) -> str:
        return str(self.query_one("#message", Static).render())

    @on(Input.Submitted)
    def _submitted(self) -> None:
        self.action_start()

    @on(Button.Pressed)
    def _pressed(self, event: Button.Pressed) -> None:
        event.stop()
        (self.action_start if event.button.id == "start-button" else self.action_cancel)()

    def action_start(self) -> None:
        if self.busy or not self.loaded:
            return
        self.busy = True
        self.query_one("#start-button", Button).disabled = True
        self._say("checking and starting...")
        self.run_start(self.form())

    @work(thread=True, exclusive=True, group="capture-start")
    def run_start(self, form: cb.CaptureForm) -> None:
        try:
            record = cb.start(self.app.backend, form)
        except HvnetError as exc:
            hint = f"\n  hint: {exc.hint}" if exc.hint else ""
            self.app.call_from_thread(self._refused, f"✗ refused: {exc.message}{hint}\nnothing was started")
            return
        summary = f"capture {record.name} started on {record.spec.port}: files in {record.directory}"
        self.app.call_from_thread(self.dismiss, summary)

    def _refused(self, text: str) -> None:
        self.busy = False
        self.query_one("#start-button", Button).disabled = False
        self._say(text)

    def action_cancel(self) -> None:
        if not self.busy:
            self.dismiss(None)
