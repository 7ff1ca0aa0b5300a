"""The console against the real lab, driven through Textual's Pilot: VIFs and Edit VIF."""

from __future__ import annotations

import asyncio
import time

from appliance.frontdoor.hosts import build_host
from appliance.switch import api
from tests.conftest import run_hvnet
from tests.tui.harness import screen_text, wait_until
from tui.app import HvnetApp
from tui.dialogs.edit_vif import EditVifDialog
from tui.widgets.vif_table import VifTable


def cell(table: VifTable, port: str, column: str) -> str:
    return str(table.get_cell(port, column))


def tag_of(lab, port: str) -> str:
    return lab.switch.vsctl("get", "Port", port, "tag").strip()


async def open_vifs(pilot, app: HvnetApp) -> VifTable:
    await pilot.press("2")
    assert await wait_until(pilot, lambda: bool(app.screen.query(VifTable)))
    table = app.screen.query_one(VifTable)
    assert await wait_until(pilot, lambda: table.row_count == 3)
    return table


async def test_vif_table_shows_lab_and_follows_external_changes(lab) -> None:
    # opened as ``hvnet tui`` opens it: the replica is built after the first table is shown
    app = HvnetApp(api.connect(build_host(), sync=False), start="host" if _has_host() else "vifs")
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            table = await open_vifs(pilot, app)
            assert [cell(table, p, "VM") for p in ("vif1.0", "vif2.0", "vif3.0")] == ["VM1", "VM2", "VM3"]
            assert cell(table, "vif3.0", "VLAN") == "access 2"

            # a change made by another tool shows within about a second, pushed by the replica
            assert await wait_until(pilot, lambda: app.backend.replica_ready, 5.0)
            started = time.monotonic()
            await asyncio.to_thread(lab.switch.vsctl, "set", "Port", "vif3.0", "tag=42")
            assert await wait_until(pilot, lambda: cell(table, "vif3.0", "VLAN") == "access 42", 3.0)
            assert time.monotonic() - started < 2.0

            # filter as you type
            await pilot.press("slash", "V", "M", "2")
            assert await wait_until(pilot, lambda: table.row_count == 1)
            await pilot.press("escape")
            assert await wait_until(pilot, lambda: table.row_count == 3)

            # sort: by VLAN, then reversed
            while app.screen.sort_column != "VLAN":
                await pilot.press("s")
            await pilot.press("S")
            assert await wait_until(pilot, lambda: [k.value for k in table.rows][:1] == ["vif3.0"])
    finally:
        lab.switch.vsctl("set", "Port", "vif3.0", "tag=2")
        app.backend.close()


async def test_edit_vm3_tag_through_the_dialog(lab) -> None:
    app = HvnetApp(api.connect(build_host()))
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            table = await open_vifs(pilot, app)
            table.move_cursor(row=[k.value for k in table.rows].index("vif3.0"))
            await pilot.press("enter")
            assert await wait_until(pilot, lambda: isinstance(app.screen, EditVifDialog))
            dialog = app.screen
            assert await wait_until(pilot, lambda: dialog.state is not None)
            tag = dialog.query_one("#tag")
            assert tag.value == "2"

            # invalid input: the error is shown, Apply stays disabled, nothing changes
            tag.value = "5000"
            assert await wait_until(pilot, lambda: "✗ Tag" in screen_text(app))
            assert "4094" in screen_text(app)
            assert dialog.query_one("#apply").disabled
            await pilot.press("ctrl+s", "ctrl+y")
            await pilot.pause(0.3)
            assert tag_of(lab, "vif3.0") == "2"

            # a valid tag: the plan shows before -> after, apply needs the confirm
            tag.value = "7"
            ok = await wait_until(pilot, lambda: "vlan: access tag 2 → access tag 7" in screen_text(app))
            assert ok, screen_text(app)
            await pilot.press("ctrl+s")
            assert await wait_until(pilot, lambda: "Apply these 1 change(s)" in screen_text(app))
            assert tag_of(lab, "vif3.0") == "2"  # not before the confirm
            await pilot.press("ctrl+y")
            assert await wait_until(pilot, lambda: "✓ applied 1 change" in screen_text(app), 10.0)
            assert tag_of(lab, "vif3.0") == "7"
            await pilot.press("escape")
            assert await wait_until(pilot, lambda: not isinstance(app.screen, EditVifDialog))
            assert await wait_until(pilot, lambda: cell(table, "vif3.0", "VLAN") == "access 7", 3.0)
    finally:
        lab.switch.vsctl("set", "Port", "vif3.0", "tag=2")
        app.backend.close()


async def test_edit_limits_show_enforcement(lab) -> None:
    app = HvnetApp(api.connect(build_host()))
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            table = await open_vifs(pilot, app)
            table.move_cursor(row=[k.value for k in table.rows].index("vif1.0"))
            await pilot.press("enter")
            dialog = app.screen
            assert await wait_until(pilot, lambda: dialog.state is not None)
            dialog.query_one("#ingress-rate").value = "10mbit"
            dialog.query_one("#ingress-burst").value = "abc"
            assert await wait_until(pilot, lambda: "✗ Ingress burst" in screen_text(app))
            dialog.query_one("#ingress-burst").value = ""
            dialog.query_one("#egress-rate").value = "20000"
            assert await wait_until(pilot, lambda: "egress: none → " in screen_text(app))
            await pilot.press("ctrl+s", "ctrl+y")
            assert await wait_until(pilot, lambda: "✓ applied 2 changes" in screen_text(app), 15.0)
            text = screen_text(app)
            assert "ingress: enforced by" in text and "egress: enforced by htb" in text
            await pilot.press("escape")
            assert await wait_until(pilot, lambda: cell(table, "vif1.0", "Ingress") == "10.0 Mbit/s ✓", 15.0)
            assert cell(table, "vif1.0", "Egress") == "20.0 Mbit/s ✓"
    finally:
        app.backend.close()
        assert run_hvnet("qos", "clear", "vif1.0").returncode == 0


def _has_host() -> bool:
    import importlib.util

    return importlib.util.find_spec("tui.screens.host") is not None


async def test_connection_loss_banner_reconnect_and_nothing_half_applied(lab) -> None:
    app = HvnetApp(api.connect(build_host()))
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            table = await open_vifs(pilot, app)
            table.move_cursor(row=[k.value for k in table.rows].index("vif3.0"))
            await pilot.press("enter")
            dialog = app.screen
            assert await wait_until(pilot, lambda: isinstance(dialog, EditVifDialog) and dialog.state is not None)

            await asyncio.to_thread(lab.switch.kill_ovsdb)
            assert await wait_until(pilot, lambda: "OVSDB connection lost" in screen_text(app), 5.0)
            dialog.query_one("#tag").value = "8"
            assert await wait_until(pilot, lambda: "access tag 2 → access tag 8" in screen_text(app))
            await pilot.press("ctrl+s", "ctrl+y")
            assert await wait_until(pilot, lambda: "nothing was applied" in screen_text(app), 5.0)

            await asyncio.to_thread(lab.switch.start)  # same database file, new server
            assert await wait_until(pilot, lambda: "OVSDB connection lost" not in screen_text(app), 10.0)
            assert tag_of(lab, "vif3.0") == "2"
            # once back, the same dialog applies normally (it re-read the switch: the tag is 2 again)
            assert await wait_until(pilot, lambda: dialog.query_one("#tag").value == "2")
            dialog.query_one("#tag").value = "8"
            assert await wait_until(pilot, lambda: not dialog.query_one("#apply").disabled)
            await pilot.press("ctrl+s", "ctrl+y")
            assert await wait_until(pilot, lambda: "✓ applied 1 change" in screen_text(app), 10.0)
            assert tag_of(lab, "vif3.0") == "8"
    finally:
        lab.switch.start()
        lab.switch.vsctl("set", "Port", "vif3.0", "tag=2")
        app.backend.close()


async def test_first_table_from_one_select_then_the_replica(lab) -> None:
    """``hvnet tui``'s start: the table is painted from a one-shot read; readers that need the
    replica (the Edit VIF dialog, limit checks) wait for it, and it is started for them."""
    conn = api.connect(build_host(), sync=False)
    assert not conn.synced and not conn.started
    app = HvnetApp(conn)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            assert await wait_until(pilot, lambda: bool(app.screen.query(VifTable)))
            table = app.screen.query_one(VifTable)
            assert await wait_until(pilot, lambda: table.row_count == 3)
            assert cell(table, "vif1.0", "VM") == "VM1"
            # the replica follows the first paint without being asked
            assert await wait_until(pilot, lambda: app.backend.replica_ready, 5.0)
            assert conn.synced and conn.started
    finally:
        app.backend.close()


def test_a_replica_reader_before_the_first_paint_waits_for_the_sync(lab) -> None:
    from tui.backend import Backend

    backend = Backend(api.connect(build_host(), sync=False))
    try:
        state = backend.snapshot()  # what the Edit VIF dialog reads: the replica, synced first
        assert {"vif1.0", "vif2.0", "vif3.0"} <= set(state.ports)
        assert backend.replica_ready
    finally:
        backend.close()
