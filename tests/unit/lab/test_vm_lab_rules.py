"""QEMU guests in topologies, their libvirt domain XML, and suites moved onto other guests (pure rules)."""

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from appliance.core.errors import ConfigError
from appliance.endpoints import topology
from appliance.lab.vm.domain import DomainSpec, Nic, domain_xml, interface_xml
from appliance.netperf.define import suite as suite_mod

ROOT = Path(__file__).resolve().parents[3]
MIXED = ROOT / "vlan-tests" / "topologies" / "mixed-qemu.yaml"


def problems(tmp_path: Path, text: str) -> list[str]:
    f = tmp_path / "topo.yaml"
    f.write_text(text)
    with pytest.raises(ConfigError) as exc:
        topology.load(f)
    return [str(p) for p in exc.value.problems]


def test_mixed_topology_has_two_kinds() -> None:
    t = topology.load(MIXED)
    assert [(g.name, g.kind, g.tag) for g in t.guests] == [
        ("NS1", "netns", 10), ("NS2", "netns", 20), ("VMQ1", "qemu", 10), ("VMQ2", "qemu", 20)
    ]  # fmt: skip
    # libvirt names a QEMU guest's port; the topology does not pretend to know it
    assert [g.vif for g in t.guests] == ["vif1.0", "vif2.0", "", ""]


def test_qemu_guest_rules(tmp_path: Path) -> None:
    text = """\
hypervisor: xenserver
bridges: [{name: br0}]
guests:
  - {name: A, kind: qemu, ip: 10.0.0.1/24, vif: tap1}
  - {name: B, kind: lxc, ip: 10.0.0.2/24}
  - {name: C, ip: 10.0.0.3/24, memory: 512}
  - {name: D, kind: qemu, ip: 10.0.0.4/24, memory: 64}
  - {name: E, ip: 10.0.0.5/24, vcpus: 2}
  - {name: F, kind: qemu, ip: 10.0.0.6/24, vcpus: 0}
  - {name: G, kind: qemu, ip: 10.0.0.7/24, vcpus: true}
"""
    found = problems(tmp_path, text)
    assert any(":4: guests[0].kind:" in p and "hypervisor: libvirt" in p for p in found), found
    assert any(":4: guests[0].vif:" in p and "vnetN" in p for p in found), found
    assert any(":5: guests[1].kind:" in p and "allowed: netns, qemu" in p for p in found), found
    assert any(":6: guests[2].memory:" in p and "only a qemu guest" in p for p in found), found
    assert any(":7: guests[3].memory:" in p and "128..4096" in p for p in found), found
    assert any(":8: guests[4].vcpus:" in p and "only a qemu guest has vCPUs" in p for p in found), found
    assert any(":9: guests[5].vcpus:" in p and "1..16" in p for p in found), found
    assert any(":10: guests[6].vcpus:" in p and "1..16" in p for p in found), found


def test_a_qemu_guest_is_sized_per_guest_and_says_what_tcg_vcpus_measure(tmp_path: Path) -> None:
    from appliance.lab.vm.labguests import size_text

    f = tmp_path / "topo.yaml"
    f.write_text("""\
hypervisor: libvirt
bridges: [{name: br0}]
guests:
  - {name: MON1, kind: qemu, ip: 10.0.0.1/24, vcpus: 4, memory: 512}
  - {name: VM1, kind: qemu, ip: 10.0.0.2/24}
""")
    mon, vm = topology.load(f).guests
    assert (mon.vcpus, mon.memory_mib, vm.vcpus, vm.memory_mib) == (4, 512, 1, 256)
    assert size_text(vm, "qemu") == "1 vCPU, 256 MiB"
    assert size_text(mon, "kvm") == "4 vCPUs, 512 MiB"
    tcg = size_text(mon, "qemu")
    assert tcg.startswith("4 vCPUs, 512 MiB; under TCG") and "measures the emulator" in tcg
    dom = ET.fromstring(domain_xml(DomainSpec(name="MON1", uuid="11111111-2222-3333-4444-555555555555",
        domain_type="qemu", kernel="/k", initrd="/i", cmdline="", channel="/c", console_log="/l",
        memory_mib=mon.memory_mib, vcpus=mon.vcpus, nics=())))  # fmt: skip
    assert (dom.find("vcpu").text, dom.find("memory").text, dom.find("memory").get("unit")) == ("4", "512", "MiB")


def test_domain_xml_plugs_into_ovs_with_the_vlan() -> None:
    spec = DomainSpec(
        name="VMQ1", uuid="11111111-2222-3333-4444-555555555555", domain_type="qemu", kernel="/k",
        initrd="/i", cmdline="console=ttyS0 hvnet.ip=10.0.0.11/24", channel="/run/x/VMQ1.chan",
        console_log="/run/x/VMQ1.console.log", nics=(Nic("br0", "02:00:00:00:00:01", 10),),
    )  # fmt: skip
    dom = ET.fromstring(domain_xml(spec))
    assert dom.get("type") == "qemu"
    iface = dom.find("devices/interface")
    assert iface is not None and iface.get("type") == "bridge"
    assert iface.find("source").get("bridge") == "br0"
    assert iface.find("virtualport").get("type") == "openvswitch"
    assert [t.get("id") for t in iface.findall("vlan/tag")] == ["10"]
    assert iface.find("vlan").get("trunk") is None
    chan, ga = dom.findall("devices/channel")
    assert chan.find("target").get("name") == "org.hvnet.agent"
    assert chan.find("source").get("path") == "/run/x/VMQ1.chan"
    # libvirt's guest agent channel: libvirt picks the socket (no path) and talks to qemu-ga itself
    assert (ga.get("type"), ga.find("target").get("type")) == ("unix", "virtio")
    assert ga.find("target").get("name") == "org.qemu.guest_agent.0"
    assert ga.find("source").get("mode") == "bind" and ga.find("source").get("path") is None
    assert dom.find("os/cmdline").text == "console=ttyS0 hvnet.ip=10.0.0.11/24"


def test_interface_vlan_forms() -> None:
    trunk = ET.fromstring(interface_xml(Nic("br0", "02:00:00:00:00:02", None, (10, 20), "trunk")))
    assert trunk.find("vlan").get("trunk") == "yes"
    assert [t.get("id") for t in trunk.findall("vlan/tag")] == ["10", "20"]
    native = ET.fromstring(interface_xml(Nic("br0", "02:00:00:00:00:03", 5, (5, 6), "native-untagged")))
    assert [(t.get("id"), t.get("nativeMode")) for t in native.findall("vlan/tag")] == [("5", "untagged"), ("6", None)]
    every = ET.fromstring(interface_xml(Nic("br0", "02:00:00:00:00:04")))
    assert every.find("vlan") is None  # no <vlan>: the port carries every VLAN, as OVS would


def test_suite_moved_onto_other_guests() -> None:
    quick = suite_mod.load("quick")
    mixed = topology.load(MIXED)
    moved = quick.with_endpoints(mixed, "VMQ1", "NS1")
    assert (moved.client, moved.server.guest, moved.server.port) == ("VMQ1", "NS1", quick.server.port)
    assert moved.topology.name == "mixed-qemu" and moved.tests == quick.tests
    with pytest.raises(ValueError, match=r"client 'VM9' is not a guest of topology .*guests: NS1, NS2, VMQ1, VMQ2"):
        quick.with_endpoints(mixed, "VM9", "NS1")
    with pytest.raises(ValueError, match="both 'NS1'"):
        quick.with_endpoints(mixed, "NS1", "NS1")
