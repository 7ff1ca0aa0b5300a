"""lab up / down: everything created is removed, even after a crash; bad
topologies are refused before anything is created."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.conftest import HVNET, ROOT, links, netns_list, run_hvnet


def ovs_daemons_for(run_dir: Path) -> list[int]:
    pids = []
    for d in Path("/proc").iterdir():
        if d.name.isdigit():
            try:
                cmd = (d / "cmdline").read_bytes().decode(errors="replace")
            except OSError:
                continue
            if str(run_dir) in cmd and ("ovsdb-server" in cmd or "ovs-vswitchd" in cmd):
                stat = (d / "stat").read_text()
                if ") Z" not in stat:
                    pids.append(int(d.name))
    return pids


@pytest.fixture()
def lab_env(tmp_path):
    os.geteuid() == 0 or pytest.fail("needs root")
    run_dir = tmp_path / "lab"
    before = (netns_list(), links())
    yield {"HVNET_LAB_DIR": str(run_dir)}, run_dir
    run_hvnet("lab", "down", env={"HVNET_LAB_DIR": str(run_dir)})
    assert (netns_list(), links()) == before


def test_up_then_down_leaves_nothing(lab_env) -> None:
    env, run_dir = lab_env
    before_ns, before_links = netns_list(), links()
    res = run_hvnet("lab", "up", env=env)
    assert res.returncode == 0, res.stderr
    assert f"export HVNET_DB=unix:{run_dir}/db.sock" in res.stdout
    assert {"hvnet-VM1", "hvnet-VM2", "hvnet-VM3"} <= netns_list()
    assert {"vif1.0", "vif2.0", "vif3.0", "xenbr0"} <= links()
    assert len(ovs_daemons_for(run_dir)) == 2

    res = run_hvnet("lab", "down", env=env)
    assert res.returncode == 0, res.stderr
    assert netns_list() == before_ns
    assert links() == before_links
    assert ovs_daemons_for(run_dir) == []
    assert not run_dir.exists()
    # down again: nothing to do, still fine
    again = run_hvnet("lab", "down", env=env)
    assert again.returncode == 0 and "nothing to do" in again.stdout
    st = run_hvnet("lab", "status", env=env)
    assert st.returncode == 1 and "lab: down" in st.stdout


def test_down_after_a_crashed_up(lab_env) -> None:
    """SIGKILL 'lab up' part-way; 'lab down' must still remove everything."""
    env, run_dir = lab_env
    before_ns, before_links = netns_list(), links()
    proc = subprocess.Popen([*HVNET, "lab", "up"], cwd=ROOT, env={**os.environ, **env}, stdout=subprocess.DEVNULL)
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and "hvnet-VM2" not in netns_list():
        time.sleep(0.005)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    assert netns_list() - before_ns, "the crash should have left something behind to clean"
    res = run_hvnet("lab", "down", env=env)
    assert res.returncode == 0, res.stderr
    assert netns_list() == before_ns
    assert links() == before_links
    assert ovs_daemons_for(run_dir) == []


def test_failed_up_rolls_back(lab_env, tmp_path) -> None:
    """A failure after devices exist (here: a foreign process holds the
    name of the bridge's device) leaves nothing behind."""
    env, run_dir = lab_env
    before_ns, before_links = netns_list(), links()
    topo = tmp_path / "t.yaml"
    # vif 'lo' passes the name rules but clashes with the loopback device
    topo.write_text("bridges: [{name: brx0}]\nguests:\n  - {name: G1, ip: 10.9.0.1/24, vif: lo}\n")
    res = run_hvnet("lab", "up", "--topology", str(topo), env=env)
    assert res.returncode == 1
    assert "interface lo already exists and is not part of the lab" in res.stderr
    assert netns_list() == before_ns and links() == before_links
    assert ovs_daemons_for(run_dir) == []


BAD = {
    "unknown key": ("bridges: [{name: br0}]\nguests:\n  - {name: A, ip: 10.0.0.1/24, colour: red}\n", ":3: guests[0].colour: unknown key; allowed:"),
    "tag range": ("bridges: [{name: br0}]\nguests:\n  - name: A\n    ip: 10.0.0.1/24\n    tag: 4096\n", ":5: guests[0].tag: VLAN tag 4096 is outside 0..4094"),
    "duplicate name": ("bridges: [{name: br0}]\nguests:\n  - {name: A, ip: 10.0.0.1/24}\n  - {name: A, ip: 10.0.0.2/24}\n", ":4: guests[1].name: duplicate guest name 'A'"),
    "duplicate ip": ("bridges: [{name: br0}]\nguests:\n  - {name: A, ip: 10.0.0.1/24}\n  - {name: B, ip: 10.0.0.1/24}\n", ":4: guests[1].ip: duplicate IP 10.0.0.1"),
    "invalid name": ("bridges: [{name: 'br 0'}]\nguests: []\n", ":1: bridges[0].name: invalid interface name 'br 0'"),
    "syntax": ("bridges: [{name: br0}\n", "YAML syntax error"),
}  # fmt: skip


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_topology_changes_nothing(lab_env, tmp_path, case) -> None:
    env, run_dir = lab_env
    text, expected = BAD[case]
    f = tmp_path / "bad.yaml"
    f.write_text(text)
    before_ns, before_links = netns_list(), links()
    res = run_hvnet("lab", "up", "--topology", str(f), env=env)
    assert res.returncode == 2, res.stderr
    assert str(f) in res.stderr and expected in res.stderr
    assert "Traceback" not in res.stderr
    assert netns_list() == before_ns and links() == before_links
    assert not run_dir.exists() and ovs_daemons_for(run_dir) == []


def test_missing_topology_file(lab_env) -> None:
    env, run_dir = lab_env
    res = run_hvnet("lab", "up", "--topology", "/nonexistent.yaml", env=env)
    assert res.returncode == 2 and "/nonexistent.yaml: (file): cannot read" in res.stderr
    assert not run_dir.exists()


LIBVIRT_TOPOLOGY = """\
name: kvm-lab
hypervisor: libvirt
bridges: [{name: br-kvm}]
guests:
  - {name: web, ip: 10.20.0.1/24, tag: 10, vif: vnet0}
  - {name: router, ip: 10.20.0.254/24, vlan_mode: native-untagged, tag: 10, trunks: "20-21", vif: vnet1}
"""


def test_libvirt_convention_and_trunk_modes(lab_env, tmp_path) -> None:
    env, _run_dir = lab_env
    topo = tmp_path / "kvm.yaml"
    topo.write_text(LIBVIRT_TOPOLOGY)
    res = run_hvnet("lab", "up", "--topology", str(topo), env=env)
    assert res.returncode == 0, res.stderr
    out = run_hvnet("status", "--json", env=env)
    assert out.returncode == 0, out.stderr
    vifs = {v["port"]: v for v in json.loads(out.stdout)["vifs"]}
    web, router = vifs["vnet0"], vifs["vnet1"]
    assert web["hypervisor"] == "libvirt" and set(web["ids"]) == {"vm-id", "iface-id", "iface-status", "attached-mac"}
    assert web["vm_name"] == "web" and web["vm_uuid"] == web["ids"]["vm-id"]
    assert (router["vlan_mode"], router["tag"], router["trunks"]) == ("native-untagged", 10, [20, 21])
    assert router["trunks_all_vlans"] is False
    # native-untagged VLAN 10 + access VLAN 10: they talk
    ping = subprocess.run(
        ["ip", "netns", "exec", "hvnet-web", "ping", "-c", "1", "-W", "2", "10.20.0.254"], capture_output=True
    )
    assert ping.returncode == 0
