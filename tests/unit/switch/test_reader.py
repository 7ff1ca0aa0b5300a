"""The one walk of the switch's rows, and the one list of columns every verb's own derives from."""

from __future__ import annotations

from dataclasses import replace

from appliance.core.vlan import VlanCols
from appliance.switch import inventory, reader
from appliance.switch.reader import COLUMNS, CONFIG_COLUMNS, SHOWN_ONLY
from tests.unit.switch_rows import lab_switch


def test_parse_xen_port() -> None:
    assert reader.parse_xen_port("vif3.0") == ("vif", 3, 0)
    assert reader.parse_xen_port("tap12.1") == ("tap", 12, 1)
    assert reader.parse_xen_port("vnet0") is None
    assert reader.parse_xen_port("vif3") is None


def test_every_port_on_a_bridge_with_an_interface_is_read_once_with_its_first_interface() -> None:
    rows = reader.read(lab_switch().snapshot())
    assert [p.name for p in rows.ports] == ["vif1.0", "tap1.0", "vnet0", "eth0", "gre0"]
    (br,) = rows.bridges
    # the bridge names every port it has, one whose interface is not there yet too; a Port row no bridge has is nowhere
    assert br.ports == ["empty0", "eth0", "gre0", "tap1.0", "vif1.0", "vnet0"]
    assert (br.name, br.datapath_type, br.mirrors, br.fail_mode) == ("xenbr0", "system", ["m1"], "standalone")
    vif = rows.ports[0]
    assert (vif.bridge, vif.interface, vif.ofport, vif.is_vif, vif.vm_uuid) == ("xenbr0", "vif1.0", 3, True, "0000-vm1")
    assert vif.vlan == VlanCols(None, 10, ())
    assert (vif.qos is not None and vif.qos.type, vif.policing_rate, vif.link_state) == ("linux-htb", 0, "up")
    assert vif.statistics == {"rx_bytes": 100, "rx_packets": 2, "tx_bytes": 300, "tx_packets": 4}
    vnet = rows.ports[2]
    assert (vnet.vlan, vnet.vm_uuid, vnet.type) == (VlanCols("native-untagged", 20, (21, 30)), "0000-vm2", "")
    assert [p.is_vif for p in rows.ports] == [True, True, True, False, False]
    assert (rows.root.ovs_version, rows.root.external_ids["hostname"]) == ("3.1.0", "hv1")


def test_a_mirror_tells_each_port_its_role_and_describes_its_output_interface() -> None:
    rows = reader.read(lab_switch().snapshot())
    ports = {p.name: p for p in rows.ports}
    assert ports["vif1.0"].mirrors == [{"mirror": "m1", "role": "source"}]
    assert ports["gre0"].mirrors == [{"mirror": "m1", "role": "output"}]
    assert ports["eth0"].mirrors == []
    (m,) = rows.mirrors
    assert (m.bridge, m.src, m.dst, m.output_port, m.snaplen) == ("xenbr0", ["vif1.0"], [], "gre0", 128)
    assert (m.output_type, m.output_options) == ("gre", {"key": "7", "remote_ip": "192.0.2.9"})
    assert m.statistics == {"tx_packets": 5, "tx_bytes": 640}


def test_a_narrower_set_of_columns_leaves_only_what_the_display_shows_unset() -> None:
    db = lab_switch()
    full, narrow = reader.read(db.snapshot()), reader.read(db.snapshot(CONFIG_COLUMNS))
    shown = {"link_state": None, "admin_state": None, "mtu": None, "statistics": {}}
    assert narrow.ports == [replace(p, **shown) for p in full.ports]
    assert narrow.bridges == [replace(b, fail_mode=None) for b in full.bridges]
    assert narrow.mirrors == full.mirrors
    assert narrow.root.db_version is None and narrow.root.datapath_types == []
    assert narrow.root.ovs_version == full.root.ovs_version


def test_a_column_left_out_is_not_read() -> None:
    """The agent's replica leaves out every ``statistics`` column (they change by themselves)."""
    columns = {t: [c for c in cols if c != "statistics"] for t, cols in CONFIG_COLUMNS.items()}
    rows = reader.read(lab_switch().snapshot(columns))
    assert rows.mirrors[0].statistics == {} and rows.mirrors[0].name == "m1"


def test_the_verbs_columns_derive_from_the_one_list() -> None:
    for table, cols in SHOWN_ONLY.items():
        assert set(cols) <= set(COLUMNS[table]), f"{table}: {sorted(set(cols) - set(COLUMNS[table]))} not read"
    assert CONFIG_COLUMNS.keys() == COLUMNS.keys()
    for table, cols in COLUMNS.items():
        assert CONFIG_COLUMNS[table] == [c for c in cols if c not in SHOWN_ONLY.get(table, ())]


def test_the_inventory_is_a_view_of_the_same_rows() -> None:
    inv = inventory.read(lab_switch().snapshot(), kernel_counters=False)
    assert [(v.port, v.alias_ports) for v in inv.vifs] == [
        ("vif1.0", ["tap1.0"]), ("vnet0", []), ("eth0", []), ("gre0", []),
    ]  # fmt: skip
    vif = inv.vifs[0]
    limits = (vif.ingress_mechanism, vif.ingress_policing_rate_kbps, vif.egress_max_rate_kbps)
    assert limits == ("meter", 10240, 10000.0)
    assert (vif.counters.rx_bytes, vif.counters.source, vif.vlan_summary()) == (100, "ovsdb", "access 10")
    assert [(b.name, b.ports, b.mirrors) for b in inv.bridges] == [("xenbr0", 6, ["m1"])]
    assert [(m.name, m.output_port, m.tx_packets, m.owner) for m in inv.mirrors] == [("m1", "gre0", 5, "hvnet")]
    assert (inv.host.hostname, inv.host.db_version, inv.host.datapath_types) == ("hv1", "8.3.1", ["netdev", "system"])
