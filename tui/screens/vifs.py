"""VIFs screen: every VM interface, live.

OVSDB changes are pushed by the connection's IDL loop (no polling the
database); counters are re-read about once a second for the rate columns.
Inventory reads run in a worker thread and report back by message.
"""

from __future__ import annotations

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Footer, Header, Input, Static

from appliance.inventory import Inventory, filter_vifs

from ..widgets.banner import ConnectionBanner
from ..widgets.vif_table import VifTable

RATE_INTERVAL_S = 1.0


class InventoryRead(Message):
    def __init__(self, inventory: Inventory, connected: bool) -> None:
        super().__init__()
        self.inventory = inventory
        self.connected = connected


class VifsScreen(Screen[None]):
    BINDINGS = [
        Binding("slash", "filter", "Filter"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
        Binding("r", "refresh", "Refresh"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.inventory: Inventory | None = None
        self.filter_text = ""

    def compose(self) -> ComposeResult:
        yield Header()
        yield Static("connecting...", id="host-line")
        yield ConnectionBanner()
        yield Input(placeholder="filter: VM name, port, MAC, uuid", id="filter")
        yield VifTable(id="vifs")
        yield Footer()

    def on_mount(self) -> None:
        self.conn = self.app.backend.conn
        self.live = self.app.backend.live
        self.query_one(VifTable).focus()
        self.set_interval(RATE_INTERVAL_S, self.action_refresh)
        self.action_refresh()

    def db_changed(self) -> None:
        self.action_refresh()

    @work(thread=True, exclusive=True, group="inventory")
    def action_refresh(self) -> None:
        inv = self.live.refresh()
        self.post_message(InventoryRead(inv, self.conn.is_connected))

    def on_inventory_read(self, message: InventoryRead) -> None:
        self.inventory = message.inventory
        h = message.inventory.host
        bridges = ", ".join(f"{b.name} ({b.datapath_type})" for b in message.inventory.bridges)
        vifs = [v for v in message.inventory.vifs if v.is_vif]
        self.query_one("#host-line", Static).update(
            f"{h.hostname} · OVS {h.ovs_version or '?'} · {bridges or 'no bridges'} · {len(vifs)} VIFs"
        )
        self._show()

    def _show(self) -> None:
        if self.inventory is None:
            return
        vifs = [v for v in self.inventory.vifs if v.is_vif]
        if self.filter_text:
            vifs = filter_vifs(vifs, self.filter_text)
        self.query_one(VifTable).show(vifs)

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.add_class("visible")
        box.focus()

    def action_clear_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.value = ""
        box.remove_class("visible")
        self.query_one(VifTable).focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value
        self._show()
