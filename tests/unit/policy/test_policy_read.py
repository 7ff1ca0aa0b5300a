"""The planner's State, read from the switch's shared rows: as stored, and the same ports the display sees."""

from __future__ import annotations

from appliance.policy.apply import read
from appliance.policy.plan.model import Egress, Ingress, TunnelCols
from appliance.policy.plan.state import PoliceCols
from appliance.switch import inventory
from appliance.switch.reader import CONFIG_COLUMNS
from tests.unit.switch_rows import lab_switch


def test_ports_keep_their_columns_as_stored() -> None:
    st = read.state(lab_switch().snapshot(read.COLUMNS), {"0000-vm1": "VM1"})
    assert list(st.ports) == ["vif1.0", "tap1.0", "vnet0", "eth0", "gre0"]
    vif = st.ports["vif1.0"]
    assert vif.police == PoliceCols(0, 0, 10240, 1024) and vif.police.effective() == Ingress(10240, 1024, "meter")
    assert vif.qos is not None and vif.qos.owned and vif.qos.effective() == Egress(10000, 1000)
    assert (vif.mac, vif.vm_name, vif.iface_type, vif.n_interfaces) == ("02:00:00:00:00:01", "VM1", "system", 1)
    assert st.ports["vnet0"].mac == "fe:54:00:00:00:05"  # no attached-mac: the MAC in use, as the planner matches it
    assert st.ports["gre0"].owner_mirror == "m1" and st.ports["eth0"].owner_mirror is None
    assert st.bridges["xenbr0"].ports == ("empty0", "eth0", "gre0", "tap1.0", "vif1.0", "vnet0")
    assert (st.ovs_version, st.has_mirror_filter, st.has_mirror_snaplen) == ("3.1.0", True, True)


def test_a_tunnel_hvnet_made_for_a_mirror_is_read_back_with_it() -> None:
    st = read.state(lab_switch().snapshot())
    m = st.mirrors[("xenbr0", "m1")]
    assert m.cols.tunnel == TunnelCols("gre0", "gre", (("key", "7"), ("remote_ip", "192.0.2.9")))
    assert (m.cols.src, m.cols.output_port, m.cols.snaplen, m.cols.owned) == (("vif1.0",), "gre0", 128, True)
    assert m.statistics == {"tx_packets": 5, "tx_bytes": 640}


def test_the_state_is_the_same_from_every_verbs_columns() -> None:
    db = lab_switch()
    assert read.state(db.snapshot()) == read.state(db.snapshot(read.COLUMNS))
    # the agent's replica has no statistics: the mirror is read all the same
    agent = {t: [c for c in cols if c != "statistics"] for t, cols in CONFIG_COLUMNS.items()}
    st = read.state(db.snapshot(agent))
    assert st.mirrors[("xenbr0", "m1")].statistics == {} and st.mirrors[("xenbr0", "m1")].cols.tunnel is not None


def test_what_the_display_calls_a_vif_is_what_a_policy_selects() -> None:
    db = lab_switch()
    inv, st = inventory.read(db.snapshot(), kernel_counters=False), read.state(db.snapshot())
    for v in inv.vifs:
        p = st.ports[v.port]
        assert (p.is_vif, p.vm_uuid, p.interface, p.ofport, p.vlan.mode) == (
            v.is_vif, v.vm_uuid, v.interface, v.ofport, v.vlan_mode,
        ), v.port  # fmt: skip
    assert [p.name for p in st.vifs()] == ["vif1.0", "tap1.0", "vnet0"]
