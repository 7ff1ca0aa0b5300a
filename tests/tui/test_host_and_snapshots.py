"""Host screen against the real lab, the palette and NO_COLOR, and text snapshots of Host, VIFs and Edit VIF."""

from __future__ import annotations

import pytest

from appliance.frontdoor.hosts import build_host
from appliance.switch import api
from tests.tui.harness import SIZES, assert_snapshot, screen_text, wait_until
from tui.app import HvnetApp
from tui.dialogs.edit_vif import EditVifDialog
from tui.screens.host import HostScreen
from tui.widgets.vif_table import VifTable


async def test_host_screen_shows_switch_cpu_agent_and_audit(lab) -> None:
    from tests.conftest import run_hvnet

    assert run_hvnet("vif", "set", "vif2.0", "--tag", "1").returncode == 0  # one audit entry, no change
    app = HvnetApp(api.connect(build_host()), start="host")
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            assert await wait_until(pilot, lambda: isinstance(app.screen, HostScreen))
            assert await wait_until(pilot, lambda: "cpu0" in screen_text(app), 5.0)
            text = screen_text(app)
            pid = (lab.run_dir / "ovs-vswitchd.pid").read_text().strip()
            assert f"ovs-vswitchd pid {pid}:" in text and "% of one core" in text
            assert "Open vSwitch 3." in text and "xenbr0" in text and "netdev" in text
            assert "not running" in text  # no agent in this lab
            app.screen.query_one("#host").scroll_end(animate=False)
            await pilot.pause(0.1)
            assert "hvnet vif set vif2.0 --tag 1" in screen_text(app)
    finally:
        app.backend.close()


async def test_palette_lists_screens_and_actions(lab) -> None:
    app = HvnetApp(api.connect(build_host()))
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            await pilot.press("2")
            assert await wait_until(pilot, lambda: bool(app.screen.query(VifTable)))
            titles = [c.title for c in app.get_system_commands(app.screen)]
            assert "Host screen" in titles and "VIFs screen" in titles
            assert any(t.startswith("Edit (enter)") for t in titles)
            assert any(t.startswith("Verify limits (v)") for t in titles)
            await pilot.press("ctrl+p")
            await pilot.press(*"verify")
            assert await wait_until(pilot, lambda: "Verify limits" in screen_text(app))
            await pilot.press("escape")
    finally:
        app.backend.close()


async def test_no_color_is_monochrome(lab, monkeypatch) -> None:
    monkeypatch.setenv("NO_COLOR", "1")
    app = HvnetApp(api.connect(build_host()))
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            assert app.no_color
            await pilot.press("2")
            assert await wait_until(pilot, lambda: bool(app.screen.query(VifTable)))
            table = app.screen.query_one(VifTable)
            assert await wait_until(pilot, lambda: table.row_count == 3)
            # every line of the screen goes through the monochrome filter: no hues, only greys
            from textual.filter import Monochrome, NoColor

            assert any(isinstance(f, (Monochrome, NoColor)) for f in app.get_line_filters())
            strip = app.screen._compositor.render_strips()[3]
            for flt in app.get_line_filters():
                strip = strip.apply_filter(flt, app.screen.styles.background)
            for seg in strip:
                for c in (seg.style.color, seg.style.bgcolor) if seg.style else ():
                    if c is not None and c.triplet is not None:
                        r, g, b = c.triplet
                        assert r == g == b, seg
    finally:
        app.backend.close()


async def _settled_vifs(pilot, app: HvnetApp) -> VifTable:
    await pilot.press("2")
    assert await wait_until(pilot, lambda: bool(app.screen.query(VifTable)))
    table = app.screen.query_one(VifTable)
    assert await wait_until(pilot, lambda: table.row_count == 3 and str(table.get_cell("vif1.0", "RX")) != "-", 5)
    return table


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_snapshots(lab, size) -> None:
    app = HvnetApp(api.connect(build_host()), start="host")
    extra = (str(lab.run_dir),)
    try:
        async with app.run_test(size=size) as pilot:
            assert await wait_until(pilot, lambda: "cpu0" in screen_text(app), 5.0)
            await assert_snapshot(pilot, app, "host", extra)
            table = await _settled_vifs(pilot, app)
            await assert_snapshot(pilot, app, "vifs", extra)
            table.move_cursor(row=[k.value for k in table.rows].index("vif3.0"))
            await pilot.press("enter")
            assert await wait_until(pilot, lambda: isinstance(app.screen, EditVifDialog))
            assert await wait_until(pilot, lambda: app.screen.state is not None)
            app.screen.query_one("#tag").value = "9999"
            assert await wait_until(pilot, lambda: "✗ Tag" in screen_text(app))
            await assert_snapshot(pilot, app, "edit-vif", extra)
    finally:
        app.backend.close()


async def test_host_screen_shows_a_bridges_sflow_and_ipfix(lab) -> None:
    from tests.conftest import run_hvnet

    res = run_hvnet("sflow", "set", "xenbr0", "--target", "192.0.2.9:6343", "--sampling", "64")
    assert res.returncode == 0, res.stdout + res.stderr
    assert run_hvnet("ipfix", "set", "xenbr0", "--target", "192.0.2.9:4739", "--cache-max-flows", "0").returncode == 0
    app = HvnetApp(api.connect(build_host()), start="host")
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            assert await wait_until(pilot, lambda: "sFlow to 192.0.2.9:6343 1-in-64" in screen_text(app), 5.0)
            assert "IPFIX to 192.0.2.9:4739 1-in-400 no flow cache" in screen_text(app)
    finally:
        app.backend.close()
        lab.switch.vsctl("clear", "bridge", "xenbr0", "sflow", "ipfix")
