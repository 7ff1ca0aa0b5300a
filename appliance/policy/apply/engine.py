"""Applying intents: plan, one transaction, meters, verification, rollback, audit.

:class:`PolicyEngine` is what the CLI, the TUI and the agent hold.  Every
intent -- a policy file, ``vif set``, ``mirror add``, a rollback -- goes
through :meth:`PolicyEngine.apply_changes` or :meth:`PolicyEngine.apply`:

1. plan against a snapshot of the replica (inside the transaction's build
   function, so a TRY_AGAIN re-plans against fresh state);
2. commit everything in one OVSDB transaction, waiting for ovs-vswitchd;
3. bring the OpenFlow meters in line with what was committed -- if that
   fails, the OVSDB part is restored with the inverse changes;
4. re-read and verify (ports have an ofport, no Interface error, policing
   installed by the mechanism that was chosen), a few times ~1 s apart;
5. write the rollback record and one audit line.

Crashes at the worst moment: before the commit an intent is written to the
journal and the audit log is checked writable (a user who cannot audit cannot
change anything); right after the commit the rollback record is saved, before
meters and verification.  An hvnet killed anywhere in between leaves its
intent, and the next engine on that switch settles it by reading the
database (:meth:`PolicyEngine.settle_interrupted`): the audit line is
written, the record kept, the meters brought in line.  A commit whose reply
is lost is settled the same way on the spot; only when the database cannot
be read is the outcome reported as unknown (exit 6), never as "prevented".
Undoing and settling live in :mod:`~appliance.policy.apply.recovery`, the
read-back of how limits are enforced in :mod:`~appliance.policy.apply.enforcement`.
"""

from __future__ import annotations

import gc
import logging
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from appliance.core import documents
from appliance.core.errors import HvnetError, OutcomeUnknown
from appliance.core.ovsdb import Connection, TxnContext
from appliance.core.vlan import DEAD, VlanCols
from appliance.policy.apply import journal, openflow, recovery, tcpolice, writer
from appliance.policy.apply.enforcement import Enforcement
from appliance.policy.apply.enforcement import observe as observe_enforcement
from appliance.policy.apply.journal import Journal
from appliance.policy.apply.read import state as read_state
from appliance.policy.plan import planner
from appliance.policy.plan.model import Ingress, Policy
from appliance.policy.plan.planner import Change, Plan, PlanOptions
from appliance.policy.plan.state import State
from appliance.switch import reader
from appliance.switch.host import Host
from appliance.switch.names import resolve_names

log = logging.getLogger("hvnet.policy")

# The OVSDB lock the policy agent holds while it enforces: only its holder writes, and
# ``status``, the fleet view and the exporter read "agent running" from whether it is held.
AGENT_LOCK = "hvnet_agent"

VERIFY_ATTEMPTS = 4
VERIFY_INTERVAL_S = 1.0


@dataclass
class ApplyResult:
    plan: Plan
    status: str  # "applied" | "unchanged" | "dry-run" | "rolled back" | "failed"
    attempts: int = 0
    enforcement: list[Enforcement] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # verification findings
    isolated: dict[str, str] = field(default_factory=dict)  # port -> reason (fail-closed)
    record_id: str | None = None
    openflow: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status in ("applied", "unchanged", "dry-run") and not self.problems

    def to_json(self) -> dict[str, Any]:
        return documents.POLICY_APPLY.stamp(
            {
                "status": self.status,
                "ok": self.ok,
                "attempts": self.attempts,
                "changes": [change_json(c) for c in self.plan.changes],
                "warnings": self.plan.warnings,
                "problems": self.problems,
                "isolated": self.isolated,
                "enforcement": [e.to_json() for e in self.enforcement],
                "record_id": self.record_id,
            }
        )


def change_json(c: Change) -> dict[str, Any]:
    """A change for ``--json`` output: stored values plus their human descriptions."""
    return {**journal.change_to_json(c), "before_text": c.describe(c.before), "after_text": c.describe(c.after)}


class PolicyEngine:
    """Plans and applies policies on one open OVSDB connection."""

    def __init__(self, conn: Connection, host: Host, *, command: str = "hvnet", audit: bool = True) -> None:
        self.conn = conn
        self.host = host
        self.command = command
        self.audit = audit
        self.remote = conn.target.remote
        self.journal = Journal.for_host(host)
        self.of = openflow.OpenFlow.for_host(host)
        self._names_sources = host.name_sources()
        self._names: dict[str, str] = {}
        self._tc_police: bool | None = None
        self.force_policing: str | None = None
        self.lenient = False  # the agent's planning mode (see PlanOptions.lenient)
        self.pool = False  # one of several hosts given the same policy (see PlanOptions.pool)
        self.audit_unchanged = True  # an operator's apply that changed nothing is audited; the agent's idle passes not
        # Called with the record of each attempt's changes before it is written (a --no-commit apply on a host
        # over SSH arms the host's own undo there); raising refuses the commit.
        self.before_commit: Callable[[dict[str, Any]], None] | None = None

    def __enter__(self) -> PolicyEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.conn.close()

    # -- reading ---------------------------------------------------------------

    def _refresh_names(self) -> None:
        """Look up the names of VMs not seen before (libvirt/XAPI calls: outside any transaction)."""
        if not self._names_sources:
            return
        missing = reader.vm_uuids(self.conn) - set(self._names)
        if missing:
            for u, (name, _src) in resolve_names(self._names_sources, missing).items():
                self._names[u] = name

    def read(self, conn: Connection) -> State:
        """The planner's snapshot, VM names attached (caller holds the lock or is in a transaction)."""
        return read_state(conn, self._names)

    def snapshot(self) -> State:
        self._refresh_names()
        with self.conn.lock:
            return self.read(self.conn)

    def options(self) -> PlanOptions:
        if self._tc_police is None and self.force_policing in (None, "auto"):
            self._tc_police = tcpolice.tc_police_works(self.host.runner, self.host.paths.cache_dir)
        return PlanOptions(tc_police=bool(self._tc_police), openflow=self.of is not None, lenient=self.lenient,
                           pool=self.pool)  # fmt: skip

    def plan(self, policy: Policy) -> Plan:
        return planner.plan(self._forced(policy), self.snapshot(), self.options())

    def _forced(self, policy: Policy) -> Policy:
        if self.force_policing is None:
            return policy
        rules = [
            replace(r, ingress=replace(r.ingress, mechanism=self.force_policing))
            if isinstance(r.ingress, Ingress)
            else r
            for r in policy.vifs
        ]
        return replace(policy, vifs=rules, policing=self.force_policing)

    # -- applying --------------------------------------------------------------

    def apply(
        self,
        policy: Policy,
        *,
        dry_run: bool = False,
        verify: bool = True,
        wait: bool = True,
        record: bool = True,
        guard: Callable[[State], None] | None = None,
    ) -> ApplyResult:
        """Make the switch match ``policy``; all or nothing.

        ``record=False``: audited, but not made what ``hvnet rollback`` undoes
        (the agent's repairs must not take the operator's last apply away).
        ``guard(state)`` runs before each planning, inside the transaction, and
        raises to refuse (e.g. "that mirror name was taken meanwhile"): a check
        made before the transaction would be check-then-act.
        """
        policy = self._forced(policy)
        options = self.options()
        self._refresh_names()

        def plan(state: State) -> Plan:
            if guard is not None:
                guard(state)
            return planner.plan(policy, state, options)

        return self._run(plan, dry_run=dry_run, verify=verify, wait=wait, record=record)

    def apply_changes(
        self, changes: list[Change], *, label: str, wait: bool = True, record: bool = True
    ) -> ApplyResult:
        """Apply given changes (a rollback, a test's set-up): each only if the row is still as it expects.

        ``record=False`` keeps the last-apply record as it is: a test's set-up and
        its undo must not become what ``hvnet rollback`` undoes.
        """

        left: list[str] = []  # rows changed since, as the last planning found them
        make_plan = recovery.guarded(changes, left)
        result = self._run(make_plan, dry_run=False, verify=True, wait=wait, label=label, record=record)
        if left:  # a rollback that could not put everything back is not a success (exit 1)
            result.problems.append(f"partial: {len(left)} change(s) not put back (changed since): " + "; ".join(left))
        return result

    def undo(self, changes: list[Change], *, label: str, wait: bool = True, record: bool = True) -> ApplyResult:
        """Put back what ``changes`` replaced, newest first; a row changed since is left alone and reported.

        The one rollback every caller uses (``hvnet rollback``, the automatic
        rollback of an unconfirmed apply, a suite restoring its cases, an
        isolation check undoing its set-up with ``record=False``).
        """
        return self.apply_changes(recovery.inverse(changes), label=label, wait=wait, record=record)

    def _run(
        self,
        make_plan: Callable[[State], Plan],
        *,
        dry_run: bool,
        verify: bool,
        wait: bool,
        label: str | None = None,
        record: bool = True,
    ) -> ApplyResult:
        if dry_run:
            with self.conn.lock:
                state = self.read(self.conn)
            return ApplyResult(make_plan(state), "dry-run")
        self.settle_interrupted()
        label = label or self.command
        attempts: recovery.Attempts = {}  # attempt number -> what it meant to change
        calls = [0]

        def build(ctx: TxnContext) -> Plan:
            calls[0] += 1
            plan = make_plan(self.read(ctx.conn))
            if self.of is not None and not self.lenient and any(_touches_meters(c) for c in plan.changes):
                # Said before anything is committed (exit 4), not found missing after the commit and undone;
                # the agent (lenient) commits the rest and keeps the meters pending instead.
                self.host.runner.which("ovs-ofctl")
            if plan.changes and self.audit:
                attempts[calls[0]] = (plan, self._intend(label, plan.changes, keep=record))
            if plan.changes and self.before_commit is not None:
                rec = attempts[calls[0]][1] if calls[0] in attempts else self.journal.new_record(label, plan.changes)
                self.before_commit(rec)
            writer.write(ctx, plan.changes)
            if plan.changes:
                self.host.checkpoint("before-commit")
            return plan

        # A full garbage collection walks the whole replica (~80 ms at 1000 VIFs) and
        # nothing here makes reference cycles worth collecting mid-transaction.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            txn = self.conn.transact(build, comment=label, wait_for_vswitchd=wait, timeout=15.0)
        except HvnetError as exc:
            # Raises unless an attempt whose reply was lost is found committed: then it is this apply.
            found, found_rec = recovery.lost_commit(self, attempts, exc)
            result = ApplyResult(found, "applied", attempts=len(attempts))
            return self._finish(result, found_rec, wait=wait, verify=verify, keep=record)
        finally:
            if gc_was_enabled:
                gc.enable()
        plan: Plan = txn.value
        rec = attempts[txn.attempts][1] if plan.changes and txn.attempts in attempts else None
        earlier = recovery.latest_unsure(attempts, txn.unsure)
        if not plan.changes and earlier is not None and recovery.settle_live(self, earlier[1]) == "committed":
            # The reply to an earlier attempt was lost (the connection dropped) and re-planning
            # found its changes made: they are this apply's, recorded and audited as such.
            plan, rec = earlier
            plan.warnings.append("the reply to the commit was lost; the changes were found in the database")
        for _, r in attempts.values():
            if r is not rec:
                self.journal.clear_intent(r["id"])
        result = ApplyResult(plan, "applied" if plan.changes else "unchanged", attempts=txn.attempts)
        if txn.vswitchd_lag and plan.changes:
            result.problems.append(txn.vswitchd_lag)
        return self._finish(result, rec, wait=wait, verify=verify, keep=record)

    def _intend(self, label: str, changes: list[Change], *, keep: bool) -> dict[str, Any]:
        """Before a commit: the audit log must be writable, and the intent is on disk."""
        self.journal.check_writable()
        rec = self.journal.new_record(label, changes)
        self.journal.write_intent(rec, keep=keep)
        return rec

    def _finish(
        self, result: ApplyResult, rec: dict[str, Any] | None, *, wait: bool, verify: bool, keep: bool
    ) -> ApplyResult:
        """After the commit: record, meters, verification, audit -- the intent goes last.

        The commit is made: nothing from here on may be reported as "prevented".
        A failure (the database gone while restoring, the disk full) leaves the
        intent for the next run to settle and says the outcome is unknown.
        """
        try:
            return self._after_commit(result, rec, wait=wait, verify=verify, keep=keep)
        except OutcomeUnknown:
            raise
        except HvnetError as exc:
            try:
                if rec is not None:
                    self.journal.mark_committed(rec["id"])
                self.audit_line(result.plan.changes, f"outcome unknown: committed, then {exc.message}")
            except HvnetError:
                pass  # the intent on disk is what the next run settles from
            raise OutcomeUnknown(
                f"the change was committed, then: {exc.message}",
                hint="the next hvnet run on this switch settles it from the journal (hvnet rollback, or any apply)",
            ) from exc

    def _after_commit(
        self, result: ApplyResult, rec: dict[str, Any] | None, *, wait: bool, verify: bool, keep: bool
    ) -> ApplyResult:
        plan = result.plan
        if rec is not None:
            self.host.checkpoint("committed")
            result.record_id = rec["id"]
            if keep:
                self.journal.save_last(rec)  # before anything can fail: rollback must undo this apply now
            self.host.checkpoint("recorded")
        try:
            # Meters live outside OVSDB: with nothing to commit they may still have drifted
            # (ovs-vswitchd restarted); sync compares first and changes only what differs.
            if not plan.changes or any(_touches_meters(c) for c in plan.changes):
                result.openflow = self.sync_openflow(plan.bridges() or None)
        except HvnetError as exc:
            return recovery.meters_failed(self, result, rec, exc, wait=wait, keep=keep)
        if not plan.changes and not any(v["added"] or v["modified"] or v["removed_ofports"] or v["pipeline"]
                                        for v in result.openflow.values()):  # fmt: skip
            if self.audit_unchanged:
                self.audit_line(plan.changes, "unchanged")
            return result
        if plan.changes:
            self.host.checkpoint("meters")
        if self.of is not None and wait and any(c.kind in ("vlan", "mirror") for c in plan.changes):
            self.of.purge_datapath()
        if verify and wait:
            isolated = self._verify(plan, result)
            if isolated and rec is not None:
                # The dead-VLAN writes are part of this apply: rollback puts the VIFs' VLANs back too.
                rec["changes"] += [journal.change_to_json(c) for c in isolated]
                if keep:
                    self.journal.save_last(rec, replaces=False)
        self.host.checkpoint("verified")
        outcome = "applied" if not result.problems else "applied with problems: " + "; ".join(result.problems)
        self.audit_line(plan.changes, outcome, isolated=result.isolated or None)
        self.done(rec)
        return result

    def done(self, rec: dict[str, Any] | None) -> None:
        """The apply is audited: its intent leaves the journal."""
        if rec is not None:
            self.journal.clear_intent(rec["id"])

    # -- settling interrupted applies ------------------------------------------------

    def settle_interrupted(self) -> list[str]:
        """Settle the applies of hvnet processes killed between their commit and their audit line (see recovery)."""
        return recovery.settle_interrupted(self)

    def audit_line(self, changes: list[Change], result: str, **extra: Any) -> None:
        """One audit line for this engine's command (none from an engine that does not audit)."""
        if self.audit:
            self.journal.audit(self.command, changes, result, **{k: v for k, v in extra.items() if v})

    # -- OpenFlow ----------------------------------------------------------------

    def openflow_drift(self) -> bool:
        """Whether hvnet's meters/flows differ from the OVSDB record (``hvnet verify``)."""
        if self.of is None:
            return False
        with self.conn.lock:
            state = read_state(self.conn)
        return self.of.drifted_any(state)

    def sync_openflow(self, bridges: set[str] | None = None) -> dict[str, Any]:
        """Make meters/flows match the OVSDB record on ``bridges`` (all when None)."""
        if self.of is None:
            return {}
        with self.conn.lock:
            state = read_state(self.conn)
        return self.of.sync_bridges(state, bridges)

    # -- verification --------------------------------------------------------------

    def _verify(self, plan: Plan, result: ApplyResult) -> list[Change]:
        """Check what the switch did with ``plan``; returns the dead-VLAN changes made for VIFs it did not take."""
        ports = sorted({c.name for c in plan.changes if c.kind in ("vlan", "ingress", "egress")})
        tunnels = sorted(
            {c.after.tunnel.name for c in plan.changes if c.kind == "mirror" and c.after and c.after.tunnel}
        )
        bad: dict[str, str] = {}
        for attempt in range(VERIFY_ATTEMPTS):
            with self.conn.lock:
                self.conn.idl.run()
                state = self.read(self.conn)
            bad = {}
            for name in ports + tunnels:
                p = state.ports.get(name)
                if p is None:
                    bad[name] = "port disappeared"
                elif p.error:
                    bad[name] = f"interface error: {p.error}"
                elif p.ofport is None or p.ofport < 0:
                    bad[name] = "ovs-vswitchd could not add the port (ofport -1)"
            if not bad:
                break
            if attempt + 1 < VERIFY_ATTEMPTS:
                self.conn.wait_for(lambda: False, VERIFY_INTERVAL_S)
        for name, why in sorted(bad.items()):
            result.problems.append(f"{name}: {why}")
        self._check_enforcement(plan, state, result)
        # Fail closed: a VIF whose VLAN was being set but that the switch did not take goes dead.
        dead = [n for n in bad if n in state.ports and any(c.kind == "vlan" and c.name == n for c in plan.changes)]
        if dead:
            return self._isolate(dead, result, {n: bad[n] for n in dead})
        return []

    def _isolate(self, names: list[str], result: ApplyResult, why: dict[str, str]) -> list[Change]:
        """Move ``names`` to the dead VLAN; the changes written (part of the apply: recorded and audited)."""
        dead_cols = VlanCols.of(DEAD)

        def build(ctx: TxnContext) -> list[Change]:
            fresh = read_state(ctx.conn)
            changes = [
                Change("vlan", fresh.ports[n].bridge, n, fresh.ports[n].vlan, dead_cols, note="isolated: policy failed")
                for n in names
                if n in fresh.ports and fresh.ports[n].vlan != dead_cols
            ]
            writer.write(ctx, changes)
            return changes

        written: list[Change] = self.conn.transact(
            build, comment="hvnet: isolate VIFs whose policy failed", timeout=10.0
        ).value
        result.plan.changes.extend(written)
        for n in names:
            result.isolated[n] = f"{why[n]}; moved to dead VLAN 4095 (isolated) instead of leaving it half-configured"
        return written

    def _check_enforcement(self, plan: Plan, state: State, result: ApplyResult) -> None:
        touched = {(c.name, c.kind) for c in plan.changes if c.kind in ("ingress", "egress")}
        for e in observe_enforcement(self.host.runner, self.of, state, touched):
            result.enforcement.append(e)
            if e.verified is False:
                result.problems.append(e.problem())

    def enforcement(self, ports: set[str] | None = None) -> list[Enforcement]:
        """How the limits on ``ports`` (default: every port that has one) are enforced, as observed now.

        Reads the switch's meters and flows (one ``ovs-ofctl`` per bridge) and
        the interfaces' tc state: seconds for a large host, so callers do it
        on demand or every few seconds, not with every replica change.
        """
        state = self.snapshot()
        names = set(state.ports) if ports is None else ports & set(state.ports)
        touched = {(n, k) for n in names for k in ("ingress", "egress")}
        return observe_enforcement(self.host.runner, self.of, state, touched)


def _touches_meters(c: Change) -> bool:
    if c.kind in ("protocols", "tap"):
        return True
    if c.kind != "ingress":
        return False
    return any(v is not None and v.meter_rate_kbps for v in (c.before, c.after))
