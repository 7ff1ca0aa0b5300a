"""The switch as the planner sees it: a plain snapshot of the rows a policy touches.

Plain data, no I/O: :mod:`appliance.policy.apply.read` fills it in from the
switch's rows as every reader reads them (:mod:`appliance.switch.reader`),
and the planner's tests build it by hand.  The snapshot keeps the raw column
values (``vlan_mode`` unset is not the same
row as ``vlan_mode=access``), so that a rollback can put back exactly what
was there; the planner compares *effective* settings, so that an export
applied back plans nothing.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from appliance.core.vlan import VlanCols
from appliance.policy.plan.model import Egress, Ingress, TunnelCols, is_owned
from appliance.switch import sampling


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
