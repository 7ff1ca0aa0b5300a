"""Policy verbs: plan, apply (optionally confirm-within), commit, rollback, verify, export,
and the imperative edits (VIF VLAN, QoS, mirrors, a bridge's sFlow and IPFIX) the CLI's ``vif|qos|mirror`` and the
console's dialogs make.

Modelled on nmstate's netapplier: :func:`apply` with ``confirm_within=N``
records the change as pending and starts a watcher that rolls it back after
N seconds unless :func:`commit` runs first; :func:`rollback` undoes the
pending change, else the last apply.  Both front ends call these, so an
unconfirmed change made in the console is committed by ``hvnet commit`` and
the other way round.

Every verb takes an open :class:`~appliance.policy.PolicyEngine`, not a
connection and a Host: the engine is what a front end keeps for its whole
life (the console holds one on its long-lived connection; the CLI one per
command), it carries the Host, the journal and the resolved VM names, and
building one per verb would look the names up again each time.  A front end
gets its engine from :func:`open_engine` (the CLI, the console, the agent
alike), never builds one.
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Callable, Container
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any, Optional

from appliance.core.errors import ConflictError, HvnetError, UsageError
from appliance.core.ovsdb import Connection
from appliance.policy import REMOVE, ApplyResult, MirrorRule, Plan, Policy, PolicyEngine, Selector, VifRule, require_one
from appliance.policy.apply import journal, tcpolice
from appliance.policy.apply.engine import AGENT_LOCK, Enforcement, change_json
from appliance.policy.apply.orphans import Collector as OrphanCollector
from appliance.policy.apply.read import COLUMNS
from appliance.policy.plan import export as exp
from appliance.policy.plan import intents, reach
from appliance.policy.plan.document import DEFAULT_POLICY
from appliance.policy.plan.document import load as load_policy
from appliance.policy.plan.fields import FieldError
from appliance.policy.plan.intents import mirror_rule, qos_rule
from appliance.policy.plan.model import SamplingRule
from appliance.policy.plan.planner import describe, describe_mirror
from appliance.policy.plan.state import State
from appliance.services import deadman
from appliance.switch import sampling
from appliance.switch.host import Host

# What front ends show and build, named here so that they depend on this module
# and not on the engine's inside.
__all__ = [
    "AGENT_LOCK",
    "DEFAULT_POLICY",
    "ApplyResult",
    "Enforcement",
    "FieldError",
    "MirrorRule",
    "OrphanCollector",
    "Plan",
    "Policy",
    "PolicyEngine",
    "SamplingRule",
    "State",
    "VifRule",
    "change_json",
    "describe_mirror",
    "load_policy",
    "mirror_rule",
    "open_engine",
    "qos_rule",
]

WATCHER_LOG = "rollback-watcher.log"
HOST_GRACE_S = 3.0  # past a host timer's deadline before the console acts: the host's own undo goes first
OVERDUE_GRACE_S = 2.0  # past the deadline, with its watcher gone (a live watcher, even one retrying, is left alone)


# -- the engine a front end works with -------------------------------------------


def connect(host: Host, *, timeout: float = 5.0, statistics: bool = True) -> Connection:
    """An OVSDB connection to ``host``'s switch holding the columns the policy engine reads.

    ``statistics=False`` leaves out the counters, which change every few
    seconds: a process that only enforces the policy (the agent) is not
    woken by every one of them.
    """
    columns = COLUMNS if statistics else {t: [c for c in cols if c != "statistics"] for t, cols in COLUMNS.items()}
    return host.connect(columns, timeout=timeout)


def open_engine(
    host: Host,
    command: str,
    *,
    conn: Optional[Connection] = None,
    timeout: float = 5.0,
    policing: Optional[str] = None,
    pool: bool = False,
    enforcing: bool = False,
) -> PolicyEngine:
    """The policy engine every verb of this module takes, on ``host``'s switch; ``command`` is what
    its audit lines and records say made the change (the command line, ``hvnet tui``).

    Without ``conn`` the engine opens its own connection and closes it when
    used as a context manager (``with open_engine(host, cmd) as eng:``: the
    CLI's one engine per command).  With ``conn`` it works on a connection
    the front end keeps for its whole life (the console's, the agent's),
    which the front end closes itself: such an engine is not used in a
    ``with``.

    ``policing`` forces the ingress mechanism (``--policing``); ``pool``: this
    host is one of several given one policy (see ``PlanOptions.pool``);
    ``enforcing``: the agent's mode -- a VIF that cannot take its rule now
    does not stop the others, and a pass that changes nothing is not audited.
    """
    if conn is None:
        conn = connect(host, timeout=timeout)
    engine = PolicyEngine(conn, host, command=command)
    engine.pool = pool
    if policing:
        engine.force_policing = policing
    if enforcing:
        engine.lenient = True
        engine.audit_unchanged = False  # a pass that found nothing to do is not an event worth a line
    return engine


def vswitchd_pid(engine: PolicyEngine) -> Optional[int]:
    """The pid of the ovs-vswitchd the engine's OpenFlow meters live in (None: no OpenFlow side, or none
    running): a new pid means it restarted and forgot them."""
    return engine.of.vswitchd_pid() if engine.of is not None else None


def tc_police(host: Host) -> tcpolice.PoliceAnswer:
    """Whether ``host``'s kernel enforces tc's police action (probed once per boot, then cached), and
    whether that answer is the kernel's own (cached) or a "no" for now because the probe could not run."""
    return tcpolice.tc_police(host.runner, host.paths.cache_dir)


# -- declarative ----------------------------------------------------------------


def plan(engine: PolicyEngine, policy: Policy) -> Plan:
    """What applying ``policy`` would change, before -> after; touches nothing."""
    return engine.plan(policy)


def apply(
    engine: PolicyEngine,
    policy: Policy,
    *,
    dry_run: bool = False,
    verify: bool = True,
    wait: bool = True,
    confirm_within: Optional[float] = None,
    guard: Optional[Callable[[State], None]] = None,
    record: bool = True,
) -> ApplyResult:
    """Make the switch match ``policy`` in one transaction (verified, audited, recorded for rollback).

    ``record=False`` (the agent's passes, never with ``confirm_within``):
    audited, but not made what :func:`rollback` undoes -- that stays the
    operator's last apply.

    ``confirm_within=N``: the change stays only if :func:`commit` runs within
    N seconds; otherwise a watcher process rolls it back (a lost console or
    SSH session cannot leave a half-tested change behind).  One such change is
    pending at a time, so a later one cannot make the first impossible to undo.
    On a host over SSH the undo is also armed on the host itself, before the
    commit (:mod:`appliance.services.deadman`): a change that cuts SSH is
    still undone in time.
    """
    if confirm_within is None or dry_run:
        result = engine.apply(policy, dry_run=dry_run, verify=verify, wait=wait, record=record, guard=guard)
        warn_unrouted(engine, result)
        return result
    settle_overdue(engine)
    slot = f"reserved-{os.getpid()}-{time.monotonic_ns()}"
    try:
        engine.journal.reserve_pending(slot)  # atomic: of two such applies at once, one goes ahead
    except HvnetError as exc:
        raise UsageError(exc.message, hint=exc.hint) from None
    arming = deadman.Arming(engine, confirm_within, _pend) if engine.host.label is not None else None
    engine.before_commit = arming
    try:
        try:
            result = engine.apply(policy, verify=verify, wait=wait, guard=guard)
        except HvnetError as exc:
            if arming is not None:
                arming.failed(exc)
            raise
        finally:
            engine.before_commit = None
        timer = arming.timer if arming is not None else None
        if result.status == "applied" and result.record_id:
            _arm_watcher(engine, result, confirm_within, timer)  # the pending record replaces the reservation
            if timer is not None and time.time() >= timer.deadline:
                _late_apply(engine, result, timer)
        elif arming is not None:
            arming.disarm()  # nothing of it stayed (the meters failed and the change was undone)
    finally:
        engine.journal.release_pending(slot)  # a no-op once replaced
    warn_unrouted(engine, result)
    return result


def warn_unrouted(engine: PolicyEngine, result: ApplyResult) -> None:
    """Warn of each new GRE/ERSPAN destination the host has no route to (see :mod:`..policy.plan.reach`):
    its copies would be dropped there without a word.  A lookup that cannot run says nothing."""
    outs = reach.new_destinations(result.plan.changes)
    if not outs:
        return
    host = engine.host
    bridges = engine.snapshot().bridges
    for out in outs:
        datapath = bridges[out.bridge].datapath_type if out.bridge in bridges else ""
        argv = reach.lookup_argv(datapath, out.remote_ip)
        if reach.userspace(datapath):
            argv = ["ovs-appctl", "-t", host.daemon_ctl("ovs-vswitchd") or "ovs-vswitchd", *argv]
        try:
            res = host.runner.run(argv, check=False, env=host.ovs_env, timeout=10)
        except HvnetError:
            continue
        if reach.routed(datapath, res.returncode, res.stdout, res.stderr) is False:
            result.plan.warnings.append(reach.warning(out, datapath, host.label or "this host"))


@dataclass(frozen=True)
class Pending:
    """An applied change waiting for :func:`commit` (or for its automatic rollback)."""

    id: str
    deadline: float  # time.time() when it rolls back
    changes: int
    watcher_pid: Optional[int] = None

    @property
    def seconds_left(self) -> float:
        return max(0.0, self.deadline - time.time())

    @classmethod
    def of(cls, record: dict[str, Any]) -> Pending:
        return cls(record["id"], float(record["deadline"]), len(record["changes"]), record.get("watcher_pid"))


def pending(engine: PolicyEngine) -> Optional[Pending]:
    """The change waiting to be committed on this switch, if any (whichever front end made it)."""
    record = engine.journal.load_pending()
    return Pending.of(record) if record else None


def outcome(engine: PolicyEngine, waiting: Pending, grace: float = 15.0) -> Optional[str]:
    """What became of ``waiting``: None while undecided, ``"rolled back"`` or ``"kept"``.

    The watcher takes the pending record first and marks the apply rolled back
    only after undoing it, so "rolled back" is said once the switch has it
    back.  A record gone before its deadline was committed (here or by
    ``hvnet commit``); one gone after it and not marked within ``grace``
    seconds was committed as the deadline came.
    """
    done = engine.journal.load_rolled_back()
    if done is not None and done["id"] == waiting.id:
        return "rolled back"
    now = pending(engine)
    if now is not None and now.id == waiting.id:
        return None
    if waiting.seconds_left > 0 or time.time() > waiting.deadline + grace:
        return "kept"
    return None


def _arm_watcher(
    engine: PolicyEngine, result: ApplyResult, timeout: float, timer: Optional[deadman.Timer] = None
) -> None:
    """Record the apply as pending, say so in its warnings (see :func:`_pend`)."""
    record = engine.journal.load_last()
    assert record is not None and record["id"] == result.record_id
    deadline = _pend(engine, record, timer, timeout)
    result.plan.warnings.append(
        f"not committed: rolls back automatically at {datetime.fromtimestamp(deadline):%H:%M:%S} "
        f"({timeout:g} s) unless 'hvnet commit' runs first"
    )
    if timer is not None:
        result.plan.warnings.append(deadman.coverage(timer))


def _pend(engine: PolicyEngine, record: dict[str, Any], timer: Optional[deadman.Timer], timeout: float = 0.0) -> float:
    """Record the apply as pending, then start the process that rolls it back at the deadline; the deadline.

    The watcher is ``python -m appliance ... rollback --pending ID --at T``, a
    process of its own on this machine (also for a host over SSH, which it
    reaches with ``--host`` as this process did) so it outlives the front end.
    It finds the package as this process did (the installed launcher hands
    ``PYTHONPATH`` down), reaches the database with the same target and SSL
    files, and reads the same journal.  A host timer's deadline is the
    host's: a commit is in time exactly when it disarms the timer there.
    """
    deadline = timer.deadline if timer is not None else time.time() + timeout
    if timer is not None:
        record = {**record, "host_timer": timer.to_json()}
    engine.journal.save_pending(record, deadline, None)
    host = engine.host
    log_path = engine.journal.state_dir / WATCHER_LOG
    env = {"HVNET_STATE_DIR": str(host.paths.state_dir), "HVNET_AUDIT_LOG": str(host.paths.audit_log)}
    if host.label is not None:  # the run directory may have come from an inventory entry the label does not name
        env["HVNET_REMOTE_OVS_RUNDIR"] = str(host.ovs_rundir)
    with open(log_path, "a") as log_file:
        # on this machine, whatever the host: the watcher reaches a remote host over SSH as this process does
        watcher = host.local_runner.popen(
            [sys.executable, "-m", "appliance", *_target_options(engine), "rollback", "--pending", record["id"],
             "--at", f"{deadline:.3f}"],
            stdin=subprocess.DEVNULL, stdout=log_file, stderr=log_file, env=env, start_new_session=True,
        )  # fmt: skip
    engine.journal.save_pending(record, deadline, watcher.pid)
    return deadline


def _late_apply(engine: PolicyEngine, result: ApplyResult, timer: deadman.Timer) -> None:
    """An apply that ended after its own deadline (its SSH cut by the change until the host undid it): say
    what the host did now, rather than promise a rollback that has happened."""
    wait_until(timer.deadline + 1.0)
    record = engine.journal.load_pending()
    if record is None or record["id"] != result.record_id:
        return
    settled = deadman.settle(engine, record, timer, force=False)
    if settled is not None:
        result.status = "rolled back"
        result.problems.append(f"{deadman.late(settled[0])}, before this apply ended")


def _target_options(engine: PolicyEngine) -> list[str]:
    """The global options that name this engine's database (and its SSL files) to a child hvnet."""
    if engine.host.label is not None:  # a host over SSH: the watcher opens its own connection to it
        return ["--host", engine.host.label]
    options = ["--db", engine.remote]
    ssl = engine.host.target.ssl
    if ssl is not None:
        options += ["--ssl-key", ssl.private_key, "--ssl-cert", ssl.certificate, "--ssl-ca", ssl.ca_cert]
    return options


def commit(engine: PolicyEngine) -> Optional[Pending]:
    """Keep the pending change and stop its watcher; the committed change, None when none was pending.

    Too late (the deadline passed, or the watcher already took the record) is
    an error: the change is being, or has been, rolled back.
    """
    late = settle_overdue(engine)
    if late is not None:
        raise HvnetError(f"too late: {deadman.late(late)}")
    record = engine.journal.load_pending()
    if record is None:
        gone = _rolled_back_by_host(engine)
        if gone is not None:  # learned already (by the watcher, or the apply itself): still too late to keep
            raise HvnetError(f"too late: {deadman.late(gone)}")
        return None
    timer = deadman.Timer.of(record)
    said = deadman.claim(engine.host, timer, "committed") if timer is not None else "gone"
    if said == "fired":
        settled = deadman.settle(engine, record, timer, force=True)
        raise HvnetError(f"too late: {deadman.late(settled[0]) if settled else 'the host is rolling it back now'}")
    if said in ("taken", "superseded"):
        raise HvnetError("too late: the pending change is being rolled back by hvnet")
    if (said == "gone" and journal.seconds_left(record) <= 0) or not engine.journal.clear_pending(record["id"]):
        raise HvnetError("too late: the pending change has already been rolled back (or is being)")
    _stop_watcher(record)
    if timer is not None:
        deadman.remove(engine.host, timer)
    engine.journal.audit(engine.command, [], f"committed {record['id']}")
    return Pending.of(record)


def _rolled_back_by_host(engine: PolicyEngine) -> Optional[dict[str, Any]]:
    """The last --no-commit apply, when its host rolled it back and nothing was applied since."""
    done = engine.journal.load_rolled_back()
    if done is None or done.get("rolled_back_by") != "host":
        return None
    last = engine.journal.load_last()
    return done if last is None or str(last.get("time")) <= str(done.get("time")) else None


def settle_overdue(engine: PolicyEngine, grace: float = OVERDUE_GRACE_S) -> Optional[dict[str, Any]]:
    """Keep the promise of a pending change whose watcher is gone: roll it back now.

    A pending record still there ``grace`` seconds after its deadline, with
    no watcher process alive, was never rolled back (the watcher was killed,
    the host rebooted).  Left alone, ``hvnet commit`` would call it "already
    rolled back" while the change stays.  Returns the record rolled back, or
    None.
    """
    record = engine.journal.load_pending()
    if record is None:
        return None
    timer = deadman.Timer.of(record)
    if timer is not None and time.time() >= timer.deadline + HOST_GRACE_S:
        settled = deadman.settle(engine, record, timer, force=not _watcher_alive(record))
        if settled is not None or deadman.probe(engine.host, timer).token != "gone":
            return settled[0] if settled else None
    if journal.seconds_left(record) > -grace or _watcher_alive(record):
        return None
    label = f"hvnet automatic rollback of {record['id']} (late: watcher gone)"
    engine.undo(journal.record_changes(record), label=label, record=False)
    engine.journal.mark_rolled_back(record)
    engine.journal.clear_pending(record["id"])
    return record


def _watcher_alive(record: dict[str, Any]) -> bool:
    pid = record.get("watcher_pid")
    if not pid:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return False
    return record["id"].encode() in cmdline


def _stop_watcher(record: dict[str, Any]) -> None:
    """Stop the watcher hvnet started for ``record`` (checked by its command line: never another process)."""
    pid = record.get("watcher_pid")
    if not pid:
        return
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
    except OSError:
        return
    if record["id"].encode() in cmdline:
        try:
            os.kill(int(pid), 15)
        except ProcessLookupError:
            pass


def rollback(
    engine: PolicyEngine, *, pending_id: Optional[str] = None, at: Optional[float] = None
) -> Optional[ApplyResult]:
    """Undo the pending change, else the last apply.

    With ``pending_id`` (the watcher): wait until ``at``, then undo that
    pending change unless it was committed (or rolled back by hand) in time --
    then None.
    """
    if pending_id is not None:
        return _rollback_when_due(engine, pending_id, at or time.time())
    engine.settle_interrupted()  # an apply killed after its commit becomes the record to undo
    late = settle_overdue(engine)
    if late is not None:
        raise HvnetError(deadman.late(late))
    record = engine.journal.load_pending()
    if record is not None:
        timer = deadman.Timer.of(record)
        said = deadman.claim(engine.host, timer, "taken") if timer is not None else "gone"
        if said == "fired":
            settled = deadman.settle(engine, record, timer, force=True)
            if settled is None:
                raise HvnetError("the host is rolling the pending change back now", hint="run this again shortly")
            return settled[1]
        if said not in ("claimed", "gone") or not engine.journal.clear_pending(record["id"]):
            raise HvnetError("the pending change is being rolled back already")
        _stop_watcher(record)
        if timer is not None:
            deadman.remove(engine.host, timer)
    else:
        record = engine.journal.load_last()
        if record is None:
            raise HvnetError("nothing to roll back: no apply is recorded for this switch")
    result = engine.undo(journal.record_changes(record), label=f"hvnet rollback {record['id']}", record=False)
    engine.journal.mark_rolled_back(record)
    return result


def wait_until(deadline: float) -> None:
    """Sleep until ``time.time()`` reaches ``deadline`` (the watcher does this before it connects)."""
    while time.time() < deadline:
        time.sleep(min(0.2, max(0.0, deadline - time.time())))


def _rollback_when_due(engine: PolicyEngine, pending_id: str, deadline: float) -> Optional[ApplyResult]:
    wait_until(deadline)
    record = engine.journal.load_pending()
    if record is None or record["id"] != pending_id:
        return None  # committed (or rolled back by hand) in time
    timer = deadman.Timer.of(record)
    if timer is not None:  # the host's own undo goes first; this one learns what it did and finishes the job
        wait_until(timer.deadline + HOST_GRACE_S)
        settled = deadman.settle(engine, record, timer, force=True)
        return settled[1] if settled else None
    engine.command = f"hvnet (automatic rollback of {pending_id}: not committed in time)"
    result = engine.undo(journal.record_changes(record), label="hvnet automatic rollback", record=False)
    # Only now is the record dropped: a watcher killed during the undo leaves it overdue,
    # and the next hvnet run (settle_overdue) finishes the job.
    engine.journal.mark_rolled_back(record)
    engine.journal.clear_pending(pending_id)
    return result


@dataclass
class Drift:
    """How the switch differs from a policy (``hvnet verify``)."""

    drift: list[dict[str, str]] = field(default_factory=list)  # target, setting, expected, found
    warnings: list[str] = field(default_factory=list)
    matched: dict[str, list[str]] = field(default_factory=dict)  # rule field -> ports (as Plan.matched)

    @property
    def in_sync(self) -> bool:
        return not self.drift


def verify(engine: PolicyEngine, policy: Policy) -> Drift:
    """Every setting that differs from ``policy``, and whether hvnet's OpenFlow meters drifted."""
    p = engine.plan(policy)
    drift = [
        {"target": c.target, "setting": c.kind, "expected": c.describe(c.after), "found": c.describe(c.before)}
        for c in p.changes
    ]
    if engine.openflow_drift():
        drift.append({"target": "OpenFlow", "setting": "meters", "expected": "as recorded in OVSDB", "found": "differ"})
    return Drift(drift, p.warnings, p.matched)


@dataclass(frozen=True)
class Exported:
    """The switch's VIF and mirror settings as a policy: the document, its YAML, what it covers."""

    document: dict[str, Any]
    yaml: str
    vifs: int
    mirrors: int


def export(engine: PolicyEngine, by: str = "mac") -> Exported:
    """The current settings as a policy that round-trips (VIFs selected by VM MAC or by port)."""
    state = engine.snapshot()
    header = f"# hvnet policy exported {datetime.now():%Y-%m-%d %H:%M:%S} from {engine.remote}\n"
    return Exported(
        exp.to_policy(state, by=by), exp.to_yaml(state, by=by, header=header), len(state.vifs()), len(state.mirrors)
    )


# -- imperative: VIFs --------------------------------------------------------------


def vlan_rule(engine: PolicyEngine, vif: str, *, mode: Optional[str], tag: Any, trunks: Any) -> VifRule:
    """The rule setting ``vif``'s VLAN (port, ``vm:NAME`` or ``mac:MAC``): unset fields keep their value.

    Raises :class:`~appliance.policy.plan.fields.FieldError` naming ``mode``, ``tag``
    or ``trunks``, for the front end to point at its own field.
    """
    state = engine.snapshot()
    port = require_one(state, vif, "VIF")
    return VifRule(
        Selector("port", port), vlan=intents.vlan_change(state.ports[port].vlan.effective(), mode, tag, trunks)
    )


def edit_vif(
    engine: PolicyEngine, rule: VifRule, *, dry_run: bool = False, confirm_within: Optional[float] = None
) -> ApplyResult:
    """Apply one VIF's rule (VLAN, ingress, egress): one transaction, like a one-rule policy file."""
    return apply(engine, Policy(vifs=[rule]), dry_run=dry_run, confirm_within=confirm_within)


def set_qos(
    engine: PolicyEngine, vif: str, rule: VifRule, *, dry_run: bool = False, confirm_within: Optional[float] = None
) -> ApplyResult:
    """Apply ``rule``'s ingress/egress limits (from :func:`intents.qos_rule`) to ``vif``."""
    rule.selector = Selector("port", require_one(engine.snapshot(), vif, "VIF"))
    return edit_vif(engine, rule, dry_run=dry_run, confirm_within=confirm_within)


def clear_qos(
    engine: PolicyEngine, vif: str, *, dry_run: bool = False, confirm_within: Optional[float] = None
) -> ApplyResult:
    """Remove ``vif``'s ingress policing and egress shaping."""
    port = require_one(engine.snapshot(), vif, "VIF")
    rule = VifRule(Selector("port", port), ingress=REMOVE, egress=REMOVE)
    return edit_vif(engine, rule, dry_run=dry_run, confirm_within=confirm_within)


# -- imperative: mirrors -------------------------------------------------------------


@dataclass(frozen=True)
class Origin:
    """Where an imperative mirror intent came from, so refusals point at what the operator used."""

    source: str = "(command line)"  # the policy's source in planner messages
    bridge_field: str = "--bridge"  # what named the bridge
    delete_hint: str = "hvnet mirror del it first"


COMMAND_LINE = Origin()


def mirror_taken(mirrors: Container[tuple[str, str]], bridge: str, name: str) -> Optional[str]:
    """Why ``name`` cannot be added on ``bridge`` (it exists), or None."""
    return f"mirror {name} already exists on {bridge}" if (bridge, name) in mirrors else None


def find_mirror(state: State, name: str, bridge: Optional[str] = None) -> str:
    """The bridge of the one mirror called ``name`` (on ``bridge`` when given); refuses none or several."""
    found = [br for (br, n) in state.mirrors if n == name and (not bridge or br == bridge)]
    if not found:
        raise UsageError(f"no mirror named {name}" + (f" on {bridge}" if bridge else ""))
    if len(found) > 1:
        raise UsageError(f"mirror {name} exists on {', '.join(found)}", hint="give --bridge")
    return found[0]


def list_mirrors(engine: PolicyEngine) -> list[dict[str, Any]]:
    """Every mirror on the switch, by bridge and name: whose it is (``hvnet`` or ``other``), what it selects
    and where it sends (as the plans describe it), and the packets and bytes it sent (None: not counted)."""
    out = []
    for (br, name), m in sorted(engine.snapshot().mirrors.items()):
        stats = m.statistics
        out.append({
            "bridge": br,
            "name": name,
            "owner": "hvnet" if m.cols.owned else "other",
            "config": describe("mirror", m.cols),
            "tx_packets": stats.get("tx_packets"),
            "tx_bytes": stats.get("tx_bytes"),
        })  # fmt: skip
    return out


def _add_policy(engine: PolicyEngine, rule: MirrorRule, origin: Origin) -> Policy:
    """The one-mirror policy of an add, after refusing a name that exists now (re-read, not remembered)."""
    taken = mirror_taken(engine.snapshot().mirrors, rule.bridge, rule.name)
    if taken:
        raise UsageError(taken, hint=origin.delete_hint)
    return Policy(source=origin.source, mirrors=[rule], bridges={rule.bridge: (origin.bridge_field,)})


def plan_mirror_add(engine: PolicyEngine, rule: MirrorRule, origin: Origin = COMMAND_LINE) -> Plan:
    """What adding the mirror would change (refused when the name exists)."""
    return engine.plan(_add_policy(engine, rule, origin))


def add_mirror(
    engine: PolicyEngine,
    rule: MirrorRule,
    origin: Origin = COMMAND_LINE,
    *,
    dry_run: bool = False,
    confirm_within: Optional[float] = None,
    may_exist: bool = False,
) -> ApplyResult:
    """Add the mirror ``rule`` (from :func:`intents.mirror_rule`); an existing name is refused.

    Refused before the transaction (a clear error without a commit attempt)
    and again inside it, against the state the commit is built on: of two
    adds of one name at once, the second re-plans and is refused.

    ``may_exist`` (ovs-vsctl's ``--may-exist``): a mirror of that name with
    these very settings is success with nothing changed, so a script can say
    "this mirror exists" and run twice; one with other settings is still
    refused, naming the differences -- silently keeping the old settings would
    report success for a mirror that is not the one asked for.
    """

    def still_free(state: State) -> None:
        taken = mirror_taken(state.mirrors, rule.bridge, rule.name)
        if taken and may_exist:  # it was free a moment ago: someone else's add won the race
            raise ConflictError(f"{taken}: added by a concurrent change; nothing was changed",
                                hint="run the command again to compare its settings")  # fmt: skip
        if taken:
            raise UsageError(taken, hint=origin.delete_hint)

    if may_exist and mirror_taken(engine.snapshot().mirrors, rule.bridge, rule.name):
        return _existing_mirror(engine, rule, origin)
    policy = _add_policy(engine, rule, origin)
    return apply(engine, policy, dry_run=dry_run, confirm_within=confirm_within, guard=still_free)


def _existing_mirror(engine: PolicyEngine, rule: MirrorRule, origin: Origin) -> ApplyResult:
    """``--may-exist`` on a mirror that exists: nothing to do when it is as asked, refused when it differs."""
    policy = Policy(source=origin.source, mirrors=[rule], bridges={rule.bridge: (origin.bridge_field,)})
    plan = engine.plan(policy)
    if plan.changes:
        differs = "; ".join(f"{c.kind} is {c.describe(c.before)}, not {c.describe(c.after)}" for c in plan.changes)
        raise UsageError(
            f"mirror {rule.name} already exists on {rule.bridge} with other settings ({differs}); nothing was changed",
            hint=f"--may-exist keeps an identical mirror; to replace this one, {origin.delete_hint}",
        )
    note = f"mirror {rule.name} already exists on {rule.bridge} with these settings (may exist): nothing changed"
    return ApplyResult(Plan(warnings=[*plan.warnings, note]), "unchanged")


def delete_mirror(
    engine: PolicyEngine,
    name: str,
    bridge: Optional[str] = None,
    origin: Origin = COMMAND_LINE,
    *,
    dry_run: bool = False,
    confirm_within: Optional[float] = None,
    if_exists: bool = False,
) -> ApplyResult:
    """Delete the mirror ``name`` (and the tunnel port hvnet made for it); refused when there is none.

    ``if_exists`` (ovs-vsctl's ``--if-exists``): no such mirror is success with nothing changed.
    """
    state = engine.snapshot()
    if if_exists and not any(n == name and (not bridge or br == bridge) for br, n in state.mirrors):
        where = f" on {bridge}" if bridge else ""
        return ApplyResult(Plan(warnings=[f"no mirror named {name}{where} (if exists): nothing deleted"]), "unchanged")
    found = find_mirror(state, name, bridge)
    policy = Policy(source=origin.source, mirrors=[MirrorRule(found, name, remove=True)])
    return apply(engine, policy, dry_run=dry_run, confirm_within=confirm_within)


# -- imperative: sFlow and IPFIX ---------------------------------------------------------


def sampling_rule(bridge: str, kind: str, values: dict[str, Any]) -> SamplingRule:
    """The rule setting ``bridge``'s sFlow or IPFIX to ``values`` (the policy file's keys).

    Raises :class:`~appliance.switch.sampling.SamplingFieldError` naming every bad
    field, for the front end to point at its own flags or form fields.
    """
    return SamplingRule(bridge, kind, sampling.from_fields(kind, values), (kind,))


def set_sampling(
    engine: PolicyEngine,
    rule: SamplingRule,
    *,
    bridge_field: str = "BRIDGE",
    dry_run: bool = False,
    confirm_within: Optional[float] = None,
) -> ApplyResult:
    """Apply one bridge's sFlow/IPFIX rule (set, or REMOVE): one transaction, like a policy file.

    A bridge that does not exist is refused by the planner, naming the ones that do.
    """
    policy = Policy(sampling=[rule], bridges={rule.bridge: (bridge_field,)})
    return apply(engine, policy, dry_run=dry_run, confirm_within=confirm_within)


def clear_sampling(
    engine: PolicyEngine,
    bridge: str,
    kind: str,
    *,
    dry_run: bool = False,
    confirm_within: Optional[float] = None,
) -> ApplyResult:
    """Take ``bridge``'s sFlow or IPFIX away (nothing to do when it has none)."""
    rule = SamplingRule(bridge, kind, REMOVE, (kind,))
    return set_sampling(engine, rule, dry_run=dry_run, confirm_within=confirm_within)
