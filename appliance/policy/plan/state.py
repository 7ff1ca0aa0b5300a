"""The switch as the planner sees it: a plain snapshot of the rows a policy touches.

Taken from the IDL replica in one pass, under the connection's lock.  The
snapshot keeps the raw column values (``vlan_mode`` unset is not the same
row as ``vlan_mode=access``), so that a rollback can put back exactly what
was there; the planner compares *effective* settings, so that an export
applied back plans nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from appliance.core.ovsdb import Connection
from appliance.core.ovsdb import column as col
from appliance.core.vlan import VlanCols
from appliance.policy.plan.model import (
    POLICE_BURST_KEY,
    POLICE_RATE_KEY,
    TUNNEL_MIRROR_KEY,
    Egress,
    Ingress,
    TunnelCols,
    is_owned,
)
from appliance.policy.plan.taps import read_bridge as read_taps
from appliance.switch import sampling
from appliance.switch.inventory import is_vif_port, port_vlan, vm_uuid_of

# Everything the policy engine reads or writes.
COLUMNS: dict[str, list[str]] = {
    "Open_vSwitch": ["bridges", "cur_cfg", "next_cfg", "ovs_version", "external_ids"],
    "Bridge": ["name", "ports", "mirrors", "protocols", "datapath_type", "external_ids", "sflow", "ipfix"],
    "Port": ["name", "interfaces", "tag", "trunks", "vlan_mode", "qos", "external_ids"],
    "Interface": [
        "name",
        "type",
        "ofport",
        "error",
        "mac_in_use",
        "external_ids",
        "options",
        "ingress_policing_rate",
        "ingress_policing_burst",
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
        "snaplen",
        "filter",
        "external_ids",
        "statistics",
    ],
    **sampling.OVSDB_COLUMNS,
}


@dataclass(frozen=True)
class PoliceCols:
    """Ingress policing as stored: the tc columns and hvnet's meter record."""

    rate_kbps: int = 0
    burst_kbit: int = 0
    meter_rate_kbps: int | None = None
    meter_burst_kbit: int | None = None

    def effective(self) -> Ingress | None:
        if self.meter_rate_kbps:
            return Ingress(self.meter_rate_kbps, self.meter_burst_kbit or 0, "meter")
        if self.rate_kbps:
            # OVS's own default for an unset burst is 8000 kbit.
            return Ingress(self.rate_kbps, self.burst_kbit or 8000, "tc")
        return None


@dataclass(frozen=True)
class QueueCols:
    number: int
    other_config: tuple[tuple[str, str], ...] = ()
    external_ids: tuple[tuple[str, str], ...] = ()
    dscp: int | None = None


@dataclass(frozen=True)
class QosCols:
    """A Port's QoS row (and its queues), as stored."""

    type: str
    other_config: tuple[tuple[str, str], ...] = ()
    external_ids: tuple[tuple[str, str], ...] = ()
    queues: tuple[QueueCols, ...] = ()
    uuid: str | None = field(default=None, compare=False)  # to re-attach a row that still exists

    @property
    def owned(self) -> bool:
        return is_owned(self.external_ids)

    def effective(self) -> Egress | None:
        """The egress cap this QoS enforces, if it is one hvnet can express."""
        if self.type != "linux-htb":
            return None
        try:
            rate = int(dict(self.other_config)["max-rate"]) // 1000
        except (KeyError, ValueError):
            return None
        burst = None
        q0 = next((q for q in self.queues if q.number == 0), None)
        if q0 is not None and "burst" in dict(q0.other_config):
            try:
                burst = int(dict(q0.other_config)["burst"]) // 1000
            except ValueError:
                burst = None
        return Egress(rate, burst)


@dataclass(frozen=True)
class MirrorCols:
    """A Mirror row, with ports by name."""

    select_all: bool = False
    src: tuple[str, ...] = ()
    dst: tuple[str, ...] = ()
    vlans: tuple[int, ...] = ()
    output_port: str | None = None
    output_vlan: int | None = None
    snaplen: int | None = None
    filter: str | None = None
    external_ids: tuple[tuple[str, str], ...] = ()
    tunnel: TunnelCols | None = None

    @property
    def owned(self) -> bool:
        return is_owned(self.external_ids)

    def same_config(self, other: MirrorCols) -> bool:
        """Equal in everything the switch acts on (ownership marks aside)."""
        a = (self.select_all, self.src, self.dst, self.vlans, self.output_port, self.output_vlan)
        b = (other.select_all, other.src, other.dst, other.vlans, other.output_port, other.output_vlan)
        return a == b and self.snaplen == other.snaplen and self.filter == other.filter and self.tunnel == other.tunnel


@dataclass
class PortState:
    name: str
    bridge: str
    interface: str
    iface_type: str
    vlan: VlanCols
    police: PoliceCols
    qos: QosCols | None
    ofport: int | None
    error: str | None
    mac: str | None  # the VM's MAC (attached-mac), else the MAC in use
    vm_uuid: str | None
    vm_name: str | None = None
    is_vif: bool = False
    owner_mirror: str | None = None  # set on tunnel ports hvnet made for a mirror
    n_interfaces: int = 1


@dataclass
class BridgeState:
    name: str
    protocols: tuple[str, ...]
    datapath_type: str
    ports: tuple[str, ...]
    mirrors: tuple[str, ...]
    sflow: sampling.SflowCols | None = None
    ipfix: sampling.IpfixCols | None = None
    taps: dict[str, Any] = field(default_factory=dict)  # name -> taps.TapCols, from external_ids


@dataclass
class MirrorState:
    bridge: str
    name: str
    cols: MirrorCols
    statistics: dict[str, int] = field(default_factory=dict)


@dataclass
class State:
    """What the planner plans against."""

    ports: dict[str, PortState] = field(default_factory=dict)
    bridges: dict[str, BridgeState] = field(default_factory=dict)
    mirrors: dict[tuple[str, str], MirrorState] = field(default_factory=dict)
    has_mirror_filter: bool = False
    has_mirror_snaplen: bool = True
    ovs_version: str | None = None

    def vifs(self) -> list[PortState]:
        return [p for p in self.ports.values() if p.is_vif]


def _opt(value: list[Any]) -> Any:
    return value[0] if value else None


def _items(mapping: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(mapping.items()))


def qos_cols(qos: Any) -> QosCols:
    queues = []
    for number, q in sorted(col(qos, "queues").items()):
        queues.append(
            QueueCols(int(number), _items(col(q, "other_config")), _items(col(q, "external_ids")), _opt(col(q, "dscp")))
        )
    return QosCols(
        col(qos, "type"),
        _items(col(qos, "other_config")),
        _items(col(qos, "external_ids")),
        tuple(queues),
        uuid=str(qos.uuid),
    )


def read(conn: Connection, vm_names: dict[str, str] | None = None) -> State:
    """Snapshot ``conn``'s replica (caller holds ``conn.lock`` or runs inside a transaction)."""
    tables = conn.idl.tables
    state = State(
        has_mirror_filter=conn.has_column("Mirror", "filter"),
        has_mirror_snaplen=conn.has_column("Mirror", "snaplen"),
    )
    root = conn.root()
    state.ovs_version = _opt(col(root, "ovs_version")) if root is not None else None
    port_bridge: dict[Any, str] = {}
    for br in tables["Bridge"].rows.values():
        for p in col(br, "ports"):
            port_bridge[p.uuid] = col(br, "name")
        state.bridges[col(br, "name")] = _bridge_state(br)
    for port in tables["Port"].rows.values():
        bridge = port_bridge.get(port.uuid)
        ifaces = list(col(port, "interfaces"))
        if bridge is not None and ifaces:
            state.ports[col(port, "name")] = _port_state(bridge, port, ifaces, vm_names or {})
    for br in tables["Bridge"].rows.values():
        for m in col(br, "mirrors"):
            state.mirrors[(col(br, "name"), col(m, "name"))] = _mirror_state(conn, state, col(br, "name"), m)
    return state


def _bridge_state(br: Any) -> BridgeState:
    return BridgeState(
        name=col(br, "name"),
        protocols=tuple(col(br, "protocols")),
        datapath_type=col(br, "datapath_type") or "system",
        ports=tuple(sorted(col(p, "name") for p in col(br, "ports"))),
        mirrors=tuple(sorted(col(m, "name") for m in col(br, "mirrors"))),
        sflow=sampling.read("sflow", br),  # type: ignore[arg-type]
        ipfix=sampling.read("ipfix", br),  # type: ignore[arg-type]
        taps=read_taps(dict(col(br, "external_ids"))),  # type: ignore[arg-type]
    )


def _port_state(bridge: str, port: Any, ifaces: list[Any], vm_names: dict[str, str]) -> PortState:
    """One port as the planner sees it; its identity (VM, VIF or not) by the display's own rules."""
    iface = ifaces[0]
    ids = dict(col(iface, "external_ids"))
    name = col(port, "name")
    qos = _opt(col(port, "qos"))
    meter_rate = ids.get(POLICE_RATE_KEY)
    meter_burst = ids.get(POLICE_BURST_KEY)
    vm_uuid = vm_uuid_of(ids)
    return PortState(
        name=name,
        bridge=bridge,
        interface=col(iface, "name"),
        iface_type=col(iface, "type") or "system",
        vlan=port_vlan(port),
        police=PoliceCols(
            int(col(iface, "ingress_policing_rate")),
            int(col(iface, "ingress_policing_burst")),
            int(meter_rate) if meter_rate and meter_rate.isdigit() else None,
            int(meter_burst) if meter_burst and meter_burst.isdigit() else None,
        ),
        qos=qos_cols(qos) if qos is not None else None,
        ofport=_opt(col(iface, "ofport")),
        error=_opt(col(iface, "error")),
        mac=(ids.get("attached-mac") or _opt(col(iface, "mac_in_use")) or "").lower() or None,
        vm_uuid=vm_uuid,
        vm_name=vm_names.get(vm_uuid) if vm_uuid else None,
        is_vif=is_vif_port(name, ids, len(ifaces)),
        owner_mirror=dict(col(port, "external_ids")).get(TUNNEL_MIRROR_KEY)
        if is_owned(col(port, "external_ids"))
        else None,
        n_interfaces=len(ifaces),
    )


def _mirror_state(conn: Connection, state: State, bridge: str, m: Any) -> MirrorState:
    """A mirror's columns; a tunnel output port hvnet made for it is described with it."""
    cols = mirror_cols(conn, m)
    out = _opt(col(m, "output_port"))
    if out is not None and cols.output_port in state.ports and state.ports[cols.output_port].owner_mirror:
        iface = next(iter(col(out, "interfaces")))
        cols = replace(cols, tunnel=TunnelCols(cols.output_port, col(iface, "type"), _items(col(iface, "options"))))
    return MirrorState(bridge, col(m, "name"), cols, {k: int(v) for k, v in col(m, "statistics").items()})


def mirror_cols(conn: Connection, m: Any) -> MirrorCols:
    out = _opt(col(m, "output_port"))
    return MirrorCols(
        select_all=bool(col(m, "select_all")),
        src=tuple(sorted(col(p, "name") for p in col(m, "select_src_port"))),
        dst=tuple(sorted(col(p, "name") for p in col(m, "select_dst_port"))),
        vlans=tuple(sorted(col(m, "select_vlan"))),
        output_port=col(out, "name") if out is not None else None,
        output_vlan=_opt(col(m, "output_vlan")),
        snaplen=_opt(col(m, "snaplen")) if conn.has_column("Mirror", "snaplen") else None,
        filter=_opt(col(m, "filter")) if conn.has_column("Mirror", "filter") else None,
        external_ids=_items(col(m, "external_ids")),
    )
