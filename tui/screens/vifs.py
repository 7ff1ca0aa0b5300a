"""VIFs screen: every VM interface, live; filter, sort, open one to edit.

OVSDB changes are pushed by the connection's IDL loop (the app calls
:meth:`VifsScreen.db_changed`); counters are re-read about once a second
for the rate columns.  Reads run in worker threads and report back by
message, so a slow read never freezes the keyboard.  Whether each limit is
really enforced (meters and flows, tc, htb) costs an ``ovs-ofctl`` per bridge
and two ``tc`` per limited interface, so it is checked for the VIFs whose
limits changed, and for all of them once a minute or on request (``v``).
"""

from __future__ import annotations

from collections import deque
from functools import partial

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Header, Input, Static

from tui.backend import Backend
from tui.backend.vifs import Inventory, Vif, filter_vifs
from tui.widgets.banner import ConnectionBanner
from tui.widgets.footer import Footer
from tui.widgets.literal import Literal, notice
from tui.widgets.spark import WIDTH as SPARK_WIDTH
from tui.widgets.vif_table import COLUMNS, SORT_KEYS, VifTable, row_for

RATE_INTERVAL_S = 1.0
ENFORCEMENT_INTERVAL_S = 60.0
FIRST_PAINT_SETTLE_S = 0.5  # after the first table is shown, before the replica and limit checks start


def limits_signature(v: Vif) -> tuple:
    """What an enforcement check of ``v`` depends on: a change means its marks are stale."""
    return (v.interface, v.ofport, v.ingress_mechanism, v.ingress_policing_rate_kbps,
            v.ingress_policing_burst_kbit, v.egress_qos_type, v.egress_max_rate_kbps)  # fmt: skip


class InventoryRead(Message):
    def __init__(self, inventory: Inventory) -> None:
        super().__init__()
        self.inventory = inventory


class EnforcementRead(Message):
    def __init__(self, ports: set[str] | None, checked: dict[tuple[str, str], bool | None], error: str | None) -> None:
        super().__init__()
        self.ports = ports  # None: every port was checked
        self.checked = checked
        self.error = error


class VifsScreen(Screen[None]):
    BINDINGS = [
        Binding("enter", "edit", "Edit"),
        Binding("slash", "filter", "Filter"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
        Binding("s", "sort", "Sort"),
        Binding("S", "reverse", "Reverse", show=False),
        Binding("v", "verify", "Verify limits"),
        Binding("r", "refresh", "Refresh", show=False),
    ]
    # The table has focus from the start: focusing the filter box first and then the
    # table would build the footer's keys twice (a tenth of a second on a 1000-VIF start).
    AUTO_FOCUS = "#vifs"

    def __init__(self) -> None:
        super().__init__()
        self.inventory: Inventory | None = None
        self.filter_text = ""
        self.sort_column = "Port"
        self.sort_reverse = False
        self.history: dict[str, deque[float]] = {}
        self.checked: dict[tuple[str, str], bool | None] = {}
        self.signatures: dict[str, tuple] = {}  # port -> limits as last checked

    def compose(self) -> ComposeResult:
        yield Header()
        yield ConnectionBanner()
        yield Literal("connecting...", id="host-line")
        yield Input(placeholder="filter: VM name, port, MAC, uuid", id="filter")
        yield VifTable(id="vifs")
        yield Footer()

    @property
    def backend(self) -> Backend:
        return self.app.backend  # type: ignore[attr-defined]

    def on_mount(self) -> None:
        self.set_interval(RATE_INTERVAL_S, self.action_refresh)
        self.set_interval(ENFORCEMENT_INTERVAL_S, self.action_verify)
        self.action_refresh()

    def db_changed(self) -> None:
        self.action_refresh()

    # -- reading (workers) ---------------------------------------------------

    @work(thread=True, exclusive=True, group="inventory")
    def action_refresh(self) -> None:
        self.post_message(InventoryRead(self.backend.inventory()))

    def action_verify(self) -> None:
        """Check every limit now (the marks ✓ enforced, ✗ not enforced, ? could not check)."""
        self.check_enforcement(None)

    @work(thread=True, exclusive=True, group="enforcement")
    def check_enforcement(self, ports: set[str] | None) -> None:
        try:
            found = self.backend.enforcement(ports)
        except Exception as exc:  # a notification; the table keeps its last marks
            self.post_message(EnforcementRead(ports, {}, f"enforcement check failed: {exc}"))
            return
        self.post_message(EnforcementRead(ports, {(e.port, e.kind): e.verified for e in found}, None))

    def on_inventory_read(self, message: InventoryRead) -> None:
        first = self.inventory is None
        inv = self.inventory = message.inventory
        vifs = [v for v in inv.vifs if v.is_vif]
        for v in vifs:
            hist = self.history.setdefault(v.port, deque(maxlen=SPARK_WIDTH))
            hist.append(v.rates.rx_bps + v.rates.tx_bps if v.rates else -1.0)
        for gone in set(self.history) - {v.port for v in vifs}:
            del self.history[gone]
        stale = {v.port for v in vifs if self.signatures.get(v.port) != limits_signature(v)}
        self.signatures = {v.port: limits_signature(v) for v in vifs}
        if stale:
            # marks for changed limits are unknown until checked; no mark rather than an old one
            self.checked = {k: val for k, val in self.checked.items() if k[0] not in stale}
        bridges = ", ".join(f"{b.name} ({b.datapath_type})" for b in inv.bridges)
        h = inv.host
        self.query_one("#host-line", Static).update(
            f"{h.hostname} · OVS {h.ovs_version or '?'} · {bridges or 'no bridges'} · {len(vifs)} VIFs"
            f" · sort {self.sort_column}{' ↓' if self.sort_reverse else ''}"
        )
        self._show()
        if first:
            # The first table came from one select.  The live replica and the limit checks
            # (seconds of work on 1000 VIFs, beside the paint they would hold it back) start
            # once it is on the screen.
            self.set_timer(FIRST_PAINT_SETTLE_S, partial(self._after_first_paint, stale))
        elif stale:
            self.call_after_refresh(self.check_enforcement, stale)

    def _after_first_paint(self, stale: set[str]) -> None:
        self.backend.start_replica()
        if stale:
            self.check_enforcement(stale)

    def on_enforcement_read(self, message: EnforcementRead) -> None:
        if message.ports is None:
            self.checked = dict(message.checked)
        else:
            kept = {k: v for k, v in self.checked.items() if k[0] not in message.ports}
            self.checked = {**kept, **message.checked}
        if message.error:
            self.notify(notice(message.error), severity="warning")
        self._show()

    # -- showing -------------------------------------------------------------

    def visible_vifs(self) -> list[Vif]:
        if self.inventory is None:
            return []
        vifs = [v for v in self.inventory.vifs if v.is_vif]
        if self.filter_text:
            vifs = filter_vifs(vifs, self.filter_text)
        return sorted(vifs, key=SORT_KEYS[self.sort_column], reverse=self.sort_reverse)

    def _show(self) -> None:
        rows = {v.port: row_for(v, self.history.get(v.port, ()), self.checked) for v in self.visible_vifs()}
        self.query_one(VifTable).show(rows)

    # -- actions -------------------------------------------------------------

    def action_sort(self) -> None:
        """Sort by the next column (or click a column heading)."""
        self.sort_column = COLUMNS[(COLUMNS.index(self.sort_column) + 1) % len(COLUMNS)]
        self.notify(f"sorted by {self.sort_column}", timeout=1.5)
        self._show()

    def action_reverse(self) -> None:
        self.sort_reverse = not self.sort_reverse
        self._show()

    def on_data_table_header_selected(self, event: DataTable.HeaderSelected) -> None:
        column = str(event.column_key.value)
        if column == self.sort_column:
            self.sort_reverse = not self.sort_reverse
        else:
            self.sort_column, self.sort_reverse = column, False
        self._show()

    def action_edit(self) -> None:
        port = self.query_one(VifTable).selected_port
        if port is None:
            return
        from tui.dialogs.edit_vif import EditVifDialog  # loaded when first used

        # The dialog's apply installs meters/qdiscs after its OVSDB commit, so a check triggered by the
        # commit alone can run too early: check this VIF again once the dialog is closed.
        self.app.push_screen(EditVifDialog(port), callback=lambda _result: self.check_enforcement({port}))

    def on_data_table_row_selected(self, _event: DataTable.RowSelected) -> None:
        self.action_edit()

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

    def on_input_submitted(self, _event: Input.Submitted) -> None:
        self.query_one(VifTable).focus()
