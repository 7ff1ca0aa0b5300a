"""A mixed pair: a userspace-datapath lab host (a namespace here) and a kernel-datapath VM host, joined by a
trunk -- the VM's second NIC, whose tap is a port of the namespaced host's bridge as a veth end would be.

The 2010 study's cross-host scenario runs on it (VM1 and VM3 on hv1, VM2 on the VM host), then a derived
one with a trunk guest on the VM host sending tagged frames across, then a suite from the VM host's guest
to hv1's.  ``lab down`` leaves nothing: no QEMU, no tap (here or in a namespace), no namespace.  One
boot for the module, through the real CLI.  Needs root and ``flock /tmp/hvnet-lab.lock``.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from pathlib import Path

import pytest
import yaml

from appliance.lab import Lab
from tests.conftest import ROOT, run_hvnet
from tests.vm import vmlab

pytestmark = [pytest.mark.vm, pytest.mark.shared_lab("mixed")]

HV, VM = "hv1", "kvm1"
SHIPPED_TOPOLOGY = ROOT / "vlan-tests" / "topologies" / "two-hosts.yaml"
SHIPPED_SCENARIO = ROOT / "vlan-tests" / "two-hosts.yaml"


def mixed_topology() -> dict:
    """The shipped two-hosts topology with its second host a VM (VM2 there), and a trunk guest T beside VM2
    trunking VLANs 1 and 2 (it sends tagged on both)."""
    doc = yaml.safe_load(SHIPPED_TOPOLOGY.read_text())
    guests = [{**g, "host": VM if g["host"] == "hv2" else g["host"]} for g in doc["guests"]]
    guests.append({"name": "T", "host": VM, "ip": "192.168.0.153/24", "vlan_mode": "trunk", "trunks": "1,2"})
    return {"name": "mixed-pair", "hypervisor": "xenserver", "hosts": [{"name": HV}, {"name": VM, "kind": "vm"}],
            "bridges": doc["bridges"], "guests": guests}  # fmt: skip


@pytest.fixture(scope="module")
def mixed_lab(vm_labs: vmlab.Labs) -> Lab:
    return vm_labs.get(yaml.safe_dump(mixed_topology(), sort_keys=False), VM,
                       said=[f"linked {HV} eth0-{VM} -- {VM} eth0-{HV} (a trunk on xenbr0)"],
                       namespaces=["hvnet-hv1", "hvnet-VM1", "hvnet-VM3"])  # fmt: skip


def in_vm(lab: Lab, command: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    return vmlab.in_vm(lab, VM, command, check=check)


def hv(lab: Lab, host: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return run_hvnet("--host", host, *args, env={"HVNET_LAB_DIR": str(lab.run_dir)}, timeout=timeout)


def check(lab: Lab, scenario: Path, out: Path) -> tuple[subprocess.CompletedProcess, dict]:
    return vmlab.isolation_check(lab, VM, scenario, out)


def test_each_host_keeps_its_datapath_and_the_trunk_is_a_port_on_both(mixed_lab: Lab) -> None:
    for host, datapath, uplink in ((HV, "netdev", f"eth0-{VM}"), (VM, "system", f"eth0-{HV}")):
        res = hv(mixed_lab, host, "status", "--json")
        assert res.returncode == 0, res.stderr
        doc = json.loads(res.stdout)
        assert doc["host"]["bridge_datapath_types"] == [datapath], (host, doc["host"])
        ports = subprocess.run(["ssh", "-F", str(mixed_lab.run_dir / "ssh_config"), host, "ovs-vsctl", "list-ports",
                                "xenbr0"], capture_output=True, text=True, timeout=60, check=True).stdout.split()  # fmt: skip
        assert uplink in ports, (host, ports)
    # the VM's trunk NIC: no tag, every VLAN, as a XenServer PIF
    assert in_vm(mixed_lab, f"ovs-vsctl get port eth0-{HV} tag trunks vlan_mode").stdout.split() == ["[]", "[]", "[]"]
    st = json.loads(run_hvnet("lab", "status", "--json", env={"HVNET_LAB_DIR": str(mixed_lab.run_dir)}).stdout)
    assert st["state"] == "up" and set(st["hosts"]) == {HV, VM}, st


def test_a_guest_on_the_vm_host_reaches_its_vlan_on_the_userspace_host_across_the_trunk(mixed_lab: Lab) -> None:
    argv = ["ip", "netns", "exec", "hvnet-VM2", "ping", "-c", "2", "-W", "3", "192.168.0.150"]
    same = in_vm(mixed_lab, " ".join(map(shlex.quote, argv)), check=False)
    assert same.returncode == 0, same.stdout + same.stderr
    other = in_vm(mixed_lab, " ".join(map(shlex.quote, [*argv[:-1], "192.168.0.152"])), check=False)
    assert other.returncode != 0, other.stdout


def test_the_cross_host_2010_scenario_holds_across_the_mixed_trunk(mixed_lab: Lab, tmp_path: Path) -> None:
    sc = tmp_path / "two-hosts.yaml"
    sc.write_text("\n".join(f"topology: {mixed_lab.state['topology_file']}" if ln.startswith("topology:") else ln
                            for ln in SHIPPED_SCENARIO.read_text().splitlines()) + "\n")  # fmt: skip
    res, doc = check(mixed_lab, sc, tmp_path / "caps")
    assert res.returncode == 0, json.dumps({m: doc["methods"][m]["verdicts"] for m in doc["methods"]})[-4000:]
    want = {("VM1", "VM2"): "yes", ("VM2", "VM1"): "yes", ("VM1", "VM3"): "no", ("VM3", "VM1"): "no",
            ("VM2", "VM3"): "no", ("VM3", "VM2"): "no"}  # fmt: skip
    for method in ("traffic", "trace"):
        assert vmlab.cells(doc["methods"][method]["observed"]) == want, (method, doc["methods"][method])


DERIVED = """\
name: mixed-tagged
description: the 2010 study's guests across the mixed trunk, with a trunk guest on the VM host sending tagged
topology: {topology}
guests: [VM1, VM2, VM3, T]
vlans:
  T: {{trunks: [1]}}     # it still sends tagged 2 from eth0.2: the VM host's port must drop that
expect: derive
"""


def test_a_tagged_trunk_sender_crosses_to_the_userspace_host_on_the_vlans_its_port_trunks(
    mixed_lab: Lab, tmp_path: Path
) -> None:
    """T (on the VM host) sends tagged 1 and 2; its port trunks only 1 for the run: VM1 on hv1 hears it across
    the trunk, VM3 (VLAN 2, on hv1) does not -- derived from the trunk list, shown by traffic and trace."""
    sc = tmp_path / "mixed-tagged.yaml"
    sc.write_text(DERIVED.format(topology=mixed_lab.state["topology_file"]))
    res, doc = check(mixed_lab, sc, tmp_path / "caps")
    expected = vmlab.cells(doc["expected"])
    assert (expected[("VM1", "T")], expected[("VM2", "T")], expected[("VM3", "T")]) == ("yes", "yes", "no")
    assert (expected[("T", "VM1")], expected[("T", "VM3")]) == ("yes", "no")
    wrong = {m: [v for v in doc["methods"][m]["verdicts"] if v["value"] != "ok"] for m in doc["methods"]}
    assert res.returncode == 0, json.dumps({"wrong": wrong, "trace": doc["methods"]["trace"]}, indent=1)[:12000]
    for method in ("traffic", "trace"):
        assert vmlab.cells(doc["methods"][method]["observed"]) == expected, method
    ev = {(e["listener"], e["sender"]): e for e in doc["methods"]["traffic"]["evidence"]}
    assert ev[("VM1", "T")]["vlan"] is None  # arrived on hv1 tagged over the trunk, left its access port untagged
    assert in_vm(mixed_lab, "ovs-vsctl get port vif4.0 trunks").stdout.strip() == "[1, 2]"  # the run's undone


SUITE = """\
version: 1
name: mixed-pair
description: TCP and UDP from VM2 on the kernel-datapath VM host to VM1 on the userspace host, across the trunk
topology: {topology}
endpoints:
  client: VM2
  server: VM1
defaults:
  duration: 3
  repetitions: 1
  concurrency: [1]
tests:
  - {{name: tcp-stream, type: TCP_STREAM}}
  - {{name: udp-rr, type: UDP_RR}}
"""


def test_tcp_crosses_the_mixed_trunk_with_good_checksums(mixed_lab: Lab) -> None:
    """netperf in VM2 (in the VM) to a netserver in VM1 (hv1's guest, here): TCP, not only ping, crosses the
    kernel datapath, the VM's trunk NIC (its transmit checksums computed by the VM, as the lab sets it) and
    the userspace datapath."""
    server = subprocess.Popen(["ip", "netns", "exec", "hvnet-VM1", "netserver", "-D", "-4", "-p", "12866"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        time.sleep(0.5)
        argv = ["ip", "netns", "exec", "hvnet-VM2", "netperf", "-H", "192.168.0.150", "-p", "12866", "-l", "2",
                "-t", "TCP_STREAM", "-P", "0"]  # fmt: skip
        res = in_vm(mixed_lab, " ".join(map(shlex.quote, argv)), check=False)
    finally:
        server.terminate()
        server.wait(timeout=10)
    assert res.returncode == 0, res.stdout + res.stderr
    mbps = float(res.stdout.split()[-1])
    print(f"\nTCP_STREAM VM2 (kvm1) -> VM1 (hv1): {mbps:.1f} Mbit/s")
    assert mbps > 1.0, res.stdout


def test_a_suite_runs_between_a_guest_on_each_host(mixed_lab: Lab, tmp_path: Path) -> None:
    """netperf in VM2's namespace in the VM (over its SSH connection), netserver in VM1's here (hv1's guest):
    every frame crosses the kernel datapath, the VM's trunk NIC and the userspace datapath."""
    suite = tmp_path / "suite.yaml"
    suite.write_text(SUITE.format(topology=mixed_lab.state["topology_file"]))
    out = tmp_path / "run"
    started = time.monotonic()
    res = run_hvnet("suite", "run", str(suite), "--out", str(out), "--json",
                    env={"HVNET_LAB_DIR": str(mixed_lab.run_dir)}, timeout=300)  # fmt: skip
    print(f"\nsuite: {time.monotonic() - started:.1f} s")
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    doc = json.loads((out / "results.json").read_text())
    assert (doc["state"], doc["meta"]["host"], doc["meta"]["datapath_types"]) == ("complete", VM, ["system"])
    steps = {s["test"]: s for s in doc["steps"]}
    assert set(steps) == {"tcp-stream", "udp-rr"}
    for name, step in steps.items():
        (rep,) = step["repetitions"]
        agg = rep["aggregate"]
        assert (agg["instances"], agg["ok"], agg["lost"]) == (1, 1, 0), (name, agg, rep["instances"])
        assert agg["sum"] > 0, (name, agg)
    print(
        f"\nTCP_STREAM {steps['tcp-stream']['repetitions'][0]['aggregate']['sum']:.1f} Mbit/s, "
        f"UDP_RR {steps['udp-rr']['repetitions'][0]['aggregate']['sum']:.0f} trans/s across the mixed trunk"
    )
