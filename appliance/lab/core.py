"""The built-in lab: a private switch with network-namespace guests.

``hvnet lab up`` starts a private OVS (see :mod:`appliance.switch`), creates
one network namespace per guest joined to the switch by a veth pair whose
host end is the VIF (``vif<domid>.0``, named the XenServer way), and
configures bridges, ports, VLANs and hypervisor ``external_ids`` in **one**
OVSDB transaction through the engine's own connection.

Everything the lab creates is recorded in ``lab.json`` *before* it is
created, so ``hvnet lab down`` removes it all even after a crash or a
half-finished ``up``; nothing it did not record is ever touched.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import socket
import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appliance.core import config, labstate, proc
from appliance.core.errors import CommandFailed, HvnetError, LabError, UsageError
from appliance.core.ovsdb import Connection, TxnContext
from appliance.core.ovsdb import column as col
from appliance.core.target import DbTarget
from appliance.core.vlan import VlanCols
from appliance.endpoints.guests import GuestEndpoint
from appliance.endpoints.topology import Guest, Link, Topology
from appliance.lab import guestssh, multihost, ovn, underlay
from appliance.lab.collector import Collector, free_udp_port
from appliance.lab.sshhost import SshHost
from appliance.lab.switch import Switch
from appliance.lab.vm import labguests
from appliance.lab.vm.gexec import gexec_argv
from appliance.lab.vmhost import labhost
from appliance.lab.vmhost.boot import VmHost
from appliance.policy.apply import writer
from appliance.policy.apply.journal import Journal
from appliance.policy.plan.planner import Change
from appliance.switch.host import DataPaths
from appliance.switch.reader import port_vlan

DEFAULT_LAB_DIR = labstate.DEFAULT_LAB_DIR
STATE_FILE = labstate.STATE_FILE
MARKER = ".hvnet-lab"
NS_PREFIX = "hvnet-"

LAB_COLUMNS: dict[str, list[str]] = {
    "Open_vSwitch": ["bridges", "cur_cfg", "next_cfg", "external_ids"],
    "Bridge": ["name", "ports", "datapath_type", "external_ids", "protocols", "mirrors"],
    "Port": ["name", "interfaces", "tag", "trunks", "vlan_mode", "external_ids"],
    "Interface": ["name", "type", "ofport", "external_ids", "error"],
}


def _existing(row: Any, column: str, default: Any) -> Any:
    """A column's current value, or ``default`` for a row inserted in this txn."""
    try:
        return getattr(row, column)
    except AttributeError:
        return default


def _assign(row: Any, column: str, value: Any) -> None:
    """Write ``value`` unless the row already holds it (rows compare by uuid)."""

    def norm(v: Any) -> Any:
        if isinstance(v, list):
            return sorted(str(getattr(x, "uuid", x)) for x in v)
        return v

    if norm(_existing(row, column, None)) != norm(value):
        setattr(row, column, value)


def lab_dir(env: Mapping[str, str] | None = None) -> Path:
    """The lab's run directory (``$HVNET_LAB_DIR``, ``[lab] dir`` or the default)."""
    return labstate.lab_dir(config.environ() if env is None else env)


def _vlan_change(port: Any, g: Guest) -> Change:
    """The guest's VLAN columns, from what the port holds (nothing, for a port inserted now)."""
    try:
        before: VlanCols | None = port_vlan(port)
    except AttributeError:  # inserted in this transaction: no stored columns yet
        before = None
    after = VlanCols(g.vlan_mode, g.tag, tuple(sorted(g.trunks)))
    return Change("vlan", g.bridge, g.vif, before, after, g.name)


def _ns_exists(ns: str) -> bool:
    return os.path.exists(f"/run/netns/{ns}")


def _link_exists(name: str) -> bool:
    return os.path.exists(f"/sys/class/net/{name}")


def _topology_digest(t: Topology) -> str:
    payload = json.dumps(
        {
            "bridges": [{k: v for k, v in b.__dict__.items() if v is not None} for b in t.bridges],
            "guests": [g.__dict__ for g in t.guests],
            "hv": t.hypervisor,
            "hosts": list(t.hosts),
            "ovn": list(t.ovn_switches),
        },
        sort_keys=True,
        default=list,
    )
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


@dataclass
class LabReport:
    """What ``up``/``down`` did, for the CLI to print (or emit as JSON)."""

    db: str
    actions: list[str] = field(default_factory=list)
    guests: list[dict[str, Any]] = field(default_factory=list)
    vm_access: dict[str, Any] | None = None  # the guests reached like VMs, and their inventory


class Lab:
    """One lab instance rooted at ``run_dir``."""

    def __init__(self, run_dir: str | Path | None = None) -> None:
        self.switch = Switch(run_dir or lab_dir())
        self.run_dir = self.switch.run_dir
        self.state: dict[str, Any] = labstate.read_state(self.run_dir) or {}

    # -- state file ---------------------------------------------------------

    def _save(self) -> None:
        self.run_dir.mkdir(parents=True, exist_ok=True)
        (self.run_dir / MARKER).touch()
        tmp = self.run_dir / (STATE_FILE + ".tmp")
        tmp.write_text(json.dumps(self.state, indent=2, sort_keys=True))
        tmp.replace(self.run_dir / STATE_FILE)

    def _record(self, kind: str, name: str) -> None:
        """Record intent to create ``name`` before creating it."""
        items = self.state.setdefault("created", {}).setdefault(kind, [])
        if name not in items:
            items.append(name)
            self._save()

    def _recorded(self, kind: str) -> list[str]:
        return list(self.state.get("created", {}).get(kind, []))

    @property
    def db(self) -> str:
        return self.switch.remote

    def ns_of(self, guest: str) -> str:
        return NS_PREFIX + guest

    def is_up(self) -> bool:
        if self.state.get("hosts"):
            return all(h.switch.pid("ovsdb-server") is not None for h in self._hosts().values()) and all(
                vm.qemu_pid() is not None for vm in self._vm_hosts().values()
            )
        return bool(self.state) and self.switch.pid("ovsdb-server") is not None

    def _hosts(self) -> dict[str, SshHost]:
        """The lab's namespaced hypervisors (a topology with ``hosts``), in the order they were started."""
        vms = set(self._vm_names())
        names = [n for n in self.state.get("hosts") or self._recorded("hosts") if n not in vms]
        return multihost.lab_hosts(self.run_dir, names)

    def _vm_names(self) -> list[str]:
        """The lab's VM hosts as recorded before they booted: their order gives their management links."""
        return self._recorded("vm_hosts")

    def _vm_hosts(self) -> dict[str, VmHost]:
        return labhost.vm_hosts(multihost.hosts_dir(self.run_dir), self._vm_names())

    # -- up ------------------------------------------------------------------

    def up(self, topology: Topology, vm_access: bool = False) -> LabReport:
        """Bring the lab to ``topology`` (idempotent; rolls back a failed fresh start).

        ``vm_access``: every namespace guest also answers SSH on a management link of its
        own, and ``vms.yaml`` lists the guests as VMs (:mod:`.guestssh`).  Once a lab has it,
        a later ``up`` keeps it.
        """
        for tool in ("ovsdb-tool", "ovsdb-server", "ovs-vswitchd", "ovs-vsctl", "ip", "ethtool"):
            proc.which(tool)
        if topology.hosts:
            for tool in ("ssh", "ssh-keygen"):
                proc.which(tool)
        if topology.vm_hosts:
            for tool in ("qemu-system-x86_64", "qemu-img"):
                proc.which(tool)
        vm_access = vm_access or bool(self.state.get("vm_access"))
        if vm_access:
            guestssh.preflight(topology)
        digest = _topology_digest(topology)
        if self.state.get("digest") and self.state["digest"] != digest and self._anything_recorded():
            raise LabError(
                f"a lab with topology {self.state.get('topology')!r} is already set up in {self.run_dir}",
                hint="run 'hvnet lab down' first, then 'hvnet lab up' with the new topology",
            )
        self._check_conflicts(topology, vm_access)
        fresh = not self._anything_recorded()
        report = LabReport(db=self.db)
        try:
            self._up(topology, digest, report, vm_access)
        except BaseException:
            if fresh:
                self.down()
            raise
        return report

    def _anything_recorded(self) -> bool:
        return any(self.state.get("created", {}).values())

    def _check_conflicts(self, t: Topology, vm_access: bool) -> None:
        """Refuse to adopt namespaces or interfaces that exist but are not ours."""
        mine_ns = set(self._recorded("namespaces"))
        mine_if = set(self._recorded("interfaces"))
        # a VM host's guests are namespaces inside the VM: nothing of theirs is on this machine
        ns_guests = [g for g in t.guests if g.kind == "netns" and g.host not in t.vm_hosts]
        clashes = [
            f"namespace {self.ns_of(g.name)}"
            for g in ns_guests
            if _ns_exists(self.ns_of(g.name)) and self.ns_of(g.name) not in mine_ns
        ]
        clashes += [f"interface {g.vif}" for g in ns_guests if _link_exists(g.vif) and g.vif not in mine_if]
        clashes += labguests.check_conflicts(t, self._recorded("domains"))
        clashes += [
            f"interface {b.name}" for b in t.bridges if _link_exists(b.name) and b.name not in self._recorded("bridges")
        ]
        clashes += multihost.conflicts(
            multihost.lab_hosts(self.run_dir, [h for h in t.hosts if h not in t.vm_hosts]), self._recorded("hosts")
        )
        clashes += labhost.conflicts(labhost.vm_hosts(multihost.hosts_dir(self.run_dir), t.vm_hosts), self._vm_names())
        if vm_access:
            clashes += guestssh.conflicts(t, self.ns_of, list(mine_if))
        if clashes:
            raise LabError(
                f"{', '.join(clashes)} already exist{'s' if len(clashes) == 1 else ''} and "
                f"{'is' if len(clashes) == 1 else 'are'} not part of the lab in {self.run_dir}",
                hint="another lab (HVNET_LAB_DIR) or another tool owns them; bring that down first",
            )

    def _up(self, t: Topology, digest: str, report: LabReport, vm_access: bool) -> None:
        self.state.update(
            {
                "vm_access": vm_access,
                "topology": t.name,
                "topology_file": t.file,
                "digest": digest,
                "db": None if t.hosts else self.db,
                "hypervisor": t.hypervisor,
                "hosts": list(t.hosts),
                "vm_names": {g.vm_uuid(t.name): g.name for g in t.guests},
                "guests": [
                    {
                        "name": g.name,
                        "kind": g.kind,
                        "host": g.host,
                        "namespace": self.ns_of(g.name) if g.kind == "netns" else None,
                        "vif": g.vif,
                        "bridge": g.bridge,
                        "ip": g.ip,
                        "mac": g.mac,
                        "vm_uuid": g.vm_uuid(t.name),
                    }
                    for g in t.guests
                ],
            }
        )
        if t.hosts:
            self._up_hosts(t, report)
            report.guests = self.status()["guests"]
            return
        self._record("daemons", "ovsdb-server")
        self._record("daemons", "ovs-vswitchd")
        for b in t.bridges:
            self._record("bridges", b.name)
        started = self.switch.pid("ovs-vswitchd") is None
        self.switch.start()
        if started:
            report.actions.append(f"started ovsdb-server and ovs-vswitchd in {self.run_dir}")
        for g in t.guests:
            if g.kind == "netns" and self._make_guest(g):
                report.actions.append(f"created guest {g.name}: namespace {self.ns_of(g.name)}, VIF {g.vif}")
        self._configure_switch(self.db, t, t.guests, [], DataPaths.for_lab(self.run_dir), report)
        report.actions += underlay.up(self.switch, t, self._record)
        labguests.up(t, self.switch, self.state, self._record, self._save, report.actions)
        if vm_access:
            self._record("daemons", "guest-sshd")
            report.actions += guestssh.up(self.run_dir, t, self.ns_of, self._record)
        st = self.status()
        report.guests, report.vm_access = st["guests"], st["vm_access"]

    def _up_hosts(self, t: Topology, report: LabReport) -> None:
        """Hosts (namespaced ones started, VM hosts booted), trunk links, guests, each host's switch, then the
        files a client reaches them with.  A VM host's switch is configured by the same transaction through
        its forwarded OVSDB socket; its trunk links are NICs of its own (:func:`labhost.join_trunk`)."""
        for name in t.hosts:
            self._record("hosts", name)  # before it exists: 'down' removes a half-started host too
            if name in t.vm_hosts:
                self._record("vm_hosts", name)  # before QEMU starts: 'down' stops a half-booted VM by its files
        hosts = self._hosts()
        for name, h in hosts.items():
            if multihost.start_host(h):
                report.actions.append(f"started host {name}: namespace {h.netns}, its own OVS and sshd "
                                      f"({h.address}:{h.port}, no Python on its PATH)")  # fmt: skip
        ends = {n: tuple(port for _, port in multihost.uplinks(t, n)) for n in t.vm_hosts}
        vms = labhost.vm_hosts(multihost.hosts_dir(self.run_dir), self._vm_names(), ends)
        report.actions += labhost.boot(vms)
        for ln in t.links():
            report.actions += self._make_link(hosts, vms, ln)
        ns_of = {g.name: self.ns_of(g.name) for g in t.guests}
        tagged = {g.name: vlans for g in t.guests if (vlans := t.tagged_vlans(g.name))}
        for name, vm in vms.items():
            report.actions += labhost.plug_guests(vm, t.guests_on(name), ns_of, tagged)
        for g in (g for g in t.guests if g.host in hosts):
            host, ns = hosts[g.host or ""], self.ns_of(g.name)
            if _ns_exists(ns) and multihost.link_in(host.netns, g.vif):
                continue
            self._record("namespaces", ns)
            multihost.plug_guest(g, ns, host.netns)
            report.actions.append(f"created guest {g.name} on {g.host}: namespace {ns}, VIF {g.vif}")
        for name, h in hosts.items():
            self._configure_switch(h.switch.remote, t, t.guests_on(name), multihost.uplinks(t, name),
                                   DataPaths.for_lab(h.dir), report, hostname=name)  # fmt: skip
        for name, vm in vms.items():
            with labhost.ovsdb_forwarded(vm) as db:
                self._configure_switch(db, t, t.guests_on(name), multihost.uplinks(t, name),
                                       DataPaths.for_lab(vm.dir), report, hostname=name)  # fmt: skip
        for name, bridge in t.management:
            if multihost.manage_through_bridge(hosts[name], bridge):
                report.actions.append(f"moved {name}'s management link onto {bridge} ({hosts[name].address})")
        if t.ovn:
            self._up_ovn(t, hosts, report)
        clients = {n: (str(h.switch.run_dir), h.ssh_config) for n, h in hosts.items()}
        clients.update({n: (labhost.OVS_RUNDIR, vm.ssh_config) for n, vm in vms.items()})
        multihost.write_client_files(self.run_dir, t, {n: clients[n] for n in t.hosts})
        report.actions.append(f"wrote the hosts' inventory and ssh_config in {self.run_dir}")

    def _make_link(self, hosts: dict[str, SshHost], vms: dict[str, VmHost], ln: Link) -> list[str]:
        """One trunk link: a veth between two namespaced hosts, or a VM host's NIC whose tap becomes the
        namespaced neighbour's end (the topology never puts two VM hosts side by side)."""
        if ln.a in hosts and ln.b in hosts:
            made = multihost.make_link(hosts, ln)
        else:
            vm_name, vm_end, other, other_end = (ln.a, ln.a_end, ln.b, ln.b_end) if ln.a in vms else \
                (ln.b, ln.b_end, ln.a, ln.a_end)  # fmt: skip
            vm = vms[vm_name]
            nic = next(n for n in vm.trunks if n.inside == vm_end)
            self._record("trunk_ends", f"{other} {other_end}")  # 'down' deletes it in that host's namespace
            made = labhost.join_trunk(vm, nic, hosts[other].netns, other_end)
        return [f"linked {ln.a} {ln.a_end} -- {ln.b} {ln.b_end} (a trunk on {ln.bridge})"] if made else []

    def _up_ovn(self, t: Topology, hosts: dict[str, SshHost], report: LabReport) -> None:
        """The pool: central daemons, the underlay, a chassis per host, the logical network, every port bound."""
        self._record("daemons", "ovn")
        c = ovn.central(self.run_dir)
        for started in c.start(hosts):
            report.actions.append(f"started {started} in {c.dir}")
        report.actions += ovn.make_underlay(hosts)
        for i, (name, h) in enumerate(hosts.items(), start=1):
            if ovn.start_chassis(h, i):
                report.actions.append(f"started ovn-controller on {name} (chassis {name}, Geneve from "
                                      f"{ovn.underlay_address(i)})")  # fmt: skip
        ovn.make_logical_network(c, t)
        ovn.wait_bound(c, t)
        report.actions.append(f"bound every guest's port on logical switches {', '.join(t.ovn_switches)}")

    def _configure_switch(
        self,
        db: str,
        t: Topology,
        guests: tuple[Guest, ...],
        uplinks: list[tuple[str, str]],
        paths: DataPaths,
        report: LabReport,
        hostname: str | None = None,
    ) -> None:
        """One switch's bridges, ports, VLANs and VIF identities in one transaction, audited; VIFs attached."""
        with Connection.open(DbTarget(db, "lab"), LAB_COLUMNS, timeout=10) as conn:
            result = conn.transact(lambda ctx: self._configure(ctx, t, guests, uplinks, hostname),
                                   comment="hvnet lab up", wait_for_vswitchd=True)  # fmt: skip
            if result.vswitchd_lag:
                raise HvnetError(result.vswitchd_lag, hint="is the lab's ovs-vswitchd running?")
            if result.status == "success":
                where = f" on {hostname}" if hostname else ""
                report.actions.append(f"configured bridges, ports, VLANs and VIF external_ids{where} (one transaction)")
            if result.value:
                Journal(db, paths.state_dir, paths.audit_log).audit(
                    "hvnet lab up (lab set-up)", result.value, "applied"
                )
            names = {g.vif for g in guests if g.kind == "netns"} | {port for _, port in uplinks}
            self._wait_ofports(conn, names)

    def _make_guest(self, g: Guest) -> bool:
        """Create the namespace and veth for ``g`` unless present; True if created."""
        ns = self.ns_of(g.name)
        if _ns_exists(ns) and _link_exists(g.vif):
            return False
        self._record("namespaces", ns)
        self._record("interfaces", g.vif)
        multihost.plug_guest(g, ns)
        return True

    def _configure(
        self,
        ctx: TxnContext,
        t: Topology,
        guests: tuple[Guest, ...],
        uplinks: list[tuple[str, str]],
        hostname: str | None = None,
    ) -> list[Change]:
        """Bridges, ports and VIF identities as ``t`` says, in one transaction; the VLAN changes made.

        Idempotent: existing rows are updated in place (only where they
        differ, so a second ``up`` commits nothing), missing ones inserted.
        """
        vlans: list[Change] = []
        root = ctx.root()
        ids = dict(root.external_ids)
        ids.setdefault("system-id", str(uuid.uuid4()))
        ids["hostname"] = hostname or socket.gethostname()
        _assign(root, "external_ids", ids)

        bridges = {col(b, "name"): b for b in ctx.rows("Bridge")}
        ports = {col(p, "name"): p for p in ctx.rows("Port")}
        root_bridges = list(root.bridges)
        for b in t.bridges_on(hostname):
            row = bridges.get(b.name)
            if row is None:
                iface = ctx.insert("Interface")
                iface.name = b.name
                iface.type = "internal"
                port = ctx.insert("Port")
                port.name = b.name
                port.interfaces = [iface]
                row = ctx.insert("Bridge")
                row.name = b.name
                row.ports = [port]
                row.external_ids = {}
                root_bridges.append(row)
                bridges[b.name] = row
            _assign(row, "datapath_type", b.datapath_type)
            _assign(row, "external_ids", {**_existing(row, "external_ids", {}), "hvnet-lab": t.name})
        _assign(root, "bridges", root_bridges)

        bridge_ports: dict[str, list[Any]] = {b.name: list(bridges[b.name].ports) for b in t.bridges}
        for bridge, name in uplinks:  # a trunk to the next host: no tag, every VLAN, like a XenServer PIF
            if name not in ports:
                iface = ctx.insert("Interface")
                iface.name = name
                port = ctx.insert("Port")
                port.name = name
                port.interfaces = [iface]
                bridge_ports[bridge].append(port)
        # QEMU guests' ports are libvirt's to add (when the domain starts), not the lab's.
        for g in (g for g in guests if g.kind == "netns"):
            port = ports.get(g.vif)
            if port is None:
                iface = ctx.insert("Interface")
                iface.name = g.vif
                port = ctx.insert("Port")
                port.name = g.vif
                port.interfaces = [iface]
            else:
                iface = next(iter(port.interfaces))
            if all(p.uuid != port.uuid for p in bridge_ports[g.bridge]):
                bridge_ports[g.bridge].append(port)
            vlans.append(_vlan_change(port, g))
            _assign(iface, "external_ids", self._vif_ids(t, g))
        for name, plist in bridge_ports.items():
            _assign(bridges[name], "ports", plist)
        # The guests' VLANs through the policy writer, like every VLAN hvnet writes.
        changes = [c for c in vlans if c.before != c.after]
        writer.write(ctx, changes)
        return changes

    @staticmethod
    def _vif_ids(t: Topology, g: Guest) -> dict[str, str]:
        """The external_ids the hypervisor would set on the VIF's Interface."""
        if t.hypervisor == "xenserver":
            return {
                "xs-vm-uuid": g.vm_uuid(t.name),
                "xs-vif-uuid": g.vif_uuid(t.name),
                "xs-network-uuid": g.network_uuid(t.name),
                "attached-mac": g.mac,
            }
        return {
            "vm-id": g.vm_uuid(t.name),
            "iface-id": g.vif_uuid(t.name),
            "iface-status": "active",
            "attached-mac": g.mac,
        }

    def _wait_ofports(self, conn: Connection, names: set[str]) -> None:

        def ready() -> bool:
            rows = {i.name: i for i in conn.idl.tables["Interface"].rows.values() if i.name in names}
            return len(rows) == len(names) and all(r.ofport and r.ofport[0] > 0 for r in rows.values())

        if not conn.wait_for(ready, 10.0):
            errs = [
                f"{i.name}: {i.error[0] if i.error else 'ofport ' + str(i.ofport)}"
                for i in conn.idl.tables["Interface"].rows.values()
                if i.name in names and not (i.ofport and i.ofport[0] > 0)
            ]
            raise LabError(f"ovs-vswitchd did not attach every VIF: {'; '.join(errs)}")

    # -- down ----------------------------------------------------------------

    def down(self) -> LabReport:
        """Remove everything recorded, in reverse order; safe to repeat."""
        report = LabReport(db=self.db)
        # Domains first: libvirt removes their ports from the switch, which must still run.
        labguests.down(self.state, self._recorded, self.run_dir, report.actions)
        # A process keeps a deleted namespace alive: the guests' sshds go by their pids before the namespaces.
        if "guest-sshd" in self._recorded("daemons"):
            report.actions += guestssh.down(self.run_dir)
        if self.switch.pid("ovs-vswitchd") is not None and self.switch.pid("ovsdb-server") is not None:
            report.actions += underlay.down(self.switch, self._recorded("routes"))
            # Deleting the bridges first lets ovs-vswitchd remove its own
            # devices (the userspace bridge's tap) before it exits.
            for br in self._recorded("bridges"):
                self.switch.vsctl("--if-exists", "del-br", br, check=False)
        # Deleting a veth's host end removes its peer synchronously; deleting
        # the namespace first would leave the host end to vanish later.
        for name in self._recorded("interfaces") + self._recorded("bridges"):
            if _link_exists(name):
                proc.run(["ip", "link", "del", name], check=False)
                report.actions.append(f"deleted interface {name}")
        for ns in self._recorded("namespaces"):
            if _ns_exists(ns):
                proc.run(["ip", "netns", "del", ns], check=False)
                report.actions.append(f"deleted namespace {ns}")
        # A VM host's trunk tap in a namespaced host goes first, by its name there: never left to outlive it.
        hosts = self._hosts()
        for entry in self._recorded("trunk_ends"):
            host_name, _, end = entry.partition(" ")
            if host_name in hosts and multihost.link_in(hosts[host_name].netns, end):
                proc.run(["ip", "-n", hosts[host_name].netns, "link", "del", end], check=False)
                report.actions.append(f"deleted trunk end {end} on {host_name}")
        # A host's namespace takes its VIF and trunk ends with it; sshd and OVS go by their pids.
        for host in self._hosts().values():
            if (line := ovn.stop_chassis(host)) is not None:
                report.actions.append(line)
        if "ovn" in self._recorded("daemons"):
            report.actions += [f"stopped {d}" for d in ovn.central(self.run_dir).stop()]
        for name, host in reversed(list(self._hosts().items())):
            host.stop()
            report.actions.append(f"stopped host {name} (sshd, OVS) and deleted namespace {host.netns}")
        # Before the run directory goes: a VM host is stopped by its files (QEMU's pid, the tap's name).
        for name, vm in reversed(list(self._vm_hosts().items())):
            found = vm.leftovers()
            if (hung := labhost.unanswered_console(vm)) is not None:
                report.actions.append(f"VM host {name} did not answer over SSH; its console ends:\n{hung}")
            vm.stop()
            if found:
                report.actions.append(f"stopped VM host {name}: {', '.join(found)}")
        for stopped in self.switch.stop():
            report.actions.append(f"stopped {stopped}")
        if (self.run_dir / MARKER).exists():
            shutil.rmtree(self.run_dir, ignore_errors=True)
            report.actions.append(f"removed {self.run_dir}")
        self.state = {}
        return report

    # -- status ----------------------------------------------------------------

    def status(self, reach: bool = False) -> dict[str, Any]:
        """Daemons, guests and their devices as they are now; with ``reach``, whether each guest
        reached like a VM (``--vm-access``) lets an SSH client log in now."""
        guests = []
        hosts = self._hosts()
        vm_hosts = self._vm_hosts()
        inside = {n: labhost.presence(vm) for n, vm in vm_hosts.items()}  # one SSH login per VM host
        recorded = self.state.get("guests", [])
        vms = labguests.statuses([g for g in recorded if g.get("kind") == "qemu"], self.switch, self.run_dir)
        for g in recorded:
            if g["name"] in vms:
                guests.append(vms[g["name"]])
                continue
            if g.get("host") in inside:  # a namespace inside a VM host: what the VM shows
                now = inside[g["host"]]
                guests.append({**g, "namespace_present": g["namespace"] in now.namespaces,
                               "vif_present": g["vif"] in now.links})  # fmt: skip
                continue
            host = hosts.get(g.get("host") or "")
            vif_present = multihost.link_in(host.netns if host else None, g["vif"])
            guests.append({**g, "namespace_present": _ns_exists(g["namespace"]), "vif_present": vif_present})
        if hosts or vm_hosts:
            daemons = {f"{n} {d}": h.switch.pid(d) for n, h in hosts.items() for d in ("ovsdb-server", "ovs-vswitchd")}
            daemons.update({f"{n} qemu": vm.qemu_pid() for n, vm in vm_hosts.items()})
            daemons.update({f"{n} sshd": h.sshd_pid() for n, h in hosts.items()})
            if "ovn" in self._recorded("daemons"):
                c = ovn.central(self.run_dir)
                daemons.update({f"ovn {d}": c.pid(d) for d in ("nb", "sb", "northd")})
                daemons.update({f"{n} ovn-controller": ovn.controller_pid(h) for n, h in hosts.items()})
        else:
            daemons = {d: self.switch.pid(d) for d in ("ovsdb-server", "ovs-vswitchd")}
        vm_access = None
        if self.state.get("vm_access"):
            names = [g["name"] for g in recorded if g.get("kind", "netns") == "netns"]
            vm_access = guestssh.status(self.run_dir, names, self.ns_of, reach=reach)
            daemons.update({f"{n} sshd": v["sshd_pid"] for n, v in vm_access["guests"].items()})
        complete = (
            bool(self.state)
            and all(daemons.values())
            and all(now.ssh for now in inside.values())
            and all(g["namespace_present"] and g["vif_present"] for g in guests)
        )
        return {
            "run_dir": str(self.run_dir),
            "state": "up" if complete else ("partial" if self.state else "down"),
            "topology": self.state.get("topology"),
            "db": self.db if self.state and not (hosts or vm_hosts) else None,
            "hosts": {
                **{
                    n: {"address": h.address, "port": h.port, "netns": h.netns, "ovs_rundir": str(h.switch.run_dir)}
                    for n, h in hosts.items()
                },
                **{n: labhost.describe(vm, inside[n]) for n, vm in vm_hosts.items()},
            },
            "inventory": str(self.run_dir / multihost.INVENTORY_FILE) if hosts or vm_hosts else None,
            "vm_access": vm_access,
            "daemons": daemons,
            "guests": guests,
        }

    def require_guests(self, topology: Topology, names: list[str]) -> dict[str, dict[str, Any]]:
        """The lab's records of ``names``, refusing a lab whose guests differ from ``topology``'s.

        A suite or scenario written for one topology must not run against
        another lab that happens to use the same guest names.
        """
        status = self.status()
        if status["state"] == "down":
            raise UsageError(f"no lab is up; this needs the lab topology {topology.file}",
                             hint=f"hvnet lab up --topology {topology.file}")  # fmt: skip
        in_lab = {x["name"]: x for x in status["guests"]}
        missing = [g for g in names if g not in in_lab]
        if missing:
            raise UsageError(
                f"the lab that is up (topology {status['topology']}) has no guest {', '.join(missing)}",
                hint=f"hvnet lab down && hvnet lab up --topology {topology.file}",
            )
        differ = [
            g for g in names
            if (in_lab[g]["ip"], in_lab[g]["mac"], in_lab[g].get("kind", "netns"))
            != (topology.guest(g).ip, topology.guest(g).mac, topology.guest(g).kind)
            or (topology.guest(g).kind == "netns" and in_lab[g]["vif"] != topology.guest(g).vif)
            or in_lab[g].get("host") != topology.guest(g).host
        ]  # fmt: skip
        if differ:
            raise UsageError(
                f"guest {', '.join(differ)} in the lab that is up (topology {status['topology']}) differs from "
                f"{topology.file} (IP, MAC, VIF or host)",
                hint=f"hvnet lab down && hvnet lab up --topology {topology.file}",
            )
        absent = [g for g in names if not (in_lab[g]["namespace_present"] and in_lab[g]["vif_present"])]
        if absent:
            raise UsageError(f"guest {', '.join(absent)} is recorded but its namespace, domain or VIF is gone",
                             hint="hvnet lab down && hvnet lab up")  # fmt: skip
        return {g: in_lab[g] for g in names}

    def require(self, topology: Topology, names: list[str]) -> dict[str, GuestEndpoint]:
        """``names`` as endpoints for the engine (suites, isolation checks): the lab is their GuestSource.

        A guest of a VM host is a namespace inside that VM: its endpoint is remote, its processes started by
        the driven host's runner (the VM over SSH), as a probe's over ``--host`` are."""
        inside = set(self._vm_names())
        return {name: _endpoint(name, rec, remote=rec.get("host") in inside)
                for name, rec in self.require_guests(topology, names).items()}  # fmt: skip

    def start_collector(self, kind: str, run_dir: Path) -> Collector:
        """A pmacct collector of ``kind`` on this machine's loopback, started and listening (suite cases that
        monitor): ovs-vswitchd sends there, not through the bridge it measures. The caller stops it."""
        return Collector(kind, "127.0.0.1", free_udp_port(), run_dir).start()

    def endpoint(self, name: str) -> GuestEndpoint:
        """The lab guest ``name`` as it is now (captures inside it), or a UsageError naming the guests there are."""
        guests = {g["name"]: g for g in self.status()["guests"]}
        if name not in guests:
            raise UsageError(
                f"the lab has no guest {name!r}", hint="guests: " + (", ".join(guests) or "none (hvnet lab up)")
            )
        rec = guests[name]
        if not (rec.get("namespace_present") and rec.get("vif_present")):
            raise UsageError(f"guest {name} is recorded but its namespace, domain or VIF is gone",
                             hint="hvnet lab down && hvnet lab up")  # fmt: skip
        return _endpoint(name, rec, remote=rec.get("host") in set(self._vm_names()))

    # -- guests ----------------------------------------------------------------

    def guest_kind(self, guest: str) -> str:
        return next((g.get("kind", "netns") for g in self.state.get("guests", []) if g["name"] == guest), "netns")

    def guest_vif(self, guest: str) -> str:
        """The guest's VIF as it is now (a QEMU guest's ``vnetN`` changes when its domain restarts)."""
        for g in self.state.get("guests", []):
            if g["name"] == guest:
                if g.get("kind") == "qemu":
                    found = labguests.find_vif(self.switch, g["mac"])
                    return found[0] if found else ""
                return str(g["vif"])
        return ""

    def exec_argv(self, guest: str, argv: list[str]) -> list[str]:
        """The full argv that runs ``argv`` inside ``guest`` as a local process (output streamed, exit status kept)."""
        if self.guest_kind(guest) == "qemu":
            sock = labguests.GuestFiles(self.run_dir, guest).sock
            return gexec_argv(str(sock), argv)
        return [proc.which("ip"), "netns", "exec", self.ns_of(guest), *argv]

    def guest_exec(self, guest: str, argv: list[str], timeout: float = 30.0, check: bool = False) -> Any:
        """Run ``argv`` inside ``guest``: in its namespace, or through a QEMU guest's agent channel."""
        if self.guest_kind(guest) == "qemu":
            with labguests.guest_client(self.run_dir, guest) as client:
                res = client.run(argv, timeout=timeout)
            if check and res.returncode != 0:
                raise CommandFailed(list(argv), res.returncode, res.stderr or res.stdout)
            return res
        return proc.run(proc.in_netns(self.ns_of(guest), argv), timeout=timeout, check=check)


def _endpoint(name: str, rec: dict[str, Any], *, remote: bool = False) -> GuestEndpoint:
    """A guest's lab record as the engine sees it (``remote``: its namespace is inside a VM host, not here)."""
    channel = rec.get("channel")
    return GuestEndpoint(
        name=name,
        kind=rec.get("kind", "netns"),
        ip=rec["ip"],
        mac=rec["mac"],
        vif=rec.get("vif") or "",
        netns=rec.get("namespace") or None,
        channel=channel,
        gexec=tuple(gexec_argv("", [])[:-2]) if channel else (),  # the program that reaches a VM's channel
        remote=remote,
    )
