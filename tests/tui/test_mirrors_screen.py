"""The Mirrors screen against the real lab: add through the dialog, refusals, outside changes, delete.

Every test starts and ends with no mirror on xenbr0 (the ``clean`` fixture),
so a failing test does not leave a mirror copying traffic for the next one.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import pytest
from textual.pilot import Pilot
from textual.widgets import DataTable, Select

from appliance.frontdoor.hosts import build_host
from appliance.lab import Lab
from appliance.switch import api
from tests.conftest import run_hvnet
from tests.tui.harness import SIZES, assert_snapshot, screen_text, wait_until
from tui.app import HvnetApp
from tui.backend.mirrors import MirrorPacketRates, rate_text
from tui.dialogs.confirm import ConfirmDialog
from tui.dialogs.mirror import MirrorDialog
from tui.screens.mirrors import MirrorsScreen

BRIDGE = "xenbr0"


def clear_mirrors(lab: Lab) -> None:
    lab.switch.vsctl("--", "clear", "Bridge", BRIDGE, "mirrors")


def mirror_names(lab: Lab) -> list[str]:
    out = lab.switch.vsctl("--bare", "--columns=name", "list", "Mirror")
    return sorted(line.strip() for line in out.splitlines() if line.strip())


@pytest.fixture()
def clean(lab: Lab) -> Iterator[Lab]:
    clear_mirrors(lab)
    try:
        yield lab
    finally:
        clear_mirrors(lab)


@asynccontextmanager
async def mirrors_app(size: tuple[int, int] = (80, 24)) -> AsyncIterator[tuple[HvnetApp, Pilot]]:
    conn = api.connect(build_host())
    app = HvnetApp(conn, start="mirrors")
    try:
        async with app.run_test(size=size) as pilot:
            assert await wait_until(pilot, lambda: isinstance(app.screen, MirrorsScreen) and app.screen.loaded)
            yield app, pilot
    finally:
        conn.close()


def _table(app: HvnetApp) -> DataTable:
    screen = next(s for s in app.screen_stack if isinstance(s, MirrorsScreen))
    return screen.query_one("#mirrors", DataTable)


def row_keys(app: HvnetApp) -> list[str]:
    return [k.value for k in _table(app).rows]


async def open_dialog(app: HvnetApp, pilot: Pilot) -> MirrorDialog:
    await pilot.press("a")
    assert await wait_until(pilot, lambda: isinstance(app.screen, MirrorDialog) and app.screen.choices is not None)
    return app.screen


async def choose(pilot: Pilot, select: Select, text: str) -> None:
    """Pick an option of a Select with the keyboard: open it, type to search, Enter."""
    select.focus()
    await pilot.press("enter")
    await pilot.press(*text)
    await pilot.press("enter")
    await pilot.pause()


async def test_add_through_dialog_refused_then_applied(clean: Lab) -> None:
    lab = clean
    async with mirrors_app() as (app, pilot):
        dialog = await open_dialog(app, pilot)
        await pilot.press(*"span1")  # the name field has the focus
        await pilot.press("tab", "space")  # sources: the first port is vif1.0 (VM1)
        assert dialog.form().sources == ("vif1.0",)
        await choose(pilot, dialog.query_one("#output-port", Select), "vif3")
        assert dialog.form().output_value == "vif3.0"
        assert dialog.rule is not None, screen_text(app)

        # VM3's VIF as output is an isolation exception: refused, nothing applied
        await pilot.press("f5")
        assert await wait_until(pilot, lambda: "nothing was applied" in screen_text(app), 10), screen_text(app)
        assert "isolation exception" in screen_text(app)
        assert dialog.planned is None
        await pilot.press("ctrl+s")  # no plan: Apply does nothing
        await pilot.pause(0.3)
        assert mirror_names(lab) == []

        # tick the box: the plan shows before -> after; Apply makes it
        await pilot.click("#allow")
        assert dialog.form().allow_isolation_exception
        await pilot.press("f5")
        assert await wait_until(pilot, lambda: dialog.planned is not None, 10), screen_text(app)
        text = screen_text(app)
        assert "mirror span1 on xenbr0: absent → src vif1.0 dst vif1.0 -> port vif3.0" in text, text
        assert mirror_names(lab) == []  # planning changes nothing
        await pilot.press("ctrl+s")
        assert await wait_until(pilot, lambda: isinstance(app.screen, MirrorsScreen), 15), screen_text(app)
        assert mirror_names(lab) == ["span1"]
        out_port = lab.switch.vsctl("get", "Mirror", "span1", "output_port")
        assert lab.switch.vsctl("get", "Port", out_port.strip(), "name").strip() == "vif3.0"
        assert await wait_until(pilot, lambda: f"{BRIDGE}/span1" in row_keys(app), 5)
        assert "applied 1 change" in screen_text(app)

        # the same name again is refused in the form, as the CLI refuses it
        dialog = await open_dialog(app, pilot)
        await pilot.press(*"span1")
        assert await wait_until(pilot, lambda: "already exists" in dialog.error_text("name"))
        assert "✗ mirror span1 already exists on xenbr0" in screen_text(app)


async def test_invalid_input_shows_errors_and_changes_nothing(clean: Lab) -> None:
    lab = clean
    async with mirrors_app() as (app, pilot):
        dialog = await open_dialog(app, pilot)
        # empty name, bad VLAN list, no output yet
        dialog.query_one("#vlans").focus()
        await pilot.press(*"10,,x")
        assert await wait_until(pilot, lambda: "VLAN list" in dialog.error_text("vlans"))
        assert dialog.error_text("name") == ""  # not touched yet: a fresh field is not marked
        text = screen_text(app)
        assert "✗ empty element in VLAN list" in text, text
        assert dialog.rule is None
        await pilot.press("f5")  # Plan names every bad field, and plans nothing
        assert await wait_until(pilot, lambda: "nothing was planned" in screen_text(app))
        assert "non-empty" in dialog.error_text("name")
        assert "✗ mirror names are non-empty" in screen_text(app)
        assert dialog.planned is None
        await pilot.press("ctrl+s")
        await pilot.pause(0.3)

        # a bad RSPAN VLAN and a bad tunnel key are refused in the CLI's words
        await choose(pilot, dialog.query_one("#output-kind", Select), "RSPAN")
        dialog.query_one("#output-value").focus()
        await pilot.press(*"5000")
        assert await wait_until(pilot, lambda: "outside" in dialog.error_text("output")), screen_text(app)
        await pilot.press("escape")
        assert await wait_until(pilot, lambda: isinstance(app.screen, MirrorsScreen))
    assert mirror_names(lab) == []


async def test_outside_mirrors_appear_and_delete_through_confirm(clean: Lab) -> None:
    lab = clean
    async with mirrors_app() as (app, pilot):
        res = await asyncio.to_thread(
            run_hvnet, "mirror", "add", "cli1", "--bridge", BRIDGE, "--vlan", "1", "--output-vlan", "999"
        )
        assert res.returncode == 0, res.stdout + res.stderr
        await asyncio.to_thread(
            lab.switch.vsctl,
            "--", "--id=@src", "get", "Port", "vif2.0",
            "--", "--id=@m", "create", "Mirror", "name=ext1", "select-src-port=@src", "output-vlan=998",
            "--", "add", "Bridge", BRIDGE, "mirrors", "@m",
        )  # fmt: skip
        want = [f"{BRIDGE}/cli1", f"{BRIDGE}/ext1"]
        assert await wait_until(pilot, lambda: row_keys(app) == want, 5), row_keys(app)
        t = _table(app)
        assert [str(c) for c in t.get_row(f"{BRIDGE}/cli1")[:5]] == [
            BRIDGE, "cli1", "hvnet", "all ports vlans 1", "RSPAN VLAN 999"
        ]  # fmt: skip
        assert [str(c) for c in t.get_row(f"{BRIDGE}/ext1")[:5]] == [
            BRIDGE, "ext1", "other", "src vif2.0", "RSPAN VLAN 998"
        ]  # fmt: skip

        # No keeps it
        t.move_cursor(row=0)
        await pilot.press("d")
        assert await wait_until(pilot, lambda: isinstance(app.screen, ConfirmDialog))
        assert "Delete mirror cli1 on bridge xenbr0?" in screen_text(app)
        await pilot.press("n")
        assert await wait_until(pilot, lambda: isinstance(app.screen, MirrorsScreen))
        assert mirror_names(lab) == ["cli1", "ext1"]

        # Yes deletes it, in OVSDB
        await pilot.press("d")
        assert await wait_until(pilot, lambda: isinstance(app.screen, ConfirmDialog))
        await pilot.press("y")
        assert await wait_until(pilot, lambda: row_keys(app) == [f"{BRIDGE}/ext1"], 10), screen_text(app)
        assert mirror_names(lab) == ["ext1"]

        # another tool's mirror can be deleted too (with the mouse this time)
        await pilot.press("d")
        assert await wait_until(pilot, lambda: isinstance(app.screen, ConfirmDialog))
        assert "not made by hvnet" in screen_text(app)
        await pilot.click("#yes")
        assert await wait_until(pilot, lambda: row_keys(app) == [], 10), screen_text(app)
        assert mirror_names(lab) == []


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_snapshots(clean: Lab, size: tuple[int, int]) -> None:
    """The screen with one idle mirror (counters written, no traffic on VLAN 4000), and the empty dialog."""
    res = await asyncio.to_thread(
        run_hvnet, "mirror", "add", "quiet", "--bridge", BRIDGE, "--vlan", "4000", "--output-vlan", "999"
    )
    assert res.returncode == 0, res.stdout + res.stderr
    async with mirrors_app(size) as (app, pilot):
        screen = app.screen
        assert isinstance(screen, MirrorsScreen)
        # OVS writes mirror statistics every few seconds: wait for them so the row is stable
        assert await wait_until(pilot, lambda: any(r.tx_packets is not None for r in screen.rows.values()), 15), (
            screen_text(app)
        )
        await pilot.pause(0.2)
        await assert_snapshot(pilot, app, "mirrors")
        await open_dialog(app, pilot)
        await pilot.pause(0.2)
        await assert_snapshot(pilot, app, "mirror-dialog")


def test_rate_is_measured_between_counter_changes() -> None:
    """OVS rewrites the counter every few seconds: equal reads are "not measured", not 0/s."""
    meter = MirrorPacketRates(stale_s=12.0)
    assert meter.update("b/m", 100, now=0.0) is None  # first sight
    assert meter.update("b/m", 100, now=2.0) is None  # OVS has not written it again yet
    assert meter.update("b/m", 600, now=5.0) == pytest.approx(100.0)  # 500 packets in 5 s
    assert meter.update("b/m", 600, now=7.0) == pytest.approx(100.0)  # last measurement stands
    assert meter.update("b/m", 600, now=18.0) == 0.0  # unchanged for longer than OVS's interval: idle
    assert meter.update("b/m", 10, now=20.0) is None  # recreated (counter went back): start over
    assert meter.update("b/m", None, now=22.0) is None  # no statistics
    assert rate_text(None) == "-" and rate_text(1500.0) == "1.5 kpkt/s"


async def test_a_flow_tap_is_listed_beside_the_mirrors_and_deleted_from_the_screen(clean: Lab) -> None:
    lab = clean
    res = run_hvnet("tap", "add", "t1", "--bridge", BRIDGE, "--vif", "vif1.0", "--protocol", "icmp",
                    "--output-port", "vif3.0", "--allow-isolation-exception")  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    try:
        async with mirrors_app(size=(160, 30)) as (app, pilot):
            assert await wait_until(pilot, lambda: row_keys(app) == [f"{BRIDGE}/tap:t1"], 10), screen_text(app)
            text = screen_text(app)
            assert "hvnet TAP" in text and "1 TAP" in text and "protocol=icmp" in text, text
            _table(app).move_cursor(row=0)
            await pilot.press("d")
            assert await wait_until(pilot, lambda: isinstance(app.screen, ConfirmDialog))
            assert "Delete TAP t1 on bridge xenbr0?" in screen_text(app)
            await pilot.press("y")
            assert await wait_until(pilot, lambda: row_keys(app) == [], 10), screen_text(app)
        assert "hvnet-tap-t1" not in lab.switch.vsctl("get", "bridge", BRIDGE, "external_ids")
    finally:
        run_hvnet("tap", "del", "t1")
