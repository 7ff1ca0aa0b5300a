"""The shipped isolation scenarios on a kernel-datapath VM host, by traffic and by trace, with trunk guests
sending 802.1Q-tagged frames from VLAN sub-interfaces inside their namespaces (the VM's kernel has 8021q;
this machine's does not, so the namespace lab never could).

One boot for the module (its own lab; see tests/vm/vmlab.py): one VM host carrying both shipped topologies' guests (the 2010 study's on
xenbr0, trunk-and-native's on br-tn), brought up by the real ``hvnet lab up``.  The shipped scenarios
run unchanged but for the topology they name (the same guests, on the VM host).  Needs root and the
lab lock: ``flock /tmp/hvnet-lab.lock``.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
import yaml

from appliance.isolation.pcap import read_arp
from appliance.lab import Lab
from tests.conftest import ROOT
from tests.vm import vmlab

pytestmark = [pytest.mark.vm, pytest.mark.shared_lab("isolation")]

HOST = "kvm1"
SEED_TOPOLOGY = ROOT / "vlan-tests" / "topologies" / "seed-2010.yaml"
TN_TOPOLOGY = ROOT / "vlan-tests" / "topologies" / "trunk-and-native.yaml"
SEED_SCENARIO = ROOT / "vlan-tests" / "seed-three-vm.yaml"
TN_SCENARIO = ROOT / "vlan-tests" / "trunk-and-native.yaml"


def vm_topology() -> dict:
    """Both shipped topologies' guests on one VM host: each on its own bridge, addresses and VLANs as shipped."""
    seed, tn = yaml.safe_load(SEED_TOPOLOGY.read_text()), yaml.safe_load(TN_TOPOLOGY.read_text())
    guests = [{**g, "bridge": "xenbr0"} for g in seed["guests"]] + [{**g, "bridge": "br-tn"} for g in tn["guests"]]
    return {"name": "vm-isolation", "hypervisor": "xenserver", "hosts": [{"name": HOST, "kind": "vm"}],
            "bridges": [{"name": "xenbr0"}, {"name": "br-tn"}], "guests": guests}  # fmt: skip


def scenario_on(src: Path, topology: Path, dest: Path, **changes: object) -> Path:
    """The shipped scenario ``src`` as shipped, but naming ``topology`` (plus ``changes``, keys it lacks),
    written to ``dest`` (its text edited, not re-dumped: its yes/no cells stay strings)."""
    lines = [f"topology: {topology}" if ln.startswith("topology:") else ln for ln in src.read_text().splitlines()]
    assert not any(ln.split(":")[0] in changes for ln in lines), "the shipped scenario already sets that key"
    dest.write_text("\n".join(lines) + "\n" + (yaml.safe_dump(changes, default_flow_style=None) if changes else ""))
    return dest


@pytest.fixture(scope="module")
def vm_lab(vm_labs: vmlab.Labs) -> Lab:
    return vm_labs.get(yaml.safe_dump(vm_topology(), sort_keys=False), HOST)


def in_vm(lab: Lab, command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return vmlab.in_vm(lab, HOST, command, check=check)


def check(lab: Lab, scenario: Path, out: Path) -> tuple[subprocess.CompletedProcess, dict]:
    return vmlab.isolation_check(lab, HOST, scenario, out)


def test_trunk_guests_have_a_vlan_sub_interface_per_trunked_vlan(vm_lab: Lab) -> None:
    shown = in_vm(vm_lab, "ip -n hvnet-trunk -d -o link show; ip -n hvnet-nt20 -d -o link show").stdout
    for line, vlan in (("eth0.10@eth0", 10), ("eth0.20@eth0", 20), ("eth0.30@eth0", 30)):
        assert any(line in x and f"vlan protocol 802.1Q id {vlan} " in x for x in shown.splitlines()), shown
    addrs = in_vm(vm_lab, "ip -n hvnet-trunk -o -4 addr show dev eth0.10").stdout
    assert "10.30.0.5/24" in addrs, addrs
    access = in_vm(vm_lab, "ip -n hvnet-a10 -o link show").stdout
    assert "eth0." not in access, access  # an access guest sends untagged only


def test_the_2010_scenario_holds_on_the_kernel_datapath_by_traffic_and_by_trace(vm_lab: Lab, tmp_path: Path) -> None:
    sc = scenario_on(SEED_SCENARIO, Path(vm_lab.state["topology_file"]), tmp_path / "seed-three-vm.yaml")
    res, doc = check(vm_lab, sc, tmp_path / "caps")
    assert res.returncode == 0, json.dumps(doc["methods"], indent=1)[-4000:]
    want = {("VM1", "VM2"): "yes", ("VM2", "VM1"): "yes", ("VM1", "VM3"): "no", ("VM3", "VM1"): "no",
            ("VM2", "VM3"): "no", ("VM3", "VM2"): "no"}  # fmt: skip
    assert vmlab.cells(doc["expected"]) == want
    for method in ("traffic", "trace"):
        assert vmlab.cells(doc["methods"][method]["observed"]) == want, (method, doc["methods"][method])
    ev = {(e["listener"], e["sender"]): e for e in doc["methods"]["traffic"]["evidence"]}
    assert set(ev) == {("VM1", "VM2"), ("VM2", "VM1")} and ev[("VM1", "VM2")]["vlan"] is None  # access: untagged


def test_trunk_and_native_with_tagged_senders_by_traffic_and_by_trace(vm_lab: Lab, tmp_path: Path) -> None:
    """The trunk guest (trunks 10,20) reaches VLANs 10 and 20 only by what it sends tagged (its untagged frames
    are VLAN 0, which it does not trunk); nu10 reaches VLAN 20 tagged, nt20 VLAN 30 tagged -- cells the
    namespace lab's untagged senders always read "no"."""
    tn = [g["name"] for g in yaml.safe_load(TN_TOPOLOGY.read_text())["guests"]]
    sc = scenario_on(TN_SCENARIO, Path(vm_lab.state["topology_file"]), tmp_path / "tn.yaml", guests=tn)
    out = tmp_path / "caps"
    res, doc = check(vm_lab, sc, out)
    expected = vmlab.cells(doc["expected"])
    tagged_only = {("a10", "trunk"): "yes", ("b10", "trunk"): "yes", ("c20", "trunk"): "yes", ("d30", "trunk"): "no",
                   ("c20", "nu10"): "yes", ("d30", "nt20"): "yes", ("a10", "nt20"): "no"}  # fmt: skip
    assert {k: expected[k] for k in tagged_only} == tagged_only
    assert res.returncode == 0, json.dumps({m: doc["methods"][m]["verdicts"] for m in doc["methods"]})[-4000:]
    for method in ("traffic", "trace"):
        assert vmlab.cells(doc["methods"][method]["observed"]) == expected, method
    # the trunk's own capture shows its who-has leaving tagged 10 and 20 (and untagged), from its own MAC
    trunk_mac = vm_lab.state["guests"][[g["name"] for g in vm_lab.state["guests"]].index("trunk")]["mac"]
    sent = {f.vlan for f in read_arp(out / "trunk.pcap") if f.is_request and f.sender_mac == trunk_mac}
    assert sent == {None, 10, 20}, sent
    # ... and a10 heard it untagged (an access port), on VLAN 10 only through its tagged frames
    ev = {(e["listener"], e["sender"]): e for e in doc["methods"]["traffic"]["evidence"]}
    assert ev[("a10", "trunk")]["vlan"] is None and ev[("nt20", "trunk")]["vlan"] == 20, ev.get(("nt20", "trunk"))


def test_a_tagged_vlan_the_port_stops_trunking_is_dropped_and_expected_so(vm_lab: Lab, tmp_path: Path) -> None:
    """The run narrows the trunk's port to VLAN 20: it still sends tagged 10 from eth0.10, and now a10 and b10
    must not hear it -- the expectation follows the trunk list, the kernel datapath drops the frames."""
    sc = scenario_on(TN_SCENARIO, Path(vm_lab.state["topology_file"]), tmp_path / "narrow.yaml",
                     guests=["a10", "b10", "c20", "trunk"], vlans={"trunk": {"trunks": [20]}})  # fmt: skip
    res, doc = check(vm_lab, sc, tmp_path / "caps")
    expected = vmlab.cells(doc["expected"])
    assert (expected[("a10", "trunk")], expected[("b10", "trunk")], expected[("c20", "trunk")]) == ("no", "no", "yes")
    assert res.returncode == 0, json.dumps({m: doc["methods"][m]["verdicts"] for m in doc["methods"]})[-4000:]
    assert vmlab.cells(doc["methods"]["traffic"]["observed"]) == expected
    assert vmlab.cells(doc["methods"]["trace"]["observed"]) == expected
    port = in_vm(vm_lab, "ovs-vsctl get port vif8.0 trunks").stdout.strip()
    assert port == "[10, 20]", port  # the run's setting undone
    left = in_vm(vm_lab, "for p in /proc/[0-9]*; do c=; read -r c <$p/comm 2>/dev/null; "
                 "case $c in tcpdump|arping) echo $c;; esac; done; true").stdout  # fmt: skip
    assert left.strip() == "", left
