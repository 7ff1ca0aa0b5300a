"""Fleet screen: every host of the inventory and this machine, checked in parallel; enter switches to one.

The list comes from the inventory file at once; each host's probe (SSH,
one OVSDB read) runs in a pool inside a thread worker and fills its row
when it answers, so a host that does not answer shows "…" until its
connect timeout and then why it is down, while the others are already
there.  The selected host is marked ``●``; enter (or the picker, ``h`` on
any screen) switches every screen of the console to the highlighted host.
"""

from __future__ import annotations

from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Header, Static

from tui.backend import fleet as fb
from tui.widgets.banner import ConnectionBanner
from tui.widgets.footer import Footer
from tui.widgets.keyed_table import KeyedTable
from tui.widgets.literal import Literal

COLUMNS = (("HOST", 10), ("GROUP", 7), ("KIND", 9), ("UP", 3), ("OVS", 7), ("VIFS", 4), ("DRIFT", 8),
           ("AGENT", 6), ("PROBLEM", 60))  # fmt: skip
PENDING = "…"


def cell(value: Any) -> str:
    """A probe's value as shown: ``-`` when the probe did not say (an older probe has no drift or agent)."""
    if value is None or value == "":
        return "-"
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def row_cells(name: str, row: dict[str, Any] | None, entry: Any, selected: bool) -> tuple[str, ...]:
    """One host's cells: its inventory fields at once, what the probe found once it answers."""
    mark = ("● " if selected else "  ") + name
    group = cell(entry.group) if entry is not None else "-"
    kind = entry.kind if entry is not None else "-"
    if row is None:
        return (mark, group, kind, PENDING, PENDING, PENDING, PENDING, PENDING, "checking...")
    if not row.get("reachable"):
        return (mark, group, kind, "NO", "-", "-", "-", "-",
                cell(row.get("error")).splitlines()[0])  # fmt: skip
    return (mark, group, kind, "yes", cell(row.get("ovs_version")), cell(row.get("vifs")), fb.drift_text(row),
            cell(row.get("agent")), "")  # fmt: skip


def detail(name: str, entry: Any, row: dict[str, Any] | None) -> str:
    """One line (or a few) on one host: where it is, and what the probe found or why it is down."""
    where = "this machine" if entry is None else entry.ssh
    if row is None:
        return f"{name} ({where}): checking..."
    if not row.get("reachable"):
        return f"{name} ({where}): down after {row.get('seconds', 0):.1f} s: {cell(row.get('error'))}"
    datapaths = ", ".join(row.get("datapaths") or []) or "no bridges"
    return (f"{name} ({where}): OVS {cell(row.get('ovs_version'))}, {datapaths}, {cell(row.get('vifs'))} VIFs, "
            f"checked in {row.get('seconds', 0):.1f} s")  # fmt: skip


class FleetListed(Message):
    def __init__(self, listing: fb.FleetList) -> None:
        super().__init__()
        self.listing = listing


class HostProbed(Message):
    def __init__(self, row: dict[str, Any]) -> None:
        super().__init__()
        self.row = row


class FleetTable(KeyedTable):
    pass


class FleetScreen(Screen[None]):
    CSS_PATH = "fleet.tcss"
    BINDINGS = [
        Binding("enter", "pick", "Switch to host"),
        Binding("r", "refresh", "Refresh"),
    ]
    AUTO_FOCUS = "#fleet"

    def __init__(self) -> None:
        super().__init__()
        self.entries: dict[str, Any] = {}  # name -> inventory entry (None: local)
        self.rows: dict[str, dict[str, Any]] = {}  # name -> probe row, as they answer
        self.listing: fb.FleetList | None = None

    def compose(self) -> ComposeResult:
        yield Header()
        yield ConnectionBanner()
        yield Literal("reading the inventory...", id="fleet-line")
        yield FleetTable(id="fleet", cursor_type="row", zebra_stripes=True)
        yield Literal("", id="fleet-status")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one(FleetTable)
        for name, width in COLUMNS:
            table.add_column(name, key=name, width=width)
        self.action_refresh()

    @property
    def timeout(self) -> float:
        return float(self.app.backend.timeout)  # type: ignore[attr-defined]

    @work(thread=True, exclusive=True, group="fleet")
    def action_refresh(self) -> None:
        """Check every host again (each bounded by the console's --timeout)."""
        listing = fb.read_list()
        self.post_message(FleetListed(listing))
        for row in fb.probe_each(listing.entries, self.app.local_host, self.timeout):  # type: ignore[attr-defined]
            self.post_message(HostProbed(row))

    def on_fleet_listed(self, message: FleetListed) -> None:
        self.listing = message.listing
        self.entries = {fb.LOCAL: None, **{e.name: e for e in message.listing.entries}}
        self.rows = {}
        self._show()

    def on_host_probed(self, message: HostProbed) -> None:
        self.rows[message.row["name"]] = message.row
        self._show()

    def host_changed(self) -> None:
        """The console switched hosts: move the mark."""
        self._show()

    def _show(self) -> None:
        selected = self.app.host_name  # type: ignore[attr-defined]
        self.query_one(FleetTable).show(
            {name: row_cells(name, self.rows.get(name), e, name == selected) for name, e in self.entries.items()}
        )
        listing = self.listing
        if listing is None:
            return
        up = sum(1 for r in self.rows.values() if r.get("reachable"))
        waiting = len(self.entries) - len(self.rows)
        line = f"on {selected} · {len(self.entries)} hosts, {up} up" + (f", {waiting} checking" if waiting else "")
        self.query_one("#fleet-line", Static).update(f"{line} · {listing.file}")
        self._show_detail()

    def _show_detail(self) -> None:
        """Under the table, the highlighted host in full (its problem does not fit its column at 80x24)."""
        name = self.query_one(FleetTable).selected_key
        lines = [f"✗ {self.listing.error}"] if self.listing is not None and self.listing.error else []
        if name is not None:
            lines.append(detail(name, self.entries.get(name), self.rows.get(name)))
        self.query_one("#fleet-status", Static).update("\n".join(lines))

    def on_data_table_row_highlighted(self, _event: DataTable.RowHighlighted) -> None:
        self._show_detail()

    def action_pick(self) -> None:
        name = self.query_one(FleetTable).selected_key
        if name is not None:
            self.app.select_host(name, then="vifs")  # type: ignore[attr-defined]

    def on_data_table_row_selected(self, event: DataTable.RowSelected) -> None:
        event.stop()
        self.action_pick()
