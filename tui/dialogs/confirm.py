"""A yes/no question before anything irreversible (deleting a mirror, ...)."""

from __future__ import annotations

from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.screen import ModalScreen
from textual.widgets import Button

from tui.widgets.literal import Literal


class ConfirmDialog(ModalScreen[bool]):
    """Dismisses with True for Yes, False for No; "No" is focused so a stray Enter changes nothing."""

    DEFAULT_CSS = """
    ConfirmDialog {
        align: center middle;
    }
    ConfirmDialog > Vertical {
        width: 70;
        max-width: 100%;
        height: auto;
        max-height: 100%;
        border: thick $primary;
        background: $surface;
        padding: 0 1;
    }
    ConfirmDialog #confirm-title {
        text-style: bold;
        width: 100%;
    }
    ConfirmDialog #confirm-body {
        width: 100%;
        margin: 1 0;
    }
    ConfirmDialog Horizontal {
        height: auto;
        align-horizontal: right;
    }
    ConfirmDialog Button {
        margin-left: 1;
    }
    """
    BINDINGS = [
        Binding("y", "answer(True)", "Yes"),
        Binding("n", "answer(False)", "No"),
        Binding("escape", "answer(False)", "Cancel"),
    ]

    def __init__(self, title: str, body: str, *, yes: str = "Yes", no: str = "No") -> None:
        super().__init__()
        self.title_text = title
        self.body_text = body
        self.yes_label = yes
        self.no_label = no

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Literal(self.title_text, id="confirm-title")
            yield Literal(self.body_text, id="confirm-body")
            with Horizontal():
                yield Button(f"{self.yes_label} (y)", id="yes", variant="error")
                yield Button(f"{self.no_label} (n)", id="no", variant="primary")

    def on_mount(self) -> None:
        self.query_one("#no", Button).focus()

    def on_button_pressed(self, event: Button.Pressed) -> None:
        event.stop()
        self.dismiss(event.button.id == "yes")

    def action_answer(self, yes: bool) -> None:
        self.dismiss(yes)
