"""The Isolation screen against the real lab: run the study's scenario, read cells, refuse bad files."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from appliance.frontdoor.hosts import build_host
from appliance.switch import api
from tests.tui.harness import SIZES, assert_snapshot, screen_text, wait_until
from tui.app import HvnetApp
from tui.screens.isolation import IsolationScreen
from tui.widgets.matrix import MatrixTable

ROOT = Path(__file__).resolve().parents[2]
SEED = ROOT / "vlan-tests" / "seed-three-vm.yaml"
GUESTS = ("VM1", "VM2", "VM3")
CHECK_TIMEOUT_S = 90.0


def tags(lab) -> str:
    return lab.switch.vsctl("--columns=name,tag,trunks,vlan_mode", "list", "Port")


def mirrors(lab) -> str:
    return lab.switch.vsctl("list", "Mirror")


def cell(table: MatrixTable, sender: str, listener: str) -> str:
    return str(table.get_cell(sender, listener))


def evidence_text(screen: IsolationScreen) -> str:
    return str(screen.query_one("#evidence").render())


async def type_path(pilot, path: str) -> None:
    """Replace the scenario path the way an operator does: focus, clear, type, enter."""
    await pilot.press("p", "ctrl+a", "ctrl+k")
    await pilot.press(*path)
    await pilot.press("enter")


async def test_seed_scenario_matrix_and_evidence(lab) -> None:
    conn = api.connect(build_host())
    app = HvnetApp(conn, start="isolation")
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            screen = app.screen
            assert isinstance(screen, IsolationScreen)
            before = tags(lab)
            await type_path(pilot, os.path.relpath(SEED))
            # the UI stays responsive and says the check is running
            assert await wait_until(pilot, lambda: screen.running and "running" in screen_text(app), 3.0)
            assert await wait_until(pilot, lambda: not screen.running, CHECK_TIMEOUT_S)
            text = screen_text(app)
            assert "PASS: isolation as expected" in text, text
            traffic = screen.query_one("#matrix-traffic", MatrixTable)
            trace = screen.query_one("#matrix-trace", MatrixTable)
            for table in (traffic, trace):
                assert table.row_count == 3
                assert cell(table, "VM1", "VM2") == "+ yes"
                assert cell(table, "VM2", "VM1") == "+ yes"
                for a, b in (("VM1", "VM3"), ("VM3", "VM1"), ("VM2", "VM3"), ("VM3", "VM2")):
                    assert cell(table, a, b) == "- no", (table.method, a, b)
                assert cell(table, "VM1", "VM1") == "·"
            # the cursor starts on VM1 -> VM2 (traffic): its evidence is the first frame and the pcap
            assert await wait_until(pilot, lambda: traffic.has_focus)  # focus() takes effect on the next message
            # the pane follows the focused table's highlighted cell on the next message: wait for traffic's
            assert await wait_until(pilot, lambda: "first frame" in evidence_text(screen))
            evidence = evidence_text(screen)
            assert "does VM2 hear VM1? observed yes, expected yes: as expected" in evidence
            assert "first frame" in evidence and "192.168.0.150" in evidence
            assert "pcap /" in evidence and ".pcap" in evidence
            # keyboard: down to VM2's row, right onto VM3 -> a "no" with its capture
            await pilot.press("down", "right")
            assert await wait_until(pilot, lambda: "VM3 hear VM2" in evidence_text(screen))
            evidence = evidence_text(screen)
            assert "does VM3 hear VM2? observed no, expected no: as expected" in evidence
            assert "positive control" in evidence
            # mouse: click the trace matrix's VM3 row, VM1 column
            corner = trace.ordered_columns[0].get_render_width(trace)
            await pilot.click(trace, offset=(corner + 2, 1 + 2))  # past the header and the rows VM1, VM2
            assert await wait_until(pilot, lambda: "trace:" in evidence_text(screen))
            evidence = evidence_text(screen)
            assert "trace: does VM1 hear VM3? observed no" in evidence, evidence
            assert "datapath actions" in evidence
            assert tags(lab) == before
    finally:
        conn.close()


async def test_invalid_scenario_shows_error_and_touches_nothing(lab, tmp_path: Path) -> None:
    topology = ROOT / "vlan-tests" / "topologies" / "seed-2010.yaml"
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        f"name: bad\ntopology: {topology}\nguests: [VM1, VM2, VM3]\nvlans:\n  VM3: {{tag: 5000}}\nexpect: derive\n"
    )
    conn = api.connect(build_host())
    app = HvnetApp(conn, start="isolation")
    before_tags, before_mirrors = tags(lab), mirrors(lab)
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            screen = app.screen
            await type_path(pilot, str(bad))
            assert await wait_until(pilot, lambda: not screen.running and "bad.yaml" in screen_text(app), 10.0)
            status = str(screen.query_one("#status").render())
            assert f"{bad}:5: vlans.VM3.tag:" in status, status
            assert screen.query_one("#status").has_class("error")
            assert not screen.query_one("#col-traffic").display
            assert not screen.query_one("#col-trace").display
        assert tags(lab) == before_tags
        assert mirrors(lab) == before_mirrors
    finally:
        conn.close()


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_isolation_snapshots(lab, size: tuple[int, int]) -> None:
    conn = api.connect(build_host())
    app = HvnetApp(conn, start="isolation")
    try:
        async with app.run_test(size=size) as pilot:
            screen = app.screen
            await pilot.press("m", "m", "m")  # both -> traffic -> trace -> both
            assert str(screen.query_one("#method").value) == "both"
            await pilot.press("r")
            assert await wait_until(pilot, lambda: screen.result is not None, CHECK_TIMEOUT_S)
            await pilot.pause(0.2)
            await assert_snapshot(pilot, app, "isolation")
    finally:
        conn.close()
