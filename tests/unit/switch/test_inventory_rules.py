from dataclasses import replace

from appliance.switch import inventory, reader
from appliance.switch.counters import Counters
from appliance.switch.inventory import Vif


def vif(port: str, vm_uuid: str | None = None, bridge: str = "xenbr0") -> Vif:
    xen = reader.parse_xen_port(port)
    return Vif(
        bridge=bridge, port=port, interface=port, type="system", is_vif=True, ofport=1, mac=None, mac_in_use=None,
        hypervisor="xenserver", vm_uuid=vm_uuid, vm_name=None, vm_name_source=None, ids={},
        xen_domid=xen[1] if xen else None, xen_devid=xen[2] if xen else None, alias_ports=[],
        vlan_mode="access", vlan_mode_configured=None, tag=1, trunks=[], trunks_all_vlans=False,
        ingress_policing_rate_kbps=0, ingress_policing_burst_kbit=0, egress_qos_type=None,
        egress_max_rate_kbps=None, mirrors=[], link_state="up", admin_state="up", mtu=1500, error=None,
        counters=Counters(),
    )  # fmt: skip


def test_effective_vlan_mode_follows_ovs_rules() -> None:
    assert inventory.effective_vlan_mode(None, 5) == "access"
    assert inventory.effective_vlan_mode(None, None) == "trunk"
    assert inventory.effective_vlan_mode("native-untagged", 5) == "native-untagged"


def test_cleared_tag_trunks_every_vlan() -> None:
    assert inventory.trunks_all_vlans(None, None, []) is True
    assert inventory.trunks_all_vlans("trunk", None, [10]) is False
    assert inventory.trunks_all_vlans(None, 3, []) is False
    # A native port with no trunks list carries every VLAN too (ovs-vswitchd.conf.db(5)): one rule
    # with the planner's (appliance.core.vlan).
    assert inventory.trunks_all_vlans("native-untagged", 3, []) is True
    assert inventory.trunks_all_vlans("native-tagged", 3, [10]) is False


def test_hvm_tap_grouped_into_its_vif() -> None:
    vifs = [vif("vif2.0", "u2"), vif("tap2.0", "u2"), vif("tap3.0", "u3"), vif("vif4.0", "u4")]
    groups: dict = {}
    for v in vifs:
        groups.setdefault((v.bridge, v.xen_domid, v.xen_devid), []).append(v)
    out = inventory._group_xen_hvm(vifs, groups)
    assert [v.port for v in out] == ["vif2.0", "tap3.0", "vif4.0"]
    assert out[0].alias_ports == ["tap2.0"]


def test_hypervisor_detection() -> None:
    assert inventory.hypervisor_of({"xs-vm-uuid": "x"}) == "xenserver"
    assert inventory.hypervisor_of({"vm-id": "x", "iface-id": "y"}) == "libvirt"
    assert inventory.hypervisor_of({}) is None


def test_filter_vifs_matches_name_port_mac() -> None:
    a = replace(vif("vif1.0"), vm_name="web-01", mac="02:00:00:00:00:aa")
    b = replace(vif("vif2.0"), vm_name="db-01")
    assert inventory.filter_vifs([a, b], "WEB") == [a]
    assert inventory.filter_vifs([a, b], "00:aa") == [a]
    assert inventory.filter_vifs([a, b], "vif2") == [b]


def test_natural_sort() -> None:
    assert sorted(["vif10.0", "vif2.0", "vif1.0"], key=inventory._natural) == ["vif1.0", "vif2.0", "vif10.0"]
