"""Captures screen: every capture on the host (running and ended) with its live count; start, stop.

Opened from the Mirrors screen (``c``): a capture listens on a monitor VIF or
on a mirror's or TAP's output port.  The table is re-read about every 2 s in
a thread worker; a running capture's count is tcpdump's own (asked with
SIGUSR1), its rate measured between two reads, its completeness (captured ÷
offered by the switch) known once it has ended.  Everything goes through
:mod:`tui.backend.captures`, i.e. the capture service the CLI uses.
"""

from __future__ import annotations

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.screen import Screen
from textual.widgets import Header, Static

from appliance.core import render
from appliance.core.errors import HvnetError
from tui.backend import captures as cb
from tui.dialogs.capture import CaptureDialog
from tui.widgets.banner import ConnectionBanner
from tui.widgets.footer import Footer
from tui.widgets.keyed_table import KeyedTable
from tui.widgets.literal import Literal

REFRESH_S = 2.0
COLUMNS = ("Capture", "State", "On", "Packets", "Rate", "Drops", "Size", "Complete", "Files")


class CaptureTable(KeyedTable):
    UPDATE_WIDTH = True


class CapturesScreen(Screen[None]):
    CSS_PATH = "captures.tcss"
    BINDINGS = [
        Binding("s", "start", "Start"),
        Binding("x", "stop", "Stop"),
        Binding("r", "refresh", "Refresh", show=False),  # the table re-reads every 2 s anyway
        Binding("escape", "close", "Back"),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.rows: dict[str, cb.CaptureRow] = {}
        self.rates = cb.LiveRates()
        self.loaded = False

    def compose(self) -> ComposeResult:
        yield Header()
        yield Literal("reading captures...", id="captures-line")
        yield ConnectionBanner()
        yield CaptureTable(id="captures", cursor_type="row", zebra_stripes=True)
        yield Literal("", id="captures-status")
        yield Footer()

    def on_mount(self) -> None:
        table = self.query_one("#captures", CaptureTable)
        for name in COLUMNS:
            table.add_column(name, key=name)
        table.focus()
        self.set_interval(REFRESH_S, self.action_refresh)
        self.action_refresh()

    @work(thread=True, exclusive=True, group="captures-read")
    def action_refresh(self) -> None:
        try:
            rows = cb.rows(self.app.backend, self.rates)
        except HvnetError as exc:
            self.app.call_from_thread(self.status, f"✗ could not read the captures: {exc.message}")
            return
        self.app.call_from_thread(self._show, rows)

    def _show(self, rows: list[cb.CaptureRow]) -> None:
        self.loaded = True
        self.rows = {r.name: r for r in rows}
        self.query_one("#captures", CaptureTable).show({r.name: r.cells() for r in rows})
        running = sum(1 for r in rows if r.live)
        line = f"{len(rows)} capture{'s' if len(rows) != 1 else ''}, {running} running" if rows else "no captures"
        self.query_one("#captures-line", Static).update(f"{line} · s: start · x: stop · Esc: back")

    def status(self, text: str) -> None:
        self.query_one("#captures-status", Static).update(text)

    def selected(self) -> cb.CaptureRow | None:
        key = self.query_one("#captures", CaptureTable).selected_key
        return self.rows.get(key) if key else None

    def action_close(self) -> None:
        self.app.pop_screen()

    def action_start(self) -> None:
        self.app.push_screen(CaptureDialog(), self._started)

    def _started(self, summary: str | None) -> None:
        if summary:
            self.status(summary)
        self.action_refresh()

    def action_stop(self) -> None:
        row = self.selected()
        if row is None or not row.live:
            self.status("no running capture selected: nothing to stop")
            return
        self.status(f"stopping {row.name}...")
        self.run_stop(row.name)

    @work(thread=True, exclusive=True, group="captures-stop")
    def run_stop(self, name: str) -> None:
        try:
            row = cb.stop(self.app.backend, name)
            text = (f"capture {name}: {row.state} ({row.reason or '-'}); {render.count(row.packets)} packets, "
                    f"{render.count(row.dropped)} dropped, complete {row.complete}")  # fmt: skip
        except HvnetError as exc:
            text = f"✗ capture {name}: {exc.message}"
        self.app.call_from_thread(self.status, text)
        self.app.call_from_thread(self.action_refresh)
