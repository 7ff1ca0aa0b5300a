"""A pool's logical network as the operator reads it, from one snapshot of each central database.

OVN keeps the intent (logical switches, their ports, QoS rules, mirrors) in
the northbound database and what the chassis did with it (which chassis
binds which port, how far each chassis has caught up) in the southbound
one.  :func:`build` joins the two; it only reads rows, so it is tested on
snapshots taken from a real pool.  The VM behind a port is not in either
database: it is on the chassis that binds the port (the VIF whose
``external_ids:iface-id`` names it), and the service layer fills it in.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from appliance.core import documents
from appliance.core.ovsdb import column as col
from appliance.core.ovsdb import opt

NB_DB = "OVN_Northbound"
COMMIT_KEY = "hvnet-last-commit"  # NB_Global external_ids: the record id of hvnet's last commit in this NB
VLAN_KEY = "hvnet-vlan"  # Logical_Switch external_ids: the VLAN an overlay-only logical switch stands for
SB_DB = "OVN_Southbound"

NB_COLUMNS: dict[str, list[str]] = {
    "NB_Global": ["nb_cfg", "sb_cfg", "hv_cfg", "nb_cfg_timestamp", "hv_cfg_timestamp", "external_ids"],
    "Logical_Switch": ["name", "ports", "qos_rules", "external_ids"],
    "Logical_Switch_Port": [
        "name",
        "type",
        "addresses",
        "tag",
        "tag_request",
        "options",
        "up",
        "enabled",
        "external_ids",
        "mirror_rules",
    ],
    "QoS": ["priority", "direction", "match", "action", "bandwidth", "external_ids"],
    "Mirror": ["name", "type", "filter", "sink", "index", "external_ids"],
}
SB_COLUMNS: dict[str, list[str]] = {
    "Chassis": ["name", "hostname", "encaps"],
    "Chassis_Private": ["name", "nb_cfg", "nb_cfg_timestamp"],
    "Encap": ["type", "ip"],
    "Port_Binding": ["logical_port", "chassis", "up"],
}


@dataclass
class PortView:
    """One logical switch port: its addresses, tag, QoS options, where it is bound and the VM behind it."""

    name: str
    type: str
    addresses: list[str]
    tag: int | None
    qos_max_rate_bps: int | None
    qos_burst_bits: int | None
    chassis: str | None
    up: bool | None
    enabled: bool
    mirrors: list[str]
    vm: str | None = None  # from the chassis that binds it (external_ids:iface-id), when it was asked
    external_ids: dict[str, str] = field(default_factory=dict)
    uuid: str = ""

    @property
    def is_vif(self) -> bool:
        """A VM's port (type ""), not a localnet, router or other port OVN itself plugs."""
        return not self.type


@dataclass
class QosView:
    direction: str
    priority: int
    match: str
    rate_kbps: int | None
    burst_kbit: int | None
    dscp: int | None
    external_ids: dict[str, str]
    uuid: str = ""


@dataclass
class SwitchView:
    name: str
    ports: list[PortView]
    qos: list[QosView]
    external_ids: dict[str, str]
    uuid: str = ""

    @property
    def vlan(self) -> int | None:
        """The VLAN this logical switch stands for: its localnet port's ``tag`` (OVN's own way of putting
        a logical switch on a physical VLAN), else ``external_ids:hvnet-vlan`` (an overlay-only switch
        standing for a VLAN, as the lab's ``vlan1``/``vlan2``); None when it says neither."""
        for p in self.ports:
            if p.type == "localnet" and p.tag is not None:
                return int(p.tag)
        value = self.external_ids.get(VLAN_KEY, "")
        return int(value) if value.isdigit() else None


@dataclass
class MirrorView:
    name: str
    type: str
    filter: str
    sink: str
    index: int
    external_ids: dict[str, str] = field(default_factory=dict)
    uuid: str = ""


@dataclass
class ChassisView:
    """A hypervisor of the pool: its encapsulation and how far it has caught up with the NB (nb_cfg)."""

    name: str
    hostname: str
    encaps: list[str]
    nb_cfg: int | None
    ports: int = 0


@dataclass
class PoolView:
    name: str
    nb: str
    sb: str
    nb_version: str
    nb_cfg: int
    hv_cfg: int
    switches: list[SwitchView]
    mirrors: list[MirrorView]
    chassis: list[ChassisView]
    # Chassis-side reads that could not be made (a chassis unreachable): named, never guessed
    notes: list[str] = field(default_factory=list)
    # The mirror types the NB's schema allows (OVN 23.03: gre, erspan; "local" came later)
    mirror_types: list[str] = field(default_factory=list)
    # NB_Global external_ids:hvnet-last-commit: which hvnet apply committed last (settles interrupted ones)
    commit_marker: str | None = None

    @property
    def behind(self) -> list[str]:
        """Chassis that have not acknowledged the NB's latest configuration (nb_cfg) yet."""
        return [c.name for c in self.chassis if c.nb_cfg is None or c.nb_cfg < self.nb_cfg]

    def ports(self) -> list[tuple[str, PortView]]:
        return [(s.name, p) for s in self.switches for p in s.ports]

    def to_json(self) -> dict[str, Any]:
        """``hvnet status --pool --json`` (version 2: the QoS rules' rate and burst in bit/s and bits, as the
        ports' already were, and ``qos_max_rate_bits_per_s`` for the ports' ``qos_max_rate_bps``)."""
        d = asdict(self)
        d["behind"] = self.behind
        for s in d["switches"]:
            s["ports"] = [{_PORT_KEY.get(k, k): v for k, v in p.items()} for p in s["ports"]]
            s["qos"] = [_qos_json(q) for q in s["qos"]]
        return documents.POOL_STATUS.stamp(d)


_PORT_KEY = {"qos_max_rate_bps": "qos_max_rate_bits_per_s"}


def _qos_json(q: dict[str, Any]) -> dict[str, Any]:
    """A QoS rule's NB bandwidth (kbit/s, kbit) in bit/s and bits, in the same places."""
    kilo = {"rate_kbps": "rate_bits_per_s", "burst_kbit": "burst_bits"}
    return {kilo.get(k, k): (v * 1000 if k in kilo and v is not None else v) for k, v in q.items()}


def _int(options: dict[str, str], key: str) -> int | None:
    value = options.get(key, "")
    return int(value) if value.isdigit() else None


def build(name: str, nb: Any, sb: Any, nb_remote: str, sb_remote: str, nb_version: str = "") -> PoolView:
    """The pool from snapshots of its NB and SB databases (:class:`~appliance.switch.snapshot.Snapshot`)."""
    sb_tables = sb.idl.tables
    chassis_name = {r.uuid: col(r, "name") for r in sb_tables["Chassis"].rows.values()}
    bound = {col(r, "logical_port"): r for r in sb_tables["Port_Binding"].rows.values()}
    nb_rows = nb.idl.tables
    switches = []
    for ls in sorted(nb_rows["Logical_Switch"].rows.values(), key=lambda r: col(r, "name")):
        ports = [_port(p, bound.get(col(p, "name")), chassis_name) for p in col(ls, "ports")]
        ports.sort(key=lambda p: p.name)
        qos = sorted((_qos(q) for q in col(ls, "qos_rules")), key=lambda q: (q.direction, -q.priority, q.match))
        switches.append(SwitchView(col(ls, "name"), ports, qos, dict(col(ls, "external_ids")), str(ls.uuid)))
    private = {col(r, "name"): r for r in sb_tables["Chassis_Private"].rows.values()}
    chassis = []
    for r in sorted(sb_tables["Chassis"].rows.values(), key=lambda r: col(r, "name")):
        cname = col(r, "name")
        encaps = [f"{col(e, 'type')} {col(e, 'ip')}" for e in col(r, "encaps")]
        cfg = col(private[cname], "nb_cfg") if cname in private else None
        n = sum(1 for s in switches for p in s.ports if p.chassis == cname)
        chassis.append(ChassisView(cname, col(r, "hostname"), sorted(encaps), cfg, n))
    glob = next(iter(nb_rows["NB_Global"].rows.values()), None)
    mirror_rows = sorted(nb_rows["Mirror"].rows.values(), key=lambda m: col(m, "name")) if "Mirror" in nb_rows else []
    mirrors = [MirrorView(col(m, "name"), col(m, "type"), col(m, "filter"), col(m, "sink"), col(m, "index"),
                          dict(col(m, "external_ids")), str(m.uuid)) for m in mirror_rows]  # fmt: skip
    return PoolView(
        name=name, nb=nb_remote, sb=sb_remote, nb_version=nb_version,
        nb_cfg=col(glob, "nb_cfg") if glob else 0, hv_cfg=col(glob, "hv_cfg") if glob else 0,
        switches=switches, mirrors=mirrors, chassis=chassis,
        commit_marker=dict(col(glob, "external_ids")).get(COMMIT_KEY) if glob and _has(glob, "external_ids") else None,
    )  # fmt: skip


def _port(p: Any, binding: Any, chassis_name: dict[Any, str]) -> PortView:
    options = dict(col(p, "options"))
    where = opt(col(binding, "chassis")) if binding is not None else None
    up = opt(col(p, "up"))
    enabled = opt(col(p, "enabled"))
    return PortView(
        name=col(p, "name"),
        type=col(p, "type") or "",
        addresses=list(col(p, "addresses")),
        tag=opt(col(p, "tag")),
        qos_max_rate_bps=_int(options, "qos_max_rate"),
        qos_burst_bits=_int(options, "qos_burst"),
        chassis=chassis_name.get(where.uuid) if where is not None else None,
        up=up,
        enabled=enabled is not False,
        mirrors=sorted(col(m, "name") for m in col(p, "mirror_rules")) if _has(p, "mirror_rules") else [],
        external_ids=dict(col(p, "external_ids")),
        uuid=str(p.uuid),
    )


def _has(row: Any, column: str) -> bool:
    try:
        col(row, column)
    except AttributeError:
        return False
    return True


def _qos(q: Any) -> QosView:
    bw = dict(col(q, "bandwidth"))
    action = dict(col(q, "action"))
    return QosView(col(q, "direction"), col(q, "priority"), col(q, "match"), bw.get("rate"), bw.get("burst"),
                   action.get("dscp"), dict(col(q, "external_ids")), str(q.uuid))  # fmt: skip
