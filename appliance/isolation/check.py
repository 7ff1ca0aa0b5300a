"""Run an isolation scenario: apply its settings, run the methods, compare, restore.

The scenario's VLAN settings and mirrors are applied in one OVSDB transaction
(mirrors marked ``hvnet-owner``) and undone in one transaction afterwards,
whatever happens in between.  The expected matrix is derived from the
configuration then in force (or taken from the file); each method's observed
matrix is compared cell by cell.
"""

from __future__ import annotations

import ipaddress
import os
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from appliance.core import ovsfeatures
from appliance.core.errors import EXIT_FAILED, EXIT_OK, EXIT_UNDECIDED, HvnetError, UsageError
from appliance.core.ovsdb import Connection
from appliance.core.vlan import VlanCols
from appliance.endpoints.guests import GuestEndpoint, GuestSource
from appliance.isolation import model, traffic
from appliance.isolation.model import Evidence, MethodResult
from appliance.isolation.scenario import _UNSET, Scenario
from appliance.isolation.trace import OdpPorts, SiteView, run_trace, trace_sites
from appliance.policy.apply.engine import PolicyEngine
from appliance.policy.plan.model import OWNER_KEY as OWNER
from appliance.policy.plan.planner import Change
from appliance.policy.plan.state import MirrorCols, State
from appliance.switch import inventory, reader
from appliance.switch.host import Host
from appliance.switch.inventory import Inventory

METHODS = ("traffic", "trace")
__all__ = [
    "Evidence",
    "MethodResult",
    "OdpPorts",
    "SiteView",
    "run_trace",
    "trace_sites",
]  # the results' types, the trace method


@dataclass
class CheckResult:
    scenario: str
    guests: list[str]
    expected: model.Expected
    methods: dict[str, MethodResult]
    out_dir: str | None
    duration_s: float = 0.0
    senders: list[str] | None = None  # the matrix's columns when they are not the guests (an audit's probes)

    def verdicts(self, method: str) -> dict[tuple[str, str], str]:
        m = self.methods[method]
        if m.error:
            return {cell: "unknown" for cell in self.expected.cells}
        return {cell: model.compare(exp, m.cells.get(cell, model.UNKNOWN)) for cell, exp in self.expected.cells.items()}

    @property
    def exit_code(self) -> int:
        """0 all match, 1 a leak or unexpected block, 7 something could not be decided (a method that
        could not run included); a finding outranks an undecided cell.  Never 2: that is invalid input."""
        all_verdicts = [v for m in self.methods for v in self.verdicts(m).values()]
        if any(v in ("leak", "blocked") for v in all_verdicts):
            return EXIT_FAILED
        if any(v == "unknown" for v in all_verdicts) or any(m.error for m in self.methods.values()):
            return EXIT_UNDECIDED
        return EXIT_OK


# -- applying and undoing the scenario's settings ------------------------------
#
# Through the policy writer, like any other change: one transaction that
# verifies every column it read, mirrors added to (and removed from) the
# bridge's list rather than the list rewritten, the set-up and the undo each
# an audit line marked as an isolation check's.  The undo is the exact inverse
# of what was applied, and leaves alone anything changed meanwhile.


def setting_changes(state: State, sc: Scenario, vif_of: dict[str, str]) -> list[Change]:
    """The scenario's VLAN overrides and mirrors as changes against ``state`` (pure)."""
    changes: list[Change] = []
    for ov in sc.vlans:
        if ov.guest not in vif_of:  # on another host's switch
            continue
        port = state.ports.get(vif_of[ov.guest])
        if port is None:
            raise HvnetError(f"port {vif_of[ov.guest]} of guest {ov.guest} is not on the switch")
        before = port.vlan
        after = VlanCols(
            vlan_mode=before.vlan_mode if ov.vlan_mode is _UNSET else ov.vlan_mode,
            tag=before.tag if ov.tag is _UNSET else ov.tag,
            trunks=tuple(before.trunks) if ov.trunks is _UNSET else tuple(sorted(ov.trunks)),
        )
        if after != before:
            changes.append(Change("vlan", port.bridge, port.name, before, after, port.vm_name))
    for m in sc.mirrors:
        if m.output not in vif_of:
            continue
        elsewhere = sorted({*m.select_src, *m.select_dst} - set(vif_of))
        if elsewhere:
            raise HvnetError(f"mirror {m.name!r} selects {', '.join(elsewhere)}, whose VIFs are on another host: "
                             f"a mirror sees one switch's ports")  # fmt: skip
        out = state.ports.get(vif_of[m.output])
        if out is None:
            raise HvnetError(f"port {vif_of[m.output]} of guest {m.output} is not on the switch")
        if (out.bridge, m.name) in state.mirrors:
            raise HvnetError(f"bridge {out.bridge} already has a mirror named {m.name!r}")
        cols = MirrorCols(
            select_all=m.select_all,
            src=tuple(sorted(vif_of[g] for g in m.select_src)),  # as the state reads them back
            dst=tuple(sorted(vif_of[g] for g in m.select_dst)),
            vlans=tuple(sorted(m.select_vlans)),
            output_port=out.name,
            external_ids=((OWNER, f"isolation:{sc.name}"),),
        )
        changes.append(Change("mirror", out.bridge, m.name, None, cols))
    return changes


def apply_settings(engine: PolicyEngine, sc: Scenario, vif_of: dict[str, str]) -> list[Change]:
    """Apply the scenario's VLAN overrides and mirrors in one transaction; what was applied."""
    if not sc.vlans and not sc.mirrors:
        return []
    changes = setting_changes(engine.snapshot(), sc, vif_of)
    if not changes:
        return []
    result = engine.apply_changes(changes, label=f"hvnet isolation {sc.name}: set-up", record=False)
    if result.status != "applied" or len(result.plan.changes) != len(changes):
        left = [w for w in result.plan.warnings] + result.problems
        restore_settings(engine, sc, result.plan.changes)
        raise HvnetError(f"could not apply the scenario's settings: {'; '.join(left) or result.status}")
    return result.plan.changes


def restore_settings(engine: PolicyEngine, sc: Scenario, applied: list[Change]) -> None:
    """Undo :func:`apply_settings`: exactly the inverse of what it applied."""
    if applied:
        engine.undo(applied, label=f"hvnet isolation {sc.name}: restore", record=False)


def _flush_datapath_flows(host: Host) -> None:
    """Make the datapath forget flows cached before a configuration change.

    ``cur_cfg`` only says ovs-vswitchd has read the change.  Flows already
    in the datapath cache were measured to keep switching ARP broadcasts the
    old way (a new mirror got no copies in 9 of 10 runs after a previous
    check) even after ``revalidator/wait``; purging them makes the next
    frames take an upcall through the new configuration.  Lab only: this is
    a burst of upcalls, harmless for namespace guests.
    """
    host.appctl("ovs-vswitchd", "revalidator/purge", check=False)
    host.appctl("ovs-vswitchd", "revalidator/wait", check=False)


# -- the configuration as the model sees it -------------------------------------


def port_vlans(inv: Inventory, vif_of: dict[str, str]) -> dict[str, model.PortVlan]:
    out = {}
    for guest, port in vif_of.items():
        v = inv.vif_by_port(port)
        if v is not None:
            out[guest] = model.PortVlan(v.bridge, v.vlan_mode_configured, v.tag, tuple(v.trunks))
    return out


def mirror_specs(inv: Inventory, vif_of: dict[str, str]) -> list[model.MirrorSpec]:
    guest_of = {port: guest for guest, port in vif_of.items()}
    return [model.MirrorSpec.of(m, guest_of) for m in inv.mirrors]


MAX_UNUSED_CANDIDATES = 256


def unused_address(ips: list[str]) -> str:
    """The highest host address of the guests' subnet that no guest uses.

    Counted down from the top of the subnet, never enumerated: a guest on an
    IPv6 /64 (or an IPv4 /8) must not make the check walk 2**64 addresses.
    Among ``len(used) + 1`` distinct candidates one is always free, so at most
    that many (and never more than ``MAX_UNUSED_CANDIDATES``) are looked at.
    """
    iface = ipaddress.ip_interface(ips[0])
    used = {ipaddress.ip_interface(i).ip for i in ips}
    candidates = _top_hosts(iface.network, min(len(used) + 1, MAX_UNUSED_CANDIDATES))
    for host in candidates:
        if host not in used:
            return str(host)
    if len(candidates) == MAX_UNUSED_CANDIDATES:
        raise HvnetError(f"none of the {MAX_UNUSED_CANDIDATES} highest addresses of {iface.network} is unused")
    raise HvnetError(f"no unused address left in {iface.network}")


def _top_hosts(
    net: ipaddress.IPv4Network | ipaddress.IPv6Network, count: int
) -> list[ipaddress.IPv4Address | ipaddress.IPv6Address]:
    """The ``count`` highest addresses of ``net.hosts()``, highest first, without enumerating it.

    ``hosts()`` leaves out the network address, and for IPv4 the broadcast
    address, except in /31 and /32 (/127 and /128) networks, which are all hosts.
    """
    first, last = int(net.network_address), int(net.broadcast_address)
    if net.num_addresses > 2:
        first += 1
        if net.version == 4:
            last -= 1
    address = type(net.network_address)  # not ip_address(n): a small IPv6 address would come back as IPv4
    return [address(n) for n in range(last, max(first, last - count + 1) - 1, -1)]


# -- the two methods ----------------------------------------------------------------


def run_traffic(
    views: list[SiteView],
    guests: dict[str, GuestEndpoint],
    sc: Scenario,
    vif_of: dict[str, str],
    out_dir: Path,
) -> MethodResult:
    """Probes from every guest, captures in every guest; each control frame put out by the switch holding
    the listener's VIF."""
    where = {g: v for v in views for g in v.guests}
    eps = []
    for name in sc.guests:
        v = where[name].inv.vif_by_port(vif_of[name])
        address = sc.topology.guest(name).address
        eps.append(traffic.Endpoint(guests[name], address, v.bridge if v else "", v.ofport if v else None,
                                    switch=where[name].host, tagged=sc.topology.tagged_vlans(name)))  # fmt: skip
    unused = unused_address([sc.topology.guest(n).ip for n in sc.guests])
    run = traffic.run(views[0].host, eps, {e.name: unused for e in eps}, sc.probes_per_target, out_dir)
    res = traffic_cells(run, eps)
    res.stats = {
        "probes_sent": run.probes_sent,
        "window_s": round(run.window_s, 3),
        "controls_sent": len(run.controls_sent),
        "closing_controls_sent": len(run.closing_sent),
        "settle_s": round(run.settle_s, 3),
        "dropped": {n: c.counts.dropped if c.counts else None for n, c in run.captures.items()},
        "pcaps": {n: str(c.pcap) for n, c in run.captures.items()},
    }
    return res


def traffic_cells(run: traffic.TrafficRun, eps: list[traffic.Endpoint]) -> MethodResult:
    """Every cell of the traffic method from its captures (pure).

    "Yes" needs a frame; "No" needs more than the frame's absence: the
    listener's capture heard something (a control or a peer), the sender's
    own capture shows its probes leaving, and nothing casts doubt on the
    listener's capture (:attr:`traffic.Capture.doubt`).  Anything less is
    "unknown", with the reason.
    """
    res = MethodResult("traffic")
    by_ep = {e.name: e for e in eps}
    for listener in by_ep:
        for sender in by_ep:
            if sender == listener:
                continue
            cell = (listener, sender)
            value, why = _traffic_cell(res, run, by_ep, listener, sender)
            res.cells[cell] = value
            if why:
                res.reasons[cell] = why
    return res


def _traffic_cell(
    res: MethodResult, run: traffic.TrafficRun, by_ep: dict[str, traffic.Endpoint], listener: str, sender: str
) -> tuple[str, str | None]:
    """One cell's value and, when unknown, why; the evidence and the reply seen go into ``res``."""
    if listener in run.down or sender in run.down:
        who = listener if listener in run.down else sender
        return model.UNKNOWN, f"{who} is down: {run.down[who]}"
    cap = run.captures.get(listener)
    if cap is None or cap.error:
        return model.UNKNOWN, f"no capture on {listener}: {cap.error if cap else 'not started'}"
    s_ep = by_ep[sender]
    scap = run.captures.get(sender)
    sent = scap is not None and any(f.sender_mac == s_ep.mac and f.is_request for f in scap.frames)
    res.replies[(sender, listener)] = scap is not None and any(
        f.op == 2 and f.sender_ip == by_ep[listener].ip for f in scap.frames
    )
    hits = [f for f in cap.frames if f.is_request and f.sender_mac == s_ep.mac and f.sender_ip == s_ep.ip]
    if hits:
        f = hits[0]
        res.evidence[(listener, sender)] = Evidence(f.time, f.sender_mac, f.sender_ip, f.vlan, str(cap.pcap))
        return model.YES, None
    peers = {e.mac for e in by_ep.values()} - {by_ep[listener].mac}
    if not any(f.sender_mac == traffic.CONTROL_MAC or f.sender_mac in peers for f in cap.frames):
        return model.UNKNOWN, f"{listener}'s capture heard no positive control, so a 'No' is not proven"
    if not sent:
        return model.UNKNOWN, f"{sender}'s own capture does not show its probes leaving"
    if cap.doubt:
        return model.UNKNOWN, cap.doubt
    return model.NO, None


def prepare(
    host: Host,
    source: GuestSource,
    sc: Scenario,
    methods: tuple[str, ...],
    out_dir: Path | None = None,
    *,
    root_hint: str,
) -> tuple[dict[str, GuestEndpoint], Path | None]:
    """Everything checked before a run touches the switch: root and tcpdump for the traffic method,
    the scenario's guests from ``source``.  Returns them and where the traffic method keeps its pcaps
    (``out_dir``, or a new directory under the host's captures directory)."""

    if "traffic" in methods:
        if os.geteuid() != 0:
            raise UsageError(
                "the traffic method needs root (captures and probes inside the guests' namespaces)", hint=root_hint
            )
        host.local_runner.which("tcpdump")
    guests = source.require(sc.topology, list(sc.guests))
    if "traffic" not in methods:
        return guests, None
    return guests, out_dir or host.paths.captures_dir / f"{sc.name}-{datetime.now():%Y%m%d-%H%M%S}"


@dataclass(frozen=True)
class Site:
    """One hypervisor's switch in a check: its connection, its Host, the scenario's guests whose VIFs it holds.

    A scenario on one switch is one site; a lab of several hosts has a site per host, and the
    guests' frames cross between them on the trunk links (:meth:`Topology.links`)."""

    conn: Connection
    host: Host
    guests: tuple[str, ...]
    name: str | None = None  # the topology's host name (None: the only switch)


def _expected(sc: Scenario, views: list[SiteView], vif_of: dict[str, str]) -> model.Expected:
    """The scenario's matrix, or the one the VLANs and mirrors in force imply (the hosts' bridges of one
    name are one network: the lab trunks every VLAN between them)."""
    if sc.matrix is not None:
        return model.Expected(guests=list(sc.guests), cells=dict(sc.matrix))
    ports: dict[str, model.PortVlan] = {}
    mirrors: list[model.MirrorSpec] = []
    for v in views:
        sub = {g: vif_of[g] for g in v.guests}
        ports.update(port_vlans(v.inv, sub))
        mirrors += mirror_specs(v.inv, sub)
    unknown_ports = [g for g in sc.guests if g not in ports]
    if unknown_ports:
        raise HvnetError(f"cannot derive expectations: no port on the switch for {', '.join(unknown_ports)}")
    tagged = {g: vlans for g in sc.guests if (vlans := sc.topology.tagged_vlans(g))}
    return model.derive(ports, mirrors, sc.guests, tagged)


def _check_trace(sites: list[Site]) -> None:
    """Refuse the trace method, before any setting is applied, on a switch whose ``ofproto/trace`` prints
    what the parser does not read (OVS older than 2.8), naming its version."""
    for site in sites:
        why = ovsfeatures.first_missing(["trace", "packet-out"], reader.ovs_version(site.conn))
        if why is not None:
            where = f"{site.name}: " if site.name else ""
            raise UsageError(
                f"{where}{why}; the trace method cannot run there",
                hint="check with --method traffic, or on a host with Open vSwitch 2.8 or later",
            )


def run_check(
    conn: Connection,
    host: Host,
    guests: dict[str, GuestEndpoint],
    sc: Scenario,
    methods: tuple[str, ...] = METHODS,
    out_dir: Path | None = None,
) -> CheckResult:
    """The check on one switch holding every guest."""
    return run_sites([Site(conn, host, tuple(sc.guests))], guests, sc, methods, out_dir)


def run_sites(
    sites: list[Site],
    guests: dict[str, GuestEndpoint],
    sc: Scenario,
    methods: tuple[str, ...] = METHODS,
    out_dir: Path | None = None,
) -> CheckResult:
    """The check over one or more switches: settings applied on each (all undone, whatever happens), then
    the methods; the expected matrix from the scenario or from the configuration then in force."""
    if "trace" in methods:
        _check_trace(sites)
    started = time.monotonic()
    # A QEMU guest's VIF is whatever libvirt named it when the domain started.
    vif_of = {name: sc.topology.guest(name).vif or guests[name].vif for name in sc.guests}
    applied: list[tuple[Site, PolicyEngine, list[Change]]] = []
    try:
        for site in sites:
            engine = PolicyEngine(site.conn, site.host, command=f"hvnet isolation check {sc.name} (test set-up)")
            applied.append((site, engine, []))
            applied[-1][2].extend(apply_settings(engine, sc, {g: vif_of[g] for g in site.guests}))
        for site, _engine, changes in applied:
            if changes:
                _flush_datapath_flows(site.host)
            site.conn.run_once()
        views = [SiteView(site.host, inventory.read(site.conn, names=site.host.name_sources()), site.guests, site.name)
                 for site in sites]  # fmt: skip
        where = {g: v for v in views for g in v.guests}
        if "traffic" in methods and all(where[g].inv.vif_by_port(vif_of[g]) is None for g in sc.guests):
            listed = ", ".join(f"{g} ({p})" for g, p in vif_of.items())
            raise HvnetError(
                f"none of the scenario's guests are on this switch: {listed}",
                hint=f"bring up its lab: hvnet lab up --topology {sc.topology.file}",
            )
        expected = _expected(sc, views, vif_of)
        results: dict[str, MethodResult] = {}
        for method in METHODS:  # a fixed order, so tables read the same every time
            if method not in methods:
                continue
            if method == "trace":
                results["trace"] = trace_sites(sc, views, vif_of)
            else:
                if out_dir is None:
                    raise HvnetError("the traffic method needs an output directory for its captures")
                results["traffic"] = run_traffic(views, guests, sc, vif_of, out_dir)
    finally:
        for site, engine, changes in reversed(applied):
            restore_settings(engine, sc, changes)
            if changes:
                _flush_datapath_flows(site.host)
    return CheckResult(
        scenario=sc.name,
        guests=list(sc.guests),
        expected=expected,
        methods=results,
        out_dir=str(out_dir) if out_dir else None,
        duration_s=time.monotonic() - started,
    )
