"""The console over many hosts: the Fleet screen, switching hosts, and ``hvnet --host NAME tui``.

Two lab hypervisors (namespaces with their own OVS and an sshd whose PATH has
no Python) with VIFs only each of them has, an inventory naming them and a
third host that accepts TCP but never speaks SSH (it fails by its connect
timeout, the slow way a dead host fails), and a private ovsdb-server as the
console machine's own switch (``local``).
"""

from __future__ import annotations

import os
import pty
import select
import socket
import struct
import subprocess
import sys
import termios
import time
from collections.abc import Iterator
from dataclasses import dataclass
from fcntl import ioctl
from pathlib import Path

import pytest

from appliance.frontdoor.hosts import build_host
from appliance.lab.sshhost import SshHost
from appliance.lab.switch import Switch
from appliance.services import inventory as inv_svc
from tests.conftest import ROOT
from tests.tui.harness import SIZES, assert_snapshot, screen_text, wait_until
from tui.app import HvnetApp
from tui.dialogs.edit_vif import EditVifDialog
from tui.dialogs.host_picker import HostPicker
from tui.screens.fleet import FleetScreen, FleetTable
from tui.screens.host import HostScreen
from tui.screens.isolation import IsolationScreen
from tui.screens.log import LogScreen
from tui.screens.suites import SuitesScreen
from tui.screens.vifs import VifsScreen
from tui.widgets.vif_table import VifTable

pytestmark = pytest.mark.skipif(not os.path.exists("/usr/sbin/sshd"), reason="openssh-server (make setup installs it)")

VIFS = {"ca1": ("vif51.0", "vif51.1"), "ca2": ("vif52.0", "vif52.1", "vif52.2")}
TIMEOUT = 5.0  # the console's --timeout: what the silent host costs (the others answer well within it)


@dataclass
class Fleet:
    hosts: dict[str, SshHost]
    local: Switch
    env: dict[str, str]
    ghost_port: int


def _add_vifs(host: SshHost, ports: tuple[str, ...]) -> None:
    cmds = ["--", "add-br", "xenbr0", "--", "set", "bridge", "xenbr0", "datapath_type=netdev"]
    for i, port in enumerate(ports):
        cmds += ["--", "add-port", "xenbr0", port, "--", "set", "interface", port, "type=internal",
                 f"external_ids:attached-mac=02:00:00:00:05:{i:02x}", "--", "set", "port", port, f"tag={10 + i}"]  # fmt: skip
    if host.name == "ca2":  # a mirror only ca2 has
        cmds += ["--", "--id=@p", "get", "Port", ports[0], "--", "--id=@o", "get", "Port", ports[-1], "--",
                 "--id=@m", "create", "Mirror", "name=m-ca2", "select-src-port=@p", "output-port=@o",
                 "--", "add", "Bridge", "xenbr0", "mirrors", "@m"]  # fmt: skip
    _vsctl(host, *cmds)


def _vsctl(host: SshHost, *args: str) -> str:
    return subprocess.run(["ovs-vsctl", f"--db={host.switch.remote}", *args], check=True, timeout=30,
                          capture_output=True, text=True).stdout.strip()  # fmt: skip


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Fleet]:
    base = tmp_path_factory.mktemp("fleet")
    hosts = {name: SshHost(name, base, index=50 + i) for i, name in enumerate(VIFS)}
    local = Switch(base / "local")
    silent = socket.socket()  # accepts connections (the kernel does) and never answers
    saved = dict(os.environ)
    try:
        silent.bind(("127.0.0.1", 0))
        silent.listen(8)
        local.start(vswitchd=False)
        for name, host in hosts.items():
            host.start()
            _add_vifs(host, VIFS[name])
        config = base / "ssh_config"  # both hosts by name, as an operator's ~/.ssh/config would
        config.write_text("".join(h.ssh_config.read_text() for h in hosts.values()))
        inventory = base / "hosts.yaml"
        inventory.write_text(
            "hosts:\n"
            + "".join(f"  - {{name: {n}, group: lab, ovs_rundir: {h.switch.run_dir}}}\n" for n, h in hosts.items())
            + f"  - {{name: ghost, address: 127.0.0.1, port: {silent.getsockname()[1]}, user: root}}\n"
        )
        env = {"HVNET_INVENTORY": str(inventory), "HVNET_SSH_CONFIG": str(config), "HVNET_DB": local.remote,
               "HVNET_STATE_DIR": str(base / "state"), "HVNET_AUDIT_LOG": str(base / "audit.jsonl"),
               "HVNET_LAB_DIR": str(base / "no-lab")}  # fmt: skip
        os.environ.update(env)
        yield Fleet(hosts, local, env, silent.getsockname()[1])
    finally:
        os.environ.clear()
        os.environ.update(saved)
        for host in hosts.values():
            host.stop()
        local.stop()
        silent.close()
    assert not any(Path(f"/run/netns/{h.netns}").exists() for h in hosts.values())


def _cells(app: HvnetApp, name: str) -> list[str]:
    table = app.screen.query_one(FleetTable)
    return [str(c) for c in table.get_row(name)]


def _vif_ports(app: HvnetApp) -> set[str]:
    tables = app.screen.query(VifTable) if isinstance(app.screen, VifsScreen) else []  # none until composed
    return {k.value for t in tables for k in t.rows}


async def test_fleet_lists_hosts_and_switches_every_screen(fleet: Fleet) -> None:
    host = build_host(ssh_host="ca1", timeout=TIMEOUT)
    app = HvnetApp(inv_svc.connect(host, timeout=TIMEOUT, sync=False), host, start="fleet", timeout=TIMEOUT,
                   name="ca1")  # fmt: skip
    async with app.run_test(size=(80, 24)) as pilot:
        assert await wait_until(pilot, lambda: isinstance(app.screen, FleetScreen))
        screen = app.screen
        assert app.sub_title.startswith("ca1 · ")
        titles = [c.title for c in app.get_system_commands(app.screen)]
        assert "Fleet screen" in titles and "Switch host (h)" in titles  # the palette lists both

        # both lab hosts up with their VIF counts, while the silent one is still being waited for
        def up(name: str) -> bool:
            return name in screen.rows and _cells(app, name)[3] == "yes"

        started = time.monotonic()
        assert await wait_until(pilot, lambda: up("ca1") and up("ca2") and up("local"), TIMEOUT)
        print(
            f"\nfleet: ca1, ca2 and local up in {time.monotonic() - started:.2f} s (the ghost bounded by {TIMEOUT} s)"
        )
        assert _cells(app, "ghost")[3] == "…"  # the UI showed the others without waiting for it
        assert [_cells(app, n)[5] for n in ("ca1", "ca2", "local")] == ["2", "3", "0"]
        assert _cells(app, "ca1")[0] == "● ca1" and _cells(app, "ca2")[0] == "  ca2"
        assert _cells(app, "ca1")[1:3] == ["lab", "kvm"]
        assert _cells(app, "ca1")[6:8] == ["-", "-"] or "drift" in screen.rows["ca1"]  # no drift/agent keys: "-"
        await pilot.press("down")  # the keyboard answers while the silent host is checked
        assert await wait_until(pilot, lambda: _cells(app, "ghost")[3] == "NO", TIMEOUT + 3)
        assert list(screen.rows)[-1] == "ghost" and "127.0.0.1" in _cells(app, "ghost")[8]
        assert "hosts, 3 up" in screen_text(app)
        table = screen.query_one(FleetTable)
        table.move_cursor(row=[k.value for k in table.rows].index("ghost"))  # its problem in full, under the table
        assert await wait_until(pilot, lambda: "ghost (root@127.0.0.1:" in screen_text(app))
        assert "down after" in screen_text(app)
        for size in SIZES:
            await pilot.resize_terminal(*size)
            await assert_snapshot(pilot, app, "fleet", (str(fleet.ghost_port),))

        # enter on ca2: the console switches, the VIFs screen shows ca2's VIFs only
        old = app.backend.host
        table.move_cursor(row=[k.value for k in table.rows].index("ca2"))
        started = time.monotonic()
        await pilot.press("enter")
        assert await wait_until(pilot, lambda: _vif_ports(app) == set(VIFS["ca2"]), TIMEOUT + 3), screen_text(app)
        print(f"switch ca1 -> ca2, enter to ca2's VIF table: {time.monotonic() - started:.2f} s")
        assert app.host_name == "ca2" and app.sub_title.startswith("ca2 · ")
        assert await wait_until(pilot, lambda: old.runner.session.closed, 5)  # the old SSH master is gone
        assert not old.runner.session.work_dir.exists()

        # the Host screen reads ca2's /proc over SSH: its ovs-vswitchd (by its pid file there), CPU, its agent
        await pilot.press("1")
        assert await wait_until(pilot, lambda: isinstance(app.screen, HostScreen))
        pid = fleet.hosts["ca2"].switch.pid("ovs-vswitchd")
        shown = (f"ovs-vswitchd pid {pid}: ", "% of one core", "cpu0")  # CPU shares from the second sample on
        assert await wait_until(pilot, lambda: all(t in screen_text(app) for t in shown), 8), screen_text(app)
        app.screen.query_one("#host").scroll_end(animate=False)
        assert await wait_until(pilot, lambda: "hvnet --host ca2 agent" in screen_text(app)), screen_text(app)
        # Mirrors: ca2's own
        await pilot.press("3")
        assert await wait_until(pilot, lambda: "m-ca2" in screen_text(app) and "1 mirror" in screen_text(app))

        # Suites and Isolation open on ca2 too (running them over SSH is their own business)
        await pilot.press("4")
        assert await wait_until(pilot, lambda: isinstance(app.screen, SuitesScreen))
        await pilot.press("5")
        assert await wait_until(pilot, lambda: isinstance(app.screen, IsolationScreen))
        await pilot.pause(0.5)

        # Edit VIF applies on ca2 (one atomic, verified apply over SSH)
        await pilot.press("2")
        assert await wait_until(pilot, lambda: _vif_ports(app) == set(VIFS["ca2"]))
        vifs = app.screen.query_one(VifTable)
        vifs.move_cursor(row=[k.value for k in vifs.rows].index("vif52.1"))
        await pilot.press("enter")
        assert await wait_until(pilot, lambda: isinstance(app.screen, EditVifDialog))
        assert await wait_until(pilot, lambda: app.screen.state is not None)
        app.select_host("local")  # refused while a dialog is open (it may be applying on ca2)
        await pilot.pause(0.2)
        assert app.host_name == "ca2" and app._switching is None and isinstance(app.screen, EditVifDialog)
        app.screen.query_one("#tag").value = "7"
        assert await wait_until(pilot, lambda: "access tag 11 → access tag 7" in screen_text(app)), screen_text(app)
        await pilot.press("ctrl+s", "ctrl+y")
        assert await wait_until(pilot, lambda: "✓ applied 1 change" in screen_text(app), 15), screen_text(app)
        assert _vsctl(fleet.hosts["ca2"], "get", "Port", "vif52.1", "tag") == "7"
        await pilot.press("escape")
        assert await wait_until(pilot, lambda: isinstance(app.screen, VifsScreen))

        # "roll back unless confirmed" on ca2: the watcher (an hvnet here, reaching ca2 over SSH) puts the tag
        # back; while the change waits, the console stays on ca2
        app.backend.confirm_within_s = 3.0
        vifs.move_cursor(row=[k.value for k in vifs.rows].index("vif52.2"))
        await pilot.press("enter")
        assert await wait_until(pilot, lambda: isinstance(app.screen, EditVifDialog) and app.screen.state)
        dialog = app.screen
        dialog.query_one("#tag").value = "8"
        assert await wait_until(pilot, lambda: "access tag 12 → access tag 8" in screen_text(app)), screen_text(app)
        dialog.query_one("#auto-rollback").focus()
        await pilot.press("space", "ctrl+s")
        assert await wait_until(pilot, lambda: "Apply these 1 change(s)" in screen_text(app))
        await pilot.press("ctrl+y")
        assert await wait_until(pilot, lambda: app.pending is not None, 15), screen_text(app)
        assert _vsctl(fleet.hosts["ca2"], "get", "Port", "vif52.2", "tag") == "8"
        await pilot.press("escape")
        assert await wait_until(pilot, lambda: isinstance(app.screen, VifsScreen))
        app.select_host("ca1")  # as the picker would
        await pilot.pause(0.2)
        assert app.host_name == "ca2" and app._switching is None
        assert await wait_until(pilot, lambda: _vsctl(fleet.hosts["ca2"], "get", "Port", "vif52.2", "tag") == "12", 20)
        assert await wait_until(pilot, lambda: app.pending is None, 20)

        # the picker: a host that cannot be reached is said, and the console stays where it was
        await pilot.press("h")
        assert await wait_until(pilot, lambda: isinstance(app.screen, HostPicker))
        assert await wait_until(pilot, lambda: "ghost" in screen_text(app))
        await pilot.press("down", "enter")  # ca2 is highlighted; ghost is next
        assert await wait_until(pilot, lambda: app._switching is None and isinstance(app.screen, VifsScreen),
                                TIMEOUT + 5)  # fmt: skip
        assert app.host_name == "ca2" and _vif_ports(app) == set(VIFS["ca2"])
        assert any("cannot switch to ghost" in m.text for m in app.backend.messages)

        # the Log screen on the new backend keeps the console's messages
        await pilot.press("6")
        assert await wait_until(pilot, lambda: isinstance(app.screen, LogScreen))
        assert await wait_until(pilot, lambda: "console switched to host ca2" in screen_text(app))

        # back to this machine's own switch through the picker: no VIFs there
        await pilot.press("2", "h")
        assert await wait_until(pilot, lambda: isinstance(app.screen, HostPicker))
        assert await wait_until(pilot, lambda: "this machine" in screen_text(app))
        await pilot.press("home", "enter")
        assert await wait_until(pilot, lambda: app.host_name == "local" and isinstance(app.screen, VifsScreen))
        assert await wait_until(pilot, lambda: "0 VIFs" in screen_text(app))
        assert app.sub_title.startswith(f"local · {fleet.local.remote}")


def test_hvnet_host_tui_shows_the_remote_vifs(fleet: Fleet) -> None:
    """``hvnet --host ca2 tui`` in a real terminal (a pty at 80x24): ca2's VIFs, its name in the header."""
    pid, fd = pty.fork()
    if pid == 0:  # the child: hvnet as an operator starts it
        os.chdir(ROOT)
        os.execvpe(sys.executable, [sys.executable, "-m", "appliance", "--timeout", "5", "--host", "ca2", "tui"],
                   {**os.environ, "TERM": "xterm-256color", "COLUMNS": "80", "LINES": "24"})  # fmt: skip
    ioctl(fd, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 80, 0, 0))
    seen = b""
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not all(p.encode() in seen for p in (*VIFS["ca2"], "ca2 ·")):
            if select.select([fd], [], [], 0.5)[0]:
                try:
                    seen += os.read(fd, 65536)
                except OSError:
                    break
        assert all(p.encode() in seen for p in VIFS["ca2"]), seen[-3000:]
        assert "ca2 ·".encode() in seen and b"vif51" not in seen
        os.write(fd, b"q")
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            done, status = os.waitpid(pid, os.WNOHANG)
            if done:
                assert os.waitstatus_to_exitcode(status) == 0
                break
            if select.select([fd], [], [], 0.2)[0]:
                try:
                    os.read(fd, 65536)
                except OSError:
                    pass
        else:
            pytest.fail("hvnet tui did not quit on q")
        pid = 0
    finally:
        if pid:
            os.kill(pid, 9)
            os.waitpid(pid, 0)
        os.close(fd)
