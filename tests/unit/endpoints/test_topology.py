"""Topology validation: every bad-input class names file:line, field and what is allowed."""

from pathlib import Path

import pytest

from appliance.core.errors import ConfigError
from appliance.endpoints import topology

GOOD = """\
name: t
bridges:
  - name: br0
guests:
  - name: A
    ip: 10.0.0.1/24
    tag: 1
  - name: B
    ip: 10.0.0.2/24
    trunks: "10,20-21"
    vlan_mode: trunk
"""


def load_text(tmp_path: Path, text: str) -> topology.Topology:
    f = tmp_path / "topo.yaml"
    f.write_text(text)
    return topology.load(f)


def problems(tmp_path: Path, text: str) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        load_text(tmp_path, text)
    return [str(p) for p in exc.value.problems]


def test_default_topology_is_the_2010_study() -> None:
    t = topology.load(topology.DEFAULT_TOPOLOGY)
    assert [b.name for b in t.bridges] == ["xenbr0"]
    assert [(g.name, g.address, g.tag, g.vif) for g in t.guests] == [
        ("VM1", "192.168.0.150", 1, "vif1.0"),
        ("VM2", "192.168.0.151", 1, "vif2.0"),
        ("VM3", "192.168.0.152", 2, "vif3.0"),
    ]
    assert t.hypervisor == "xenserver"


def test_good_topology_defaults(tmp_path) -> None:
    t = load_text(tmp_path, GOOD)
    a, b = t.guests
    assert a.bridge == "br0" and a.vif == "vif1.0" and a.domid == 1
    assert b.trunks == (10, 20, 21) and b.vlan_mode == "trunk"
    assert a.mac.startswith("02:") and a.mac != b.mac
    # ids are stable across loads
    assert a.vm_uuid(t.name) == load_text(tmp_path, GOOD).guests[0].vm_uuid(t.name)


def test_unknown_keys(tmp_path) -> None:
    out = problems(tmp_path, GOOD.replace("    tag: 1\n", "    tag: 1\n    colour: red\n") + "extra: 1\n")
    assert any("topo.yaml:8: guests[0].colour: unknown key; allowed:" in p and "vlan_mode" in p for p in out)
    assert any(
        ":13: extra: unknown key; allowed: bridges, description, guests, hosts, hypervisor, name" in p for p in out
    )


@pytest.mark.parametrize(
    "tag, msg", [(4095, "reserved"), (5000, "outside 0..4094"), (-1, "outside 0..4094"), ('"x"', "integer")]
)
def test_tag_outside_range(tmp_path, tag, msg) -> None:
    (p,) = problems(tmp_path, GOOD.replace("tag: 1", f"tag: {tag}"))
    assert p.startswith(f"{tmp_path / 'topo.yaml'}:7: guests[0].tag: ")
    assert msg in p


def test_duplicate_names_and_ips(tmp_path) -> None:
    text = GOOD.replace("name: B", "name: A").replace("10.0.0.2/24", "10.0.0.1/24")
    out = problems(tmp_path, text)
    assert any(":8: guests[1].name: duplicate guest name 'A' (also guests[0])" in p for p in out)
    assert any(":9: guests[1].ip: duplicate IP 10.0.0.1 (also guests[0])" in p for p in out)


@pytest.mark.parametrize(
    "old, new, field",
    [
        ("name: A", "name: 1bad", "guests[0].name"),
        ("name: A", "name: has space", "guests[0].name"),
        ("- name: br0", "- name: bridge-name-too-long", "bridges[0].name"),
        ("- name: br0", "- name: br/0", "bridges[0].name"),
        ("ip: 10.0.0.1/24", "ip: 10.0.0.1", "guests[0].ip"),
        ("ip: 10.0.0.1/24", "ip: 10.0.0.0/24", "guests[0].ip"),
        ("ip: 10.0.0.1/24", "ip: 10.0.0.300/24", "guests[0].ip"),
        ("tag: 1", "tag: 1\n    mac: 01:00:00:00:00:01", "guests[0].mac"),
        ("tag: 1", "tag: 1\n    vif: br0", "guests[0].vif"),
        ("tag: 1", "tag: 1\n    bridge: nope", "guests[0].bridge"),
        ('trunks: "10,20-21"', 'trunks: "10,,20"', "guests[1].trunks"),
        ("vlan_mode: trunk", "vlan_mode: hybrid", "guests[1].vlan_mode"),
        ("vlan_mode: trunk", "vlan_mode: access", "guests[1].trunks"),
    ],
)
def test_invalid_values(tmp_path, old, new, field) -> None:
    out = problems(tmp_path, GOOD.replace(old, new, 1))
    assert any(f": {field}: " in p for p in out), out
    assert all(p.startswith(str(tmp_path / "topo.yaml") + ":") for p in out)


def test_missing_bridges_and_bad_shapes(tmp_path) -> None:
    out = problems(tmp_path, "guests: {}\n")
    assert any("bridges: required" in p for p in out)
    assert any("guests: must be a list" in p for p in out)
    assert problems(tmp_path, "- a\n") == [
        f"{tmp_path / 'topo.yaml'}:1: (document): a topology is a mapping with 'bridges' and 'guests'"
    ]


def test_all_problems_reported_at_once(tmp_path) -> None:
    text = GOOD.replace("tag: 1", "tag: 9999").replace("name: B", "name: 'B B'")
    assert len(problems(tmp_path, text)) == 2


def test_the_two_hosts_topology_places_the_2010_guests_on_two_hosts_joined_by_a_trunk() -> None:
    t = topology.load(Path(topology.DEFAULT_TOPOLOGY).parent / "two-hosts.yaml")
    assert t.hosts == ("hv1", "hv2")
    assert [(g.name, g.host, g.tag) for g in t.guests] == [("VM1", "hv1", 1), ("VM2", "hv2", 1), ("VM3", "hv1", 2)]
    (link,) = t.links()
    assert (link.bridge, link.a, link.a_end, link.b, link.b_end) == ("xenbr0", "hv1", "eth0-hv2", "hv2", "eth0-hv1")
    assert link.peer("hv1", "eth0-hv2") == ("hv2", "eth0-hv1") and link.peer("hv2", "vif2.0") is None


def test_a_hosts_management_link_may_be_a_port_of_one_of_its_bridges() -> None:
    t = topology.load(Path(topology.DEFAULT_TOPOLOGY).parent / "managed-host.yaml")
    assert (t.hosts, t.management) == (("hm1",), (("hm1", "xenbr0"),))
    assert topology.load(Path(topology.DEFAULT_TOPOLOGY).parent / "two-hosts.yaml").management == ()


def test_three_hosts_are_a_chain_per_bridge(tmp_path) -> None:
    text = GOOD.replace(
        "bridges:\n  - name: br0\n",
        "hosts: [{name: a}, {name: b}, {name: c}]\nbridges:\n  - name: br0\n  - name: br1\n",
    )
    text = text.replace("    tag: 1\n", "    tag: 1\n    host: a\n    bridge: br0\n")
    text = text.replace("    vlan_mode: trunk\n", "    vlan_mode: trunk\n    host: c\n    bridge: br1\n")
    t = load_text(tmp_path, text)
    assert [(ln.bridge, ln.a, ln.b) for ln in t.links()] == [
        ("br0", "a", "b"), ("br0", "b", "c"), ("br1", "a", "b"), ("br1", "b", "c")]  # fmt: skip
    assert [ln.a_end for ln in t.links()] == ["eth0-b", "eth0-c", "eth1-b", "eth1-c"]
    assert [g.name for g in t.guests_on("c")] == ["B"]


@pytest.mark.parametrize(
    "hosts, guest_extra, message",
    [
        (
            "hosts: [{name: hv1}, {name: hv2}]\n",
            "",
            "topo.yaml:6: guests[0].host: required when there are several hosts; one of: hv1, hv2",
        ),
        ("hosts: [{name: hv1}]\n", "    host: hv9\n", "guests[0].host: unknown host 'hv9'; one of: hv1"),
        ("", "    host: hv1\n", "guests[0].host: the topology declares no 'hosts'"),
        ("hosts: [{name: HV1}]\n", "", "hosts[0].name: required: 1-8 characters, a lower-case letter first"),
        ("hosts: [{name: hv1}, {name: hv1}]\n", "", "hosts[1].name: duplicate host name 'hv1'"),
        ("hosts: [{name: A}]\n", "", "hosts[0].name"),
        ("hosts: [{name: hv1, ip: 1}]\n", "", "hosts[0].ip: unknown key; allowed: kind, management, name"),
        (
            "hosts: [{name: hv1, management: xenbr0}]\n",
            "",
            "topo.yaml:1: hosts[0].management: one of the topology's bridges: br0",
        ),
        ("hosts: []\n", "", "hosts: a list of 1..16 hosts"),
    ],
)
def test_bad_hosts(tmp_path, hosts, guest_extra, message) -> None:
    text = hosts + GOOD.replace("    tag: 1\n", "    tag: 1\n" + guest_extra)
    out = problems(tmp_path, text)
    assert any(message in p for p in out), out


def test_a_guest_may_not_share_a_hosts_name(tmp_path) -> None:
    text = "hosts: [{name: hv1}]\n" + GOOD.replace("name: A\n", "name: hv1\n")
    assert any("guests[0].name: 'hv1' names a host too" in p for p in problems(tmp_path, text))


POOL = """\
hypervisor: libvirt
hosts: [{name: hv1}, {name: hv2}]
ovn:
  switches: [blue, red]
guests:
  - {name: A, host: hv1, switch: blue, ip: 10.0.0.1/24}
  - {name: B, host: hv2, switch: red, ip: 10.0.0.2/24}
"""


def test_the_ovn_pool_topology_spreads_the_2010_guests_over_three_chassis() -> None:
    t = topology.load(Path(topology.DEFAULT_TOPOLOGY).parent / "ovn-pool.yaml")
    assert t.ovn and t.ovn_switches == ("vlan1", "vlan2") and t.hosts == ("hv1", "hv2", "hv3")
    assert [b.name for b in t.bridges] == ["br-int"]
    assert [(g.name, g.host, g.lswitch, g.tag) for g in t.guests] == [
        ("VM1", "hv1", "vlan1", None), ("VM2", "hv2", "vlan1", None), ("VM3", "hv3", "vlan2", None)]  # fmt: skip
    assert t.links() == []  # the chassis meet through Geneve, not trunks


@pytest.mark.parametrize(
    "old, new, message",
    [
        ("hypervisor: libvirt\n", "", "ovn: an OVN pool needs 'hypervisor: libvirt'"),
        ("hosts: [{name: hv1}, {name: hv2}]\n", "", "ovn: an OVN pool needs 'hosts'"),
        ("switches: [blue, red]", "switches: []", "ovn.switches: required: a non-empty list"),
        ("switches: [blue, red]", "switches: [blue, blue]", "ovn.switches[1]: duplicate logical switch 'blue'"),
        ("switches: [blue, red]", "switches: [blue, 'r d']", "ovn.switches[1]: 1-32 characters"),
        ("  switches:", "  subnet: x\n  switches:", "ovn.subnet: unknown key; allowed: switches"),
        ("switch: red,", "switch: green,", "guests[1].switch: required in an OVN pool: one of the logical switches"),
        ("switch: red,", "tag: 2,", "guests[1].tag: in an OVN pool a guest joins a logical switch"),
        ("ovn:\n", "bridges: [{name: br0}]\novn:\n", "bridges: an OVN pool's hosts have one bridge, br-int"),
    ],
)
def test_bad_ovn_pools(tmp_path, old, new, message) -> None:
    assert old in POOL
    out = problems(tmp_path, POOL.replace(old, new, 1))
    assert any(message in p for p in out), out


def test_switch_is_only_for_ovn_pools(tmp_path) -> None:
    text = GOOD.replace("    tag: 1\n", "    switch: blue\n")
    assert any("guests[0].switch: only in a topology with 'ovn'" in p for p in problems(tmp_path, text))


def test_a_vm_host_puts_every_bridge_on_the_kernel_datapath(tmp_path) -> None:
    t = load_text(tmp_path, "hosts: [{name: kvm1, kind: vm}]\n" + GOOD)
    assert (t.hosts, t.vm_hosts) == (("kvm1",), ("kvm1",))
    assert [b.datapath_type for b in t.bridges] == ["system"]
    assert [g.host for g in t.guests] == ["kvm1", "kvm1"]
    plain = load_text(
        tmp_path,
        "hosts: [{name: hv1}, {name: hv2, kind: netns}]\n"
        + GOOD.replace("    tag: 1\n", "    tag: 1\n    host: hv1\n").replace(
            "    vlan_mode: trunk\n", "    vlan_mode: trunk\n    host: hv2\n"
        ),
    )
    assert (plain.vm_hosts, [b.datapath_type for b in plain.bridges]) == ((), ["netdev"])


@pytest.mark.parametrize(
    "hosts, bridge_extra, message",
    [
        (
            "hosts: [{name: hv1, kind: xen}]\n",
            "",
            "topo.yaml:1: hosts[0].kind: unknown host kind 'xen'; allowed: netns, vm",
        ),
        (
            "hosts:\n  - {name: kv1, kind: vm}\n  - {name: kv2, kind: vm}\n",
            "",
            "topo.yaml:3: hosts[1].kind: VM hosts kv1 and kv2 are neighbours in the chain: a trunk joins a VM "
            "host to a namespaced host, so put one between them",
        ),
        ("hosts: [{name: hv1, kind: vm, management: br0}]\n", "", "hosts[0].management: a VM host's management link"),
        (
            "hosts: [{name: hv1, kind: vm}]\n",
            "    datapath_type: netdev\n",
            "bridges[0].datapath_type: a VM host's bridges are on the kernel datapath: 'system'",
        ),
        ("hosts: [{name: hv1, kind: [vm]}]\n", "", "hosts[0].kind: unknown host kind ['vm']"),
    ],
)
def test_bad_vm_hosts(tmp_path, hosts, bridge_extra, message) -> None:
    text = hosts + GOOD.replace("  - name: br0\n", "  - name: br0\n" + bridge_extra)
    out = problems(tmp_path, text)
    assert any(message in p for p in out), out


def test_an_ovn_pool_has_no_vm_host(tmp_path) -> None:
    text = "hypervisor: libvirt\nhosts: [{name: hv1, kind: vm}]\novn: {switches: [ls1]}\nguests: []\n"
    assert any("ovn: an OVN pool's chassis are namespaced hosts" in p for p in problems(tmp_path, text))


MIXED = """\
hypervisor: xenserver
hosts:
  - {name: hv1}
  - {name: kvm1, kind: vm}
bridges:
  - {name: xenbr0, datapath_type: netdev}
guests:
  - {name: VM1, host: hv1, ip: 192.168.0.150/24, tag: 1}
  - {name: VM2, host: kvm1, ip: 192.168.0.151/24, tag: 1}
  - {name: T, host: kvm1, ip: 192.168.0.153/24, vlan_mode: trunk, trunks: "1,2"}
  - {name: N, host: kvm1, ip: 192.168.0.154/24, vlan_mode: native-untagged, tag: 1, trunks: "0,1,3"}
  - {name: U, host: hv1, ip: 192.168.0.155/24, vlan_mode: trunk, trunks: "1,2"}
"""


def test_a_mixed_pair_keeps_the_namespaced_hosts_datapath_and_puts_the_vm_hosts_on_the_kernel(tmp_path) -> None:
    t = load_text(tmp_path, MIXED)
    assert (t.hosts, t.vm_hosts) == (("hv1", "kvm1"), ("kvm1",))
    assert [b.datapath_type for b in t.bridges_on("hv1")] == ["netdev"]
    assert [b.datapath_type for b in t.bridges_on("kvm1")] == ["system"]
    assert [b.datapath_type for b in t.bridges_on(None)] == ["netdev"]  # the file's, as for any namespaced host
    # one trunk between them: the VM's NIC inside (eth0-hv1), its tap the namespaced host's end (eth0-kvm1)
    assert [(ln.a, ln.a_end, ln.b, ln.b_end) for ln in t.links()] == [("hv1", "eth0-kvm1", "kvm1", "eth0-hv1")]


def test_only_a_vm_hosts_guests_send_tagged_and_only_on_what_their_port_trunks_explicitly(tmp_path) -> None:
    t = load_text(tmp_path, MIXED)
    # T trunks 1 and 2: eth0.1, eth0.2; N's native VLAN 1 and VLAN 0 go untagged: eth0.3 only
    assert {g.name: t.tagged_vlans(g.name) for g in t.guests} == {"VM1": (), "VM2": (), "T": (1, 2), "N": (3,),
                                                                  "U": ()}  # fmt: skip
    # U is on hv1, a namespace of this machine, whose kernel has no 8021q


def test_a_vm_host_between_two_namespaced_hosts_is_a_chain(tmp_path) -> None:
    text = MIXED.replace("  - {name: kvm1, kind: vm}\n", "  - {name: kvm1, kind: vm}\n  - {name: hv3}\n")
    t = load_text(tmp_path, text)
    assert [(ln.a_end, ln.b_end) for ln in t.links()] == [("eth0-kvm1", "eth0-hv1"), ("eth0-hv3", "eth0-kvm1")]
