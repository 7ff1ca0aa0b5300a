"""Probe ports on a host's bridge: added, checked, renewed and removed through the Host.

Order makes a crash recoverable: a probe's port is recorded in OVSDB, with
its marks (name, owner, expiry), *before* its namespace and veth exist, so
whatever a killed run leaves behind is found from the switch by the next run
(:func:`clean`) and nothing hvnet did not mark is ever touched.  Every program
(``ip``, ``ethtool``, ``arping``, ``kill``) runs through the Host's command
runner with an argument list, so the same code adds probes on this machine and
on a hypervisor over SSH; the OVSDB rows go through the engine's one
connection and the policy writer (VLANs and limits), never ``ovs-vsctl``.
"""

from __future__ import annotations

import os
import socket
import time
from dataclasses import dataclass
from typing import Optional

from appliance.core.errors import CommandFailed, HvnetError, UsageError
from appliance.core.ovsdb import Connection, TxnContext
from appliance.core.ovsdb import column as col
from appliance.core.vlan import VlanCols
from appliance.endpoints.guests import GuestEndpoint
from appliance.policy.apply import writer
from appliance.policy.apply.read import COLUMNS
from appliance.policy.plan.planner import Change, owned_qos
from appliance.policy.plan.state import PoliceCols
from appliance.probes import spec as sp
from appliance.probes.spec import FoundProbe, ProbeSpec
from appliance.switch.host import Host
from appliance.switch.reader import ovn_bridge, port_vlan

OFPORT_WAIT_S = 10.0


@dataclass(frozen=True)
class Placement:
    """Where a probe goes: its bridge and the VLAN columns of its port (copied from ``like`` or given)."""

    spec: ProbeSpec
    bridge: str
    vlan: VlanCols


def owner_id() -> str:
    """``HOSTNAME:PID:START``: this process, as a later run on this machine can tell it is gone."""
    return f"{socket.gethostname()}:{os.getpid()}:{_start_time(os.getpid())}"


def _start_time(pid: int) -> str:
    try:
        return open(f"/proc/{pid}/stat").read().rsplit(") ", 1)[1].split()[19]
    except (OSError, IndexError):
        return "0"


def _alive(pid: int, start: str) -> bool:
    """Whether process ``pid`` of this machine still runs and is the one that started at ``start``
    (not another process that reused the PID)."""
    return os.path.exists(f"/proc/{pid}") and _start_time(pid) == start


# -- where (reads the switch, changes nothing) -------------------------------------------------------


def place(conn: Connection, specs: list[ProbeSpec]) -> list[Placement]:
    """Each probe's bridge and VLAN settings, from the switch as it is; a UsageError names what is wrong."""
    with conn.lock:
        bridges = {col(b, "name"): b for b in conn.idl.tables["Bridge"].rows.values()}
        port_bridge = {p.uuid: name for name, b in bridges.items() for p in col(b, "ports")}
        ports = {col(p, "name"): p for p in conn.idl.tables["Port"].rows.values()}
        integration = ovn_bridge(dict(col(conn.root(), "external_ids")))
        out = []
        for s in specs:
            if s.like is not None:
                port = ports.get(s.like)
                if port is None or port.uuid not in port_bridge:
                    raise UsageError(f"probe {s.name}: no port {s.like!r} on this switch to copy",
                                     hint="'like' names a VIF's port (hvnet status lists them)")  # fmt: skip
                if any(sp.is_probe(col(i, "external_ids")) for i in col(port, "interfaces")):
                    raise UsageError(f"probe {s.name}: {s.like} is itself a probe; name a VM's VIF")
                bridge, vlan = port_bridge[port.uuid], port_vlan(port)
            else:
                bridge = s.bridge or _only_bridge(s, sorted(bridges), integration)
                if bridge not in bridges:
                    raise UsageError(f"probe {s.name}: no bridge {bridge!r}; bridges: {', '.join(sorted(bridges))}")
                vlan = VlanCols(None, s.vlan, ())
            if bridge == integration:
                raise UsageError(f"probe {s.name}: bridge {bridge} is ovn-controller's integration bridge; hvnet "
                                 "adds no port there (OVN decides what it reaches)",
                                 hint="measure an OVN pool with: hvnet --pool NAME suite run ...")  # fmt: skip
            if s.dev in ports:
                raise UsageError(f"probe {s.name}: port {s.dev} already exists (another run's probe?)",
                                 hint="hvnet probes list; hvnet probes clean removes the ones left behind")  # fmt: skip
            out.append(Placement(s, bridge, vlan))
        return out


def _only_bridge(s: ProbeSpec, bridges: list[str], integration: Optional[str]) -> str:
    candidates = [b for b in bridges if b != integration]
    if len(candidates) != 1:
        raise UsageError(f"probe {s.name}: the switch has bridges {', '.join(bridges) or 'none'}; say which",
                         hint=f"add 'bridge: NAME' to probe {s.name}")  # fmt: skip
    return candidates[0]


# -- set up -----------------------------------------------------------------------------------------


def record(conn: Connection, placements: list[Placement], owner: str, lease_s: float = sp.LEASE_S) -> None:
    """The probes' ports, marked, with their VLAN settings, in one transaction (before any device exists)."""
    expires = time.time() + lease_s

    def build(ctx: TxnContext) -> None:
        bridges = {col(b, "name"): b for b in ctx.rows("Bridge")}
        for pl in placements:
            ids = sp.marks(pl.spec, owner, expires)
            iface = ctx.insert("Interface")
            iface.name = pl.spec.dev
            iface.external_ids = ids
            port = ctx.insert("Port")
            port.name = pl.spec.dev
            port.interfaces = [iface]
            port.external_ids = {sp.MARK: pl.spec.name}
            port.vlan_mode = [pl.vlan.vlan_mode] if pl.vlan.vlan_mode else []
            port.tag = [pl.vlan.tag] if pl.vlan.tag is not None else []
            port.trunks = list(pl.vlan.trunks)
            bridges[pl.bridge].verify("ports")
            bridges[pl.bridge].addvalue("ports", port)

    conn.transact(build, comment="hvnet: add probe ports")


def limit(conn: Connection, placements: list[Placement]) -> None:
    """The probes' limits, written as the policy writer writes a VIF's (tc policing, an owned linux-htb QoS)."""
    changes = []
    for pl in placements:
        if pl.spec.ingress is not None:
            after = PoliceCols(pl.spec.ingress.rate_kbps, pl.spec.ingress.burst_kbit)
            changes.append(Change("ingress", pl.bridge, pl.spec.dev, PoliceCols(), after, pl.spec.name))
        if pl.spec.egress is not None:
            changes.append(Change("egress", pl.bridge, pl.spec.dev, None, owned_qos(pl.spec.egress), pl.spec.name))
    if changes:
        conn.transact(lambda ctx: writer.write(ctx, changes), comment="hvnet: limit probe ports")


def plumb(host: Host, s: ProbeSpec) -> None:
    """The namespace and its veth: the peer made inside the namespace as eth0 with the probe's MAC; TX
    checksum offload off on both ends (TCP through a userspace datapath hangs otherwise)."""
    run = host.runner.run
    run(["ip", "netns", "add", s.netns], timeout=15)
    run(["ip", "link", "add", s.dev, "type", "veth", "peer", "name", s.peer, "address", s.hwaddr], timeout=15)
    run(["ip", "link", "set", s.peer, "netns", s.netns], timeout=15)
    inside = ["ip", "netns", "exec", s.netns]
    run([*inside, "ip", "link", "set", s.peer, "name", sp.GUEST_IF], timeout=15)
    run([*inside, "ip", "link", "set", "lo", "up"], timeout=15)
    run([*inside, "ip", "link", "set", sp.GUEST_IF, "up"], timeout=15)
    run(["ip", "link", "set", s.dev, "up"], timeout=15)
    for argv in (["ethtool", "-K", s.dev, "tx", "off"], [*inside, "ethtool", "-K", sp.GUEST_IF, "tx", "off"]):
        run(argv, timeout=15)


def wait_attached(conn: Connection, placements: list[Placement], timeout: float = OFPORT_WAIT_S) -> None:
    """ovs-vswitchd has opened every probe's device (an OpenFlow port number), or an error naming it."""
    names = {pl.spec.dev for pl in placements}

    def ready() -> bool:
        rows = [i for i in conn.idl.tables["Interface"].rows.values() if i.name in names]
        return len(rows) == len(names) and all(r.ofport and r.ofport[0] > 0 for r in rows)

    if not conn.wait_for(ready, timeout):
        bad = [f"{i.name}: {i.error[0] if i.error else 'no OpenFlow port'}"
               for i in conn.idl.tables["Interface"].rows.values() if i.name in names]  # fmt: skip
        raise HvnetError(f"ovs-vswitchd did not attach the probe ports: {'; '.join(bad) or 'none found'}")


def arping_flavour(host: Host) -> str:
    """``iputils`` (EL, a dom0) or ``habets`` (Debian's arping): their DAD options and exit codes differ."""
    res = host.runner.run([host.runner.which("arping"), "--help"], check=False, timeout=10)
    return "habets" if "Habets" in res.stdout + res.stderr else "iputils"


def dad_argv(flavour: str, address: str) -> list[str]:
    """Duplicate-address detection of ``address`` from eth0, sender 0.0.0.0, two probes."""
    if flavour == "habets":
        return ["arping", "-0", "-q", "-c", "2", "-w", "2", "-i", sp.GUEST_IF, address]
    return ["arping", "-D", "-q", "-c", "2", "-w", "2", "-I", sp.GUEST_IF, address]


def dad_taken(flavour: str, returncode: int) -> bool:
    """Whether someone answered: Habets's arping exits 0 on a reply; iputils' -D exits 1 on a duplicate."""
    return returncode == 0 if flavour == "habets" else returncode == 1


def claim(host: Host, s: ProbeSpec, flavour: str) -> None:
    """Check ``s``'s address is free on its VLAN, then give it to eth0 (a taken address is refused)."""
    inside = ["ip", "netns", "exec", s.netns]
    res = host.runner.run([*inside, *dad_argv(flavour, s.address)], check=False, timeout=15)
    if dad_taken(flavour, res.returncode):
        raise UsageError(f"probe {s.name}: address {s.address} is taken on its VLAN (duplicate-address "
                         f"detection got an answer{_where(host)}); nothing was left behind",
                         hint=f"give probe {s.name} an address that is free on that VLAN")  # fmt: skip
    if res.returncode not in (0, 1):
        raise CommandFailed([*inside, *dad_argv(flavour, s.address)], res.returncode, res.stderr or res.stdout)
    host.runner.run([*inside, "ip", "addr", "add", s.ip, "dev", sp.GUEST_IF], timeout=15)


def _where(host: Host) -> str:
    return f" on {host.label}" if host.label else ""


def endpoint(pl: Placement, *, remote: bool) -> GuestEndpoint:
    """A probe as the engine sees a guest: a namespace on the host, its veth's host end the VIF
    (``remote``: on a hypervisor over SSH, whose processes the endpoint interface starts there)."""
    s = pl.spec
    return GuestEndpoint(name=s.name, kind="netns", ip=s.ip, mac=s.hwaddr, vif=s.dev, netns=s.netns, remote=remote)


# -- renew, find, remove ------------------------------------------------------------------------------


def renew(conn: Connection, names: list[str], owner: str, lease_s: float = sp.LEASE_S) -> None:
    """Push the expiry of this run's probes ``lease_s`` ahead (a long suite keeps its probes)."""
    expires = str(int(time.time() + lease_s))

    def build(ctx: TxnContext) -> None:
        for iface in ctx.rows("Interface"):
            ids = dict(col(iface, "external_ids"))
            if ids.get(sp.MARK) in names and ids.get(sp.OWNER) == owner:
                iface.verify("external_ids")
                iface.external_ids = {**ids, sp.EXPIRES: expires}

    conn.transact(build, comment="hvnet: renew probe ports")


def find(conn: Connection) -> list[FoundProbe]:
    """Every probe port on the switch, from its marks."""
    with conn.lock:
        out = []
        for b in conn.idl.tables["Bridge"].rows.values():
            for p in col(b, "ports"):
                for i in col(p, "interfaces"):
                    ids = dict(col(i, "external_ids"))
                    if sp.is_probe(ids):
                        out.append(sp.found_probe(col(b, "name"), col(p, "name"), ids))
        return sorted(out, key=lambda f: (f.bridge, f.port))


def stale(found: list[FoundProbe], now: Optional[float] = None) -> list[tuple[FoundProbe, str]]:
    """The probes any run may remove, with why (their owner on this machine is gone, or they expired)."""
    here = socket.gethostname()
    now = time.time() if now is None else now
    out = []
    for f in found:
        why = f.stale(now, here, _alive)
        if why is not None:
            out.append((f, why))
    return out


def unrecord(conn: Connection, ports: list[str]) -> None:
    """Delete probe ports (and the QoS hvnet made for them) in one transaction; only ports marked as probes."""

    def build(ctx: TxnContext) -> None:
        wanted = set(ports)
        changes = []
        for b in ctx.rows("Bridge"):
            for p in col(b, "ports"):
                if col(p, "name") in wanted and all(sp.is_probe(col(i, "external_ids")) for i in col(p, "interfaces")):
                    if col(p, "qos"):
                        changes.append(Change("egress", col(b, "name"), col(p, "name"), None, None))
                    b.verify("ports")
                    b.delvalue("ports", p)
        writer.write(ctx, changes)

    conn.transact(build, comment="hvnet: remove probe ports")


def unplumb(host: Host, netns: Optional[str], dev: str) -> list[str]:
    """Stop what runs in the namespace, delete it and the veth; what was done (absent parts are skipped)."""
    done = []
    run = host.runner.run
    if netns:
        pids = run(["ip", "netns", "pids", netns], check=False, timeout=15)
        listed = [p for p in pids.stdout.split() if p.isdigit()]
        if pids.returncode == 0:
            for sig in ("-TERM", "-KILL"):
                if listed:
                    run(["kill", sig, *listed], check=False, timeout=15)
                    time.sleep(0.2)
                    listed = [p for p in run(["ip", "netns", "pids", netns], check=False, timeout=15).stdout.split()
                              if p.isdigit()]  # fmt: skip
            if run(["ip", "netns", "del", netns], check=False, timeout=15).returncode == 0:
                done.append(f"deleted namespace {netns}")
    if run(["ip", "link", "del", dev], check=False, timeout=15).returncode == 0:
        done.append(f"deleted device {dev}")
    return done


def remove(conn: Connection, host: Host, probes: list[FoundProbe]) -> list[str]:
    """Ports first (the switch stops using the devices), then namespaces and devices; what was done."""
    if not probes:
        return []
    unrecord(conn, [f.port for f in probes])
    done = [f"removed probe {f.name} (port {f.port} on {f.bridge})" for f in probes]
    for f in probes:
        done += unplumb(host, f.namespace(), f.port)
    return done


def columns() -> dict[str, list[str]]:
    """What the probe lifecycle reads and writes (the policy engine's columns: the writer's too)."""
    return COLUMNS
