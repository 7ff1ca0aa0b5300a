"""Text from VMs, operators and files is shown literally on every screen, whatever it holds.

A mirror named ``x[/]`` used to close the Log and VIFs screens with a
MarkupError and break the Mirrors table; VM names and audit entries took the
same path.  Here the lab's switch is given hostile names (markup, control
characters, a 10,000-character name, right-to-left marks) and every screen is
visited: nothing may crash, the layout stays inside the terminal, and the
names appear as written.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from appliance import api
from appliance.frontdoor import build_host
from appliance.lab import Lab
from tui.app import HvnetApp

from .harness import screen_text, wait_until

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
