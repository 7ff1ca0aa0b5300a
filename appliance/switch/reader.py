"""The switch's rows, read once: Bridge, Port, Interface, Mirror and QoS as plain records.

Every reader of what is on the switch starts here.  The inventory
(:mod:`appliance.switch.inventory`: ``hvnet status``, the console's VIF table,
the exporter) and the policy engine's ``State`` (:mod:`appliance.policy.apply.read`)
are each a view of the :class:`SwitchRows` that :func:`read` gives, so they
read the same rows by the same rules: which bridge a port is on, which of its
interfaces speaks for it, what a VIF is, which VM it belongs to.

:func:`read` takes the rows from a live replica
(:class:`~appliance.core.ovsdb.Connection`, under its lock) or from a
one-shot :class:`~appliance.switch.snapshot.Snapshot`; the two give rows the
same way, so this is the one walk of them.  It reads each column it needs
once, and only the columns the source registered: a verb's narrower set of
columns (:data:`CONFIG_COLUMNS`, the policy engine's) leaves the fields that
only the display shows unset.

Values are as stored (a VLAN mode left unset is not ``access``, an
interface's type may be ``""``) so that the planner can put back exactly
what was there; what a view shows (the effective VLAN mode, ``system`` for an
unset type) is the view's to derive.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from appliance.core.ovsdb import column as col
from appliance.core.ovsdb import opt
from appliance.core.target import DbTarget
from appliance.core.vlan import VlanCols
from appliance.switch import sampling

# The columns hvnet reads of the switch: each one is read by :func:`read` (the root's
# ``bridges`` and ``*_cfg`` by the connection and the writer); registering only these
# keeps a replica and a snapshot small.
COLUMNS: dict[str, list[str]] = {
    "Open_vSwitch": [
        "bridges",
        "cur_cfg",
        "next_cfg",
        "ovs_version",
        "db_version",
        "system_type",
        "system_version",
        "external_ids",
        "datapath_types",
    ],
    "Bridge": [
        "name",
        "ports",
        "datapath_type",
        "mirrors",
        "protocols",
        "fail_mode",
        "external_ids",
        "sflow",
        "ipfix",
    ],
    "Port": ["name", "interfaces", "tag", "trunks", "vlan_mode", "qos", "external_ids"],
    "Interface": [
        "name",
        "type",
        "ofport",
        "mac_in_use",
        "external_ids",
        "ingress_policing_rate",
        "ingress_policing_burst",
        "link_state",
        "admin_state",
        "statistics",
        "error",
        "options",
        "mtu",
    ],
    "QoS": ["type", "other_config", "queues", "external_ids"],
    "Queue": ["other_config", "external_ids", "dscp"],
    "Mirror": [
        "name",
        "select_all",
        "select_src_port",
        "select_dst_port",
        "select_vlan",
        "output_port",
        "output_vlan",
        "statistics",
        "external_ids",
        "snaplen",
        "filter",
    ],
    **sampling.OVSDB_COLUMNS,
}

# What only the display shows: counters and link state, which ovs-vswitchd rewrites by itself (a
# replica that registers them is woken every few seconds by nothing a policy decides on), and what
# ``status`` says about the host.  The policy engine's connection leaves them out.
SHOWN_ONLY: dict[str, tuple[str, ...]] = {
    "Open_vSwitch": ("db_version", "system_type", "system_version", "datapath_types"),
    "Bridge": ("fail_mode",),
    "Interface": ("link_state", "admin_state", "statistics", "mtu"),
}


def without(columns: Mapping[str, Iterable[str]], leave_out: Mapping[str, Iterable[str]]) -> dict[str, list[str]]:
    """``columns`` less ``leave_out`` (table -> columns): a verb's narrower set, derived from :data:`COLUMNS`."""
    out = {}
    for table, cols in columns.items():
        dropped = set(leave_out.get(table, ()))
        out[table] = [c for c in cols if c not in dropped]
    return out


# The switch's configuration: everything the policy engine reads or writes.
CONFIG_COLUMNS = without(COLUMNS, SHOWN_ONLY)

# -- who is behind a port: the rules the display and the policy share ------------------------------

_XEN_PORT = re.compile(r"^(?P<kind>vif|tap)(?P<domid>[0-9]{1,10})\.(?P<devid>[0-9]{1,10})$")
_LIBVIRT_PORT = re.compile(r"^(?:vnet|macvtap)\d+$")
_VM_ID_KEYS = ("xs-vm-uuid", "vm-id")
PROBE_MARK = "hvnet-probe"  # a probe port's mark (see appliance.probes): its value is the probe's name
_VIF_ID_KEYS = ("attached-mac", "iface-id", "vm-id", "xs-vif-uuid", "xs-vm-uuid")


def parse_xen_port(name: str) -> tuple[str, int, int] | None:
    """``vif3.0`` -> ("vif", 3, 0); ``tap3.0`` -> ("tap", 3, 0); else None."""
    m = _XEN_PORT.match(name)
    if not m:
        return None
    return m.group("kind"), int(m.group("domid")), int(m.group("devid"))


def is_vif_port(name: str, ids: Mapping[str, str], n_interfaces: int) -> bool:
    """A VM's interface: one interface, and a hypervisor's identity on it or a hypervisor's port name.
    (The display and the planner both read :attr:`PortRow.is_vif`: what ``status`` calls a VIF is what
    a policy selects.)  hvnet's own probe ports (marked :data:`PROBE_MARK`) are never VIFs: no policy
    selects them, the agent and ``verify`` leave them alone, ``status`` and the exporter count no VM
    behind them."""
    return (
        n_interfaces == 1
        and PROBE_MARK not in ids
        and (any(k in ids for k in _VIF_ID_KEYS) or parse_xen_port(name) is not None or bool(_LIBVIRT_PORT.match(name)))
    )


def vm_uuid_of(ids: Mapping[str, str]) -> str | None:
    """The VM's uuid as the hypervisor recorded it on the interface (XenServer or libvirt key)."""
    return next((ids[k] for k in _VM_ID_KEYS if k in ids), None)


def port_vlan(port: Any) -> VlanCols:
    """A Port row's VLAN columns as stored (trunks sorted), read the same way by every reader."""
    return VlanCols(opt(col(port, "vlan_mode")), opt(col(port, "tag")), tuple(sorted(col(port, "trunks"))))


def ovn_bridge(root_ids: Mapping[str, str]) -> str | None:
    """OVN's integration bridge on a chassis (ovn-controller's ``ovn-bridge``, ``br-int`` by default);
    None on a host that is not an OVN chassis (no ``ovn-remote``)."""
    if not root_ids.get("ovn-remote"):
        return None
    return root_ids.get("ovn-bridge") or "br-int"


# -- the records ------------------------------------------------------------------------------------


@dataclass
class QueueRow:
    """One queue of a QoS row, by its number, as stored."""

    number: int
    other_config: dict[str, str]
    external_ids: dict[str, str]
    dscp: int | None


@dataclass
class QosRow:
    """A Port's QoS row, its queues by number (ascending)."""

    uuid: str
    type: str
    other_config: dict[str, str]
    external_ids: dict[str, str]
    queues: list[QueueRow]


@dataclass
class PortRow:
    """A port on a bridge, with its first interface (a VIF has exactly one; a bond's others are not read).

    The fields from ``link_state`` on are the display's: None (``statistics`` empty) when the
    source did not register them.
    """

    uuid: Any
    name: str
    bridge: str
    vlan: VlanCols
    external_ids: dict[str, str]
    qos: QosRow | None
    n_interfaces: int
    is_vif: bool
    vm_uuid: str | None
    interface: str
    type: str  # as stored: "" for a system interface
    ofport: int | None
    ids: dict[str, str]  # the interface's external_ids: the hypervisor's identity, hvnet's meter record
    mac_in_use: str | None
    policing_rate: int
    policing_burst: int
    error: str | None
    link_state: str | None
    admin_state: str | None
    mtu: int | None
    statistics: dict[str, int]
    mirrors: list[dict[str, str]] = field(default_factory=list)  # {"mirror": name, "role": source|destination|output}


@dataclass
class MirrorRow:
    """A Mirror row, ports by name (sorted); the output port's first interface described with it
    (a tunnel hvnet made for the mirror is read back from there)."""

    bridge: str
    name: str
    select_all: bool
    src: list[str]
    dst: list[str]
    vlans: list[int]
    output_port: str | None
    output_vlan: int | None
    snaplen: int | None  # None also where the server's schema has no such column
    filter: str | None
    external_ids: dict[str, str]
    statistics: dict[str, int]
    output_type: str | None = None
    output_options: dict[str, str] = field(default_factory=dict)


@dataclass
class BridgeRow:
    """One bridge as stored, with its ports' and mirrors' names."""

    name: str
    datapath_type: str  # "system" when unset
    ports: list[str]  # every port's name, sorted (those without interfaces too)
    mirrors: list[str]  # sorted
    protocols: list[str]
    fail_mode: str | None
    external_ids: dict[str, str]
    sflow: sampling.SflowCols | None
    ipfix: sampling.IpfixCols | None


@dataclass
class RootRow:
    """The Open_vSwitch row (its display-only columns None, or empty, when not registered)."""

    external_ids: dict[str, str]
    ovs_version: str | None
    db_version: str | None
    system_type: str | None
    system_version: str | None
    datapath_types: list[str]


@dataclass
class SwitchRows:
    """The switch in one read, in the source's row order: bridges, the ports on them that have an
    interface, and the mirrors (bridge by bridge)."""

    root: RootRow
    bridges: list[BridgeRow]
    ports: list[PortRow]
    mirrors: list[MirrorRow]
    has_mirror_filter: bool
    has_mirror_snaplen: bool

    @property
    def integration_bridge(self) -> str | None:
        """OVN's integration bridge when this host is an OVN chassis (see :func:`ovn_bridge`)."""
        return ovn_bridge(self.root.external_ids)


class Source(Protocol):
    """What :func:`read` reads: a :class:`~appliance.core.ovsdb.Connection` or a
    :class:`~appliance.switch.snapshot.Snapshot`."""

    target: DbTarget
    lock: Any
    idl: Any

    def root(self) -> Any: ...

    def has_column(self, table: str, column: str) -> bool: ...


# -- the walk ---------------------------------------------------------------------------------------


def read(source: Source) -> SwitchRows:
    """Every bridge, port and mirror of ``source`` in one pass (under its lock: a background loop may be
    running the replica; inside a transaction's build the lock is already this thread's)."""
    with source.lock:
        return _walk(source)


def vm_uuids(source: Source) -> set[str]:
    """The VM uuids hypervisors recorded on the switch's interfaces (every Interface row), for a name
    lookup made before a read."""
    with source.lock:
        found = (vm_uuid_of(col(i, "external_ids")) for i in source.idl.tables["Interface"].rows.values())
        return {u for u in found if u}


def ovs_version(source: Source) -> str | None:
    """The switch's ``ovs_version`` alone: what a refusal of a too-new feature needs before any reading."""
    return opt(col(source.root(), "ovs_version"))


def _walk(source: Source) -> SwitchRows:
    tables = source.idl.tables
    root = _root(source)
    shown = _Shown(source)
    bridge_rows = [(br, col(br, "name"), col(br, "ports"), col(br, "mirrors")) for br in tables["Bridge"].rows.values()]
    port_bridge = {p.uuid: name for _, name, br_ports, _ in bridge_rows for p in br_ports}
    names: dict[Any, str] = {}
    ports: list[PortRow] = []
    for port in tables["Port"].rows.values():
        bridge = port_bridge.get(port.uuid)
        if bridge is None:
            continue  # a Port row not (yet) referenced by any bridge
        name = names[port.uuid] = col(port, "name")
        ifaces = col(port, "interfaces")
        if ifaces:  # a port without interfaces is a bridge's port (by name) but no PortRow
            ports.append(_port(bridge, name, port, ifaces, shown))
    on_port = {p.uuid: p.mirrors for p in ports} if any(m for *_, m in bridge_rows) else {}
    mirrors: list[MirrorRow] = []
    bridges: list[BridgeRow] = []
    for br, name, br_ports, br_mirrors in bridge_rows:
        own = [_mirror(name, m, shown, on_port) for m in br_mirrors]
        mirrors += own
        bridges.append(_bridge(br, name, sorted(names[p.uuid] for p in br_ports), sorted(m.name for m in own), shown))
    return SwitchRows(root, bridges, ports, mirrors, shown.mirror_filter, shown.mirror_snaplen)


class _Shown:
    """Which optional columns the source registered (asked once per read, not once per row)."""

    def __init__(self, source: Source) -> None:
        iface = {c: source.has_column("Interface", c) for c in SHOWN_ONLY["Interface"]}
        self.link_state, self.admin_state = iface["link_state"], iface["admin_state"]
        self.mtu, self.statistics = iface["mtu"], iface["statistics"]
        self.fail_mode = source.has_column("Bridge", "fail_mode")
        self.mirror_statistics = source.has_column("Mirror", "statistics")
        self.mirror_filter = source.has_column("Mirror", "filter")
        self.mirror_snaplen = source.has_column("Mirror", "snaplen")


def _root(source: Source) -> RootRow:
    row = source.root()

    def shown(name: str) -> Any:
        return col(row, name) if source.has_column("Open_vSwitch", name) else []

    return RootRow(
        external_ids=dict(col(row, "external_ids")),
        ovs_version=opt(col(row, "ovs_version")),
        db_version=opt(shown("db_version")),
        system_type=opt(shown("system_type")),
        system_version=opt(shown("system_version")),
        datapath_types=list(shown("datapath_types")),
    )


def _port(bridge: str, name: str, port: Any, ifaces: list[Any], shown: _Shown) -> PortRow:
    iface = ifaces[0]
    ids = dict(col(iface, "external_ids"))
    qos = opt(col(port, "qos"))
    return PortRow(
        uuid=port.uuid,
        name=name,
        bridge=bridge,
        vlan=port_vlan(port),
        external_ids=dict(col(port, "external_ids")),
        qos=_qos(qos) if qos is not None else None,
        n_interfaces=len(ifaces),
        is_vif=is_vif_port(name, ids, len(ifaces)),
        vm_uuid=vm_uuid_of(ids),
        interface=col(iface, "name"),
        type=col(iface, "type"),
        ofport=opt(col(iface, "ofport")),
        ids=ids,
        mac_in_use=opt(col(iface, "mac_in_use")),
        policing_rate=int(col(iface, "ingress_policing_rate")),
        policing_burst=int(col(iface, "ingress_policing_burst")),
        error=opt(col(iface, "error")),
        link_state=opt(col(iface, "link_state")) if shown.link_state else None,
        admin_state=opt(col(iface, "admin_state")) if shown.admin_state else None,
        mtu=opt(col(iface, "mtu")) if shown.mtu else None,
        statistics=dict(col(iface, "statistics")) if shown.statistics else {},
    )


def _qos(qos: Any) -> QosRow:
    queues = [
        QueueRow(int(number), dict(col(q, "other_config")), dict(col(q, "external_ids")), opt(col(q, "dscp")))
        for number, q in sorted(col(qos, "queues").items())
    ]
    return QosRow(str(qos.uuid), col(qos, "type"), dict(col(qos, "other_config")), dict(col(qos, "external_ids")),
                  queues)  # fmt: skip


def _mirror(bridge: str, m: Any, shown: _Shown, on_port: dict[Any, list[dict[str, str]]]) -> MirrorRow:
    """A mirror; each port it touches is told its role (as source, destination or output)."""
    name = col(m, "name")
    src, dst = col(m, "select_src_port"), col(m, "select_dst_port")
    out = opt(col(m, "output_port"))
    for ports, role in ((src, "source"), (dst, "destination"), ([out] if out is not None else [], "output")):
        for p in ports:
            roles = on_port.get(p.uuid)
            if roles is not None:
                roles.append({"mirror": name, "role": role})
    row = MirrorRow(
        bridge=bridge,
        name=name,
        select_all=bool(col(m, "select_all")),
        src=sorted(col(p, "name") for p in src),
        dst=sorted(col(p, "name") for p in dst),
        vlans=sorted(col(m, "select_vlan")),
        output_port=col(out, "name") if out is not None else None,
        output_vlan=opt(col(m, "output_vlan")),
        snaplen=opt(col(m, "snaplen")) if shown.mirror_snaplen else None,
        filter=opt(col(m, "filter")) if shown.mirror_filter else None,
        external_ids=dict(col(m, "external_ids")),
        statistics=dict(col(m, "statistics")) if shown.mirror_statistics else {},
    )
    out_ifaces = col(out, "interfaces") if out is not None else []
    if out_ifaces:
        row.output_type = col(out_ifaces[0], "type")
        row.output_options = dict(col(out_ifaces[0], "options"))
    return row


def _bridge(br: Any, name: str, ports: list[str], mirrors: list[str], shown: _Shown) -> BridgeRow:
    return BridgeRow(
        name=name,
        datapath_type=col(br, "datapath_type") or "system",
        ports=ports,
        mirrors=mirrors,
        protocols=list(col(br, "protocols")),
        fail_mode=opt(col(br, "fail_mode")) if shown.fail_mode else None,
        external_ids=dict(col(br, "external_ids")),
        sflow=sampling.read("sflow", br),  # type: ignore[arg-type]
        ipfix=sampling.read("ipfix", br),  # type: ignore[arg-type]
    )
