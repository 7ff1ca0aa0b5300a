"""The planner's :class:`~appliance.policy.plan.state.State`, read from the switch.

The policy engine reads the switch through the one walk every reader shares
(:func:`appliance.switch.reader.read`: the replica or a snapshot) and keeps a
narrower view of it here: each port's settings as stored, the meter record
hvnet keeps beside them, the tunnels it made for mirrors.  Reading is I/O
(under the connection's lock or inside a transaction's build); the State it
gives is plain data, so the pure planner never sees a connection.
"""

from __future__ import annotations

from appliance.policy.plan.model import POLICE_BURST_KEY, POLICE_RATE_KEY, TUNNEL_MIRROR_KEY, TunnelCols, is_owned
from appliance.policy.plan.state import (
    BridgeState,
    MirrorCols,
    MirrorState,
    PoliceCols,
    PortState,
    QosCols,
    QueueCols,
    State,
)
from appliance.policy.plan.taps import read_bridge as read_taps
from appliance.switch import reader
from appliance.switch.reader import BridgeRow, MirrorRow, PortRow, QosRow, Source, SwitchRows

# Everything the policy engine reads or writes: the switch's columns but those only the display shows.
COLUMNS = reader.CONFIG_COLUMNS


def state(source: Source, vm_names: dict[str, str] | None = None) -> State:
    """The planner's snapshot of ``source`` (its replica, or a one-shot snapshot), VMs named from
    ``vm_names`` (uuid -> name)."""
    return of_rows(reader.read(source), vm_names or {})


def of_rows(rows: SwitchRows, vm_names: dict[str, str]) -> State:
    """The planner's view of the switch's rows."""
    out = State(
        has_mirror_filter=rows.has_mirror_filter,
        has_mirror_snaplen=rows.has_mirror_snaplen,
        ovs_version=rows.root.ovs_version,
    )
    out.bridges = {b.name: _bridge_state(b) for b in rows.bridges}
    out.ports = {p.name: _port_state(p, vm_names) for p in rows.ports}
    out.mirrors = {(m.bridge, m.name): _mirror_state(m, out) for m in rows.mirrors}
    return out


def _items(mapping: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted(mapping.items()))


def _bridge_state(br: BridgeRow) -> BridgeState:
    return BridgeState(
        name=br.name,
        protocols=tuple(br.protocols),
        datapath_type=br.datapath_type,
        ports=tuple(br.ports),
        mirrors=tuple(br.mirrors),
        sflow=br.sflow,
        ipfix=br.ipfix,
        taps=read_taps(br.external_ids),
    )


def _port_state(port: PortRow, vm_names: dict[str, str]) -> PortState:
    """One port as the planner sees it; its identity (VM, VIF or not) as the display's."""
    ids = port.ids
    meter_rate = ids.get(POLICE_RATE_KEY)
    meter_burst = ids.get(POLICE_BURST_KEY)
    return PortState(
        name=port.name,
        bridge=port.bridge,
        interface=port.interface,
        iface_type=port.type or "system",
        vlan=port.vlan,
        police=PoliceCols(
            port.policing_rate,
            port.policing_burst,
            int(meter_rate) if meter_rate and meter_rate.isdigit() else None,
            int(meter_burst) if meter_burst and meter_burst.isdigit() else None,
        ),
        qos=_qos_cols(port.qos) if port.qos is not None else None,
        ofport=port.ofport,
        error=port.error,
        mac=(ids.get("attached-mac") or port.mac_in_use or "").lower() or None,
        vm_uuid=port.vm_uuid,
        vm_name=vm_names.get(port.vm_uuid) if port.vm_uuid else None,
        is_vif=port.is_vif,
        owner_mirror=port.external_ids.get(TUNNEL_MIRROR_KEY) if is_owned(port.external_ids) else None,
        n_interfaces=port.n_interfaces,
    )


def _qos_cols(qos: QosRow) -> QosCols:
    queues = tuple(QueueCols(q.number, _items(q.other_config), _items(q.external_ids), q.dscp) for q in qos.queues)
    return QosCols(qos.type, _items(qos.other_config), _items(qos.external_ids), queues, uuid=qos.uuid)


def _mirror_state(m: MirrorRow, state: State) -> MirrorState:
    """A mirror's columns; a tunnel output port hvnet made for it is described with it."""
    tunnel = None
    if m.output_port is not None and m.output_type is not None:
        out = state.ports.get(m.output_port)
        if out is not None and out.owner_mirror:
            tunnel = TunnelCols(m.output_port, m.output_type, _items(m.output_options))
    cols = MirrorCols(
        select_all=m.select_all,
        src=tuple(m.src),
        dst=tuple(m.dst),
        vlans=tuple(m.vlans),
        output_port=m.output_port,
        output_vlan=m.output_vlan,
        snaplen=m.snaplen,
        filter=m.filter,
        external_ids=_items(m.external_ids),
        tunnel=tunnel,
    )
    return MirrorState(m.bridge, m.name, cols, {k: int(v) for k, v in m.statistics.items()})
