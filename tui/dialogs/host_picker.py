"""Pick the host the console works on: ``local`` and every inventory host, by name (no probing).

Dismisses with the chosen name, or None.  Reachability is the Fleet
screen's business; a host that cannot be reached is said when the console
tries it, and the current host stays.
"""

from __future__ import annotations

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.screen import ModalScreen
from textual.widgets import OptionList, Static
from textual.widgets.option_list import Option

from tui.backend import fleet as fb
from tui.widgets.literal import Literal


class HostPicker(ModalScreen[str | None]):
    DEFAULT_CSS = """
    HostPicker {
        align: center middle;
    }
    HostPicker > Vertical {
        width: 60;
        max-width: 100%;
        height: auto;
        max-height: 100%;
        border: thick $primary;
        background: $surface;
        padding: 0 1;
    }
    HostPicker #picker-title {
        text-style: bold;
    }
    HostPicker OptionList {
        height: auto;
        max-height: 16;
    }
    """
    BINDINGS = [Binding("escape", "cancel", "Cancel")]

    def __init__(self, current: str) -> None:
        super().__init__()
        self.current = current

    def compose(self) -> ComposeResult:
        with Vertical():
            yield Literal(f"Switch host (now: {self.current})", id="picker-title")
            yield OptionList(id="picker-hosts")
            yield Literal("reading the inventory...", id="picker-note")

    def on_mount(self) -> None:
        self.query_one(OptionList).focus()
        self.list_hosts()

    @work(thread=True, exclusive=True, group="picker")
    def list_hosts(self) -> None:
        listing = fb.read_list()
        self.app.call_from_thread(self._listed, listing)

    def _listed(self, listing: fb.FleetList) -> None:
        names = [fb.LOCAL, *(e.name for e in listing.entries)]
        options = self.query_one(OptionList)
        for name in names:
            entry = next((e for e in listing.entries if e.name == name), None)
            where = "this machine" if entry is None else entry.ssh + (f" ({entry.group})" if entry.group else "")
            mark = "● " if name == self.current else "  "
            options.add_option(Option(Text(f"{mark}{name:<16} {where}"), id=name))  # Text: never markup
        options.highlighted = names.index(self.current) if self.current in names else 0
        note = listing.error or f"{listing.file}: {len(listing.entries)} host(s)"
        self.query_one("#picker-note", Static).update(f"{note} · enter switches, escape cancels")

    def on_option_list_option_selected(self, event: OptionList.OptionSelected) -> None:
        event.stop()
        self.dismiss(event.option.id)

    def action_cancel(self) -> None:
        self.dismiss(None)
