"""``hvnet vif show``, ``qos show``, ``sflow show``, ``ipfix show``: views of the one inventory read, on a
hand-built switch read through a real snapshot (tests/unit/switch_rows.py), and how the CLI writes them."""

from __future__ import annotations

import pytest

from appliance.cli import limits as cli_limits
from appliance.core.errors import UsageError
from appliance.services import limits
from appliance.switch import inventory
from tests.unit.switch_rows import OWNED, Db, lab_switch, refs, smap


def _inventory(db: Db | None = None) -> inventory.Inventory:
    return inventory.read((db or lab_switch()).snapshot(), kernel_counters=False)


def test_a_vifs_limits_in_bits_and_in_xe_and_libvirt_units() -> None:
    vif, lim = limits.vif_view(_inventory(), "vif1.0")
    assert vif.egress_burst_bits == 1_000_000  # queue 0's burst, as the shaper keeps it
    doc = lim.to_json()
    assert doc["ingress"] == {"rate_bits_per_s": 10_240_000, "burst_bits": 1_024_000, "burst_is_ovs_default": False,
                              "mechanism": "meter"}  # fmt: skip
    assert doc["egress"] == {"qos_type": "linux-htb", "rate_bits_per_s": 10_000_000, "burst_bits": 1_000_000}
    # xe's kbps and libvirt's average are kilobytes/s (1000 bytes); libvirt's burst is KiB (8192 bits).
    assert doc["equivalents"]["xe"] == {"qos_algorithm_type": "ratelimit", "qos_algorithm_params:kbps": 1280}
    assert doc["equivalents"]["libvirt"] == {
        "outbound": {"average": 1280, "burst": 125},  # 1024 kbit = 1 024 000 bit = 125 KiB
        "inbound": {"average": 1250, "burst": 1_000_000 / 8192},
    }


def test_vif_show_text_names_both_directions_and_the_other_tools() -> None:
    vif, lim = limits.vif_view(_inventory(), "tap1.0")  # an alias names the VIF too
    text = "\n".join(cli_limits._vif_lines(vif, lim))
    assert "vif1.0 (also tap1.0) on xenbr0" in text
    assert "ingress:  10240 kbit/s burst 1024 kbit (meter)  (what the VM may send)" in text
    assert "egress:   max 10000 kbit/s burst 1000 kbit  (what the VM may receive)" in text
    assert "qos_algorithm_params:kbps=1280 (kilobytes/s" in text
    assert "<bandwidth><outbound average='1280' burst='125'/>" in text
    assert "<bandwidth><inbound average='1250' burst='~122'/>" in text  # libvirt takes integers: marked rounded


def test_a_tc_police_burst_of_0_is_ovs_default() -> None:
    db = Db()
    iface = db.add("Interface", name="vif2.0", ingress_policing_rate=2000,
                   external_ids=smap({"attached-mac": "02:00:00:00:00:02", "xs-vm-uuid": "u2"}))  # fmt: skip
    port = db.add("Port", name="vif2.0", interfaces=refs(iface))
    db.add("Open_vSwitch", bridges=refs(db.add("Bridge", name="xenbr0", ports=refs(port))))
    (lim,) = limits.qos_view(_inventory(db))
    assert (lim.ingress_rate_kbit, lim.ingress_burst_kbit, lim.ingress_burst_is_default) == (2000, 8000, True)
    assert cli_limits._ingress(lim) == "2000 kbit/s burst 8000 kbit (OVS default) (tc)"
    assert lim.to_json()["egress"] is None and lim.equivalents()["libvirt"] == {
        "outbound": {"average": 250, "burst": 8_000_000 / 8192}
    }


def test_qos_show_selects_like_vif_set() -> None:
    inv = _inventory()
    assert [lim.port for lim in limits.qos_view(inv)] == ["vif1.0", "vnet0"]  # VIFs only, limited or not
    assert [lim.port for lim in limits.qos_view(inv, "mac:02:00:00:00:00:01")] == ["vif1.0"]
    assert [lim.port for lim in limits.qos_view(inv, "vm:0000-vm2")] == ["vnet0"]
    assert not limits.qos_view(inv, "vnet0")[0].limited
    with pytest.raises(UsageError, match=r"no VIF 'vif9\.0' on this switch"):
        limits.qos_view(inv, "vif9.0")


def test_a_vm_with_two_vifs_asks_for_one() -> None:
    db = Db()
    ports = []
    for i in (0, 1):
        iface = db.add("Interface", name=f"vif3.{i}", external_ids=smap({"xs-vm-uuid": "vm3", "attached-mac":
                                                                         f"02:00:00:00:03:0{i}"}))  # fmt: skip
        ports.append(db.add("Port", name=f"vif3.{i}", interfaces=refs(iface)))
    db.add("Open_vSwitch", bridges=refs(db.add("Bridge", name="xenbr0", ports=refs(*ports))))
    with pytest.raises(UsageError, match=r"vm:vm3 has 2 VIFs: vif3\.0, vif3\.1"):
        limits.vif_view(_inventory(db), "vm:vm3")


def _sampled() -> Db:
    db = lab_switch()
    sf = db.add("sFlow", targets=["set", ["192.0.2.10:6343"]], sampling=64, external_ids=OWNED)
    ipfix = db.add("IPFIX", targets=["set", ["192.0.2.11:4739"]], cache_active_timeout=0, cache_max_flows=0)
    bridge = db.raw["Bridge"][0]
    bridge["sflow"], bridge["ipfix"] = refs(sf), refs(ipfix)
    return db


def test_sflow_and_ipfix_show() -> None:
    inv = _inventory(_sampled())
    (sf,) = limits.sampling_view(inv, "sflow")
    assert sf.to_json() == {
        "bridge": "xenbr0", "kind": "sflow", "configured": True, "owner": "hvnet",
        "settings": {"targets": ["192.0.2.10:6343"], "sampling": 64, "polling_s": None,
                     "header_bytes": None, "agent": None},
        "text": "sFlow to 192.0.2.10:6343 1-in-64 polling 30 s header 128 B",
    }  # fmt: skip
    (ipfix,) = limits.sampling_view(inv, "ipfix", "xenbr0")
    doc = ipfix.to_json()
    assert doc["owner"] is None and doc["settings"]["cache_active_timeout_s"] == 0
    assert "no flow cache" in doc["text"]
    (none,) = limits.sampling_view(_inventory(), "sflow")
    assert none.to_json()["configured"] is False and none.text == "no sFlow"
    with pytest.raises(UsageError, match="no bridge named 'br9'"):
        limits.sampling_view(inv, "ipfix", "br9")


def test_a_port_that_is_no_vms_interface_is_said_to_be_so() -> None:
    db = Db()
    iface = db.add("Interface", name="eth1", ingress_policing_rate=2000)  # an uplink: no VM's ids
    port = db.add("Port", name="eth1", interfaces=refs(iface))
    db.add("Open_vSwitch", bridges=refs(db.add("Bridge", name="xenbr0", ports=refs(port))))
    vif, lim = limits.vif_view(_inventory(db), "eth1")
    assert not vif.is_vif
    assert cli_limits._vif_lines(vif, lim)[0] == "eth1 on xenbr0: not a VM's interface, MAC -"
    assert [x.port for x in limits.qos_view(_inventory(db))] == []  # the VIF listing keeps to VMs' interfaces
