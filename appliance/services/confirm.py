"""An apply that stays only if confirmed: the pending change, its watcher, commit and rollback.

Modelled on nmstate's netapplier: :func:`appliance.services.policy.apply`
with ``confirm_within=N`` records the change as pending here (:func:`pend`)
and starts a watcher that rolls it back after N seconds unless
:func:`commit` runs first; :func:`rollback` undoes the pending change, else
the last apply.  Both front ends call these, so an unconfirmed change made in
the console is committed by ``hvnet commit`` and the other way round.  On a
host over SSH the host arms its own undo as well (:mod:`.deadman`).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Optional

from appliance.core.errors import HvnetError
from appliance.policy import ApplyResult, PolicyEngine
from appliance.policy.apply import journal
from appliance.services import deadman

WATCHER_LOG = "rollback-watcher.log"
HOST_GRACE_S = 3.0  # past a host timer's deadline before the console acts: the host's own undo goes first
OVERDUE_GRACE_S = 2.0  # past the deadline, with its watcher gone (a live watcher, even one retrying, is left alone)


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


def arm_watcher(
    engine: PolicyEngine, result: ApplyResult, timeout: float, timer: Optional[deadman.Timer] = None
) -> None:
    """Record the apply as pending, say so in its warnings (see :func:`pend`)."""
    record = engine.journal.load_last()
    assert record is not None and record["id"] == result.record_id
    deadline = pend(engine, record, timer, timeout)
    result.plan.warnings.append(
        f"not committed: rolls back automatically at {datetime.fromtimestamp(deadline):%H:%M:%S} "
        f"({timeout:g} s) unless 'hvnet commit' runs first"
    )
    if timer is not None:
        result.plan.warnings.append(deadman.coverage(timer))


def pend(engine: PolicyEngine, record: dict[str, Any], timer: Optional[deadman.Timer], timeout: float = 0.0) -> float:
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


def late_apply(engine: PolicyEngine, result: ApplyResult, timer: deadman.Timer) -> None:
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
