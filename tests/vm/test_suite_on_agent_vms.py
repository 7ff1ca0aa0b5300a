"""Suites and the 2010 isolation scenario on real VMs through libvirt's QEMU guest agent: three QEMU guests
running Debian's qemu-ga, named VM1..VM3 by a VM inventory, measured on their VIFs of the lab's switch --
no network path to them, one agent command at a time, the work dirs removed, nothing left after a
SIGKILLed hvnet once the next run has swept."""

from __future__ import annotations

import json
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from appliance.core.runner import LocalRunner
from appliance.endpoints.agent import AgentChannel, AgentRunner
from appliance.lab import Lab
from appliance.lab.vm import libvirtd
from tests.conftest import HVNET, ROOT, links, netns_list, run_hvnet
from tests.lab.conftest import _require_root_and_ovs

pytestmark = pytest.mark.vm

DATA = ROOT / "tests" / "lab" / "data"
TOPOLOGY = """\
name: agent-vms
hypervisor: libvirt
bridges: [{name: br0, datapath_type: netdev}]
guests:
  - {name: QA, kind: qemu, ip: 10.0.0.11/24, tag: 1}
  - {name: QB, kind: qemu, ip: 10.0.0.12/24, tag: 1}
  - {name: QC, kind: qemu, ip: 10.0.0.13/24, tag: 2, vcpus: 2, memory: 320}
"""


@pytest.fixture(scope="module")
def agent_lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Lab, Path]]:
    """Three QEMU guests and the VM inventory naming them as the 2010 study's VM1..VM3, through the agent."""
    import os

    from appliance.endpoints.topology import load as load_topology

    why = libvirtd.available()
    if why:
        pytest.fail(f"QEMU guests cannot run here: {why}")
    _require_root_and_ovs()
    tmp = tmp_path_factory.mktemp("agentvms")
    (tmp / "topo.yaml").write_text(TOPOLOGY)
    before_ns, before_links = netns_list(), links()
    old = os.environ.get("HVNET_LAB_DIR")
    os.environ["HVNET_LAB_DIR"] = str(tmp / "run")
    lab = Lab(tmp / "run")
    try:
        lab.up(load_topology(tmp / "topo.yaml"), vm_access=True)
        written = {v["name"]: v for v in yaml.safe_load((tmp / "run" / "vms.yaml").read_text())["vms"]}
        assert {v["agent"] for v in written.values()} == {"libvirt"}  # the lab lists its QEMU guests so
        vms = [{"name": f"VM{i}", "vm": written[g]["vm"], "agent": "libvirt", "libvirt": written[g]["libvirt"]}
               for i, g in ((1, "QA"), (2, "QB"), (3, "QC"))]  # fmt: skip
        (tmp / "vms.yaml").write_text(yaml.safe_dump({"vms": vms}))
        yield lab, tmp / "vms.yaml"
    finally:
        Lab(tmp / "run").down()
        if old is None:
            os.environ.pop("HVNET_LAB_DIR", None)
        else:
            os.environ["HVNET_LAB_DIR"] = old
        assert not (netns_list() - before_ns) and not (links() - before_links)


def in_vm(domain: str, script: str) -> str:
    runner = AgentRunner(AgentChannel(LocalRunner(), domain, uri=libvirtd.URI, timeout=30))
    return runner.run(["sh", "-c", script], check=False, timeout=60).stdout


def leftovers(domains: list[str]) -> dict[str, str]:
    """netperf/netserver/tcpdump processes and hvnet work dirs inside each VM."""
    script = ('for p in /proc/[0-9]*; do c=$(cat $p/comm 2>/dev/null); case $c in netperf|netserver|tcpdump) '
              'echo "$c ${p#/proc/}";; esac; done; ls /var/tmp/hvnet-endpoints 2>/dev/null')  # fmt: skip
    return {d: out for d in domains if (out := in_vm(d, script).strip())}


def test_a_qemu_guest_boots_with_the_size_its_topology_gives(agent_lab: tuple[Lab, Path]) -> None:
    """QC is sized in the topology (2 vCPUs, 320 MiB), the others take the defaults (1 vCPU, 256 MiB)."""
    cpus = {g: in_vm(g, "grep -c ^processor /proc/cpuinfo").strip() for g in ("QA", "QC")}
    assert cpus == {"QA": "1", "QC": "2"}
    mem_kib = {g: int(in_vm(g, "sed -n 's/^MemTotal: *\\([0-9]*\\) kB$/\\1/p' /proc/meminfo")) for g in ("QA", "QC")}
    assert 200 * 1024 < mem_kib["QA"] <= 256 * 1024 < mem_kib["QC"] <= 320 * 1024, mem_kib


def test_a_suite_runs_between_two_vms_through_their_guest_agents(agent_lab: tuple[Lab, Path], tmp_path: Path) -> None:
    lab, vms = agent_lab
    res = run_hvnet("--vms", str(vms), "suite", "run", str(DATA / "suite-vms.yaml"), "--out", str(tmp_path / "r"),
                    timeout=900)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads((tmp_path / "r" / "results.json").read_text())
    meta = doc["meta"]
    assert meta["client"]["runs_in"] == meta["server"]["runs_in"] == "vm-agent"
    assert meta["client"]["address"] == "10.0.0.11" and meta["server"]["address"] == "10.0.0.12"  # found inside
    assert meta["client"]["vif"] == lab.guest_vif("QA")  # by the VM's name, as libvirt knows it
    for step in doc["steps"]:
        for rep in step["repetitions"]:
            assert rep["aggregate"]["lost"] == 0, rep["aggregate"]["lost_reasons"]
            assert rep["aggregate"]["sum"] > 0 and rep["start_spread_ms"] is not None
            assert rep["start_spread_ms"] < 400  # 4 instances woken in a 1-vCPU TCG guest
            assert rep["cpu"]["vms"]["client"]["busy_pct_of_vm"] is not None
    assert leftovers(["QA", "QB"]) == {}


def test_the_2010_scenario_runs_in_vms_through_their_guest_agents(agent_lab: tuple[Lab, Path], tmp_path: Path) -> None:
    _lab, vms = agent_lab
    res = run_hvnet("--vms", str(vms), "isolation", "check", str(ROOT / "vlan-tests" / "seed-three-vm.yaml"),
                    "--json", "--out", str(tmp_path / "iso"), timeout=600)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    out = json.loads(res.stdout)
    for method in ("traffic", "trace"):
        obs = {(c["listener"], c["sender"]): c["value"] for c in out["methods"][method]["observed"]}
        assert obs[("VM2", "VM1")] == obs[("VM1", "VM2")] == "yes", (method, obs)
        assert obs[("VM3", "VM1")] == obs[("VM1", "VM3")] == obs[("VM3", "VM2")] == "no", (method, obs)
    assert leftovers(["QA", "QB", "QC"]) == {}


def test_a_killed_hvnet_leaves_netserver_only_until_the_next_run(agent_lab: tuple[Lab, Path], tmp_path: Path) -> None:
    _lab, vms = agent_lab
    long = tmp_path / "long.yaml"  # repetitions enough to be killed in the middle of (no policy: VM names differ)
    long.write_text(f"name: long\ntopology: {ROOT / 'vlan-tests' / 'topologies' / 'seed-2010.yaml'}\n"
                    "endpoints: {client: VM1, server: VM2}\ndefaults: {duration: 1, repetitions: 8, "
                    "concurrency: [2]}\ntests: [{name: tcp-rr, type: TCP_RR}]\n")  # fmt: skip
    p = subprocess.Popen([*HVNET, "--vms", str(vms), "suite", "run", str(long), "--out",
                          str(tmp_path / "killed")], cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 300
        while (
            time.monotonic() < deadline and p.poll() is None and "netperf" not in in_vm("QA", "cat /proc/[0-9]*/comm")
        ):
            time.sleep(1)
        assert "netserver" in in_vm("QB", "cat /proc/[0-9]*/comm 2>/dev/null"), "the run never started"
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    assert "netserver" in leftovers(["QB"]).get("QB", "")  # the agent has no channel to close: it is still there
    # the next run on these VMs sweeps what the killed one left, by PID on the same boot, then runs
    res = run_hvnet("--vms", str(vms), "suite", "run", str(DATA / "suite-vms-tiny.yaml"), "--out", str(tmp_path / "next"),
                    timeout=900)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert leftovers(["QA", "QB"]) == {}


def test_vms_that_cannot_be_reached_are_refused_by_name(agent_lab: tuple[Lab, Path], tmp_path: Path) -> None:
    lab, vms = agent_lab
    doc = yaml.safe_load(vms.read_text())
    suite = str(DATA / "suite-vms.yaml")
    # unknown to the switch: exit 2 before any VM is asked
    doc["vms"][0]["vm"] = "no-such-domain"
    (tmp_path / "a.yaml").write_text(yaml.safe_dump(doc))
    res = run_hvnet("--vms", str(tmp_path / "a.yaml"), "suite", "run", suite, "--out", str(tmp_path / "a"))
    assert res.returncode == 2 and "VM VM1" in res.stderr and "no-such-domain" in res.stderr, res.stderr
    # on the switch (its VIF given) but no such libvirt domain: exit 3 naming it, nothing started
    doc["vms"][0]["vif"] = lab.guest_vif("QA")
    (tmp_path / "b.yaml").write_text(yaml.safe_dump(doc))
    res = run_hvnet("--vms", str(tmp_path / "b.yaml"), "suite", "run", suite, "--out", str(tmp_path / "b"))
    assert res.returncode == 3 and "VM1" in res.stderr and "no-such-domain" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr and not (tmp_path / "b" / "results.json").exists()
    assert leftovers(["QB"]) == {}
