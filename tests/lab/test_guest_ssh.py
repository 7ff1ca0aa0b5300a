"""The lab's namespace guests reached like real VMs (``hvnet lab up --vm-access``): the system ssh
client with the lab's ssh_config logs into each guest on its management link, strict host key
checking refuses a key it was not given, the VM inventory lists every guest, and ``lab down`` --
or a failed ``lab up`` -- leaves no sshd, no link and no file behind.

The two tests that bring up labs of their own come first: the module's lab (the default
topology with VM access) is started by the first test that asks for it and stays up until the
module ends, and two labs cannot share the host's VIF names.
"""

from __future__ import annotations

import json
import shlex
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from appliance.core.errors import LabError
from appliance.endpoints.topology import DEFAULT_TOPOLOGY
from appliance.endpoints.topology import load as load_topology
from appliance.lab import Lab, guestssh, sshd
from tests.conftest import links, netns_list, run_hvnet
from tests.lab.conftest import lab_up

TOPOLOGY = load_topology(DEFAULT_TOPOLOGY)
GUESTS = [g for g in TOPOLOGY.guests if g.kind == "netns"]


def _ssh(config: Path, guest: str, command: list[str], *options: str) -> subprocess.CompletedProcess[str]:
    """The system client, keys only, never a prompt: the remote command quoted word by word."""
    argv = ["ssh", "-F", str(config), "-o", "BatchMode=yes", "-o", "ConnectTimeout=5", *options, guest,
            shlex.join(command)]  # fmt: skip
    return subprocess.run(argv, capture_output=True, text=True, timeout=30, check=False)


def _alive(pid: int) -> bool:
    try:
        return not Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except (OSError, IndexError):
        return False


def _mgmt_links() -> set[str]:
    return {n for n in links() if n.startswith(guestssh.OUTER_PREFIX)}


# -- labs of their own: teardown ----------------------------------------------------------


def test_lab_down_stops_every_guest_sshd_by_pid_and_removes_the_links_and_files(tmp_path: Path) -> None:
    run_dir = tmp_path / "run"
    env = {"HVNET_LAB_DIR": str(run_dir)}
    before = (netns_list(), links())
    try:
        up = run_hvnet("lab", "up", "--vm-access", "--json", env=env, timeout=180)
        assert up.returncode == 0, up.stderr
        vm = json.loads(up.stdout)["vm_access"]
        pids = {name: g["sshd_pid"] for name, g in vm["guests"].items()}
        assert set(pids) == {g.name for g in GUESTS} and all(pids.values())
        assert all(_alive(p) for p in pids.values())
        assert _mgmt_links() == {"hvm1", "hvm2", "hvm3"}
        files = [Path(vm["inventory"]), Path(vm["ssh_config"]), Path(vm["known_hosts"]), Path(vm["identity"])]
        assert all(f.exists() for f in files)
        # the flag lives in the lab's state: 'lab down' takes no flag and still knows
        down = run_hvnet("lab", "down", env=env, timeout=120)
        assert down.returncode == 0, down.stderr
        for name, pid in pids.items():
            assert f"stopped guest {name}'s sshd (pid {pid})" in down.stdout
            assert not _alive(pid)
        assert not _mgmt_links()
        assert not any(f.exists() for f in files) and not run_dir.exists()
    finally:
        Lab(run_dir).down()
    assert (netns_list(), links()) == before


def test_a_lab_up_that_fails_halfway_leaves_no_sshd_link_or_file(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    run_dir = tmp_path / "run"
    before = (netns_list(), links())
    started: list[int] = []
    real_start = guestssh._start

    def start_one_then_fail(ln: guestssh.MgmtLink, files: guestssh.ClientFiles, record: Any) -> bool:
        if started:
            raise LabError(f"injected: guest {ln.guest}'s sshd did not start")
        assert real_start(ln, files, record)
        pid = sshd.pid(files.guest_dir(ln.guest))
        assert pid is not None and _alive(pid)
        started.append(pid)
        return True

    monkeypatch.setattr(guestssh, "_start", start_one_then_fail)
    try:
        with pytest.raises(LabError, match="injected"):
            Lab(run_dir).up(TOPOLOGY, vm_access=True)
        assert len(started) == 1 and not _alive(started[0])
        assert not _mgmt_links() and not run_dir.exists()
    finally:
        Lab(run_dir).down()
    assert (netns_list(), links()) == before


# -- the module's lab ---------------------------------------------------------------------


@pytest.fixture(scope="module")
def vm_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with lab_up(DEFAULT_TOPOLOGY, tmp_path_factory.mktemp("vm-access") / "run", vm_access=True) as the_lab:
        pids = [p for name, p in the_lab.status()["daemons"].items() if name.endswith(" sshd")]
        yield the_lab
    assert pids and not any(_alive(p) for p in pids)


def test_ssh_into_each_guest_shows_its_data_interface_and_its_management_link_apart(vm_lab: Lab) -> None:
    files = guestssh.ClientFiles(vm_lab.run_dir)
    seen_mgmt = set()
    for g in GUESTS:
        res = _ssh(files.ssh_config, g.name, ["ip", "-j", "addr"])
        assert res.returncode == 0, res.stderr
        ifaces = {i["ifname"]: i for i in json.loads(res.stdout)}
        addrs = {n: {(a["local"], a["prefixlen"]) for a in i.get("addr_info", []) if a["family"] == "inet"}
                 for n, i in ifaces.items()}  # fmt: skip
        ip, prefix = g.ip.split("/")
        # the data interface: the VIF's MAC, the guest's address, and nothing of the management link
        data = [n for n, i in ifaces.items() if i.get("address") == g.mac]
        assert data == ["eth0"]
        assert addrs["eth0"] == {(ip, int(prefix))}
        # the management link: another interface, another MAC, a link-local /30 of the block
        mgmt = addrs[guestssh.MGMT_IFACE]
        assert ifaces[guestssh.MGMT_IFACE]["address"] != g.mac and len(mgmt) == 1
        ((address, plen),) = mgmt
        assert plen == 30 and address.startswith("169.254.6") and address not in seen_mgmt
        seen_mgmt.add(address)


def test_a_guest_session_has_a_vms_path_and_tools(vm_lab: Lab) -> None:
    files = guestssh.ClientFiles(vm_lab.run_dir)
    script = (
        "echo $PATH; for t in " + " ".join(guestssh.GUEST_TOOLS) + '; do command -v "$t" || echo "missing $t"; done'
    )
    res = _ssh(files.ssh_config, GUESTS[0].name, ["sh", "-c", script])
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == guestssh.GUEST_PATH
    assert not [line for line in lines if line.startswith("missing ")]
    # and it is the guest's namespace the session runs in: its own name for it
    ns = _ssh(files.ssh_config, GUESTS[0].name, ["ip", "netns", "identify"])
    assert ns.stdout.strip() == vm_lab.ns_of(GUESTS[0].name)


def test_the_inventory_lists_every_guest_and_lab_status_says_each_is_reachable(vm_lab: Lab) -> None:
    vm_dir = vm_lab.run_dir / "vm-access"
    inventory = vm_lab.run_dir / "vms.yaml"
    expected = [
        {"name": g.name, "vif": g.vif, "ssh": g.name, "ssh_config": str(vm_dir / "ssh_config"),
         "known_hosts": str(vm_dir / "known_hosts"), "identity": str(vm_dir / "id_ed25519"), "user": "root"}
        for g in GUESTS
    ]  # fmt: skip
    assert yaml.safe_load(inventory.read_text()) == {"vms": expected}
    assert [g["vif"] for g in expected] == ["vif1.0", "vif2.0", "vif3.0"]
    st = run_hvnet("lab", "status", "--json", env={"HVNET_LAB_DIR": str(vm_lab.run_dir)})
    assert st.returncode == 0, st.stderr
    vm = json.loads(st.stdout)["vm_access"]
    assert vm["inventory"] == str(inventory)
    assert {n: g["reachable"] for n, g in vm["guests"].items()} == {g.name: True for g in GUESTS}
    text = run_hvnet("lab", "status", env={"HVNET_LAB_DIR": str(vm_lab.run_dir)}).stdout
    assert f"VM inventory: {inventory}" in text and "guest VM1: ssh 169.254.64.2:22 on mgmt0, reachable" in text


def test_a_changed_host_key_is_refused_by_strict_checking(vm_lab: Lab, tmp_path: Path) -> None:
    files = guestssh.ClientFiles(vm_lab.run_dir)
    g = GUESTS[1]
    assert _ssh(files.ssh_config, g.name, ["true"]).returncode == 0  # the lab's own known_hosts: accepted
    other = tmp_path / "other_key"
    sshd.keygen(other, "not-the-guest")
    address = vm_lab.status()["vm_access"]["guests"][g.name]["address"]
    changed = tmp_path / "known_hosts"
    changed.write_text(sshd.known_hosts_line(address, 22, other.with_name("other_key.pub").read_text()))
    res = _ssh(files.ssh_config, g.name, ["true"], "-o", f"UserKnownHostsFile={changed}")
    assert res.returncode == 255 and "REMOTE HOST IDENTIFICATION HAS CHANGED" in res.stderr
    assert "Host key verification failed" in res.stderr
    # and a guest whose key is not known at all is not learnt on first use
    empty = tmp_path / "empty_known_hosts"
    empty.write_text("")
    res = _ssh(files.ssh_config, g.name, ["true"], "-o", f"UserKnownHostsFile={empty}")
    assert res.returncode == 255 and "Host key verification failed" in res.stderr
    assert empty.read_text() == ""


def test_a_guest_whose_sshd_died_is_reported_and_a_second_lab_up_brings_it_back_with_the_same_key(
    vm_lab: Lab,
) -> None:
    files = guestssh.ClientFiles(vm_lab.run_dir)
    g = GUESTS[2]
    known_before = files.known_hosts.read_text()
    killed = sshd.kill(files.guest_dir(g.name))
    assert killed is not None and not _alive(killed)
    env = {"HVNET_LAB_DIR": str(vm_lab.run_dir)}
    st = run_hvnet("lab", "status", "--json", env=env)
    assert st.returncode == 1  # not whole: one guest cannot be reached
    vm = json.loads(st.stdout)["vm_access"]["guests"]
    assert [n for n, v in vm.items() if not v["reachable"]] == [g.name] and vm[g.name]["sshd_pid"] is None
    # 'lab up' without the flag: the lab's state has it; only the dead one is started again
    up = run_hvnet("lab", "up", "--json", env=env, timeout=120)
    assert up.returncode == 0, up.stderr
    started = [a for a in json.loads(up.stdout)["actions"] if a.startswith("started sshd")]
    assert started == [f"started sshd in guest {g.name} on mgmt0 169.254.64.10:22 (management link hvm3)"]
    assert files.known_hosts.read_text() == known_before
    assert _ssh(files.ssh_config, g.name, ["true"]).returncode == 0
