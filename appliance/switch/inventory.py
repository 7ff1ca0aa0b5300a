"""The read model: what is on this host's switch, VIF by VIF.

A view of the switch's rows as :mod:`appliance.switch.reader` reads them for
every reader (one pass over the IDL replica or a one-shot snapshot, no per-row
round trips), so a refresh of a 1000-port bridge costs about as much as one
``ovs-vsctl list``.  VM identity comes from the ``external_ids`` hypervisors
set on Interfaces:

* libvirt: ``attached-mac``, ``iface-id``, ``vm-id``, ``iface-status``;
* XenServer: ``xs-vm-uuid``, ``xs-vif-uuid``, ``xs-network-uuid``,
  ``attached-mac``, with ports named ``vif<domid>.<devid>`` -- and, for an HVM
  guest, a second port ``tap<domid>.<devid>`` for the same VIF (the emulated
  NIC used until PV drivers load).  The two are grouped into one VIF.
"""

from __future__ import annotations

import re
import socket
import time
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from appliance.core import documents
from appliance.core.ovsdb import c_json_parser_in_use
from appliance.core.runner import CommandRunner, LocalRunner
from appliance.core.vlan import VlanCols
from appliance.switch import counters as ctr
from appliance.switch import sampling
from appliance.switch.names import NameSource, VmInfo, resolve_vms
from appliance.switch.reader import BridgeRow, MirrorRow, PortRow, QosRow, Source, SwitchRows, parse_xen_port
from appliance.switch.reader import read as read_rows


def effective_vlan_mode(vlan_mode: str | None, tag: int | None) -> str:
    """The VLAN mode OVS applies (see :mod:`appliance.core.vlan`, the one rule)."""
    return VlanCols(vlan_mode, tag).mode


def trunks_all_vlans(vlan_mode: str | None, tag: int | None, trunks: list[int]) -> bool:
    """True when the port carries every VLAN: a trunk or native port with an
    empty trunk list (see :mod:`appliance.core.vlan`, the one rule)."""
    return VlanCols(vlan_mode, tag, tuple(trunks)).every_vlan


def hypervisor_of(ids: dict[str, str]) -> str | None:
    if any(k.startswith("xs-") for k in ids):
        return "xenserver"
    if "vm-id" in ids or "iface-id" in ids:
        return "libvirt"
    return None


@dataclass
class MirrorInfo:
    """One mirror as shown: what it selects, where it sends, what it has sent."""

    name: str
    bridge: str
    select_all: bool
    select_src_ports: list[str]
    select_dst_ports: list[str]
    select_vlans: list[int]
    output_port: str | None
    output_vlan: int | None
    tx_packets: int | None
    tx_bytes: int | None
    owner: str | None


@dataclass
class Vif:
    """One VM interface (or, with ``is_vif=False``, any other port)."""

    bridge: str
    port: str
    interface: str
    type: str
    is_vif: bool
    ofport: int | None
    mac: str | None
    mac_in_use: str | None
    hypervisor: str | None
    vm_uuid: str | None
    vm_name: str | None
    vm_name_source: str | None
    ids: dict[str, str]
    xen_domid: int | None
    xen_devid: int | None
    alias_ports: list[str]
    vlan_mode: str
    vlan_mode_configured: str | None
    tag: int | None
    trunks: list[int]
    trunks_all_vlans: bool
    ingress_policing_rate_kbps: int
    ingress_policing_burst_kbit: int
    egress_qos_type: str | None
    egress_max_rate_kbps: float | None
    mirrors: list[dict[str, str]]
    link_state: str | None
    admin_state: str | None
    mtu: int | None
    error: str | None
    counters: ctr.Counters = field(default_factory=ctr.Counters)
    rates: ctr.Rates | None = None
    # "tc" (ingress_policing_rate columns) or "meter" (hvnet's OpenFlow meter record)
    ingress_mechanism: str | None = None
    # From libvirt, when it knows the domain (else None): virsh's word for its state
    # ("running", "paused", "shut off", ...) and the domain's interface with this
    # port's MAC as libvirt describes it ("vnet3 virtio on br0").
    vm_state: str | None = None
    vm_interface: str | None = None
    # On an OVN chassis's integration bridge: the logical port the VIF is bound to (its iface-id).
    # OVN, not VLAN tags, decides what such a port reaches.
    ovn_port: str | None = None
    # The egress shaper's burst, bits, as its queue 0 holds it (linux-htb ``burst``): None when unset.
    egress_burst_bits: int | None = None

    @property
    def carries_every_vlan(self) -> bool:
        """A VIF whose port would carry every VLAN: not one OVN switches (it ignores the port's tags)."""
        return self.is_vif and self.trunks_all_vlans and self.ovn_port is None

    def vlan_summary(self) -> str:
        """``access 1``, ``trunk 10,20``, ``native-untagged 10 +20,21``, or
        ``trunk ALL`` / ``native-untagged 10 +ALL`` for a port carrying every VLAN;
        ``OVN`` for a port on an OVN integration bridge (its logical switch decides)."""
        if self.ovn_port is not None and self.trunks_all_vlans:
            return "OVN"
        if self.trunks_all_vlans and self.vlan_mode == "trunk":
            return "trunk ALL"
        trunks = "ALL" if self.trunks_all_vlans else ",".join(str(t) for t in self.trunks)
        if self.vlan_mode == "access":
            return f"access {self.tag}"
        if self.vlan_mode == "trunk":
            return f"trunk {trunks}"
        return f"{self.vlan_mode} {self.tag}" + (f" +{trunks}" if trunks else "")

    @property
    def drops(self) -> int:
        return (self.counters.rx_dropped or 0) + (self.counters.tx_dropped or 0)

    @property
    def errors(self) -> int:
        return (self.counters.rx_errors or 0) + (self.counters.tx_errors or 0)

    def to_json(self) -> dict[str, Any]:
        """Machine-readable form; units are part of the key names, spelled out (``_bits_per_s``, ``_bits``).

        The limits are kept in kbit/s and kbit as OVS stores them, and written in
        bit/s and bits (status version 2, see :data:`STATUS_RENAMED`).  Field by
        field rather than ``asdict`` (which deep-copies the counters and rates
        only to have them replaced below): a third of ``status --json``'s time on
        a 1000-VIF host went there.
        """
        d = {f: _plain(getattr(self, f)) for f in _VIF_JSON_FIELDS if f not in _JSON_KEY}
        for old, new, factor in STATUS_RENAMED:  # the table renames and scales: one place, never half of it
            value = getattr(self, old)
            d[new] = None if value is None else round(value * factor)
        d["counters"] = self.counters.as_dict()
        d["rates"] = (
            None
            if self.rates is None
            else {
                "rx_bits_per_s": round(self.rates.rx_bps, 1),
                "tx_bits_per_s": round(self.rates.tx_bps, 1),
                "rx_packets_per_s": round(self.rates.rx_pps, 1),
                "tx_packets_per_s": round(self.rates.tx_pps, 1),
                "interval_s": round(self.rates.interval_s, 3),
            }
        )
        d["counters_source"] = self.counters.source
        return d


_VIF_JSON_FIELDS = tuple(f.name for f in fields(Vif))  # counters and rates are replaced in to_json

# the keys ``hvnet status --json`` version 2 renamed (old key, new key, x factor)
STATUS_RENAMED = (
    ("ingress_policing_rate_kbps", "ingress_policing_rate_bits_per_s", 1000),
    ("ingress_policing_burst_kbit", "ingress_policing_burst_bits", 1000),
    ("egress_max_rate_kbps", "egress_max_rate_bits_per_s", 1000),
)
_JSON_KEY = {old: new for old, new, _ in STATUS_RENAMED}
# a bridge's sampling settings are kept as a policy file writes them (no unit: ``polling: 30``); version 2
# writes the unit in the key, the value unchanged
SAMPLING_RENAMED = (
    ("polling", "polling_s"),
    ("header", "header_bytes"),
    ("cache_active_timeout", "cache_active_timeout_s"),
)
SAMPLING_KEY = dict(SAMPLING_RENAMED)  # a setting's key in --json: status's, and the show verbs'


def _bridge_json(b: BridgeInfo) -> dict[str, Any]:
    d = asdict(b)
    for kind in sampling.KINDS:
        if d[kind] is not None:
            d[kind] = {SAMPLING_KEY.get(k, k): v for k, v in d[kind].items()}
    return d


def _plain(value: Any) -> Any:
    """A copy of a field's value that shares nothing with the Vif (lists of values or of dicts)."""
    if isinstance(value, list):
        return [dict(v) if isinstance(v, dict) else v for v in value]
    return value


@dataclass
class BridgeInfo:
    """One bridge as shown (a port count, not its ports)."""

    name: str
    datapath_type: str
    ports: int
    mirrors: list[str]
    protocols: list[str]
    fail_mode: str | None
    sflow: dict[str, Any] | None = None  # the sFlow settings as a policy writes them, "owner" and "text" added
    ipfix: dict[str, Any] | None = None

    def sampling_text(self) -> list[str]:
        """One line per sampling protocol configured on the bridge (``hvnet status``, the Host screen)."""
        out = []
        for kind in sampling.KINDS:
            value = getattr(self, kind)
            if value is not None:
                mark = "" if value.get("owner") == "hvnet" else " (not hvnet's)"
                out.append(f"{value['text']}{mark}")
        return out


@dataclass
class HostInfo:
    """The host and its Open vSwitch, as the root row and hvnet know them."""

    hostname: str
    system_id: str | None
    ovs_version: str | None
    db_version: str | None
    system_type: str | None
    system_version: str | None
    datapath_types: list[str]
    bridge_datapath_types: list[str]
    db_target: str
    c_json_parser: bool
    # What the host is (XenServer/XCP-ng dom0 or not), from its files (switch.platform), when they
    # are the switch's host's: filled by status, None where it was not asked or cannot be told.
    platform: dict[str, Any] | None = None


@dataclass
class Inventory:
    """One switch as hvnet shows it (``hvnet status``, the console), from one read."""

    host: HostInfo
    bridges: list[BridgeInfo]
    vifs: list[Vif]
    mirrors: list[MirrorInfo]
    read_at: float
    # flow TAPs with their flows' counts (TapRow.to_json), filled by the services when asked (hvnet status):
    # counting needs ovs-ofctl, which a read of OVSDB alone cannot do
    taps: list[dict[str, Any]] = field(default_factory=list)

    def vif_by_port(self, name: str) -> Vif | None:
        return next((v for v in self.vifs if v.port == name or name in v.alias_ports), None)

    def to_json(self, all_ports: bool = False) -> dict[str, Any]:
        return documents.STATUS.stamp(
            {
                "host": asdict(self.host),
                "bridges": [_bridge_json(b) for b in self.bridges],
                "vifs": [v.to_json() for v in self.vifs if all_ports or v.is_vif],
                "mirrors": [asdict(m) for m in self.mirrors],
                "taps": self.taps,
            }
        )


def _stat_int(stats: dict[str, int], key: str) -> int | None:
    v = stats.get(key)
    return int(v) if v is not None else None


def read(
    conn: Source,
    *,
    names: list[NameSource] | None = None,
    kernel_counters: bool = True,
    runner: CommandRunner | None = None,
) -> Inventory:
    """Build the inventory from ``conn``'s rows: its replica or a one-shot snapshot
    (:func:`appliance.switch.reader.read`, one pass under its lock).

    Kernel counters are read on the ``runner``'s host (this machine when None).
    """
    inv = _build(conn, read_rows(conn))
    if not inv.host.hostname:  # OVS was not told its host's name: the host's as hvnet knows it
        remote = runner is not None and not runner.local
        inv.host.hostname = str(getattr(runner, "host", "")) if remote else socket.gethostname()
    if names:
        attach_vms(inv.vifs, names)
    if kernel_counters:
        found = ctr.read_kernel_many(runner or LocalRunner(), [v.interface for v in inv.vifs])
        for v in inv.vifs:
            kc = found.get(v.interface)
            if kc is not None:
                v.counters = kc
    return inv


def attach_vms(vifs: list[Vif], names: list[NameSource]) -> None:
    """Fill in each VIF's VM name -- and its domain's state and interface when libvirt
    knows it -- matched by the VM uuid (``vm-id``) and then the MAC (``attached-mac``).

    Every source is asked once for all VIFs together: libvirt answers a whole
    refresh with one listing (and a domain's XML only for the domains asked about).
    """
    wanted = wanted_vms(vifs)
    if wanted:
        apply_vms(vifs, resolve_vms(names, wanted))


def wanted_vms(vifs: list[Vif]) -> dict[str, set[str]]:
    """The VMs the name sources are asked about: each VM uuid with its VIFs' MACs."""
    wanted: dict[str, set[str]] = {}
    for v in vifs:
        if v.vm_uuid:
            wanted.setdefault(v.vm_uuid, set()).update(m for m in (v.mac,) if m)
    return wanted


def apply_vms(vifs: list[Vif], resolved: Mapping[str, VmInfo]) -> None:
    """Put what the name sources said (:func:`~appliance.switch.names.resolve_vms`) on the VIFs (a lookup may run
    in a thread of its own, bounded by a timeout, and its answer be applied here afterwards)."""
    for v in vifs:
        info = resolved.get(v.vm_uuid) if v.vm_uuid else None
        if info is None:
            continue
        v.vm_name, v.vm_name_source = info.name, info.source
        if info.domain is not None:
            v.vm_state = info.domain.state
            nic = info.domain.interface_for(v.mac)
            v.vm_interface = nic.describe() if nic is not None else None


def _build(conn: Source, rows: SwitchRows) -> Inventory:
    """The switch's rows as the display sees them: bridges, mirrors, then every port as a VIF."""
    bridges = [_bridge(br) for br in sorted(rows.bridges, key=lambda b: b.name)]
    vifs: list[Vif] = []
    xen_groups: dict[tuple[str, int, int], list[Vif]] = {}
    integration = rows.integration_bridge
    for port in rows.ports:
        v = _vif(port)
        if port.bridge == integration and v.is_vif:
            v.ovn_port = v.ids.get("iface-id")
        if v.xen_domid is not None and v.xen_devid is not None:
            xen_groups.setdefault((port.bridge, v.xen_domid, v.xen_devid), []).append(v)
        vifs.append(v)
    vifs = _group_xen_hvm(vifs, xen_groups)
    vifs.sort(key=lambda v: (not v.is_vif, v.bridge, _natural(v.port)))
    return Inventory(
        host=_host_info(conn, rows, bridges),
        bridges=bridges,
        vifs=vifs,
        mirrors=sorted((_mirror(m) for m in rows.mirrors), key=lambda m: (m.bridge, m.name)),
        read_at=time.time(),
    )


def _bridge(br: BridgeRow) -> BridgeInfo:
    return BridgeInfo(
        name=br.name,
        datapath_type=br.datapath_type,
        ports=len(br.ports),
        mirrors=list(br.mirrors),
        protocols=list(br.protocols),
        fail_mode=br.fail_mode,
        sflow=_sampling_json(br.sflow),
        ipfix=_sampling_json(br.ipfix),
    )


def _sampling_json(value: sampling.SamplingCols | None) -> dict[str, Any] | None:
    if value is None:
        return None
    return {**value.fields(), "owner": dict(value.external_ids).get("hvnet-owner"), "text": value.describe()}


def _mirror(m: MirrorRow) -> MirrorInfo:
    return MirrorInfo(
        name=m.name,
        bridge=m.bridge,
        select_all=m.select_all,
        select_src_ports=list(m.src),
        select_dst_ports=list(m.dst),
        select_vlans=list(m.vlans),
        output_port=m.output_port,
        output_vlan=m.output_vlan,
        tx_packets=_stat_int(m.statistics, "tx_packets"),
        tx_bytes=_stat_int(m.statistics, "tx_bytes"),
        owner=m.external_ids.get("hvnet-owner"),
    )


def _egress_max_rate(other_config: dict[str, str]) -> float | None:
    """linux-htb ``max-rate`` (bit/s) in kbit/s; None when absent or not a number."""
    if "max-rate" not in other_config:
        return None
    try:
        return int(other_config["max-rate"]) / 1000.0
    except ValueError:
        return None


def _egress_burst_bits(qos: QosRow) -> int | None:
    """linux-htb's queue 0 ``burst`` (bits), where hvnet's shaping keeps it; None when absent or not a number."""
    q0 = next((q for q in qos.queues if q.number == 0), None)
    try:
        return int(q0.other_config["burst"]) if q0 is not None and "burst" in q0.other_config else None
    except ValueError:
        return None


def _vif(port: PortRow) -> Vif:
    """One port as the display sees it (VIF ports have exactly one interface; bonds are not VIFs)."""
    ids = port.ids
    vlan = port.vlan
    xen = parse_xen_port(port.name)
    qos = port.qos
    stats = port.statistics
    meter_rate = _int_or_zero(ids.get("hvnet-police-rate-kbps"))
    meter_burst = _int_or_zero(ids.get("hvnet-police-burst-kbit"))
    return Vif(
        bridge=port.bridge,
        port=port.name,
        interface=port.interface,
        type=port.type or "system",
        is_vif=port.is_vif,
        ofport=port.ofport,
        mac=ids.get("attached-mac"),
        mac_in_use=port.mac_in_use,
        hypervisor=hypervisor_of(ids),
        vm_uuid=port.vm_uuid,
        vm_name=None,
        vm_name_source=None,
        ids=ids,
        xen_domid=xen[1] if xen else None,
        xen_devid=xen[2] if xen else None,
        alias_ports=[],
        vlan_mode=vlan.mode,
        vlan_mode_configured=vlan.vlan_mode,
        tag=vlan.tag,
        trunks=list(vlan.trunks),
        trunks_all_vlans=vlan.every_vlan,
        ingress_policing_rate_kbps=meter_rate or port.policing_rate,
        ingress_policing_burst_kbit=meter_burst if meter_rate else port.policing_burst,
        ingress_mechanism="meter" if meter_rate else ("tc" if port.policing_rate else None),
        egress_qos_type=qos.type if qos is not None else None,
        egress_max_rate_kbps=_egress_max_rate(qos.other_config) if qos is not None else None,
        egress_burst_bits=_egress_burst_bits(qos) if qos is not None else None,
        mirrors=port.mirrors,
        link_state=port.link_state,
        admin_state=port.admin_state,
        mtu=port.mtu,
        error=port.error,
        counters=ctr.Counters.from_mapping(stats, "ovsdb") if stats else ctr.Counters(),
    )


def _host_info(conn: Source, rows: SwitchRows, bridges: list[BridgeInfo]) -> HostInfo:
    root = rows.root
    ext = root.external_ids
    return HostInfo(
        hostname=ext.get("hostname", ""),
        system_id=ext.get("system-id"),
        ovs_version=root.ovs_version,
        db_version=root.db_version,
        system_type=root.system_type,
        system_version=root.system_version,
        datapath_types=sorted(root.datapath_types),
        bridge_datapath_types=sorted({b.datapath_type for b in bridges}),
        db_target=conn.target.where or conn.target.remote,
        c_json_parser=c_json_parser_in_use(),
    )


def _int_or_zero(text: str | None) -> int:
    return int(text) if text and text.isdigit() else 0


def _group_xen_hvm(vifs: list[Vif], groups: dict[tuple[str, int, int], list[Vif]]) -> list[Vif]:
    """Fold ``tapD.N`` into ``vifD.N`` (one HVM VIF shown once).

    The ``vif`` port is kept as the entry (it carries the PV path and is
    what XenServer's tools name); the ``tap`` port is listed in
    ``alias_ports``.  A lone ``tap`` port stays an entry of its own.
    """
    drop: set[int] = set()
    for members in groups.values():
        vif = next((m for m in members if m.port.startswith("vif")), None)
        taps = [m for m in members if m.port.startswith("tap")]
        if vif is None or not taps:
            continue
        for tap in taps:
            vif.alias_ports.append(tap.port)
            if vif.vm_uuid is None and tap.vm_uuid is not None:
                vif.vm_uuid = tap.vm_uuid
            drop.add(id(tap))
    return [v for v in vifs if id(v) not in drop]


def _natural(name: str) -> list[Any]:
    """Sort key that puts ``vif2.0`` before ``vif10.0``.

    Digit runs compare by length then text, never through int(): a port name is any
    string OVSDB holds, and int() refuses '²' (a digit to str.isdigit) and huge runs.
    """
    return [(len(t.lstrip("0")), t) if i % 2 else t for i, t in enumerate(re.split(r"([0-9]+)", name))]


def filter_vifs(vifs: Iterable[Vif], text: str) -> list[Vif]:
    """VIFs whose VM name, port, MAC or VM uuid contains ``text`` (case-insensitive)."""
    needle = text.lower()
    return [
        v
        for v in vifs
        if needle in " ".join(filter(None, [v.vm_name, v.port, v.mac, v.vm_uuid, *v.alias_ports])).lower()
    ]
