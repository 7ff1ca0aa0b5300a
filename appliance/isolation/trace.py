"""The switch-logic method: ``ofproto/trace`` a broadcast ARP from each VIF.

No traffic is sent, so it is instant and answers even for guests that are
down.  The trace ends with the datapath actions, e.g.
``push_vlan(vid=1,pcp=0),2,pop_vlan,3`` -- output to datapath ports 2 (tagged
VLAN 1) and 3 (untagged).  Datapath port numbers map back to port names
through ``dpif/show``.  Both parsers are pure.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# ASCII numbers of bounded length: \d also matches other scripts' digits, and int() refuses huge ones.
_DPIF_PORT = re.compile(r"^\s+(?P<name>\S+) (?P<ofport>[0-9]{1,10})/(?P<odp>[0-9]{1,10}):")
_PUSH = re.compile(r"push_vlan\((?:tpid=0x[0-9a-f]+,)?vid=(?P<vid>[0-9]{1,4})\b")


@dataclass(frozen=True)
class Delivery:
    """A frame the trace sends out of ``port`` (None vlan: untagged)."""

    port: str
    vlan: int | None


def parse_dpif_show(text: str, bridge: str) -> dict[int, str]:
    """``ovs-appctl dpif/show`` -> {datapath port number: port name} for ``bridge``."""
    ports: dict[int, str] = {}
    current = None
    for line in text.splitlines():
        stripped = line.strip()
        if line.startswith("  ") and not line.startswith("    ") and stripped.endswith(":"):
            current = stripped[:-1]
            continue
        m = _DPIF_PORT.match(line)
        if m and current == bridge:
            ports[int(m.group("odp"))] = m.group("name")
    return ports


def datapath_actions(trace_output: str) -> str:
    """The ``Datapath actions:`` line of an ``ofproto/trace`` output ('' if dropped)."""
    for line in reversed(trace_output.splitlines()):
        if line.startswith("Datapath actions:"):
            actions = line.split(":", 1)[1].strip()
            return "" if actions == "drop" else actions
    raise ValueError("no 'Datapath actions' line in the trace output")


def _split_actions(actions: str) -> list[str]:
    """Split on top-level commas (not those inside parentheses)."""
    out, depth, cur = [], 0, ""
    for ch in actions:
        if ch == "(":
            depth += 1
        elif ch == ")":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        out.append(cur)
    return [a.strip() for a in out if a.strip()]


def deliveries(actions: str, odp_ports: dict[int, str]) -> list[Delivery]:
    """Where the frame goes, with the VLAN tag it carries on each port."""
    vlans: list[int] = []
    out: list[Delivery] = []
    for action in _split_actions(actions):
        if re.fullmatch(r"[0-9]{1,10}", action):  # not str.isdigit(): '²' is a digit to it, yet no int
            port = odp_ports.get(int(action), f"dp{action}")
            out.append(Delivery(port, vlans[-1] if vlans else None))
        elif m := _PUSH.match(action):
            vlans.append(int(m.group("vid")))
        elif action.startswith("pop_vlan") and vlans:
            vlans.pop()
    return out


def arp_flow(in_port: str, mac: str, ip: str, target_ip: str) -> str:
    """The flow of a broadcast ARP who-has from ``mac``/``ip`` entering ``in_port``."""
    return (
        f"in_port={in_port},dl_src={mac},dl_dst=ff:ff:ff:ff:ff:ff,dl_type=0x0806,"
        f"arp_op=1,arp_sha={mac},arp_spa={ip},arp_tpa={target_ip}"
    )
