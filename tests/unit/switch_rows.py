"""Hand-built Open_vSwitch databases for the readers' unit tests, read through a real snapshot.

The rows are what a ``select`` returns (RFC 7047 notation) and are turned into
a :class:`~appliance.switch.snapshot.Snapshot` by the same code a one-shot
read uses, typed by the schema of the columns hvnet reads (OVS 3.1's, with
OVS 3.3's ``Mirror.filter``): the readers cannot tell it from a server's.
"""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from appliance.core.target import DbTarget
from appliance.switch import snapshot
from appliance.switch.reader import COLUMNS

SCHEMA: dict[str, Any] = json.loads((Path(__file__).parent / "data" / "vswitch-schema-read.json").read_text())["tables"]


def ref(row: str) -> list[str]:
    return ["uuid", row]


def refs(*rows: str) -> list[Any]:
    return ["set", [ref(r) for r in rows]]


def smap(values: Mapping[str, Any]) -> list[Any]:
    return ["map", [[k, v] for k, v in values.items()]]


def _empty(column_type: Any) -> Any:
    """A column's value when a row leaves it out: an empty set or map, else the atom's zero."""
    atom = column_type["key"] if isinstance(column_type, dict) else column_type
    atom = atom["type"] if isinstance(atom, dict) else atom
    if isinstance(column_type, dict) and (column_type.get("min", 1) == 0 or atom == "uuid"):
        return ["map", []] if "value" in column_type else ["set", []]
    return {"string": "", "integer": 0, "real": 0.0, "boolean": False}[atom]


GONE = str(uuid.UUID(int=999))  # a row that is not in the database
OWNED = smap({"hvnet-owner": "hvnet"})


class Db:
    """Rows added table by table; :meth:`snapshot` reads them with a verb's columns."""

    def __init__(self) -> None:
        self.raw: dict[str, list[dict[str, Any]]] = {t: [] for t in SCHEMA}
        self._next = 0

    def add(self, table: str, **values: Any) -> str:
        self._next += 1
        row_uuid = str(uuid.UUID(int=self._next))
        columns = SCHEMA[table]["columns"]
        unknown = set(values) - set(columns)
        assert not unknown, f"{table} has no {sorted(unknown)}"
        row = {c: values.get(c, _empty(spec["type"])) for c, spec in columns.items()}
        self.raw[table].append({"_uuid": ref(row_uuid), **row})
        return row_uuid

    def snapshot(self, columns: Mapping[str, Iterable[str]] = COLUMNS) -> snapshot.Snapshot:
        present = {t: [c for c in cols if c in SCHEMA[t]["columns"]] for t, cols in columns.items() if t in SCHEMA}
        return snapshot.build(DbTarget("unix:/db.sock", "test"), SCHEMA, present, {t: self.raw[t] for t in present})


def lab_switch() -> Db:
    """xenbr0 as a policy leaves it: an HVM guest's VIF (``vif1.0`` and its emulated ``tap1.0``) with a tag,
    a meter record and an egress cap; a libvirt guest's ``vnet0``; the uplink; a port whose interface is not
    there (a reference to no row, which a read drops); a GRE tunnel hvnet made for mirror ``m1``, which copies ``vif1.0`` there; and a Port row no
    bridge references."""
    db = Db()
    q0 = db.add("Queue", other_config=smap({"burst": "1000000"}), external_ids=OWNED)
    qos = db.add(
        "QoS", type="linux-htb", other_config=smap({"max-rate": "10000000"}), queues=["map", [[0, ref(q0)]]],
        external_ids=OWNED,
    )  # fmt: skip
    xen = {"xs-vm-uuid": "0000-vm1", "xs-vif-uuid": "0000-vif1", "attached-mac": "02:00:00:00:00:01"}
    vif = db.add(
        "Interface", name="vif1.0", ofport=3, link_state="up", admin_state="up", mtu=1500,
        external_ids=smap({**xen, "hvnet-police-rate-kbps": "10240", "hvnet-police-burst-kbit": "1024"}),
        statistics=smap({"rx_bytes": 100, "rx_packets": 2, "tx_bytes": 300, "tx_packets": 4}),
    )  # fmt: skip
    tap = db.add("Interface", name="tap1.0", ofport=4, external_ids=smap(xen))
    vnet = db.add(
        "Interface", name="vnet0", ofport=5, mac_in_use="FE:54:00:00:00:05",
        external_ids=smap({"vm-id": "0000-vm2", "iface-id": "port-2"}),
    )  # fmt: skip
    eth = db.add("Interface", name="eth0", ofport=1, link_state="up", ingress_policing_rate=0)
    gre = db.add("Interface", name="gre0", type="gre", options=smap({"remote_ip": "192.0.2.9", "key": "7"}))
    ports = {
        "vif1.0": db.add("Port", name="vif1.0", interfaces=refs(vif), tag=10, qos=refs(qos)),
        "tap1.0": db.add("Port", name="tap1.0", interfaces=refs(tap), tag=10),
        "vnet0": db.add("Port", name="vnet0", interfaces=refs(vnet), vlan_mode="native-untagged", tag=20,
                        trunks=["set", [30, 21]]),
        "eth0": db.add("Port", name="eth0", interfaces=refs(eth)),
        "empty0": db.add("Port", name="empty0", interfaces=refs(GONE)),
        "gre0": db.add("Port", name="gre0", interfaces=refs(gre),
                       external_ids=smap({"hvnet-owner": "hvnet", "hvnet-mirror": "m1"})),
    }  # fmt: skip
    db.add("Port", name="loose0")
    m1 = db.add(
        "Mirror", name="m1", select_src_port=refs(ports["vif1.0"]), output_port=refs(ports["gre0"]),
        statistics=smap({"tx_packets": 5, "tx_bytes": 640}), external_ids=OWNED, snaplen=128,
    )  # fmt: skip
    br = db.add(
        "Bridge", name="xenbr0", ports=refs(*ports.values()), mirrors=refs(m1), fail_mode="standalone",
        protocols=["set", ["OpenFlow10", "OpenFlow13"]],
    )  # fmt: skip
    db.add(
        "Open_vSwitch", bridges=refs(br), ovs_version="3.1.0", db_version="8.3.1",
        datapath_types=["set", ["system", "netdev"]], external_ids=smap({"hostname": "hv1", "system-id": "hv1-id"}),
    )  # fmt: skip
    return db
