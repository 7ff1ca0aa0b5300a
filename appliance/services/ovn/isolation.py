"""An isolation scenario on an OVN pool: each guest's logical port, and the trace method with ``ovn-trace``.

On a pool a guest's network is the logical switch its port is on, and OVN,
not a VLAN tag, decides what its frames reach.  The scenario's guests are
found in the pool's NB (:func:`resolve`): the port whose VM is the guest
(the chassis binding it says so through ``external_ids:iface-id``), or the
port the lab named for it.  A guest the pool has no port for is refused
before anything runs, at the line of the scenario that names it.

The trace method asks ``ovn-trace`` (which reads the pool's SB, as
``ovn-controller`` does) where each guest's broadcast ARP goes in the
logical network: to which logical ports it is delivered, or where and why
it is dropped.  The broadcast asks for an unused address, like the traffic
method's pure broadcast: OVN answers an ARP for a known port's address
itself (the ARP responder stage), so a who-has for a peer never reaches the
peer and would say nothing about isolation.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass
from pathlib import Path

from appliance.core.errors import CommandFailed, HvnetError, OvsdbUnreachable, UsageError
from appliance.core.hostlist import Inventory, InventoryHost, InventoryPool
from appliance.core.runner import CommandRunner, LocalRunner
from appliance.core.target import DbTarget, SslOptions
from appliance.endpoints.guests import GuestEndpoint, GuestSource
from appliance.endpoints.topology import Topology
from appliance.isolation import check, model, ovntrace
from appliance.isolation.check import CheckResult
from appliance.isolation.model import MethodResult
from appliance.isolation.scenario import Scenario
from appliance.isolation.trace import SiteView
from appliance.ovn.view import PoolView, PortView
from appliance.services.ovn import pool as pools
from appliance.services.ovn import tunnels
from appliance.switch import inventory, reader
from appliance.switch.host import Host


@dataclass(frozen=True)
class PoolPort:
    """A scenario guest as the pool has it: its logical switch and port, addresses and chassis."""

    guest: str
    switch: str
    port: str
    mac: str
    ip: str
    chassis: str | None


def _addresses(p: PortView) -> tuple[str, str] | None:
    """The port's first ``MAC IP`` address pair (``dynamic``/``unknown`` say nothing definite)."""
    for entry in p.addresses:
        parts = entry.split()
        if len(parts) >= 2 and parts[0].count(":") == 5:
            return parts[0], parts[1]
    return None


def _port_of(view: PoolView, t: Topology, guest: str) -> tuple[str, PortView] | None:
    """The guest's port: the one whose VM it is, else the one the lab made for it (named and labelled)."""
    ports = view.ports()
    for how in (lambda p: p.vm == guest, lambda p: p.external_ids.get("hvnet-vm") == guest):
        found = [(s, p) for s, p in ports if how(p)]
        if found:
            return found[0]
    g = t.guest(guest)
    lab_name = g.vif_uuid(t.name)
    return next(((s, p) for s, p in ports if p.name == lab_name), None)


def resolve(sc: Scenario, view: PoolView) -> dict[str, PoolPort]:
    """Each of the scenario's guests' port on the pool; :class:`UsageError` naming every guest it lacks."""
    out: dict[str, PoolPort] = {}
    missing: list[str] = []
    for guest in sc.guests:
        found = _port_of(view, sc.topology, guest)
        if found is None:
            line = sc.guest_lines.get(guest)
            where = f"{sc.file}:{line}: guests" if line else f"{sc.file}: guests"
            missing.append(f"{where}: pool {view.name} has no port for {guest}")
            continue
        switch, p = found
        g = sc.topology.guest(guest)
        mac, ip = _addresses(p) or (g.mac, g.address)
        out[guest] = PoolPort(guest, switch, p.name, mac, ip, p.chassis)
    if missing:
        vms = sorted({p.vm or p.external_ids.get("hvnet-vm") or p.name for _s, p in view.ports()})
        raise UsageError("; ".join(missing), hint=f"the pool's ports are those of: {', '.join(vms) or 'none'}")
    return out


Trace = Callable[[str, str], str]  # (logical switch, microflow expression) -> ovn-trace's output


def trace_method(sc: Scenario, ports: dict[str, PoolPort], unused_ip: str, trace: Trace) -> MethodResult:
    """Every guest's broadcast through the pool's logical network, as ``ovn-trace`` follows it.

    A listener's "No" stands only when ovn-trace knows its port: the
    listener's own broadcast must have entered the logical network at that
    port.  Otherwise (the port unknown to the SB, the trace unreadable) its
    cells are unknown, as with a capture that heard nothing.
    """
    res = MethodResult("trace", stats={"engine": "ovn-trace", "logical": {}, "traces": {}})
    traced: dict[str, ovntrace.Trace] = {}
    failed: dict[str, str] = {}
    for guest in sc.guests:
        p = ports[guest]
        try:  # a MAC or address that is not one (ValueError) is not traced: its cells stay unknown
            traced[guest] = ovntrace.parse(trace(p.switch, ovntrace.arp_broadcast(p.port, p.mac, p.ip, unused_ip)))
        except (CommandFailed, ValueError) as exc:
            failed[guest] = f"ovn-trace of {guest}'s broadcast could not be read: {exc}"
            continue
        res.stats["traces"][guest] = traced[guest].summary()
    known = {g for g, t in traced.items() if t.inport == ports[g].port}
    by_port = {p.port: g for g, p in ports.items()}
    for sender in sc.guests:
        row: dict[str, str] = {}
        for listener in sc.guests:
            if listener == sender:
                continue
            cell = (listener, sender)
            value, why = _cell(sender, listener, traced.get(sender), failed, known, ports, by_port)
            res.cells[cell] = value
            row[listener] = why
            if value == model.UNKNOWN:
                res.reasons[cell] = why
        res.stats["logical"][sender] = row
    return res


def _cell(
    sender: str,
    listener: str,
    t: ovntrace.Trace | None,
    failed: dict[str, str],
    known: set[str],
    ports: dict[str, PoolPort],
    by_port: dict[str, str],
) -> tuple[str, str]:
    """One cell and its logical verdict in words."""
    if t is None:
        return model.UNKNOWN, failed.get(sender, f"{sender} was not traced")
    lp, sp = ports[listener], ports[sender]
    fate = t.fate(lp.port)
    if fate.delivered:
        return model.YES, f"delivered to {listener}'s port {_short(lp.port)} on {lp.switch}"
    if listener not in known:
        why = failed.get(listener) or f"ovn-trace does not know {listener}'s port {_short(lp.port)}"
        return model.UNKNOWN, f"{why}, so the trace's 'No' is not proven"
    if fate.dropped:
        return model.NO, f"dropped {fate.why}"
    if lp.switch != sp.switch:
        reached = [by_port.get(x, _short(x)) for x in t.delivered]
        to = f"delivered to {', '.join(reached)} only" if reached else "delivered to no one"
        return model.NO, f"{listener}'s port is on {lp.switch}, {sender}'s broadcast stays on {sp.switch} ({to})"
    if t.ingress_drop:
        return model.NO, f"dropped {t.ingress_drop}"
    return model.NO, f"not delivered: the broadcast never left for {listener}'s port on {lp.switch}"


def _short(port: str) -> str:
    """A port named by a uuid (as libvirt and OpenStack name them) by its first 8 digits."""
    return port[:8] + "…" if len(port) == 36 and port.count("-") == 4 else port


# -- the check on a pool ---------------------------------------------------------------


def run_pool_check(
    sc: Scenario,
    guests: GuestSource,
    entry: InventoryPool,
    inv: Inventory,
    connect: pools.Connect,
    methods: tuple[str, ...],
    out_dir: Path | None = None,
    *,
    root_hint: str,
    timeout: float = 5.0,
    ssl: SslOptions | None = None,
) -> CheckResult:
    """``sc`` on the pool ``entry``: the traffic method across its chassis, the trace method with ovn-trace.

    Nothing is set up for the run (a pool scenario has no VLAN settings or
    mirrors): the check reads the pool as it is.  ovn-trace must be here for
    the trace method (exit 4), the NB and SB must answer (exit 3) and every
    guest must have a port (exit 2 naming the guests it lacks), all before a
    probe is sent.
    """
    started = time.monotonic()
    local = LocalRunner()
    if "trace" in methods:
        local.which("ovn-trace")
    view = pools.status(entry, inv, connect, timeout=timeout, ssl=ssl)
    ports = resolve(sc, view)
    unused = check.unused_address([sc.topology.guest(g).ip for g in sc.guests])
    results: dict[str, MethodResult] = {}
    captures = None
    for method in check.METHODS:  # a fixed order, so tables read the same every time
        if method not in methods:
            continue
        if method == "traffic":
            results["traffic"], captures = _traffic(sc, guests, ports, view, inv, connect, out_dir,
                                                    root_hint=root_hint, timeout=timeout)  # fmt: skip
        else:
            results["trace"] = _trace(sc, ports, unused, entry, inv, connect, ssl, local, timeout)
    return CheckResult(
        scenario=sc.name,
        guests=list(sc.guests),
        expected=expected(sc, ports),
        methods=results,
        out_dir=str(captures) if captures else None,
        duration_s=time.monotonic() - started,
    )


def expected(sc: Scenario, ports: dict[str, PoolPort]) -> model.Expected:
    """The scenario's matrix, or the one the logical network implies: guests on one logical switch hear
    each other's broadcasts, guests on different ones do not."""
    if sc.matrix is not None:
        return model.Expected(guests=list(sc.guests), cells=dict(sc.matrix))
    cells = {(lst, snd): model.YES if ports[lst].switch == ports[snd].switch else model.NO
             for lst in sc.guests for snd in sc.guests if lst != snd}  # fmt: skip
    return model.Expected(guests=list(sc.guests), cells=cells)


def _chassis_hosts(ports: dict[str, PoolPort], view: PoolView, inv: Inventory) -> dict[str, InventoryHost]:
    """The inventory host of each chassis binding a guest's port (by name, else by the chassis' hostname)."""
    hostname = {c.name: c.hostname for c in view.chassis}
    out: dict[str, InventoryHost] = {}
    for p in ports.values():
        if p.chassis is None:
            raise HvnetError(f"{p.guest}'s port {_short(p.port)} is bound to no chassis: its VM is not running",
                             hint=f"hvnet --pool {view.name} status shows every port's chassis")  # fmt: skip
        entry = inv.get(p.chassis) or inv.get(hostname.get(p.chassis, ""))
        if entry is None:
            raise HvnetError(f"chassis {p.chassis}, binding {p.guest}'s port, is not a host of {inv.file}",
                             hint="add it to the inventory's hosts (its name or its hostname)")  # fmt: skip
        out[p.chassis] = entry
    return out


def _traffic(
    sc: Scenario,
    source: GuestSource,
    ports: dict[str, PoolPort],
    view: PoolView,
    inv: Inventory,
    connect: pools.Connect,
    out_dir: Path | None,
    *,
    root_hint: str,
    timeout: float,
) -> tuple[MethodResult, Path | None]:
    """Probes from each guest, captures in every guest, each control frame put on the listener's VIF by
    its own chassis' br-int (through that host's runner)."""
    try:
        entries = _chassis_hosts(ports, view, inv)
    except HvnetError as exc:
        return MethodResult("traffic", error=str(exc)), None
    with ExitStack() as stack:
        hosts: dict[str, Host] = {}
        for chassis, entry in entries.items():
            hosts[chassis] = connect(entry)
            stack.callback(hosts[chassis].close)
        first = hosts[ports[sc.guests[0]].chassis or ""]
        found, captures = check.prepare(first, source, sc, ("traffic",), out_dir, root_hint=root_hint)
        views, vif_of = _sites(sc, ports, found, hosts, stack, timeout)
        assert captures is not None  # prepare names a directory for the traffic method
        unused = check.unused_address([sc.topology.guest(g).ip for g in sc.guests])
        unresolved = tunnels.warm(hosts, ports, found, view, unused)
        res = check.run_traffic(views, found, sc, vif_of, captures)
        tunnels.doubt(res, ports, view, unresolved)
        return res, captures


def _sites(
    sc: Scenario,
    ports: dict[str, PoolPort],
    found: dict[str, GuestEndpoint],
    hosts: dict[str, Host],
    stack: ExitStack,
    timeout: float,
) -> tuple[list[SiteView], dict[str, str]]:
    """Each chassis' switch read once, and each guest's VIF on it: the one whose iface-id is its port."""
    views: list[SiteView] = []
    vif_of: dict[str, str] = {}
    for chassis, host in hosts.items():
        conn = stack.enter_context(host.connect(reader.COLUMNS, timeout=timeout))
        inv = inventory.read(conn, names=host.name_sources())
        here = tuple(g for g in sc.guests if ports[g].chassis == chassis)
        for g in here:
            vif = next((v for v in inv.vifs if v.ovn_port == ports[g].port), None)
            if vif is None:
                raise HvnetError(f"chassis {chassis} binds {g}'s port {_short(ports[g].port)} but its switch has "
                                 "no VIF with that iface-id")  # fmt: skip
            vif_of[g] = vif.port
        views.append(SiteView(host, inv, here, chassis))
    return views, vif_of


def _trace(
    sc: Scenario,
    ports: dict[str, PoolPort],
    unused: str,
    entry: InventoryPool,
    inv: Inventory,
    connect: pools.Connect,
    ssl: SslOptions | None,
    runner: CommandRunner,
    timeout: float,
) -> MethodResult:
    """The trace method against the pool's SB (forwarded here first when the pool is reached ``via`` a host)."""
    _nb, sb, via = pools.targets(entry, inv, connect, ssl)
    try:
        return trace_method(sc, ports, unused, ovn_trace(runner, sb, timeout))
    finally:
        if via is not None:
            via.close()


def ovn_trace(runner: CommandRunner, sb: DbTarget, timeout: float) -> Trace:
    """A :data:`Trace` running ovn-trace against ``sb`` here; an SB it cannot reach is exit 3."""
    exe = runner.which("ovn-trace")
    ssl = sb.ssl
    creds = [f"--private-key={ssl.private_key}", f"--certificate={ssl.certificate}",
             f"--ca-cert={ssl.ca_cert}"] if ssl else []  # fmt: skip

    def run(switch: str, expr: str) -> str:
        # full port names: by default ovn-trace shortens uuid-like names to their first digits
        argv = [exe, f"--db={sb.remote}", "--no-friendly-names", *creds, switch, expr]
        try:
            res = runner.run(argv, check=False, timeout=timeout + 10)
        except CommandFailed:
            raise OvsdbUnreachable(f"ovn-trace did not finish within {timeout + 10:g} s against {sb.describe()}",
                                   hint="is the pool's SB database up and reachable from here?") from None  # fmt: skip
        if res.returncode != 0:
            detail = (res.stderr.strip().splitlines() or ["no output"])[-1]
            if "connection" in detail or "database" in detail:
                raise OvsdbUnreachable(f"ovn-trace cannot read the pool's SB {sb.describe()}: {detail}",
                                       hint="is the pool's SB database up and reachable from here?")  # fmt: skip
            raise CommandFailed(argv, res.returncode, res.stderr)
        return res.stdout

    return run
