"""Putting changes back, and finding out what a commit that went unanswered did.

Every undo -- ``hvnet rollback``, the automatic rollback of an unconfirmed
apply, a suite restoring its cases, the restore after meters failed -- is the
inverse of changes written earlier, applied only where the row still holds
what the change left there: a row changed since is left alone and reported.
Settling an apply whose process was killed between its commit and its audit
line asks the same question of the database: are the changes in it, all or
none?  Both compare a change with the value the switch has now
(:func:`current_value`); the engine's main line never needs either.
"""

from __future__ import annotations

import logging
from typing import Any, Callable, Protocol

from appliance.core.errors import HvnetError, OutcomeUnknown
from appliance.core.ovsdb import Connection, TxnContext
from appliance.policy.apply import journal, writer
from appliance.policy.apply.read import state as read_state
from appliance.policy.plan.planner import Change, Plan
from appliance.policy.plan.state import State


class PolicyEngine(Protocol):
    """What undoing and settling use of the engine (:class:`~.engine.PolicyEngine`), which imports this module."""

    conn: Connection
    journal: journal.Journal
    command: str
    audit: bool
    lenient: bool

    def read(self, conn: Connection) -> State: ...

    def sync_openflow(self, bridges: set[str] | None = None) -> dict[str, Any]: ...

    def audit_line(self, changes: list[Change], result: str, **extra: Any) -> None: ...

    def done(self, rec: dict[str, Any] | None) -> None: ...


class ApplyResult(Protocol):
    """The part of an apply's result (:class:`~.engine.ApplyResult`) a restore after meters failed updates."""

    plan: Plan
    status: str
    problems: list[str]


log = logging.getLogger("hvnet.policy")


def inverse(changes: list[Change]) -> list[Change]:
    """The changes that undo ``changes``: each inverted, in reverse order (later changes may build on earlier)."""
    return [c.inverse() for c in reversed(changes)]


def current_value(state: State, c: Change) -> Any:
    """The stored value ``c`` is about, read from ``state`` (for guards and drift)."""
    if c.kind in ("vlan", "ingress", "egress"):
        p = state.ports.get(c.name)
        if p is None:
            return _GONE
        return {"vlan": p.vlan, "ingress": p.police, "egress": p.qos}[c.kind]
    if c.kind == "mirror":
        m = state.mirrors.get((c.bridge, c.name))
        return m.cols if m is not None else None
    if c.kind == "protocols":
        b = state.bridges.get(c.name)
        return b.protocols if b is not None else _GONE
    if c.kind in ("sflow", "ipfix"):
        b = state.bridges.get(c.bridge)
        return getattr(b, c.kind) if b is not None else _GONE
    if c.kind == "tap":
        b = state.bridges.get(c.bridge)
        return b.taps.get(c.name) if b is not None else _GONE
    raise ValueError(c.kind)


def settled(state: State, changes: list[Change]) -> str:
    """Whether ``changes`` are in ``state``: all made ("committed"), none ("not committed"), or "unknown".

    One OVSDB transaction is all or nothing, so a mix means the rows changed
    since; so does a value that is neither the one before nor the one after.
    """
    made = {current_value(state, c) == c.after for c in changes}
    if made == {True}:
        return "committed"
    if made == {False} and all(current_value(state, c) == c.before for c in changes):
        return "not committed"
    return "unknown"


class _Gone:
    def __repr__(self) -> str:
        return "(gone)"


_GONE = _Gone()


def guarded(changes: list[Change], left: list[str]) -> Callable[[State], Plan]:
    """Planning for given changes: each only if its row still holds ``before``; ``left`` says which were not."""

    def make_plan(state: State) -> Plan:
        result = Plan()
        left.clear()
        for c in changes:
            current = current_value(state, c)
            if current == c.after:
                continue  # already so (a rollback run twice, or one interrupted and run again)
            if current != c.before:
                left.append(
                    f"{c.target} {c.kind}: left as is, changed since "
                    f"(now {c.describe(current)}, expected {c.describe(c.before)})"
                )
                continue
            result.changes.append(c)
        result.warnings.extend(left)
        return result

    return make_plan


def restore(engine: PolicyEngine, changes: list[Change], wait: bool) -> None:
    """Undo a commit whose meters failed: the OVSDB rows still as it left them go back, then the meters."""
    undo = inverse(changes)

    def build(ctx: TxnContext) -> None:
        state = read_state(ctx.conn)
        writer.write(ctx, [c for c in undo if current_value(state, c) == c.before])

    engine.conn.transact(build, comment="hvnet: restore after failure", wait_for_vswitchd=wait, timeout=15.0)
    try:
        engine.sync_openflow({c.bridge for c in changes})
    except HvnetError as exc:
        log.error("could not bring meters back in line after restoring: %s", exc)


def meters_failed(
    engine: PolicyEngine, result: ApplyResult, rec: dict[str, Any] | None, exc: HvnetError, *, wait: bool, keep: bool
) -> ApplyResult:
    """After the commit the meters could not be brought in line: the agent waits, anyone else restores."""
    plan = result.plan
    if engine.lenient:
        # The agent keeps what it committed (a VLAN must not be undone because
        # ovs-vswitchd is restarting) and brings the meters in line next time.
        result.problems.append(f"meters not installed yet ({exc.message}); will retry")
        engine.audit_line(plan.changes, f"applied; meters pending: {exc.message}")
        engine.done(rec)
        return result
    log.error("OpenFlow meters failed after the OVSDB commit: %s; restoring", exc)
    restore(engine, plan.changes, wait)
    if rec is not None and keep:
        engine.journal.unsave_last(rec["id"])
    engine.audit_line(plan.changes, f"rolled back: meters failed: {exc.message}")
    engine.done(rec)
    result.status = "rolled back"
    result.problems.append(f"meter installation failed ({exc.message}); the OVSDB changes were undone")
    return result


# -- settling a commit whose reply was lost, and applies interrupted after theirs ------------


Attempts = dict[int, tuple[Plan, dict[str, Any]]]  # attempt number -> its plan and its intent record


def latest_unsure(attempts: Attempts, unsure: list[int]) -> tuple[Plan, dict[str, Any]] | None:
    """The latest attempt that may have been committed without its reply arriving."""
    for n in sorted(unsure, reverse=True):
        if n in attempts:
            return attempts[n]
    return None


def lost_commit(engine: PolicyEngine, attempts: Attempts, exc: HvnetError) -> tuple[Plan, dict[str, Any]]:
    """The transaction raised: the attempt whose reply was lost, found committed; raises otherwise.

    Refused or conflicting, no attempt can have been committed: ``exc`` again.
    Found not made: ``exc`` again, audited.  Cannot tell: the outcome is unknown.
    """
    maybe = latest_unsure(attempts, getattr(exc, "unsure", []))
    for _, r in attempts.values():
        if maybe is None or r is not maybe[1]:
            engine.journal.clear_intent(r["id"])
    if maybe is None:
        if attempts:
            last_plan = attempts[max(attempts)][0]
            engine.audit_line(last_plan.changes, f"failed, nothing changed: {exc.message}")
        raise exc  # refused or conflicting: no attempt can have been committed
    plan, rec = maybe
    verdict = settle_live(engine, rec)
    if verdict == "committed":
        plan.warnings.append(f"the commit's reply was lost ({exc.message}); the changes were found in the database")
        return plan, rec
    if verdict == "not committed":
        engine.audit_line(plan.changes, f"failed, nothing changed: {exc.message}")
        engine.journal.clear_intent(rec["id"])
        raise exc
    engine.audit_line(plan.changes, f"outcome unknown: {exc.message}")
    raise OutcomeUnknown(
        f"{exc.message}; whether the change was made is unknown",
        hint="the next hvnet run on this switch settles it from the journal (hvnet rollback, or any apply)",
    ) from exc


def settle_live(engine: PolicyEngine, rec: dict[str, Any]) -> str:
    """Whether ``rec``'s changes are in the database: "committed", "not committed" or "unknown"."""
    conn = engine.conn
    if not conn.wait_for(lambda: conn.is_connected, 3.0):
        return "unknown"
    conn.run_once(wait=0.2)
    with conn.lock:
        state = engine.read(conn)
    return settled(state, journal.record_changes(rec))


def settle_interrupted(engine: PolicyEngine) -> list[str]:
    """Settle the applies of hvnet processes killed between their commit and their audit line.

    For each intent left in the journal: read the database; a change found
    made is audited (and becomes the rollback record if it was to be one,
    and its meters are brought in line); one not made is audited as such;
    one that can no longer be told apart is audited as unknown and its
    record kept, so ``hvnet rollback`` can still undo what matches.
    Returns one line per intent settled.
    """
    said: list[str] = []
    if not engine.audit:
        return said  # an engine that does not audit (a test's set-up) leaves the journal to one that does
    jnl = engine.journal
    for rec in jnl.interrupted():
        changes = journal.record_changes(rec)
        verdict = settle_live(engine, rec)
        if verdict == "unknown" and not engine.conn.is_connected:
            continue  # cannot read the database now: the next run settles it
        who = f"hvnet process {rec.get('pid')} ({rec.get('command')}) was interrupted"
        if verdict == "committed":
            last = jnl.load_last()
            if rec.get("keep") and (last is None or last["id"] != rec["id"]):
                jnl.save_last({k: v for k, v in rec.items() if k not in ("pid", "keep")})
            try:
                engine.sync_openflow({c.bridge for c in changes} or None)
            except HvnetError as exc:
                log.error("meters after an interrupted apply: %s", exc)
            text = f"applied ({who} after its commit; verification did not run)"
        elif verdict == "not committed":
            text = _settle_not_made(jnl, rec, who)
        else:
            if rec.get("keep"):
                jnl.save_last({k: v for k, v in rec.items() if k not in ("pid", "keep")})
            text = f"outcome unknown ({who}; the switch has changed since)"
        # The line is the interrupted command's (its change), saying who found out.
        jnl.audit(str(rec.get("command")), changes, text, record_id=rec["id"], settled_by=engine.command)
        jnl.clear_intent(rec["id"])
        said.append(f"{rec['id']}: {text}")
        log.warning("settled an interrupted apply: %s", said[-1])
    return said


def _settle_not_made(jnl: journal.Journal, rec: dict[str, Any], who: str) -> str:
    """An intent whose change the switch does not have: rollback goes back to the apply before it.

    When the switch had acknowledged the commit, the host lost the change since (it crashed before
    its database reached the disk, or someone changed it back): said so, not "before its commit"."""
    jnl.unsave_last(rec["id"])
    if rec.get("committed"):
        return (f"not applied (hvnet process {rec.get('pid')} ({rec.get('command')}) committed it, "
                "but the switch no longer has the change: the host lost it or it was changed back)")  # fmt: skip
    return f"not applied ({who} before its commit)"
