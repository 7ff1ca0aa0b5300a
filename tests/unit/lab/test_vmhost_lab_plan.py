"""The lab's side of a VM host, the pure parts: the guest's commands for the VM's shell and what it shows."""

from __future__ import annotations

import shlex
from pathlib import Path

from appliance.endpoints.topology import Guest
from appliance.lab.vmhost import labhost

# `ip -o link show; echo '--'; ip netns list` in the shape the VM host's iproute2 prints it (one line per
# interface, a backslash for its line breaks, `@ifN` after a veth's name).
PRESENCE_OUTPUT = """\
1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN mode DEFAULT group default qlen 1000\\    link/loopback 00:00:00:00:00:00 brd 00:00:00:00:00:00
2: mgmt0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc fq_codel state UP mode DEFAULT group default qlen 1000\\    link/ether 52:54:00:6b:00:01 brd ff:ff:ff:ff:ff:ff
3: ovs-system: <BROADCAST,MULTICAST> mtu 1500 qdisc noop state DOWN mode DEFAULT group default qlen 1000\\    link/ether 5a:0e:1d:6b:2a:11 brd ff:ff:ff:ff:ff:ff
4: xenbr0: <BROADCAST,MULTICAST> mtu 1500 qdisc noop state DOWN mode DEFAULT group default qlen 1000\\    link/ether 9e:5c:02:44:6f:4b brd ff:ff:ff:ff:ff:ff
5: vif1.0@if2: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue master ovs-system state UP mode DEFAULT group default qlen 1000\\    link/ether fe:ff:ff:ff:ff:ff brd ff:ff:ff:ff:ff:ff link-netns hvnet-VA
--
hvnet-VB (id: 1)
hvnet-VA (id: 0)
"""


def test_what_the_vm_shows_is_its_interfaces_and_namespaces() -> None:
    links, namespaces = labhost.parse_presence(PRESENCE_OUTPUT)
    assert links == {"lo", "mgmt0", "ovs-system", "xenbr0", "vif1.0"}
    assert namespaces == {"hvnet-VA", "hvnet-VB"}
    assert labhost.parse_presence("") == (set(), set())


def test_a_guests_commands_quote_every_name_and_value_for_the_vms_shell() -> None:
    g = Guest("A", "xenbr0", "10.0.0.1/24", "02:00:00:00:00:01", "vif1.0", 1, tag=10)
    hostile = Guest("A", "xenbr0", "10.0.0.1/24; reboot", "$(reboot)", "vif1.0`x`", 1)
    line = labhost.guest_script(g, "hvnet-A")
    assert line.split("; ")[:3] == ["ip link del vif1.0 2>/dev/null || true",
                                    "ip netns del hvnet-A 2>/dev/null || true", "set -e"]  # fmt: skip
    assert "ip link add vif1.0 type veth peer name eth0 netns hvnet-A" in line
    assert (
        "ip -n hvnet-A addr add 10.0.0.1/24 dev eth0" in line and "ip link set vif1.0 address fe:ff:ff:ff:ff:ff" in line
    )
    bad = labhost.guest_script(hostile, "hvnet-A")
    for value in ("10.0.0.1/24; reboot", "$(reboot)", "vif1.0`x`"):
        assert shlex.quote(value) in bad and f" {value} " not in bad


def test_vm_hosts_take_their_management_links_in_the_recorded_order(tmp_path: Path) -> None:
    hosts = labhost.vm_hosts(tmp_path, ["kv1", "kv2"])
    assert [(h.link.tap, h.link.address) for h in hosts.values()] == [
        ("hvk1", "169.254.32.6"),
        ("hvk2", "169.254.32.10"),
    ]
    assert hosts["kv2"].dir == tmp_path.resolve() / "kv2"


def test_a_trunk_guest_gets_a_vlan_sub_interface_per_tagged_vlan_with_its_own_address() -> None:
    g = Guest("T", "xenbr0", "10.0.0.5/24", "02:00:00:00:00:05", "vif5.0", 5, trunks=(10, 20), vlan_mode="trunk")
    steps = labhost.guest_script(g, "hvnet-T", (10, 20)).split("; ")
    for v in (10, 20):
        assert f"ip -n hvnet-T link add link eth0 name eth0.{v} type vlan id {v}" in steps
        # its own address, no prefix route: plain traffic keeps eth0, the probes from eth0.V are still its own
        assert f"ip -n hvnet-T addr add 10.0.0.5/24 dev eth0.{v} noprefixroute" in steps
        assert steps.index(f"ip -n hvnet-T link set eth0.{v} up") > steps.index("ip -n hvnet-T link set eth0 up")
    assert steps[-1] == "ip link set vif5.0 up"  # the VIF goes up last, its namespace complete
    assert "eth0." not in labhost.guest_script(g, "hvnet-T")


def test_the_trunk_nic_is_found_in_the_vm_by_its_mac_and_renamed_quoted() -> None:
    nic = labhost.TrunkNic("hvk1t0", "52:54:10:6b:00:01", "eth0-hv1")
    line = labhost.trunk_inside_script(nic)
    assert line.startswith("set -e; ") and "ip link set eth0-hv1 up; ethtool -K eth0-hv1 tx off" in line
    assert '[ "$a" = 52:54:10:6b:00:01 ]' in line and 'ip link set "$dev" name eth0-hv1' in line
    hostile = labhost.trunk_inside_script(labhost.TrunkNic("t", "$(reboot)", "x;reboot"))
    assert "'$(reboot)'" in hostile and "'x;reboot'" in hostile


def test_vm_hosts_get_their_trunk_nics_when_they_are_to_boot(tmp_path: Path) -> None:
    hosts = labhost.vm_hosts(tmp_path, ["kv1", "kv2"], {"kv2": ("eth0-hv1", "eth0-hv3")})
    assert hosts["kv1"].trunks == ()
    assert [(n.tap, n.inside) for n in hosts["kv2"].trunks] == [("hvk2t0", "eth0-hv1"), ("hvk2t1", "eth0-hv3")]
