"""The console adds flow TAPs (Mirrors screen, ``t``) and runs captures (Captures screen, ``c``) on the real lab.

A TAP added through the dialog is in OVS (its record on the bridge, its flows)
and counts the pings it copied in ``hvnet status``; a refused one changes
nothing and its refusal is the service's text, shown literally.  A capture
started from the Captures screen counts pings live and stops with its
completeness; a refused one starts nothing.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import time
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import pytest
from textual.pilot import Pilot
from textual.widgets import Checkbox, Input, Select

from appliance.frontdoor.hosts import build_host
from appliance.lab import Lab
from appliance.switch import api
from tests.conftest import run_hvnet
from tests.lab.policy_helpers import ofctl
from tests.tui.harness import screen_text, wait_until
from tui.app import HvnetApp
from tui.dialogs.capture import CaptureDialog
from tui.dialogs.tap import TapDialog
from tui.screens.captures import CapturesScreen
from tui.screens.mirrors import MirrorsScreen

BRIDGE = "xenbr0"


def tap_records(lab: Lab) -> str:
    return lab.switch.vsctl("get", "Bridge", BRIDGE, "external_ids")


def ping(lab: Lab, count: int) -> None:
    argv = ["ip", "netns", "exec", lab.ns_of("VM1"), "ping", "-q", "-c", str(count), "-i", "0.01", "192.168.0.151"]
    subprocess.run(argv, check=True, capture_output=True, timeout=60)


@pytest.fixture()
def pcap_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """HVNET_PCAP_DIR for one test; no capture process outlives it (killed by pid, and the test fails)."""
    monkeypatch.setenv("HVNET_PCAP_DIR", str(tmp_path / "captures"))
    try:
        yield tmp_path / "captures"
    finally:
        left = []
        for entry in os.listdir("/proc"):
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
                state = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()[0]
            except (OSError, IndexError):
                continue
            if entry.isdigit() and str(tmp_path) in cmdline and state != "Z" and int(entry) != os.getpid():
                left.append(int(entry))
                os.kill(int(entry), signal.SIGKILL)
        assert not left, f"capture processes left running: {left}"


@asynccontextmanager
async def console(size: tuple[int, int] = (80, 24)) -> AsyncIterator[tuple[HvnetApp, Pilot]]:
    conn = api.connect(build_host())
    app = HvnetApp(conn, start="mirrors")
    try:
        async with app.run_test(size=size) as pilot:
            assert await wait_until(pilot, lambda: isinstance(app.screen, MirrorsScreen) and app.screen.loaded)
            yield app, pilot
    finally:
        conn.close()


def fill(dialog, **values: str) -> None:
    for widget_id, value in values.items():
        dialog.query_one(f"#{widget_id}", Input).value = value


async def test_add_tap_refused_then_applied_and_counted(lab: Lab) -> None:
    try:
        async with console() as (app, pilot):
            await pilot.press("t")
            assert await wait_until(pilot, lambda: isinstance(app.screen, TapDialog) and app.screen.bridges)
            dialog = app.screen
            await pilot.press(*"t2")  # the name field has the focus
            # an L4 port without a protocol, and markup in a MAC: the service's words, literally
            fill(dialog, vifs="vif1.0", **{"dst-port": "80", "src-mac": "[b]x[/b]", "output-value": "vif3.0"})
            await pilot.press("f5")
            assert await wait_until(pilot, lambda: "nothing was applied" in dialog.message_text())
            assert "✗ refused: match.src_mac: " in dialog.message_text() and "[b]x[/b]" in screen_text(app)
            fill(dialog, **{"src-mac": ""})
            await pilot.press("f5")
            assert await wait_until(pilot, lambda: "dst_port needs protocol tcp or udp" in dialog.message_text())
            # VM3's VIF as output is an isolation exception: refused by the planner, nothing applied
            fill(dialog, **{"dst-port": "", "protocol": "icmp"})
            await pilot.press("f5")
            assert await wait_until(pilot, lambda: "isolation exception" in dialog.message_text(), 10), (
                dialog.message_text()
            )
            assert dialog.planned is None and "hvnet-tap-t2" not in tap_records(lab)
            await pilot.press("ctrl+s")  # no plan: nothing to apply
            await pilot.pause(0.2)
            assert "hvnet-tap-t2" not in tap_records(lab)

            dialog.query_one("#allow", Checkbox).value = True
            await pilot.press("f5")
            assert await wait_until(pilot, lambda: dialog.planned is not None, 10), dialog.message_text()
            assert "hvnet-tap-t2" not in tap_records(lab)  # planning changes nothing
            await pilot.press("ctrl+s")
            assert await wait_until(pilot, lambda: isinstance(app.screen, MirrorsScreen), 15), screen_text(app)
            assert "hvnet-tap-t2" in tap_records(lab)
            flows = await asyncio.to_thread(ofctl, lab, "dump-flows", opts=("--no-stats",))
            assert "table=10" in flows and "icmp" in flows, flows  # the TAP's own table (see pipeline.py)
            keys = lambda: [k.value for k in app.screen.query_one("#mirrors").rows]  # noqa: E731
            assert await wait_until(pilot, lambda: f"{BRIDGE}/tap:t2" in keys(), 5), screen_text(app)
            assert "TAP t2 on xenbr0: ✓ applied" in screen_text(app)
            await pilot.press("1")  # the Host screen lists it under its bridge with what it copied
            assert await wait_until(pilot, lambda: "TAP t2: protocol=icmp" in screen_text(app), 10), screen_text(app)

        await asyncio.to_thread(ping, lab, 5)
        # the switch credits datapath hits to its OpenFlow flows when it revalidates them (about every 0.5 s)
        deadline = time.monotonic() + 10
        while True:
            res = await asyncio.to_thread(run_hvnet, "status", "--json")
            assert res.returncode == 0, res.stderr
            tap = {t["name"]: t for t in json.loads(res.stdout)["taps"]}["t2"]
            if tap["packets"] >= 10 or time.monotonic() > deadline:
                break
            await asyncio.sleep(0.5)
        assert tap["packets"] >= 10 and tap["bytes"] >= 10 * 98, tap  # VM1's 5 requests and the 5 replies to it
        text = (await asyncio.to_thread(run_hvnet, "status")).stdout
        assert "tap t2 on xenbr0: protocol=icmp both of vif1.0 -> port vif3.0 (flows) (copied" in text, text
    finally:
        run_hvnet("tap", "del", "t2")


async def test_capture_started_counted_live_and_stopped(lab: Lab, pcap_dir: Path) -> None:
    async with console() as (app, pilot):
        await pilot.press("c")
        assert await wait_until(pilot, lambda: isinstance(app.screen, CapturesScreen) and app.screen.loaded)
        screen = app.screen

        # a filter tcpdump rejects: its message, nothing started
        await pilot.press("s")
        assert await wait_until(pilot, lambda: isinstance(app.screen, CaptureDialog) and app.screen.loaded)
        dialog = app.screen
        port = dialog.query_one("#port", Select)
        port.value = "vif2.0"
        fill(dialog, name="c1", bpf="icmp and [nonsense", count="100000")
        await pilot.press("ctrl+s")
        assert await wait_until(pilot, lambda: "nothing was started" in dialog.message_text(), 10)
        assert "tcpdump rejects the filter 'icmp and [nonsense'" in dialog.message_text()
        assert not (pcap_dir / "c1").exists()

        fill(dialog, bpf="icmp")
        await pilot.press("ctrl+s")
        assert await wait_until(pilot, lambda: app.screen is screen, 20), screen_text(app)
        assert await wait_until(pilot, lambda: "c1" in screen.rows and screen.rows["c1"].live, 5)
        await asyncio.to_thread(ping, lab, 20)
        assert await wait_until(pilot, lambda: (screen.rows["c1"].packets or 0) >= 40, 10), screen_text(app)
        assert "port:vif2.0" in screen_text(app)

        screen.query_one("#captures").move_cursor(row=0)
        await pilot.press("x")
        assert await wait_until(pilot, lambda: screen.rows.get("c1") and not screen.rows["c1"].live, 20)
        row = screen.rows["c1"]
        assert row.state == "stopped" and row.packets == 40, row  # 20 requests + 20 replies
        assert "capture c1: stopped" in screen_text(app)
        assert row.complete == "unknown"  # a filter: the switch's counters cannot single out its subset
        await pilot.press("escape")
        assert await wait_until(pilot, lambda: isinstance(app.screen, MirrorsScreen))
    res = run_hvnet("capture", "list", "--json", env={"HVNET_PCAP_DIR": str(pcap_dir)})
    assert [c["state"] for c in json.loads(res.stdout)["captures"]] == ["stopped"]
