"""A topology host that is a VM: ``hvnet lab up`` boots it, plugs its guests inside it on the kernel datapath,
and ``hvnet --host NAME`` reaches it as any lab host; ``lab down`` leaves nothing.

The lab (through the real CLI; under TCG here, about half a minute to SSH) is the one the modules on the VM host's
guests share (tests/vm/vmlab.py): what a test applies it clears.  Needs root
(tap device, namespaces in the VM, debootstrap for a first image build): run it under
``flock /tmp/hvnet-lab.lock``.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.core.runner import LocalRunner
from appliance.endpoints.topology import load as load_topology
from appliance.frontdoor.hosts import build_host
from appliance.lab import Lab
from appliance.lab.vmhost import labhost
from appliance.lab.vmhost.boot import VmHost
from appliance.policy.apply import tcpolice
from tests.conftest import HVNET, ROOT, run_hvnet
from tests.vm import vmlab

pytestmark = [pytest.mark.vm, pytest.mark.shared_lab("guests")]

HOST = vmlab.HOST
POLICY = """\
version: 1
vifs:
  - vm: VM1
    vlan: {mode: access, tag: 10}
    ingress: {rate: 10240, burst: 1024}
"""


@pytest.fixture(scope="module")
def vm_lab(vm_labs: vmlab.Labs) -> Lab:
    return vm_labs.get(vmlab.GUESTS_TOPOLOGY, HOST)


@pytest.fixture()
def last_lab(vm_labs: vmlab.Labs) -> Iterator[Lab]:
    """The shared lab for a test that takes it down: nobody gets it after."""
    with vm_labs.last(vmlab.GUESTS_TOPOLOGY, HOST) as lab:
        yield lab


def test_lab_down_after_lab_up_was_killed_mid_boot_stops_the_vm_by_its_files(
    vm_labs: vmlab.Labs, tmp_path: Path
) -> None:
    """SIGKILL of 'lab up' once QEMU runs, before SSH answers: the record written first lets 'down' find it all.

    Runs with no lab up (it takes the same management link): the shared one, if up, is taken down first."""
    vmlab.require_qemu_and_root()
    vm_labs.close()
    topo = tmp_path / "vmhost.yaml"
    topo.write_text(vmlab.GUESTS_TOPOLOGY)
    run_dir = tmp_path / "run"
    env = {**os.environ, "HVNET_LAB_DIR": str(run_dir)}
    vm = VmHost(HOST, run_dir / "hosts", labhost.FIRST_INDEX)
    up = subprocess.Popen([*HVNET, "lab", "up", "--topology", str(topo)], env=env, cwd=ROOT,
                          stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    pid = None
    try:
        deadline = time.monotonic() + 120
        while (pid := vm.qemu_pid()) is None and up.poll() is None and time.monotonic() < deadline:
            time.sleep(0.05)
        assert pid is not None, "QEMU never started"
        up.send_signal(signal.SIGKILL)
        up.wait(timeout=10)
        assert vm.qemu_pid() == pid and json.loads((run_dir / "lab.json").read_text())["created"]["vm_hosts"] == [HOST]
    finally:
        if up.poll() is None:
            up.kill()
            up.wait()
        down = run_hvnet("lab", "down", env={"HVNET_LAB_DIR": str(run_dir)}, timeout=120)
    assert down.returncode == 0, down.stdout + down.stderr
    assert f"stopped VM host {HOST}: QEMU pid {pid}" in down.stdout, down.stdout
    assert vmlab.leftovers(run_dir, HOST, pid) == []


def in_vm(lab: Lab, command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return vmlab.in_vm(lab, HOST, command, check=check)


def hv(lab: Lab, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return run_hvnet("--host", HOST, *args, env={"HVNET_LAB_DIR": str(lab.run_dir)}, timeout=timeout)


def test_hvnet_reaches_the_vm_host_by_name_and_lists_its_vifs_with_their_tags(vm_lab: Lab) -> None:
    res = hv(vm_lab, "status", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    vifs = {v["port"]: v for v in out["vifs"]}
    topo = {g.name: g for g in load_topology_text(vm_lab).guests}
    assert set(vifs) == {g.vif for g in topo.values()}
    for g in topo.values():
        v = vifs[g.vif]
        assert (v["vm_name"], v["tag"], v["vlan_mode"], v["mac"]) == (g.name, g.tag, "access", g.mac)
        assert v["hypervisor"] == "xenserver" and v["xen_domid"] == g.domid
    assert out["host"]["bridge_datapath_types"] == ["system"]


def load_topology_text(lab: Lab):  # the topology the lab was brought up with
    return load_topology(lab.state["topology_file"])


def test_the_vm_switch_is_on_the_kernel_datapath(vm_lab: Lab) -> None:
    dpif = in_vm(vm_lab, "ovs-appctl dpif/show").stdout
    assert "system@ovs-system" in dpif and "netdev@" not in dpif, dpif
    assert in_vm(vm_lab, "ovs-vsctl get bridge xenbr0 datapath_type").stdout.strip() == "system"


def test_guests_on_one_vlan_reach_each_other_and_not_the_other_vlan(vm_lab: Lab) -> None:
    def ping(guest: str, address: str) -> subprocess.CompletedProcess[str]:
        argv = ["ip", "netns", "exec", vm_lab.ns_of(guest), "ping", "-c", "2", "-W", "2", address]
        return in_vm(vm_lab, " ".join(map(shlex.quote, argv)), check=False)

    same = ping("VM1", "10.77.0.2")
    assert same.returncode == 0, same.stdout + same.stderr
    other = ping("VM1", "10.77.0.3")
    assert other.returncode != 0 and " 0% packet loss" not in other.stdout, other.stdout


def test_apply_of_an_ingress_rate_installs_a_tc_police_filter_in_the_vm(vm_lab: Lab, tmp_path: Path) -> None:
    policy = tmp_path / "police.yaml"
    policy.write_text(POLICY)
    res = hv(vm_lab, "apply", str(policy), "--json", timeout=300)
    try:
        assert res.returncode == 0, res.stdout + res.stderr
        shown = in_vm(vm_lab, "tc -s filter show dev vif1.0 ingress").stdout
        assert "police" in shown and "rate 10240Kbit" in shown, shown
    finally:
        hv(vm_lab, "qos", "clear", "vm:VM1")


def flood(lab: Lab, sender: str, address: str) -> subprocess.CompletedProcess[str]:
    """5 s of pings of 60000 bytes, 8 in flight (~41 fragments each): 480 kB at once, beyond the 256 kB bucket.

    Bounded by time (``-w``), not by a count: ping's count is of replies, and with the police action dropping
    nearly every fragmented request a count could take minutes to reach while the flood held the VM's vCPUs."""
    argv = ["ip", "netns", "exec", lab.ns_of(sender), "ping", "-q", "-f", "-l", "8", "-s", "60000", "-w", "5",
            address]  # fmt: skip
    return in_vm(lab, " ".join(map(shlex.quote, argv)), check=False)


def test_tc_polices_what_the_guest_sends_and_its_own_counters_show_the_drops(vm_lab: Lab, tmp_path: Path) -> None:
    """The probe finds tc policing works on the VM host, so 'auto' chooses tc; traffic beyond the rate is dropped
    by the police action OVS installed, as tc's own counters show."""
    policy = tmp_path / "police.yaml"
    policy.write_text(POLICY.replace("burst: 1024", "burst: 2048"))  # a change: apply checks its enforcement
    res = hv(vm_lab, "apply", str(policy), "--json", timeout=300)
    host = build_host(ssh_host=HOST, environ={**os.environ, "HVNET_LAB_DIR": str(vm_lab.run_dir)})
    try:
        assert res.returncode == 0, res.stdout + res.stderr
        (applied,) = [e for e in json.loads(res.stdout)["enforcement"] if e["kind"] == "ingress"]
        assert (applied["port"], applied["mechanism"], applied["verified"]) == ("vif1.0", "tc", True), applied
        assert applied["detail"].startswith("tc police (matchall) rate 10240 kbit/s burst 262144 B: "), applied
        (before,) = tcpolice.tc_enforcement(host.runner, "vif1.0").police or ()
        sent = flood(vm_lab, "VM1", "10.77.0.2")
        (after,) = tcpolice.tc_enforcement(host.runner, "vif1.0").police or ()
        print(f"\n{after.describe()} ({sent.stdout.strip().splitlines()[-2:]})")
        assert (after.classifier, after.rate_kbit, after.burst_bytes) == ("matchall", 10240, 262144)
        assert after.dropped > before.dropped and after.passed > before.passed, (before, after)
        cache = tmp_path / "cache"
        assert tcpolice.tc_police_works(host.runner, cache) is True
        boot_id = in_vm(vm_lab, "cat /proc/sys/kernel/random/boot_id").stdout.strip()
        release = in_vm(vm_lab, "uname -r").stdout.strip()
        assert [p.name for p in cache.iterdir()] == [f"tc-police-{HOST}-{release}-{boot_id}"]
    finally:
        host.close()
        hv(vm_lab, "qos", "clear", "vm:VM1")


class NetnsRefused(LocalRunner):
    """This machine, where ``ip netns add`` fails (as it does in a container without the right to mount)."""

    def run(self, argv, **kw):  # type: ignore[no-untyped-def]
        if list(argv[:3]) == ["ip", "netns", "add"]:
            return subprocess.CompletedProcess(list(argv), 1, "", "mount --make-shared /run/netns failed")
        return super().run(argv, **kw)


def test_this_machine_says_no_and_only_its_kernels_no_is_cached(tmp_path: Path) -> None:
    """This kernel lacks act_police (PLATFORM.md): a probe that could not run says no and caches nothing;
    the kernel's own refusal is cached for this boot."""
    cache = tmp_path / "cache"
    assert tcpolice.tc_police_works(NetnsRefused(), cache) is False
    assert not cache.exists() or list(cache.iterdir()) == []
    assert tcpolice.tc_police_works(LocalRunner(), cache) is False
    boot_id = Path(tcpolice.BOOT_ID).read_text().strip()
    (cached,) = cache.iterdir()
    assert (cached.name, cached.read_text()) == (f"tc-police-local-{os.uname().release}-{boot_id}", "no\n")


def test_lab_status_shows_the_vm_host_and_that_ssh_answers(vm_lab: Lab) -> None:
    res = run_hvnet("lab", "status", env={"HVNET_LAB_DIR": str(vm_lab.run_dir)}, timeout=60)
    assert res.returncode == 0, res.stdout + res.stderr
    assert re.search(rf"host {HOST} \(VM, kernel datapath\): ssh \S+:22 over tap hvk1, QEMU pid \d+, SSH answers",
                     res.stdout), res.stdout  # fmt: skip
    st = json.loads(run_hvnet("lab", "status", "--json", env={"HVNET_LAB_DIR": str(vm_lab.run_dir)}).stdout)
    assert st["state"] == "up" and st["hosts"][HOST]["ssh"] is True
    assert all(g["namespace_present"] and g["vif_present"] for g in st["guests"])


@pytest.mark.ends_lab
def test_lab_down_of_a_hung_vm_host_shows_its_console_before_removing_it(last_lab: Lab) -> None:
    """QEMU stopped (SIGSTOP: a host that hangs): 'lab down' says SSH did not answer and shows the console's last
    lines, the only evidence of why, before it removes the VM with its files.  The shared lab's last test: it takes
    the lab down (the fixture's own 'lab down' then finds nothing, and checks nothing is left)."""
    pid = vmlab.vm(last_lab.run_dir, HOST).qemu_pid()
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)
    down = run_hvnet("lab", "down", env={"HVNET_LAB_DIR": str(last_lab.run_dir)}, timeout=120)
    assert down.returncode == 0, down.stdout + down.stderr
    said = down.stdout
    assert f"VM host {HOST} did not answer over SSH; its console ends:" in said, said
    assert "hvnet-vmhost: ready at" in said, said  # the init's own line, from the console
    assert f"stopped VM host {HOST}: QEMU pid {pid}" in said, said
