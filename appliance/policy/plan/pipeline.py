"""hvnet's OpenFlow pipeline on a bridge: one layout shared by policing meters and TAPs.

Tables (all flows carry hvnet's cookie)::

    table 0        meters: in_port=VIF -> meter:N, goto_table:<first TAP or 60>;
                   priority 0 -> goto_table:<first TAP or 60>
    tables 10..41  one per TAP, in name order: its copies (priority 200
                   in_port=VIF + match for "in", priority 100 dl_dst=VIF's MAC +
                   match for "out"), each copying then continuing to the next
                   TAP's table (or 60); priority 0 -> the next table
    table 60       priority 0 -> NORMAL (the switch's own forwarding)

Meters come first, so that a TAP copies what the switch forwards: a VM
flooding beyond its policing rate does not flood the monitor too.  A TAP
per table means overlapping TAPs all get their copies (one table holds
one action per packet).  ``method: flows`` copies with ``output:MON``
before ``goto_table``; ``method: group`` sends the packet to an OpenFlow
group of type ALL (group id 0x68760000 + the TAP's index) whose two
buckets are ``output:MON`` and ``resubmit(,next)`` -- the vTAP thesis's
group TAP.  With neither meters nor TAPs hvnet has no flows and the
switch's default flow (``priority=0 actions=NORMAL``) is put back.

Flows of anyone else: hvnet installs nothing while other flows are on the
bridge (they would be bypassed or would bypass hvnet's), and says so.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from appliance.policy.plan.model import TapMatch
from appliance.policy.plan.state import PortState, State
from appliance.policy.plan.taps import TapCols, ip_version, protocol_number

METER_TABLE = 0
TAP_TABLE0 = 10
NORMAL_TABLE = 60
GROUP_BASE = 0x68760000  # "hv" + TAP index: hvnet's groups, and only these, are ever deleted
METER_PRIORITY = 100
IN_PRIORITY = 200
OUT_PRIORITY = 100


@dataclass(frozen=True)
class Flow:
    """One flow as hvnet writes and reads it: match tokens compare as a set (ovs-ofctl reorders them)."""

    table: int
    priority: int
    match: frozenset[str]
    actions: str

    def text(self, cookie: int) -> str:
        fields = [f"cookie={cookie:#x}", f"table={self.table}", f"priority={self.priority}"]
        fields += sorted(self.match, key=_token_order)
        return ",".join([*fields, f"actions={self.actions}"])


def _token_order(token: str) -> tuple[int, str]:
    """Protocol shorthands (ip, tcp...) first: ovs-ofctl needs them before the fields they enable."""
    return (0 if "=" not in token else 1, token)


@dataclass
class Pipeline:
    """What hvnet wants installed on one bridge."""

    flows: set[Flow] = field(default_factory=set)
    groups: dict[int, str] = field(default_factory=dict)  # group id -> its description, as dump-groups prints it
    taps: list[str] = field(default_factory=list)  # TAP names, index = table - TAP_TABLE0

    @property
    def empty(self) -> bool:
        return not self.flows and not self.groups


def tap_table(index: int) -> int:
    return TAP_TABLE0 + index


def build(state: State, bridge: str, meters: dict[int, int]) -> Pipeline:
    """The pipeline for ``bridge``: ``meters`` (ofport -> meter id) and the bridge's recorded TAPs."""
    br = state.bridges.get(bridge)
    taps = sorted(br.taps.items()) if br is not None else []
    out = Pipeline(taps=[name for name, _ in taps])
    if not meters and not taps:
        return out
    first = tap_table(0) if taps else NORMAL_TABLE
    for ofport, meter in sorted(meters.items()):
        out.flows.add(
            Flow(METER_TABLE, METER_PRIORITY, frozenset({f"in_port={ofport}"}), f"meter:{meter},goto_table:{first}")
        )
    out.flows.add(Flow(METER_TABLE, 0, frozenset(), f"goto_table:{first}"))
    for i, (_, tap) in enumerate(taps):
        nxt = tap_table(i + 1) if i + 1 < len(taps) else NORMAL_TABLE
        _tap_flows(out, state, tap, i, nxt)
    out.flows.add(Flow(NORMAL_TABLE, 0, frozenset(), "NORMAL"))
    return out


def _tap_flows(out: Pipeline, state: State, tap: TapCols, index: int, nxt: int) -> None:
    table = tap_table(index)
    out.flows.add(Flow(table, 0, frozenset(), f"goto_table:{nxt}"))
    monitor = state.ports.get(tap.output_port)
    if monitor is None or not monitor.ofport or monitor.ofport < 0:
        return  # no output (yet): nothing to copy to; the TAP's table only passes packets on
    if tap.method == "group":
        gid = GROUP_BASE + index
        out.groups[gid] = (
            f"group_id={gid},type=all,bucket=actions=output:{monitor.ofport},bucket=actions=resubmit(,{nxt})"
        )
        actions = f"group:{gid}"
    else:
        actions = f"output:{monitor.ofport},goto_table:{nxt}"
    base = match_tokens(tap.match)
    for name in tap.vifs:
        port = state.ports.get(name)
        if port is None or not port.ofport or port.ofport < 0:
            continue
        vlan = _vlan_tokens(tap.match, port)
        if vlan is None:
            continue  # an access port of another VLAN: nothing of its traffic matches
        if tap.direction in ("in", "both"):
            out.flows.add(Flow(table, IN_PRIORITY, base | vlan | {f"in_port={port.ofport}"}, actions))
        if tap.direction in ("out", "both") and port.mac and tap.match.dst_mac in (None, port.mac):
            match = {t for t in base if not t.startswith("dl_dst=")} | vlan | {f"dl_dst={port.mac}"}
            out.flows.add(Flow(table, OUT_PRIORITY, frozenset(match), actions))


def _vlan_tokens(match: TapMatch, port: PortState) -> frozenset[str] | None:
    """A VLAN match on a VIF: nothing on its own access VLAN (untagged here), dl_vlan on a trunk."""
    if match.vlan is None:
        return frozenset()
    eff = port.vlan.effective()
    if eff.mode == "access":
        return frozenset() if eff.tag == match.vlan else None
    return frozenset({f"dl_vlan={match.vlan}"})


def match_tokens(match: TapMatch) -> frozenset[str]:
    """The OpenFlow match of a TAP's fields, spelled as ``ovs-ofctl dump-flows`` prints it."""
    tokens: set[str] = set()
    if match.src_mac:
        tokens.add(f"dl_src={match.src_mac}")
    if match.dst_mac:
        tokens.add(f"dl_dst={match.dst_mac}")
    version = ip_version(match)
    proto = protocol_number(match)
    names = {6: "tcp", 17: "udp", 1: "icmp"} if version == 4 else {6: "tcp6", 17: "udp6", 58: "icmp6"}
    if version is not None:
        if proto is None:
            tokens.add("ip" if version == 4 else "ipv6")
        elif proto in names:
            tokens.add(names[proto])
        else:
            tokens |= {"ip" if version == 4 else "ipv6", f"nw_proto={proto}"}
        prefix = "nw" if version == 4 else "ipv6"
        if match.src_ip:
            tokens.add(f"{prefix}_src={match.src_ip}")
        if match.dst_ip:
            tokens.add(f"{prefix}_dst={match.dst_ip}")
    if match.src_port is not None:
        tokens.add(f"tp_src={match.src_port}")
    if match.dst_port is not None:
        tokens.add(f"tp_dst={match.dst_port}")
    return frozenset(tokens)
