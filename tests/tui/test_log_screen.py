"""The Log screen against the real lab: a CLI change shows in the audit view, notes in the messages."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import pytest
from textual.widgets import DataTable

from appliance.frontdoor.hosts import build_host
from appliance.switch import api
from tests.conftest import run_hvnet
from tests.tui.harness import SIZES, assert_snapshot, screen_text, wait_until
from tui.app import HvnetApp
from tui.screens.log import LogScreen


def rows(table: DataTable) -> list[list[str]]:
    return [[str(c) for c in table.get_row_at(i)] for i in range(table.row_count)]


def has_row(table: DataTable, *words: str) -> bool:
    return any(all(any(w in c for c in row) for w in words) for row in rows(table))


def detail_text(screen) -> str:
    return str(screen.query_one("#audit-detail").render())


async def test_cli_change_shows_in_audit_and_notes_in_messages(lab) -> None:
    conn = api.connect(build_host())
    app = HvnetApp(conn, start="log")
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            screen = app.screen
            assert isinstance(screen, LogScreen)
            audit = screen.query_one("#audit", DataTable)
            messages = screen.query_one("#messages", DataTable)

            done = await asyncio.to_thread(run_hvnet, "vif", "set", "vif3.0", "--tag", "7")
            assert done.returncode == 0, done.stderr
            # the replica change triggers a re-read; the newest entry is at the bottom
            assert await wait_until(pilot, lambda: has_row(audit, "vif3.0 vlan", "access tag 7"), 5.0), rows(audit)
            newest = rows(audit)[-1]
            assert "vif set vif3.0" in newest[2]
            assert newest[3].startswith("applied")
            assert "vif3.0 vlan: access tag 2 -> access tag 7" in newest[4]
            assert audit.cursor_row == audit.row_count - 1
            # the detail follows the highlighted row on the next message
            assert await wait_until(pilot, lambda: "hvnet vif set vif3.0 --tag 7" in detail_text(screen), 5.0)
            assert "applied" in detail_text(screen)

            done = await asyncio.to_thread(run_hvnet, "vif", "set", "vif3.0", "--tag", "2")
            assert done.returncode == 0, done.stderr
            assert await wait_until(pilot, lambda: "access tag 7 -> access tag 2" in rows(audit)[-1][4], 5.0)

            # hvnet's own messages, live (here from the UI thread, next from another thread)
            app.backend.note("note from the console test")
            assert await wait_until(pilot, lambda: has_row(messages, "note from the console test"))
            await asyncio.to_thread(app.backend.note, "note from a worker thread")
            assert await wait_until(pilot, lambda: has_row(messages, "note from a worker thread"))
            assert messages.row_count == len([x for x in app.backend.messages])  # no line twice

            # filter as you type narrows both views; escape brings everything back
            await pilot.press("slash", *"worker")
            assert await wait_until(pilot, lambda: messages.row_count == 1)
            assert audit.row_count == 0
            await pilot.press("escape")
            assert await wait_until(pilot, lambda: messages.row_count >= 2 and audit.row_count >= 2)

            # one view at a time
            await pilot.press("v")
            assert screen.query_one("#audit-pane").display and not screen.query_one("#messages-pane").display
            await pilot.press("v")
            assert not screen.query_one("#audit-pane").display and screen.query_one("#messages-pane").display
            assert "note from a worker thread" in screen_text(app)
            await pilot.press("v")
            assert screen.query_one("#audit-pane").display and screen.query_one("#messages-pane").display
    finally:
        lab.switch.vsctl("set", "Port", "vif3.0", "tag=2")
        conn.close()


AUDIT = [
    {
        "time": "2024-05-01T10:00:00.000+00:00",
        "user": "ops",
        "command": "hvnet vif set vif3.0 --tag 7",
        "target": "x",
        "before": [{"kind": "vlan", "bridge": "xenbr0", "name": "vif3.0", "value": "access tag 2"}],
        "after": [{"kind": "vlan", "bridge": "xenbr0", "name": "vif3.0", "value": "access tag 7"}],
        "result": "applied",
    },
    {
        "time": "2024-05-01T10:05:00.000+00:00",
        "user": "ops",
        "command": "hvnet apply policies/tenant.yaml --no-commit --confirm-within 120",
        "target": "x",
        "before": [
            {"kind": "ingress", "bridge": "xenbr0", "name": "vif1.0", "value": "none"},
            {"kind": "mirror", "bridge": "xenbr0", "name": "span1", "value": "absent"},
        ],
        "after": [
            {"kind": "ingress", "bridge": "xenbr0", "name": "vif1.0", "value": "10 Mbit/s burst 1 Mbit (policing)"},
            {"kind": "mirror", "bridge": "xenbr0", "name": "span1", "value": "src vif1.0 -> port vif2.0"},
        ],
        "result": "rolled back: meters failed: timeout",
    },
]


@pytest.mark.parametrize("size", SIZES, ids=lambda s: f"{s[0]}x{s[1]}")
async def test_log_snapshots(lab, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, size: tuple[int, int]) -> None:
    audit_log = tmp_path / "audit.jsonl"
    audit_log.write_text("".join(json.dumps(e) + "\n" for e in AUDIT))
    monkeypatch.setenv("HVNET_AUDIT_LOG", str(audit_log))  # fixed entries: the snapshot does not drift
    conn = api.connect(build_host())
    app = HvnetApp(conn, start="log")
    try:
        async with app.run_test(size=size) as pilot:
            screen = app.screen
            app.backend.note("isolation check seed-three-vm: PASS: isolation as expected in 4.1 s")
            assert await wait_until(pilot, lambda: screen.query_one("#audit", DataTable).row_count == 2)
            assert await wait_until(pilot, lambda: screen.query_one("#messages", DataTable).row_count >= 1)
            await pilot.pause(0.2)
            await assert_snapshot(pilot, app, "log")
    finally:
        conn.close()
