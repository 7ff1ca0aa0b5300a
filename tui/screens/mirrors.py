"""Mirrors screen: every mirror and flow TAP on the switch with its statistics; add either, delete either.

The table follows OVSDB (the app calls :meth:`MirrorsScreen.db_changed` on
each replica change) and re-reads about every 2 s for the counters.  OVS
writes mirror statistics only every few seconds, so the packet rate is
measured between two changes of the counter and shows "-" until it can be.
Reads and applies run in thread workers; the engine calls live in
:mod:`tui.backend.mirrors`.
"""

from __future__ import annotations

import time

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Header, Static

from appliance.core.errors import HvnetError
from tui.backend import mirrors as mb
from tui.backend.plans import refusal_lines, result_lines
from tui.dialogs.confirm import ConfirmDialog
from tui.dialogs.mirror import MirrorDialog
from tui.dialogs.tap import TapDialog
from tui.widgets.banner import ConnectionBanner
from tui.widgets.footer import Footer
from tui.widgets.keyed_table import KeyedTable
from tui.widgets.literal import Literal

STATS_INTERVAL_S = 2.0
COLUMNS = ("Bridge", "Mirror", "Owner", "Selects", "Output", "TX", "Bytes", "Rate")


class MirrorTable(KeyedTable):
    UPDATE_WIDTH = True  # the columns are sized by their contents


class MirrorsScreen(Screen[None]):
    CSS_PATH = "mirrors.tcss"
    BINDINGS = [
        Binding("a", "add", "Add mirror"),
        Binding("t", "add_tap", "Add TAP"),
        Binding("c", "captures", "Captures"),
        Binding("d", "delete", "Delete"),  # a mirror or a TAP
        Binding("r", "refresh", "Refresh", show=False),  # the table re-reads every 2 s anyway
    ]

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, mb.MirrorRow] = {}
        self.packet_rates = mb.MirrorPacketRates()
        self.loaded = False

    def compose(self) -> ComposeResult:
        yield Header()
        yield Literal("reading mirrors...", id="mirrors-line")
        yield ConnectionBanner()
        yield MirrorTable(id="mirrors", cursor_type="row", zebra_stripes=True)
        yield Literal("", id="mirrors-status")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#mirrors", MirrorTable)
        for name in COLUMNS:
            table.add_column(name, key=name)
        table.focus()
        self.set_interval(STATS_INTERVAL_S, self.action_refresh)
        self.action_refresh()

    def db_changed(self) -> None:
        self.action_refresh()

    # -- reading -----------------------------------------------------------------

    @work(thread=True, exclusive=True, group="mirrors-read")
    def action_refresh(self) -> None:
        try:
            rows = mb.list_mirrors(self.app.backend)
        except HvnetError as exc:
            self.app.call_from_thread(self.status, f"✗ could not read mirrors: {exc.message}")
            return
        self.app.call_from_thread(self._show, rows, time.monotonic())

    def _show(self, rows: list[mb.MirrorRow], now: float) -> None:
        self.loaded = True
        table = self.query_one("#mirrors", MirrorTable)
        wanted = {r.key: r for r in rows}
        self.packet_rates.forget_except(set(wanted))
        cells = {
            r.key: (
                r.bridge,
                r.name,
                r.owner,
                r.selects,
                r.output,
                r.packets_text(),
                r.bytes_text(),
                mb.rate_text(self.packet_rates.update(r.key, r.tx_packets, now)),
            )
            for r in rows
        }
        table.show(cells)
        self.rows = wanted
        mirrors = [r for r in rows if r.kind == "mirror"]
        ours = sum(1 for r in mirrors if r.owner == "hvnet")
        n = len(mirrors)
        line = f"{n} mirror{'s' if n != 1 else ''} ({ours} hvnet's)" if mirrors else "no mirrors"
        taps = len(rows) - n
        if taps:
            line += f", {taps} TAP{'s' if taps != 1 else ''} (counts: packets their flows matched)"
        self.query_one("#mirrors-line", Static).update(f"{line} · rates need two OVS updates")  # keys: the footer

    def selected_key(self) -> str | None:
        return self.query_one("#mirrors", MirrorTable).selected_key

    def status(self, text: str) -> None:
        self.query_one("#mirrors-status", Static).update(text)

    # -- add -------------------------------------------------------------------------

    def action_add(self) -> None:
        self.app.push_screen(MirrorDialog(), self._added)

    def action_captures(self) -> None:
        from tui.screens.captures import CapturesScreen  # loaded when first opened, as the screens are

        self.app.push_screen(CapturesScreen())

    def action_add_tap(self) -> None:
        self.app.push_screen(TapDialog(), self._added)

    def _added(self, summary: str | None) -> None:
        if summary:
            self.status(summary)  # the backend has logged the apply itself
        self.action_refresh()

    # -- delete ----------------------------------------------------------------------

    def action_delete(self) -> None:
        key = self.selected_key()
        row = self.rows.get(key) if key else None
        if row is None:
            self.status("no mirror selected: nothing to delete")
            return
        owner = "" if row.owner.startswith("hvnet") else "\nIt was not made by hvnet (another tool manages it)."
        what = "TAP" if row.kind == "tap" else "mirror"
        body = (
            f"Delete {what} {row.name} on bridge {row.bridge}?\n"
            f"It copies {row.selects} -> {row.output}.{owner}\n"
            "This is applied at once, in one transaction."
        )
        self.app.push_screen(ConfirmDialog(f"Delete {what}", body, yes="Delete"), lambda yes: self._confirmed(row, yes))

    def _confirmed(self, row: mb.MirrorRow, yes: bool | None) -> None:
        if not yes:
            self.status(f"mirror {row.name} kept")
            return
        self.status(f"deleting {row.kind} {row.name}...")
        self.run_delete(row.bridge, row.name, row.kind)

    @work(thread=True, exclusive=True, group="mirrors-delete")
    def run_delete(self, bridge: str, name: str, kind: str = "mirror") -> None:
        delete = mb.apply_delete_tap if kind == "tap" else mb.apply_delete
        try:
            lines = result_lines(delete(self.app.backend, bridge, name))
        except HvnetError as exc:
            lines = refusal_lines(exc)
        self.app.call_from_thread(self._deleted, name, bridge, lines)

    def _deleted(self, name: str, bridge: str, lines: list[str]) -> None:
        self.status(f"mirror {name} on {bridge}: " + "\n".join(lines))
        self.action_refresh()
