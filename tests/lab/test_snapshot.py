"""The one-shot snapshot reads what the live replica reads: same inventory, same values, from a real ovsdb-server."""

from __future__ import annotations

import subprocess

from appliance.core import ovsdb
from appliance.core.target import DbTarget
from appliance.switch import inventory, reader, snapshot


def _vsctl(switch, *args: str) -> None:
    subprocess.run(["ovs-vsctl", f"--db={switch.remote}", "--no-wait", *args], check=True, capture_output=True)


def test_snapshot_and_replica_give_the_same_inventory(switch) -> None:
    _vsctl(
        switch, "add-br", "br0", "--", "set", "bridge", "br0", "datapath_type=netdev", "protocols=OpenFlow10,OpenFlow13"
    )
    _vsctl(switch, "add-port", "br0", "vif1.0", "tag=10", "--", "set", "Interface", "vif1.0", "type=internal",
           "external_ids:xs-vm-uuid=u-1", "external_ids:attached-mac=02:00:00:00:00:01", "ingress_policing_rate=1000")  # fmt: skip
    _vsctl(switch, "add-port", "br0", "vif2.0", "trunks=20,30", "vlan_mode=native-untagged", "tag=20")
    _vsctl(switch, "add-port", "br0", "vif3.0")  # no tag, no trunks: every VLAN
    _vsctl(switch, "--", "--id=@q", "create", "QoS", "type=linux-htb", "other-config:max-rate=20000000",
           "--", "set", "Port", "vif2.0", "qos=@q")  # fmt: skip
    _vsctl(switch, "--", "--id=@p", "get", "Port", "vif1.0", "--", "--id=@o", "get", "Port", "vif3.0",
           "--", "--id=@m", "create", "Mirror", 'name="m[/]"', "select-src-port=@p", "output-port=@o",
           "--", "add", "Bridge", "br0", "mirrors", "@m")  # fmt: skip
    target = DbTarget(switch.remote, "--db")
    with ovsdb.Connection.open(target, reader.COLUMNS) as conn:
        live = inventory.read(conn, kernel_counters=False).to_json(all_ports=True)
    once = inventory.read(snapshot.take(target, reader.COLUMNS), kernel_counters=False).to_json(all_ports=True)
    assert live.pop("host") == once.pop("host")
    assert live == once
    v3 = next(v for v in once["vifs"] if v["port"] == "vif3.0")
    assert v3["trunks_all_vlans"] is True and v3["mirrors"] == [{"mirror": "m[/]", "role": "output"}]
    v2 = next(v for v in once["vifs"] if v["port"] == "vif2.0")
    assert (v2["vlan_mode"], v2["tag"], v2["trunks"], v2["egress_max_rate_bits_per_s"]) == (
        "native-untagged",
        20,
        [20, 30],
        20000000,
    )
