"""The trace method: every guest's broadcast ARP through the switches' flow logic (``ofproto/trace``).

On one switch a sender's trace shows the ports its frame leaves by.  In a lab
of several hosts a frame that leaves by a trunk link is traced again on the
host at the link's other end, entering the peer port with the VLAN it left
with, and so on along the chain (each host once per bridge): the frame's path
through every switch, without sending it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from appliance.core.errors import CommandFailed
from appliance.isolation import model, traffic
from appliance.isolation import ofproto as trace
from appliance.isolation.model import MethodResult
from appliance.isolation.scenario import Scenario
from appliance.switch.host import Host
from appliance.switch.inventory import Inventory, Vif

OdpPorts = Callable[[str], dict[int, str]]  # bridge -> {datapath port number: port name}


@dataclass(frozen=True)
class SiteView:
    """One switch of a check as the methods see it: its Host, its inventory read once the settings are in
    force, the scenario's guests whose VIFs it holds and, in a lab of several hosts, the host's name."""

    host: Host
    inv: Inventory
    guests: tuple[str, ...]
    name: str | None = None


def _odp_ports(host: Host) -> OdpPorts:
    """``dpif/show`` read once per switch: every bridge's datapath port numbers."""
    dpif: list[str] = []

    def odp_ports(bridge: str) -> dict[int, str]:
        if not dpif:
            dpif.append(host.appctl("ovs-vswitchd", "dpif/show"))
        return trace.parse_dpif_show(dpif[0], bridge)

    return odp_ports


def run_trace(host: Host, sc: Scenario, inv: Inventory, vif_of: dict[str, str]) -> MethodResult:
    """The trace method on one switch holding every guest."""
    return trace_sites(sc, [SiteView(host, inv, tuple(sc.guests))], vif_of)


def trace_sites(sc: Scenario, views: list[SiteView], vif_of: dict[str, str]) -> MethodResult:
    """Trace every guest's broadcast through the switches' logic.

    A listener's "No" stands only when its positive control passes: a trace
    of a frame put straight onto its port must show the frame leaving there.
    Otherwise nothing the trace method could say about that port is evidence
    (the trace, the parser or the port numbers cannot see it) and its cells
    are unknown, like a capture that heard nothing.
    """
    res = MethodResult("trace")
    where = {g: v for v in views for g in v.guests}
    odp = {id(v): _odp_ports(v.host) for v in views}
    guest_at = {(id(where[g]), vif_of[g]): g for g in sc.guests}  # (switch, port) -> guest
    vifs = {g: where[g].inv.vif_by_port(vif_of[g]) for g in sc.guests}
    doubts = {
        g: _trace_control(where[g].host, vifs[g], vif_of[g], sc.topology.guest(g).address, odp[id(where[g])])
        for g in sc.guests
    }
    for sender in sc.guests:
        view = where[sender]
        reached: set[tuple[int, str]] = set()
        problem = None
        for vlan in (None, *sc.topology.tagged_vlans(sender)):  # untagged, then tagged on each of its VLANs
            heard, problem = _trace_sender(view.host, sc, sender, vifs[sender], vif_of[sender], odp[id(view)], res,
                                           vlan)  # fmt: skip
            reached |= {(id(view), d.port) for d in heard}
            if problem is None and len(views) > 1:
                more, problem = _across_links(sc, sender, views, view, heard, odp)
                reached |= more
            if problem is not None:
                break
        heard_by = {guest_at[k] for k in reached if k in guest_at}
        for listener in sc.guests:
            if listener == sender:
                continue
            cell = (listener, sender)
            if problem is None and listener in heard_by:
                res.cells[cell] = model.YES
            elif problem is None and doubts[listener] is None:
                res.cells[cell] = model.NO
            else:
                res.cells[cell] = model.UNKNOWN
                res.reasons[cell] = problem or doubts[listener] or ""
    return res


def _across_links(
    sc: Scenario,
    sender: str,
    views: list[SiteView],
    start: SiteView,
    heard: list[trace.Delivery],
    odp: dict[int, OdpPorts],
) -> tuple[set[tuple[int, str]], str | None]:
    """Follow ``sender``'s frame over the trunk links: the (switch, port) pairs it leaves by on other hosts,
    or why that is not known."""
    by_name = {v.name: v for v in views}
    links = sc.topology.links()
    g = sc.topology.guest(sender)
    target = next(sc.topology.guest(o).address for o in sc.guests if o != sender)
    reached: set[tuple[int, str]] = set()
    done = {(start.name, ln.bridge) for ln in links}
    queue = [(start, d) for d in heard]
    while queue:
        view, d = queue.pop(0)
        for ln in links:
            peer = ln.peer(view.name or "", d.port)
            if peer is None or (peer[0], ln.bridge) in done or peer[0] not in by_name:
                continue
            done.add((peer[0], ln.bridge))
            other = by_name[peer[0]]
            flow = trace.arp_flow(peer[1], g.mac, g.address, target, vlan=d.vlan)
            try:
                out = other.host.appctl("ovs-vswitchd", "ofproto/trace", ln.bridge, flow)
                deliveries = trace.deliveries(trace.passes(out), odp[id(other)](ln.bridge), d.vlan)
            except (CommandFailed, ValueError) as exc:
                return reached, f"the trace of {sender}'s broadcast on {peer[0]} could not be read: {exc}"
            reached |= {(id(other), x.port) for x in deliveries}
            queue += [(other, x) for x in deliveries]
    return reached, None


def _trace_sender(
    host: Host,
    sc: Scenario,
    sender: str,
    vif: Vif | None,
    port: str,
    odp_ports: OdpPorts,
    res: MethodResult,
    vlan: int | None = None,
) -> tuple[list[trace.Delivery], str | None]:
    """Where ``sender``'s broadcast ARP (tagged ``vlan``, as from its sub-interface ``eth0.VLAN``) leaves the
    switch, or why that is not known."""
    if vif is None:
        return [], f"{port} is not on the switch"
    g = sc.topology.guest(sender)
    target = next(sc.topology.guest(o).address for o in sc.guests if o != sender)
    flow = trace.arp_flow(vif.port, g.mac, g.address, target, vlan=vlan)
    what = f"{sender}'s broadcast" if vlan is None else f"{sender}'s broadcast tagged {vlan}"
    try:
        out = host.appctl("ovs-vswitchd", "ofproto/trace", vif.bridge, flow)
        passes = trace.passes(out)
        key = sender if vlan is None else f"{sender} (tagged {vlan})"
        res.stats.setdefault("datapath_actions", {})[key] = trace.describe(passes)
        return trace.deliveries(passes, odp_ports(vif.bridge), vlan), None
    except (CommandFailed, ValueError) as exc:
        return [], f"the trace of {what} could not be read: {exc}"


def _trace_control(host: Host, vif: Vif | None, port: str, ip: str, odp_ports: OdpPorts) -> str | None:
    """The trace method's positive control for one port: why it fails, or None when it passes.

    ``ofproto/trace-packet-out`` of the traffic method's own control frame,
    output straight to the port: a port the switch can certainly reach.
    """
    if vif is None:
        return f"{port} is not on the switch"
    if vif.ofport is None or vif.ofport < 1:
        return f"{port} has no OpenFlow port number, so no control trace can reach it"
    try:
        out = host.appctl(
            "ovs-vswitchd",
            "ofproto/trace-packet-out",
            vif.bridge,
            trace.control_flow(traffic.CONTROL_MAC, ip),
            f"output:{vif.ofport}",
        )
        passes = trace.passes(out)
        reached = any(d.port == vif.port for d in trace.deliveries(passes, odp_ports(vif.bridge)))
    except (CommandFailed, ValueError) as exc:
        return f"the control trace to {port} failed ({exc}), so the trace's 'No' is not proven"
    if reached:
        return None
    return (
        f"a control trace straight to {port} does not show it leaving there "
        f"(datapath actions: {trace.describe(passes)}), so the trace's 'No' is not proven"
    )
