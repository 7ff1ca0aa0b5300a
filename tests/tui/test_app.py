"""The TUI shell against the real lab, driven through Textual's Pilot."""

from __future__ import annotations

import asyncio
import time

from appliance import api
from tui.app import HvnetApp
from tui.widgets.vif_table import VifTable

from .harness import wait_until


def cell(table: VifTable, port: str, column: str) -> str:
    return str(table.get_cell(port, column))


async def test_vif_table_shows_lab_and_follows_external_changes(lab) -> None:
    conn = api.connect()
    app = HvnetApp(conn)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            table = app.screen.query_one(VifTable)
            assert await wait_until(pilot, lambda: table.row_count == 3)
            assert [cell(table, p, "VM") for p in ("vif1.0", "vif2.0", "vif3.0")] == ["VM1", "VM2", "VM3"]
            assert cell(table, "vif3.0", "VLAN") == "access 2"

            # a change made by another tool shows within about a second
            started = time.monotonic()
            await asyncio.to_thread(lab.switch.vsctl, "set", "Port", "vif3.0", "tag=42")
            assert await wait_until(pilot, lambda: cell(table, "vif3.0", "VLAN") == "access 42", 3.0)
            assert time.monotonic() - started < 2.0

            # filter as you type
            await pilot.press("slash", "V", "M", "2")
            assert await wait_until(pilot, lambda: table.row_count == 1)
            await pilot.press("escape")
            assert await wait_until(pilot, lambda: table.row_count == 3)
    finally:
        lab.switch.vsctl("set", "Port", "vif3.0", "tag=2")
        conn.close()
