"""QEMU guests in the lab: libvirt plugs them into OVS, hvnet reaches them over their agent channel,
suites and isolation checks use them like namespace guests, and the agent keeps its policy in force
while libvirt re-plugs their VIFs (destroy + start, detach + attach).

The mixed lab (two namespace guests and two QEMU guests across VLANs 10 and 20,
``vlan-tests/topologies/mixed-qemu.yaml``), shared with the guest agent's tests (:mod:`tests.vm.qemumixed`), torn
down after them and checked to leave no domain, tap device, libvirt file or process behind.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest

from appliance.core import documents
from appliance.endpoints.topology import load as load_topology
from appliance.lab import Lab
from appliance.lab.vm.domain import Nic, interface_xml
from tests import jsonschemas
from tests.conftest import run_hvnet
from tests.lab.test_policy_agent import AgentProc, wait_until
from tests.vm.qemumixed import TOPOLOGY, VMS, virsh

pytestmark = pytest.mark.vm


def port_of(lab: Lab, guest: str) -> str:
    return lab.guest_vif(guest)


def vsctl(lab: Lab, *args: str) -> str:
    return lab.switch.vsctl(*args).strip()


def hv(lab: Lab, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    return run_hvnet(*args, env={"HVNET_LAB_DIR": str(lab.run_dir)}, timeout=timeout)


def in_guest(lab: Lab, guest: str, *argv: str, timeout: float = 30) -> subprocess.CompletedProcess:
    """Through ``hvnet lab exec``, as an operator would."""
    return hv(lab, "lab", "exec", guest, "--", *argv, timeout=timeout)


def test_libvirt_plugs_each_vm_into_ovs(mixed: Lab) -> None:
    topo = load_topology(TOPOLOGY)
    st = json.loads(hv(mixed, "lab", "status", "--json").stdout)
    assert st["state"] == "up"
    jsonschemas.check(documents.LAB_STATUS, st)  # with QEMU guests: their domains and channels
    for name in VMS:
        g = topo.guest(name)
        port = port_of(mixed, name)
        assert port.startswith("vnet"), port  # libvirt's name, not the lab's
        assert vsctl(mixed, "get", "port", port, "tag") == str(g.tag)  # from the domain's <vlan>
        ids = vsctl(mixed, "get", "interface", port, "external_ids")
        assert f'vm-id="{g.vm_uuid(topo.name)}"' in ids and f'attached-mac="{g.mac}"' in ids and "iface-id=" in ids
        rec = next(x for x in st["guests"] if x["name"] == name)
        assert rec["kind"] == "qemu" and rec["domain_state"] == "running" and rec["vif"] == port
        assert virsh("domuuid", name).stdout.strip() == g.vm_uuid(topo.name)
    status = json.loads(hv(mixed, "status", "--json").stdout)
    vifs = {v["port"]: v for v in status["vifs"]}
    vm1 = vifs[port_of(mixed, "VMQ1")]
    assert vm1["vm_name"] == "VMQ1" and vm1["vm_state"] == "running", vm1
    assert vm1["vm_interface"] and port_of(mixed, "VMQ1") in vm1["vm_interface"], vm1


def test_exec_reaches_the_vm_and_the_vlans_hold(mixed: Lab) -> None:
    res = in_guest(mixed, "VMQ1", "ip", "-o", "-4", "addr", "show", "eth0")
    assert res.returncode == 0 and "10.0.0.11/24" in res.stdout, res
    assert in_guest(mixed, "VMQ1", "sh", "-c", "exit 7").returncode == 7
    ok = in_guest(mixed, "VMQ1", "ping", "-c", "2", "-W", "2", "10.0.0.1")  # NS1, VLAN 10
    assert ok.returncode == 0, ok.stdout + ok.stderr
    blocked = in_guest(mixed, "VMQ1", "ping", "-c", "1", "-W", "1", "10.0.0.12")  # VMQ2, VLAN 20
    assert blocked.returncode != 0


def test_isolation_both_methods_with_vms(mixed: Lab, tmp_path: Path) -> None:
    res = hv(mixed, "isolation", "check", "vlan-tests/mixed-qemu.yaml", "--method", "both", "--json",
             "--out", str(tmp_path / "iso"))  # fmt: skip
    doc = json.loads(res.stdout)
    assert res.returncode == 0, res.stdout + res.stderr
    for method in ("traffic", "trace"):
        verdicts = {(c["listener"], c["sender"]): c["value"] for c in doc["methods"][method]["verdicts"]}
        assert len(verdicts) == 12 and set(verdicts.values()) == {"ok"}, (method, verdicts)
    assert doc["methods"]["traffic"]["stats"]["probes_sent"] >= 16  # the VMs' probes too, sent from inside them
    # the VMs' own captures came back over the channel and hold their peers' probes
    assert (tmp_path / "iso" / "VMQ1.pcap").stat().st_size > 24


def test_quick_suite_with_vm_endpoints(mixed: Lab, tmp_path: Path) -> None:
    out = tmp_path / "quick"
    res = hv(mixed, "suite", "run", "quick", "--topology", str(TOPOLOGY), "--client", "VMQ1", "--server", "NS1",
             "--repetitions", "1", "--json", "--out", str(out), timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads((out / "results.json").read_text())
    assert doc["state"] == "complete" and len(doc["steps"]) == 10
    assert doc["meta"]["client"]["runs_in"] == "qemu" and doc["meta"]["server"]["runs_in"] == "netns"
    for step in doc["steps"]:
        rep = step["repetitions"][0]
        assert rep["aggregate"]["lost"] == 0, step["key"]
        assert rep["cpu"]["netperf_pct_of_core"] > 0, step["key"]  # the guest's own CPU accounting
    report = hv(mixed, "suite", "report", str(out), "--no-plots").stdout
    assert "client VMQ1 run" in report.replace("runs", "run") and "QEMU guest" in report
    # and the other way round: netserver inside a VM
    out2 = tmp_path / "rr"
    res = hv(mixed, "suite", "run", "quick", "--topology", str(TOPOLOGY), "--client", "NS2", "--server", "VMQ2",
             "--repetitions", "1", "--concurrency", "1", "--duration", "1", "--json", "--out", str(out2),
             timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads((out2 / "results.json").read_text())
    assert doc["state"] == "complete" and doc["meta"]["server"]["runs_in"] == "qemu"


# -- the agent against libvirt re-plugging ----------------------------------------------

POLICY = """\
vifs:
  - vm: VMQ2
    vlan: {tag: 10}
    ingress: {rate: 10240, burst: 1024}
"""


def meter_flow(lab: Lab, port: str) -> bool:
    ofport = vsctl(lab, "get", "interface", port, "ofport")
    sock = f"unix:{lab.switch.run_dir / 'br0.mgmt'}"
    flows = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "--no-stats", "dump-flows", sock],
                           capture_output=True, text=True, check=True, timeout=10).stdout  # fmt: skip
    return f"in_port={ofport} actions=meter:" in flows


def in_force(lab: Lab) -> bool:
    port = port_of(lab, "VMQ2")
    return bool(port) and vsctl(lab, "get", "port", port, "tag") == "10" and meter_flow(lab, port)


def replugged_in_force(lab: Lab, old_port: str, timeout: float = 60) -> tuple[str, float]:
    """Wait for libvirt's new port, then time how long until the policy holds on it."""
    assert wait_until(lambda: port_of(lab, "VMQ2") not in ("", old_port), timeout) is not None, "no new port"
    port = port_of(lab, "VMQ2")
    took = wait_until(lambda: in_force(lab), 10)
    assert took is not None, f"policy not back on {port}"
    return port, took


def traffic_says_in_force(lab: Lab, netserver_ns: str) -> float:
    """VLAN: VMQ2 now reaches NS1 (VLAN 10), not NS2 (VLAN 20); ingress: its TCP stream is policed."""
    assert in_guest(lab, "VMQ2", "ping", "-c", "2", "-W", "2", "10.0.0.1").returncode == 0
    assert in_guest(lab, "VMQ2", "ping", "-c", "1", "-W", "1", "10.0.0.2").returncode != 0
    res = in_guest(lab, "VMQ2", "netperf", "-H", "10.0.0.1", "-t", "TCP_STREAM", "-l", "3", "-P", "0", "--",
                   "-m", "10000", "-o", "THROUGHPUT,THROUGHPUT_UNITS", timeout=60)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    mbit = float(res.stdout.strip().splitlines()[-1].split(",")[0])
    assert mbit < 12.0, f"{mbit} Mbit/s through a 10240 kbit/s limit"
    return mbit


def reconfigure_guest_nic(lab: Lab) -> None:
    """A re-attached NIC is a new device in the guest: address it again (the probe image has no DHCP)."""
    assert wait_until(lambda: in_guest(lab, "VMQ2", "ip", "link", "show", "eth0").returncode == 0, 20) is not None
    for argv in (["ip", "addr", "add", "10.0.0.12/24", "dev", "eth0"], ["ip", "link", "set", "eth0", "up"],
                 ["ethtool", "-K", "eth0", "tx", "off"]):  # fmt: skip
        in_guest(lab, "VMQ2", *argv)


def test_agent_keeps_policy_through_libvirt_replugs(mixed: Lab, tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    ns1 = mixed.ns_of("NS1")
    netserver = subprocess.Popen(["ip", "netns", "exec", ns1, "netserver", "-D", "-4"],
                                 stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    env_before = os.environ.get("HVNET_LAB_DIR")
    os.environ["HVNET_LAB_DIR"] = str(mixed.run_dir)
    agent = AgentProc(policy, tmp_path / "agent.log")
    try:
        assert wait_until(lambda: in_force(mixed), 15) is not None, agent.text()
        first = traffic_says_in_force(mixed, ns1)

        # virsh destroy + start: libvirt deletes the port and adds a new one with the domain's tag 20
        old = port_of(mixed, "VMQ2")
        virsh("destroy", "VMQ2")
        assert wait_until(lambda: port_of(mixed, "VMQ2") == "", 10) is not None
        virsh("start", "VMQ2")
        port, took = replugged_in_force(mixed, old)
        assert took < 1.5, f"tag and limit back on {port} after {took:.2f} s"
        assert wait_until(lambda: in_guest(mixed, "VMQ2", "true").returncode == 0, 90) is not None
        after_restart = traffic_says_in_force(mixed, ns1)

        # virsh detach-interface + attach-interface: the NIC unplugged and plugged live
        mac = load_topology(TOPOLOGY).guest("VMQ2").mac
        res = virsh("detach-interface", "VMQ2", "bridge", "--mac", mac, "--live", check=False)
        assert res.returncode == 0, res.stderr
        assert wait_until(lambda: port_of(mixed, "VMQ2") == "", 20) is not None, "libvirt did not unplug the NIC"
        xml = tmp_path / "nic.xml"
        xml.write_text(interface_xml(Nic("br0", mac, 20)))
        res = virsh("attach-device", "VMQ2", str(xml), "--live", check=False)
        assert res.returncode == 0, res.stderr
        port2, took2 = replugged_in_force(mixed, port)
        assert took2 < 1.5, f"tag and limit back on {port2} after {took2:.2f} s"
        reconfigure_guest_nic(mixed)
        after_attach = traffic_says_in_force(mixed, ns1)
        print(f"\npoliced TCP from VMQ2: {first:.2f} / {after_restart:.2f} / {after_attach:.2f} Mbit/s; "
              f"policy back {took * 1000:.0f} ms after start, {took2 * 1000:.0f} ms after attach")  # fmt: skip
    finally:
        assert agent.stop() == 0, agent.text()
        if env_before is None:
            os.environ.pop("HVNET_LAB_DIR", None)
        else:
            os.environ["HVNET_LAB_DIR"] = env_before
        netserver.terminate()
        netserver.wait(timeout=10)
    assert "Traceback" not in agent.text(), agent.text()
