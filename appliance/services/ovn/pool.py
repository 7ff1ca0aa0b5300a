"""OVN pools: ``hvnet --pool NAME``, the pool's logical network read from its central databases.

A pool is an inventory entry (:class:`~appliance.core.hostlist.InventoryPool`): its
northbound and southbound remotes, reached directly (``unix:``, ``tcp:``,
``ssl:``) or as unix sockets on an inventory host over that host's SSH
master (``via``), like a hypervisor's own OVSDB.  The NB and SB say which
chassis binds each port; the VM behind a port is on that chassis (the VIF
whose ``external_ids:iface-id`` names the port), so the pool's chassis
hosts are read in parallel too, and a chassis that cannot be read is named
in the view's notes rather than guessed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from appliance.core.errors import EXIT_FAILED, EXIT_OK, HvnetError, UsageError
from appliance.core.hostlist import Inventory, InventoryHost, InventoryPool
from appliance.core.target import DbTarget, SslOptions
from appliance.endpoints.topology import OVN_BRIDGE
from appliance.ovn import export as ovn_export
from appliance.ovn import plan as ovn_plan
from appliance.ovn import write
from appliance.ovn.model import Desired
from appliance.ovn.plan import Limit, PoolPlan
from appliance.ovn.read import read_pool
from appliance.ovn.view import PoolView, QosView
from appliance.ovn.write import Acks
from appliance.policy.apply.journal import Journal
from appliance.policy.apply.openflow import OpenFlow
from appliance.policy.plan.model import Policy
from appliance.services import fleet
from appliance.services.ovn import history
from appliance.services.ovn import mirrors as mirror_checks
from appliance.services.policy import Exported  # a pool's intent exported is the same record as a host's
from appliance.switch import api
from appliance.switch.host import Host

Connect = Callable[[InventoryHost], Host]


def targets(pool: InventoryPool, inventory: Inventory, connect: Connect,
            ssl: SslOptions | None = None) -> tuple[DbTarget, DbTarget, Host | None]:  # fmt: skip
    """The pool's NB and SB targets, and the host they are forwarded through (to close) if ``via``."""
    source = f"--pool {pool.name}"
    if pool.via is None:
        for remote in (pool.nb, pool.sb):
            if remote.startswith("ssl:") and ssl is None:
                raise UsageError(f"--pool {pool.name}: {remote} needs --ssl-key, --ssl-cert and --ssl-ca")
        return (DbTarget(pool.nb, source, ssl if pool.nb.startswith("ssl:") else None),
                DbTarget(pool.sb, source, ssl if pool.sb.startswith("ssl:") else None), None)  # fmt: skip
    entry = inventory.get(pool.via)
    if entry is None:
        raise UsageError(f"--pool {pool.name}: via {pool.via!r} is not a host of {inventory.file}")
    host = connect(entry)
    try:
        session = getattr(host.runner, "session", None)
        if session is None:
            raise UsageError(f"--pool {pool.name}: via {pool.via} is not reached over SSH")
        out = []
        for db, remote in (("nb", pool.nb), ("sb", pool.sb)):
            path = remote.removeprefix("unix:")
            local = Path(session.work_dir) / f"ovn-{db}.sock"
            session.forward_unix(local, path)
            out.append(DbTarget(f"unix:{local}", source, where=f"{path} on {pool.via}"))
    except BaseException:
        host.close()
        raise
    return out[0], out[1], host


def status(pool: InventoryPool, inventory: Inventory, connect: Connect, *, timeout: float = 5.0,
           ssl: SslOptions | None = None, vms: bool = True) -> PoolView:  # fmt: skip
    """The pool as its NB and SB say now; with ``vms`` the VM behind each bound port, from its chassis."""
    nb, sb, via = targets(pool, inventory, connect, ssl)
    try:
        view = read_pool(pool.name, nb, sb, timeout)
    finally:
        if via is not None:
            via.close()
    if vms and pool.chassis:
        _name_vms(view, inventory.select(pool.chassis), connect, timeout)
    return view


def _name_vms(view: PoolView, chassis: list[InventoryHost], connect: Connect, timeout: float) -> None:
    """Each port's VM, from the chassis hosts' own inventories (read in parallel)."""

    def work(host: Host, _entry: InventoryHost) -> tuple[dict[str, str], int]:
        inv = api.read_inventory_once(host, timeout=timeout)
        return {v.ovn_port: v.vm_name or v.vm_uuid or "" for v in inv.vifs if v.ovn_port}, EXIT_OK

    names: dict[str, str] = {}
    for outcome in fleet.run(chassis, work, connect, deadline_s=max(30.0, 6 * timeout)):
        if outcome.value is None:
            view.notes.append(f"VMs on {outcome.name} not read: {outcome.error or 'no result'}")
        else:
            names.update(outcome.value)
    for _, port in view.ports():
        port.vm = names.get(port.name)


# -- policy on a pool: plan, apply, verify ------------------------------------------------------


@dataclass
class Enforced:
    """Whether a limit holds: the NB rule for its port with the port's own match and its band, and on the
    chassis binding the port a meter with that band."""

    limit: Limit
    chassis: str | None
    state: str  # "enforced" | "missing" | "unknown"
    detail: str = ""


@dataclass
class PoolOutcome:
    """A plan, and once applied: the NB configuration number, the chassis' acknowledgements, enforcement."""

    view: PoolView
    plan: PoolPlan
    nb_cfg: int | None = None
    acks: Acks | None = None
    enforced: list[Enforced] = field(default_factory=list)
    mirrored: list[mirror_checks.Mirrored] = field(default_factory=list)
    undone: str | None = None  # rollback: the apply record it undid
    commit_s: float | None = None  # how long the NB transaction took
    settled: list[str] = field(default_factory=list)  # interrupted applies found and settled first

    @property
    def exit_code(self) -> int:
        bad = (self.acks is not None and not self.acks.complete) or any(e.state != "enforced" for e in self.enforced)
        bad = bad or any(m.state != "present" for m in self.mirrored)
        return EXIT_FAILED if bad else EXIT_OK


def plan_pool(pool: InventoryPool, inventory: Inventory, connect: Connect, policy: Policy, *,
              timeout: float = 5.0, ssl: SslOptions | None = None) -> PoolOutcome:  # fmt: skip
    """The NB changes ``policy`` needs on the pool (nothing is changed)."""
    view = status(pool, inventory, connect, timeout=timeout, ssl=ssl)
    return PoolOutcome(view, ovn_plan.plan(view, policy))


def apply_pool(pool: InventoryPool, inventory: Inventory, connect: Connect, policy: Policy, *,
               timeout: float = 5.0, wait_s: float = 30.0, ssl: SslOptions | None = None,
               journal: Journal | None = None, comment: str = "hvnet apply",
               stop_at: str | None = None) -> PoolOutcome:  # fmt: skip
    """One NB transaction, then every chassis' acknowledgement (within ``wait_s``), the meters and mirrors on
    each chassis that binds a limited or mirrored port.  With ``journal``: audited, and recorded so that
    :func:`rollback_pool` can undo it."""
    out = plan_pool(pool, inventory, connect, policy, timeout=timeout, ssl=ssl)
    if journal is not None:
        out.settled = history.settle(journal, out.view, comment)
    if out.plan.changed:
        _commit(pool, inventory, connect, out, ssl, timeout, wait_s, journal, comment, keep=True, stop_at=stop_at)
    _check(out, inventory, pool, connect, timeout, ssl)
    return out


def rollback_pool(pool: InventoryPool, inventory: Inventory, connect: Connect, journal: Journal, *,
                  timeout: float = 5.0, wait_s: float = 30.0, ssl: SslOptions | None = None,
                  comment: str = "hvnet rollback", stop_at: str | None = None) -> PoolOutcome:  # fmt: skip
    """Put back what the last apply on the pool replaced (its record), as one NB transaction, audited.

    What the record holds is the values before that apply, only where it changed something, so a later
    change elsewhere in the pool is left alone.  The undone record is kept as rolled back."""
    view = status(pool, inventory, connect, timeout=timeout, ssl=ssl)
    settled = history.settle(journal, view, comment)  # an apply killed after its commit is the one to undo
    record = journal.load_last()
    if record is None or "undo" not in record:
        raise HvnetError(f"nothing to roll back: no apply is recorded for pool {pool.name}",
                         hint=f"records are kept in {journal.state_dir}")  # fmt: skip
    out = PoolOutcome(view, ovn_plan.diff(view, Desired.from_json(record["undo"])), undone=str(record["id"]),
                      settled=settled)  # fmt: skip
    if out.plan.changed:
        _commit(pool, inventory, connect, out, ssl, timeout, wait_s, journal, f"{comment} {record['id']}",
                keep=False, stop_at=stop_at, undoes=str(record["id"]))  # fmt: skip
    else:
        journal.audit(comment, [], f"nothing to undo for {record['id']}: the pool already has its values",
                      pool=pool.name)  # fmt: skip
    journal.mark_rolled_back(record)
    _check(out, inventory, pool, connect, timeout, ssl)
    return out


def _commit(pool: InventoryPool, inventory: Inventory, connect: Connect, out: PoolOutcome,
            ssl: SslOptions | None, timeout: float, wait_s: float, journal: Journal | None, comment: str,
            *, keep: bool, stop_at: str | None = None, undoes: str | None = None) -> None:  # fmt: skip
    """Commit ``out.plan`` in the NB, record it (``keep``: as what rollback undoes), wait for the chassis.

    Write-ahead, as on a host: the intent is on disk before the commit, and the commit marks the NB with
    the record's id, so a process killed in between is settled by the next (:func:`history.settle`)."""
    record = None
    if journal is not None:
        journal.check_writable()
        record = history.record(journal, comment, out.view, out.plan, undoes)
        journal.write_intent(record, keep=keep)
    nb, sb, via = targets(pool, inventory, connect, ssl)
    try:
        try:
            start = time.monotonic()
            out.nb_cfg = write.commit(nb, out.view, out.plan, f"{comment} (pool {pool.name})", timeout,
                                      marker=record["id"] if record else None)  # fmt: skip
            out.commit_s = time.monotonic() - start
        except HvnetError as exc:
            if journal is not None and record is not None:
                journal.audit(comment, [], f"refused: {exc.message}", pool=pool.name, plan=out.plan.lines())
                journal.clear_intent(record["id"])
            raise
        history.checkpoint(stop_at, "committed")
        if journal is not None and record is not None and keep:
            journal.save_last(record)
        out.acks = write.wait_acks(nb, sb, out.nb_cfg, wait_s)
    finally:
        if via is not None:
            via.close()
    if journal is not None and record is not None:
        journal.audit(comment, [], history.result(out.nb_cfg, out.acks), pool=pool.name, plan=out.plan.lines(),
                      nb_cfg=out.nb_cfg, **({"record": record["id"]} if keep else {}))  # fmt: skip
        journal.clear_intent(record["id"])


def _owned_rules(view: PoolView) -> dict[tuple[str, str, str], QosView]:
    """hvnet's QoS rules in the NB by (logical switch, direction, port): the first of each, read once."""
    rules: dict[tuple[str, str, str], QosView] = {}
    for s in view.switches:
        for q in s.qos:
            if ovn_plan.owned(q.external_ids):
                rules.setdefault((s.name, q.direction, q.external_ids.get("hvnet-port", "")), q)
    return rules


def _rule_differs(rules: dict[tuple[str, str, str], QosView], lim: Limit) -> str:
    """Why the NB's rule for ``lim`` is not the rule hvnet wants ("" when it is): absent, or another match
    or band -- a rule matching more than its port (a name pasted into it) polices traffic not its own."""
    q = rules.get((lim.switch, lim.direction, lim.port))
    if q is None:
        return f"no {lim.direction} rule for the port on logical switch {lim.switch} in the NB"
    if q.match != lim.match:
        return f"the NB rule matches {q.match!r}, not the port's own {lim.match!r}"
    if (q.rate_kbps, q.burst_kbit) != (lim.rate_kbps, lim.burst_kbit):
        return f"the NB rule's band is {q.rate_kbps} kbit/s burst {q.burst_kbit} kbit"
    return ""


def _check(out: PoolOutcome, inventory: Inventory, pool: InventoryPool, connect: Connect, timeout: float,
           ssl: SslOptions | None) -> None:  # fmt: skip
    """Each limit's NB rule (as read after the commit) and meter, and each mirror's OVS mirror, on the
    chassis that binds its port."""
    view = out.view
    if out.plan.changed:
        try:
            view = status(pool, inventory, connect, timeout=timeout, ssl=ssl, vms=False)
        except HvnetError as exc:  # committed, but what the NB holds now is not known: said, not assumed
            out.enforced = [Enforced(lim, None, "unknown", f"the NB could not be read again: {exc.message}")
                            for lim in out.plan.wanted()]  # fmt: skip
    if not out.enforced:
        out.enforced = enforcement(view, out.plan.wanted(), inventory, pool, connect, timeout)
    out.mirrored = mirror_checks.check(out.view, out.plan.wanted_mirrors(), inventory, pool, connect, timeout)


def export_pool(pool: InventoryPool, inventory: Inventory, connect: Connect, *, by: str = "mac",
                timeout: float = 5.0, ssl: SslOptions | None = None) -> Exported:  # fmt: skip
    """The pool's current intent as a policy that plans no change on it."""
    view = status(pool, inventory, connect, timeout=timeout, ssl=ssl)
    header = f"# hvnet policy exported {datetime.now():%Y-%m-%d %H:%M:%S} from OVN pool {pool.name} ({view.nb})\n"
    doc = ovn_export.to_policy(view, by=by)
    mirrors = len(doc.get("bridges", {}).get(OVN_BRIDGE, {}).get("mirrors", {}))
    return Exported(doc, ovn_export.to_yaml(view, by=by, header=header), len(doc["vifs"]), mirrors)


def enforcement(view: PoolView, limits: list[Limit], inventory: Inventory, pool: InventoryPool,
                connect: Connect, timeout: float) -> list[Enforced]:  # fmt: skip
    """Each limit checked on the chassis that binds its port (the chassis' meters, over its Host)."""
    bound = {p.name: p.chassis for _, p in view.ports()}
    rules = _owned_rules(view)
    entries = inventory.select(pool.chassis) if pool.chassis else []
    by_chassis = {c.name: e for c in view.chassis for e in entries if e.name in (c.name, c.hostname)}
    wanted = sorted({bound.get(lim.port) for lim in limits} & set(by_chassis), key=str)

    def work(host: Host, _entry: InventoryHost) -> tuple[set[tuple[int, int]], int]:
        of = OpenFlow.for_host(host)
        if of is None:
            raise UsageError(f"{host.label}: its OVS run directory is not known (inventory ovs_rundir)")
        return set(of.meter_bands(OVN_BRIDGE).values()), EXIT_OK

    outcomes = fleet.run([by_chassis[c] for c in wanted], work, connect, deadline_s=max(30.0, 6 * timeout))
    bands = {c: o for c, o in zip(wanted, outcomes)}
    result = []
    for lim in limits:
        chassis = bound.get(lim.port)
        o = bands.get(chassis or "")
        wrong = _rule_differs(rules, lim)
        if wrong:  # a meter of the same band elsewhere (another rule's) says nothing about this port
            result.append(Enforced(lim, chassis, "missing", wrong))
        elif chassis is None:
            result.append(Enforced(lim, None, "unknown", "the port is bound to no chassis"))
        elif o is None:
            result.append(Enforced(lim, chassis, "unknown", f"chassis {chassis} is not a host of the inventory"))
        elif o.value is None:
            result.append(Enforced(lim, chassis, "unknown", f"{chassis}: {o.error or 'no result'}"))
        elif (lim.rate_kbps, lim.burst_kbit) in o.value:
            result.append(Enforced(lim, chassis, "enforced", f"meter on {chassis}'s {OVN_BRIDGE}"))
        else:
            result.append(Enforced(lim, chassis, "missing", f"no meter of that band on {chassis}'s {OVN_BRIDGE}"))
    return result
