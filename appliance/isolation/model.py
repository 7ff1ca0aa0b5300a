"""VLAN forwarding as OVS does it, and the reachability it implies.

All pure: the expected matrix is computed from port VLAN settings and
mirrors, so it can be unit-tested and compared with what the switch's flow
logic (trace) and real traffic show.  Rules (ovs-vswitchd.conf.db(5), Port
``vlan_mode``):

* an untagged frame entering an *access* port, or a *native-tagged* /
  *native-untagged* port, belongs to the port's ``tag``; entering a *trunk*
  port it belongs to VLAN 0, accepted only if the port trunks VLAN 0;
* a frame of VLAN v leaves an *access* port only if v is its tag (untagged);
  a *trunk* port if it trunks v (tagged, VLAN 0 untagged); a *native-*
  port if v is the tag (untagged for native-untagged) or it trunks v;
* an empty ``trunks`` means every VLAN; no tag and no trunks on a VM's port
  is therefore a trunk of every VLAN -- the fail-open misconfiguration;
* a mirror's output port carries only mirrored copies: it neither forwards
  what it receives nor gets normal traffic;
* a frame a guest sends *tagged* with VLAN v (from a VLAN sub-interface,
  where the guest's kernel has 8021q) is dropped entering an *access* port;
  a *trunk* port takes it into v if it trunks v; a *native-* port if v is
  its tag or it trunks v (OVS trunks the native VLAN of such a port).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from appliance.core.vlan import VlanCols

YES, NO, EXCEPTION, UNKNOWN = "yes", "no", "exception", "unknown"


@dataclass(frozen=True)
class PortVlan:
    """The VLAN settings of one guest's port."""

    bridge: str
    mode: str | None  # as configured; None means "derive from tag"
    tag: int | None
    trunks: tuple[int, ...] = ()

    @property
    def effective_mode(self) -> str:
        return VlanCols(self.mode, self.tag).mode  # the one rule (appliance.core.vlan)

    def trunks_vlan(self, vlan: int) -> bool:
        return not self.trunks or vlan in self.trunks


@dataclass(frozen=True)
class MirrorSpec:
    """A mirror in guest terms: which guests' ports it selects, and its output guest."""

    name: str
    bridge: str
    output: str | None  # the guest whose VIF is the output port (None: not a guest)
    select_all: bool = False
    select_src: frozenset[str] = frozenset()
    select_dst: frozenset[str] = frozenset()
    select_vlans: frozenset[int] = frozenset()

    @classmethod
    def of(cls, mirror: Any, name_of: dict[str, str]) -> MirrorSpec:
        """``mirror`` (an inventory mirror) in the names ``name_of`` gives its ports (ports without one left
        out): the isolation check's guests, the audit's labels."""
        return cls(
            name=mirror.name,
            bridge=mirror.bridge,
            output=name_of.get(mirror.output_port or ""),
            select_all=mirror.select_all,
            select_src=frozenset(name_of[p] for p in mirror.select_src_ports if p in name_of),
            select_dst=frozenset(name_of[p] for p in mirror.select_dst_ports if p in name_of),
            select_vlans=frozenset(mirror.select_vlans),
        )


def ingress_vlan(port: PortVlan) -> int | None:
    """VLAN of an untagged frame a guest sends, or None if the port drops it."""
    mode = port.effective_mode
    if mode == "trunk":
        return 0 if port.trunks_vlan(0) else None
    return port.tag


def tagged_ingress_vlan(port: PortVlan, vlan: int) -> int | None:
    """VLAN of a frame a guest sends tagged with ``vlan``, or None if the port drops it."""
    mode = port.effective_mode
    if mode == "access" or vlan == 0:  # VLAN 0 is a priority tag: never sent tagged here
        return None
    if mode == "trunk":
        return vlan if port.trunks_vlan(vlan) else None
    return vlan if vlan == port.tag or port.trunks_vlan(vlan) else None


def sent_vlans(port: PortVlan, tagged: tuple[int, ...] = ()) -> list[int]:
    """Every VLAN a guest's frames get on its port: its untagged frames' and, for each VLAN it sends
    tagged (``tagged``), that VLAN if the port takes it; in that order, each once."""
    out: list[int] = []
    for vlan in [ingress_vlan(port), *(tagged_ingress_vlan(port, v) for v in tagged)]:
        if vlan is not None and vlan not in out:
            out.append(vlan)
    return out


def egress(port: PortVlan, vlan: int) -> str | None:
    """How a frame of ``vlan`` leaves ``port``: "untagged", "tagged" or None (not at all)."""
    mode = port.effective_mode
    if mode == "access":
        return "untagged" if vlan == port.tag else None
    if mode == "trunk":
        if not port.trunks_vlan(vlan):
            return None
        return "untagged" if vlan == 0 else "tagged"
    if vlan == port.tag:
        return "untagged" if mode == "native-untagged" else "tagged"
    return "tagged" if port.trunks_vlan(vlan) else None


def _mirror_outputs(mirrors: list[MirrorSpec]) -> set[str]:
    return {m.output for m in mirrors if m.output}


Tagged = dict[str, tuple[int, ...]]  # guest -> the VLANs it sends tagged frames on (none: untagged only)


def hears_normally(
    ports: dict[str, PortVlan], listener: str, sender: str, mirrors: list[MirrorSpec], tagged: Tagged | None = None
) -> bool:
    """Does ``listener`` get ``sender``'s broadcast -- untagged, or tagged on one of its VLANs -- by normal
    switching?"""
    s, lst = ports[sender], ports[listener]
    if s.bridge != lst.bridge:
        return False
    outputs = _mirror_outputs([m for m in mirrors if m.bridge == s.bridge])
    if sender in outputs or listener in outputs:
        return False
    return any(egress(lst, vlan) is not None for vlan in sent_vlans(s, (tagged or {}).get(sender, ())))


def mirrored_to(
    ports: dict[str, PortVlan], listener: str, sender: str, mirrors: list[MirrorSpec], tagged: Tagged | None = None
) -> list[str]:
    """Names of mirrors that copy ``sender``'s broadcast to ``listener``."""
    s = ports[sender]
    vlans = sent_vlans(s, (tagged or {}).get(sender, ()))
    if not vlans or sender in _mirror_outputs(mirrors):
        return []
    names = []
    for m in mirrors:
        if m.output != listener or m.bridge != s.bridge:
            continue
        if m.select_vlans and not m.select_vlans.intersection(vlans):
            continue
        selected = m.select_all or sender in m.select_src
        if not selected and m.select_dst:
            selected = any(
                d != sender and d in ports and hears_normally(ports, d, sender, mirrors, tagged) for d in m.select_dst
            )
        if selected:
            names.append(m.name)
    return names


@dataclass
class Expected:
    """Expected matrix: ``cells[(listener, sender)]`` is yes, no or exception."""

    guests: list[str]
    cells: dict[tuple[str, str], str]
    exceptions: dict[tuple[str, str], list[str]] = field(default_factory=dict)  # cell -> mirror names


def derive(
    ports: dict[str, PortVlan], mirrors: list[MirrorSpec], guests: list[str], tagged: Tagged | None = None
) -> Expected:
    """Who should hear whom, from VLAN settings and the VLANs each guest sends tagged on (``tagged``);
    mirror copies are declared exceptions."""
    cells: dict[tuple[str, str], str] = {}
    exceptions: dict[tuple[str, str], list[str]] = {}
    for listener in guests:
        for sender in guests:
            if listener == sender:
                continue
            if hears_normally(ports, listener, sender, mirrors, tagged):
                cells[(listener, sender)] = YES
                continue
            via = mirrored_to(ports, listener, sender, mirrors, tagged)
            if via:
                cells[(listener, sender)] = EXCEPTION
                exceptions[(listener, sender)] = via
            else:
                cells[(listener, sender)] = NO
    return Expected(guests=list(guests), cells=cells, exceptions=exceptions)


def compare(expected: str, observed: str) -> str:
    """Verdict for one cell: ok, leak, blocked (unexpected block) or unknown."""
    if observed == UNKNOWN:
        return "unknown"
    want_yes = expected in (YES, EXCEPTION)
    if observed == YES:
        return "ok" if want_yes else "leak"
    return "blocked" if want_yes else "ok"


# -- what a method found ------------------------------------------------------------


@dataclass
class Evidence:
    """Why a cell reads "yes": the first matching frame and where it was captured."""

    time: float
    src_mac: str
    src_ip: str
    vlan: int | None
    pcap: str

    @property
    def clock(self) -> str:
        """The frame's local time of day; a time no clock can show (a hand-edited result) is shown as written."""
        try:
            return datetime.fromtimestamp(self.time).strftime("%H:%M:%S.%f")
        except (OverflowError, OSError, ValueError, TypeError):
            return str(self.time)


@dataclass
class MethodResult:
    method: str
    cells: dict[tuple[str, str], str] = field(default_factory=dict)
    reasons: dict[tuple[str, str], str] = field(default_factory=dict)  # why unknown
    evidence: dict[tuple[str, str], Evidence] = field(default_factory=dict)
    replies: dict[tuple[str, str], bool] = field(default_factory=dict)  # (sender, replier) -> reply seen
    error: str | None = None
    stats: dict[str, Any] = field(default_factory=dict)
