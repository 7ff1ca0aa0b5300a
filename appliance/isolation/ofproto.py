"""The switch-logic method: ``ofproto/trace`` a broadcast ARP from each VIF.

No traffic is sent, so it is instant and answers even for guests that are
down.  A trace ends with the datapath actions, e.g.
``push_vlan(vid=1,pcp=0),2,pop_vlan,3`` -- output to datapath ports 2 (tagged
VLAN 1) and 3 (untagged).  Datapath port numbers map back to port names
through ``dpif/show``.  Everything here is pure.

What the parser must not miss (each seen in real ``ofproto/trace`` output of
Open vSwitch 3.1, tests/unit/data/trace-*.txt; the format is written by
``ofproto_trace()`` in ofproto/ofproto-dpif-trace.c):

* outputs nested in ``clone(...)`` -- patch ports to a bridge whose flows
  are not reversible (a meter, a truncation) are crossed in a datapath clone,
  ``...,5,clone(meter(0),pop_vlan,3,...),100``; also ``sample(...,actions(...))``
  and both branches of ``check_pkt_len(...)``;
* every pass: after a ``recirc(0x1)`` (conntrack, some bonds) the trace goes
  on in a section headed ``recirc(0x1)`` with its own ``Datapath actions:``
  line, and a frame output in the first pass is as delivered as one output
  in the last;
* ports of other bridges: bridges of one datapath share its port numbers,
  and a frame crossing a patch port leaves through the other bridge's ports.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_DPIF_DATAPATH = re.compile(r"^(?P<dp>\S+@\S+):")
_DPIF_BRIDGE = re.compile(r"^  (?P<bridge>\S+):$")
# ASCII numbers of bounded length: \d also matches other scripts' digits, and int() refuses huge ones.
_DPIF_PORT = re.compile(r"^    (?P<name>\S+) (?P<ofport>[0-9]{1,10})/(?P<odp>[0-9]{1,10}):")
_PASS_HEADER = re.compile(r"^recirc\((?P<id>0x[0-9a-fA-F]+)\)")
_VID = re.compile(r"(?:^|,)vid=(?P<vid>[0-9]{1,4})(?:,|$)")
_ODP_PORT = re.compile(r"^[0-9]{1,10}$")
MAX_DEPTH = 32  # nested actions: OVS itself stops translating far earlier


@dataclass(frozen=True)
class Delivery:
    """A frame the trace sends out of ``port`` (None vlan: untagged)."""

    port: str
    vlan: int | None


@dataclass(frozen=True)
class Pass:
    """One pass through the switch: the first, or one resumed after a ``recirc``."""

    recirc_id: str | None  # None for the first pass
    actions: str  # its datapath actions, '' when it drops the frame


def parse_dpif_show(text: str, bridge: str) -> dict[int, str]:
    """``ovs-appctl dpif/show`` -> {datapath port number: port name} of ``bridge``'s datapath.

    Every bridge of the datapath is included, not only ``bridge``: they share
    its port numbers, and a trace that crosses a patch port outputs to the
    other bridge's ports.  Patch ports themselves (``9/none``) have no number.
    """
    by_datapath: dict[str, dict[int, str]] = {}
    datapath_of: dict[str, str] = {}
    dp, current = "", None
    for line in text.splitlines():
        if m := _DPIF_DATAPATH.match(line):
            dp, current = m.group("dp"), None
        elif m := _DPIF_BRIDGE.match(line):
            current = m.group("bridge")
            datapath_of.setdefault(current, dp)
        elif (m := _DPIF_PORT.match(line)) and current is not None:
            by_datapath.setdefault(dp, {})[int(m.group("odp"))] = m.group("name")
    if bridge not in datapath_of:
        return {}
    return dict(by_datapath.get(datapath_of[bridge], {}))


def passes(trace_output: str) -> list[Pass]:
    """Every pass of an ``ofproto/trace`` output, in order; ValueError if it has none."""
    out: list[Pass] = []
    recirc_id: str | None = None
    for line in trace_output.splitlines():
        if m := _PASS_HEADER.match(line):
            recirc_id = m.group("id").lower()
        elif line.startswith("Datapath actions:"):
            actions = line.split(":", 1)[1].strip()
            out.append(Pass(recirc_id, "" if actions == "drop" else actions))
        elif line.startswith("Translation failed") and out:  # "..., packet is dropped."
            out[-1] = Pass(out[-1].recirc_id, "")
    if not out:
        raise ValueError("no 'Datapath actions' line in the trace output")
    return out


def describe(trace_passes: list[Pass]) -> str:
    """The passes' actions on one line, for the report ('drop' when none outputs anything)."""
    parts = [(f"recirc({p.recirc_id}): " if p.recirc_id else "") + (p.actions or "drop") for p in trace_passes]
    return "; ".join(parts) or "drop"


def split_actions(actions: str) -> list[str]:
    """Split on top-level commas (not those inside parentheses); ValueError if they do not balance."""
    out, depth, start = [], 0, 0
    for i, ch in enumerate(actions):
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
            if depth < 0:
                raise ValueError(f"unbalanced ')' in datapath actions: {actions[:80]!r}")
        elif ch == "," and depth == 0:
            out.append(actions[start:i])
            start = i + 1
    if depth:
        raise ValueError(f"unbalanced '(' in datapath actions: {actions[:80]!r}")
    out.append(actions[start:])
    return [a.strip() for a in out if a.strip()]


def _call(action: str) -> tuple[str, str | None]:
    """``name(args)`` -> (name, args); a bare ``name`` -> (name, None)."""
    name, paren, rest = action.partition("(")
    if not paren:
        return action, None
    if not rest.endswith(")"):
        raise ValueError(f"malformed datapath action {action[:80]!r}")
    return name.strip(), rest[:-1]


class _Walk:
    """Evaluates datapath actions: where frames go, with which VLAN tags."""

    def __init__(self, odp_ports: dict[int, str]) -> None:
        self.odp_ports = odp_ports
        self.out: list[Delivery] = []
        self.recirc_vlans: dict[str, list[int]] = {}  # the tags a frame carries into each recirculation

    def run(self, actions: str, vlans: list[int], depth: int = 0) -> None:
        if depth > MAX_DEPTH:
            raise ValueError(f"datapath actions nested deeper than {MAX_DEPTH} levels")
        for action in split_actions(actions):
            name, args = _call(action)
            if args is None and _ODP_PORT.match(name):
                port = self.odp_ports.get(int(name), f"dp{name}")
                self.out.append(Delivery(port, vlans[-1] if vlans else None))
            elif name == "push_vlan":
                vlans.append(_vid(args or ""))
            elif name == "pop_vlan":
                if vlans:
                    vlans.pop()
            elif name == "recirc" and args is not None:
                self.recirc_vlans[args.strip().lower()] = list(vlans)
            elif args is not None:
                for inner in _nested(name, args):
                    self.run(inner, list(vlans), depth + 1)  # a copy: a clone's changes stay in it


def _vid(args: str) -> int:
    m = _VID.search(args)
    if m is None or int(m.group("vid")) > 4095:
        raise ValueError(f"push_vlan without a VLAN id: push_vlan({args[:60]})")
    return int(m.group("vid"))


def _nested(name: str, args: str) -> list[str]:
    """The action lists nested in ``name(args)`` that can output a frame."""
    if name == "clone":
        return [args]
    if name == "sample":  # sample(sample=P%,actions(...)); older OVS wrote a clone this way
        return [a for part in split_actions(args) for n, a in [_call(part)] if n == "actions" and a is not None]
    if name == "check_pkt_len":  # check_pkt_len(size=N,gt(...),le(...)): either branch may run
        return [a for part in split_actions(args) for n, a in [_call(part)] if n in ("gt", "le") and a is not None]
    return []


def deliveries(actions: str | list[Pass], odp_ports: dict[int, str], vlan: int | None = None) -> list[Delivery]:
    """Where the frame goes, with the VLAN tag it carries on each port.

    ``actions`` is one datapath-actions string or every pass of a trace; a
    recirculated pass starts with the tags the frame had at its ``recirc``.
    ``vlan`` is the tag the frame arrived with (a trunk guest's tagged frame,
    or one entering from another switch's trunk): an output before any
    ``pop_vlan`` sends it on tagged so, as the datapath does.  ValueError when
    the actions cannot be read.
    """
    trace_passes = [Pass(None, actions)] if isinstance(actions, str) else actions
    walk = _Walk(odp_ports)
    arrived = [] if vlan is None else [vlan]
    for p in trace_passes:
        start = walk.recirc_vlans.get(p.recirc_id, []) if p.recirc_id else arrived
        walk.run(p.actions, list(start))
    return walk.out


def arp_flow(in_port: str, mac: str, ip: str, target_ip: str, vlan: int | None = None) -> str:
    """The flow of a broadcast ARP who-has from ``mac``/``ip`` entering ``in_port`` (tagged ``vlan``, if given:
    how it arrives on a trunk from another switch)."""
    tag = "" if vlan is None else f"dl_vlan={vlan},"
    return (
        f"in_port={in_port},{tag}dl_src={mac},dl_dst=ff:ff:ff:ff:ff:ff,dl_type=0x0806,"
        f"arp_op=1,arp_sha={mac},arp_spa={ip},arp_tpa={target_ip}"
    )


def control_flow(mac: str, target_ip: str) -> str:
    """The flow of the positive control: a broadcast ARP the controller puts out (packet-out)."""
    return (
        f"in_port=controller,dl_src={mac},dl_dst=ff:ff:ff:ff:ff:ff,dl_type=0x0806,"
        f"arp_op=1,arp_sha={mac},arp_spa=0.0.0.0,arp_tpa={target_ip}"
    )


_TABLE_LINE = re.compile(r"^\s*(?P<table>[0-9]{1,3})\. (?P<rule>.*)$")
# OpenFlow actions that hand the frame to the switch's forwarding: its MAC learning (NORMAL), a flood or an
# output to a port.  A trace that reaches none of them dropped the frame before any forwarding decision.
FORWARDING = ("NORMAL", "FLOOD", "ALL", "IN_PORT", "LOCAL", "output", "enqueue")


def forwarding_stop(trace_output: str) -> str | None:
    """None when an ``ofproto/trace`` output reaches a forwarding action (NORMAL, a flood, an output);
    otherwise what stopped the frame: the last table and rule the trace shows, and its last action."""
    rule = action = None
    for line in trace_output.splitlines():
        if m := _TABLE_LINE.match(line):
            what = m.group("rule").rstrip(".")
            rule = f"table {m.group('table')}" + (": no flow matches" if what == "No match" else f" rule '{what}'")
            action = None
            continue
        text = line.strip()
        if text.startswith("Translation failed"):
            action = text
        if not line.startswith("    ") or not text or text.startswith(("->", ">>")):
            continue
        if re.split(r"[:(,]", text, maxsplit=1)[0] in FORWARDING:
            return None
        action = text
    return f"{rule or 'the trace'} ({action or 'drop'})"


def probe_flow(in_port: int, mac: str, tha: str, target_ip: str, vlan: int | None = None) -> str:
    """The flow of the audit's packet-out probe, every field of its frame: a broadcast ARP who-has from
    ``mac`` with sender address 0.0.0.0 and target MAC ``tha`` (tagged ``vlan``, if given)."""
    tag = "" if vlan is None else f"dl_vlan={vlan},"
    return (
        f"in_port={in_port},{tag}dl_src={mac},dl_dst=ff:ff:ff:ff:ff:ff,dl_type=0x0806,"
        f"arp_op=1,arp_sha={mac},arp_spa=0.0.0.0,arp_tha={tha},arp_tpa={target_ip}"
    )
