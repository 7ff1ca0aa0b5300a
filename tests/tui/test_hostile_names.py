"""Text from VMs, operators and files is shown literally on every screen, whatever it holds.

A mirror named ``x[/]`` used to close the Log and VIFs screens with a
MarkupError and break the Mirrors table; VM names and audit entries took the
same path.  Here the lab's switch is given hostile names (markup, control
characters, a 10,000-character name, right-to-left marks) and every screen is
visited: nothing may crash, the layout stays inside the terminal, and the
names appear as written.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from appliance.frontdoor.hosts import build_host
from appliance.lab import Lab
from appliance.switch import api
from tests.tui.harness import screen_text, wait_until
from tui.app import HvnetApp

MARKUP = "x[/]"
BOLD = "[b]VM[/b]"
RTL = "\u202eevil\u202c"
LONG = "L" * 10_000


@pytest.fixture()
def hostile(lab: Lab) -> Iterator[Lab]:
    """A mirror whose name is markup, and VIF identities that are markup, RTL and very long."""
    vs = lab.switch.vsctl
    vs("--", "--id=@p", "get", "Port", "vif1.0", "--", "--id=@o", "get", "Port", "vif3.0",
       "--", "--id=@m", "create", "Mirror", f'name="{MARKUP}"', "select-src-port=@p", "output-port=@o",
       "--", "add", "Bridge", "xenbr0", "mirrors", "@m")  # fmt: skip
    old = {i: vs("get", "Interface", i, "external_ids") for i in ("vif1.0", "vif2.0")}
    vs("set", "Interface", "vif1.0", f'external_ids:xs-vm-uuid="{BOLD}"')
    vs("set", "Interface", "vif2.0", f'external_ids:attached-mac="{RTL}{LONG}\\n\\t"')
    try:
        yield lab
    finally:
        vs("--", "clear", "Bridge", "xenbr0", "mirrors")
        for i, ids in old.items():
            vs("set", "Interface", i, f"external_ids={ids.strip()}")


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_every_screen_shows_hostile_names_literally(hostile: Lab, size: tuple[int, int]) -> None:
    conn = api.connect(build_host())
    app = HvnetApp(conn, start="vifs")
    try:
        async with app.run_test(size=size) as pilot:
            assert await wait_until(pilot, lambda: BOLD[:8] in screen_text(app), 10), screen_text(
                app
            )  # cut to the column
            for key in ("1", "3", "4", "5", "6", "2"):  # every screen, back to the VIFs
                await pilot.press(key)
                await pilot.pause(0.5)
                text = screen_text(app)
                assert all(len(line) <= size[0] for line in text.splitlines()), text
            await pilot.press("3")  # Mirrors
            assert await wait_until(pilot, lambda: MARKUP in screen_text(app), 10), screen_text(app)
    finally:
        conn.close()
    assert app.return_code in (None, 0)


ESC_VM = "vm\x1b[2J\x1b]0;owned\x07"  # clears the screen and sets the window title when written raw
AUDITED = "hvnet mirror add x[/] --bridge xenbr0 --src vif1.0 --output-port vif3.0"


async def test_the_log_screen_shows_markup_and_control_characters_of_the_audit_log_literally(lab: Lab) -> None:
    """The audit log's command column was read as markup: ``x[/]`` closed the console with a MarkupError."""
    vs = lab.switch.vsctl
    old = vs("get", "Interface", "vif2.0", "external_ids")
    vs("set", "Interface", "vif2.0", 'external_ids:xs-vm-uuid="vm\\u001b[2J\\u001b]0;owned\\u0007"')
    conn = api.connect(build_host())
    app = HvnetApp(conn, start="log")
    try:
        async with app.run_test(size=(120, 40)) as pilot:
            await asyncio.to_thread(lambda: app.backend.engine.journal.audit(AUDITED, [], "applied \x1b[31mred"))
            await asyncio.to_thread(lambda: app.backend.engine.journal.audit(f"hvnet vif set {ESC_VM}", [], "ok"))
            app.screen.action_refresh()
            assert await wait_until(pilot, lambda: "vif set vm\\x1b[2J" in screen_text(app), 10), screen_text(app)
            text = screen_text(app)
            assert "hvnet mirror add x[/]" in text and "applied \\x1b[31mred" in text, text
            await pilot.press("2")  # the VIFs: the VM's name as escapes, not obeyed
            assert await wait_until(pilot, lambda: "vm\\x1b[2J" in screen_text(app), 10), screen_text(app)
            assert "\x1b" not in screen_text(app) and "\x07" not in screen_text(app)
    finally:
        conn.close()
        vs("set", "Interface", "vif2.0", f"external_ids={old.strip()}")
    assert app.return_code in (None, 0)
