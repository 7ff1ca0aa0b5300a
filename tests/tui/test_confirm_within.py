"""Apply with automatic rollback from the Edit VIF dialog, against the real lab; ovs-vsctl is the witness.

An apply made with "roll back unless confirmed" stays only if the operator
keeps it (ctrl+o) within the window; otherwise the watcher process puts the
tag back.  The window is shortened to a few seconds here.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager

import pytest
from textual.pilot import Pilot
from textual.widgets import Checkbox, Input

from appliance.frontdoor.hosts import build_host
from appliance.lab import Lab
from appliance.switch import api
from tests.conftest import run_hvnet
from tests.tui.harness import screen_text, wait_until
from tui.app import HvnetApp
from tui.dialogs.edit_vif import EditVifDialog

PORT = "vif1.0"
WINDOW_S = 3.0


def tag_of(lab: Lab) -> str:
    return lab.switch.vsctl("get", "Port", PORT, "tag").strip()


@pytest.fixture()
def clean(lab: Lab) -> Iterator[Lab]:
    """VM1 on VLAN 1 before and after; a change left pending by a failed test is committed, then reset."""
    lab.switch.vsctl("set", "Port", PORT, "tag=1")
    try:
        yield lab
    finally:
        run_hvnet("commit")
        lab.switch.vsctl("set", "Port", PORT, "tag=1")


@asynccontextmanager
async def edit_dialog() -> AsyncIterator[tuple[HvnetApp, Pilot, EditVifDialog]]:
    app = HvnetApp(api.connect(build_host()))
    app.backend.confirm_within_s = WINDOW_S
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            app.push_screen(EditVifDialog(PORT))
            assert await wait_until(pilot, lambda: isinstance(app.screen, EditVifDialog) and app.screen.state)
            yield app, pilot, app.screen
    finally:
        app.backend.close()


async def apply_pending(app: HvnetApp, pilot: Pilot, dialog: EditVifDialog, tag: str) -> None:
    """Type the tag, tick "roll back unless confirmed", apply and confirm the apply."""
    dialog.query_one("#tag", Input).value = tag
    assert await wait_until(pilot, lambda: f"access tag 1 → access tag {tag}" in screen_text(app), 10)
    box = dialog.query_one("#auto-rollback", Checkbox)
    assert f"roll back in {WINDOW_S:g} s unless confirmed" in str(box.label)
    box.focus()
    await pilot.press("space")
    assert box.value
    await pilot.press("ctrl+s")
    assert await wait_until(pilot, lambda: "Apply these 1 change(s)" in screen_text(app))
    await pilot.press("ctrl+y")
    assert await wait_until(pilot, lambda: "✓ applied 1 change" in screen_text(app), 15), screen_text(app)
    assert await wait_until(pilot, lambda: app.pending is not None, 5)


async def test_not_confirmed_rolls_back(clean: Lab) -> None:
    async with edit_dialog() as (app, pilot, dialog):
        await apply_pending(app, pilot, dialog, "5")
        assert await asyncio.to_thread(tag_of, clean) == "5"
        assert "rolls back in" in screen_text(app), screen_text(app)
        assert not dialog.query_one("#keep").disabled and dialog.query_one("#keep").display

        # nobody keeps it: the watcher puts VLAN 1 back, and the console says so
        assert await wait_until(pilot, lambda: tag_of(clean) == "1", WINDOW_S + 15)
        assert await wait_until(pilot, lambda: app.pending is None, 20)
        assert await wait_until(pilot, lambda: "now: access tag 1" in screen_text(app), 5), screen_text(app)
        assert not dialog.query_one("#keep").display
    assert "nothing to commit" in run_hvnet("commit").stdout


async def test_kept_in_time_stays(clean: Lab) -> None:
    async with edit_dialog() as (app, pilot, dialog):
        await apply_pending(app, pilot, dialog, "6")
        await pilot.press("ctrl+o")
        assert await wait_until(pilot, lambda: app.pending is None, 5)
        assert await wait_until(pilot, lambda: not dialog.query_one("#keep").display, 5)
        await pilot.pause(WINDOW_S + 3)  # past the window: the watcher was stopped
        assert await asyncio.to_thread(tag_of, clean) == "6"
        assert "now: access tag 6" in screen_text(app), screen_text(app)
    assert "nothing to commit" in run_hvnet("commit").stdout
