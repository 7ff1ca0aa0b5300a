"""The dead-man switch of a ``--no-commit`` apply on a hypervisor reached over SSH: armed on the host.

A change that cuts the management network (a tag on the port that carries
SSH, an uplink policed to nothing) also cuts the console's way to undo it:
neither its watcher nor the next hvnet run can reach the host.  So before
the apply is committed, hvnet arms the undo *on the host*, agentless:

* a private directory (0700) in hvnet's state directory on the host holds
  the undo as ``ovsdb-client transact`` arguments (planned by
  :mod:`appliance.policy.plan.hostundo`: rows by name, guarded by ``wait`` on
  their post-change values) and a token file, ``armed``;
* a detached shell (:data:`TIMER`, started with ``setsid``, its input and
  output away from the SSH channel, so the session's end does not end it)
  sleeps until the deadline, then claims the token by renaming it to
  ``fired`` -- a rename is atomic -- and only if it won runs the undo and
  records ``ovsdb-client``'s answer and exit status beside it;
* ``hvnet commit`` disarms it by renaming the token to ``committed``: of
  the timer and the commit exactly one wins, and no process is killed by a
  pid that may have been reused.

The console learns what the host did at its next contact (commit, rollback,
the watcher, any apply): :func:`probe` reads the directory in one round
trip.  What the host's undo leaves out -- egress QoS, mirrors, sFlow/IPFIX,
TAPs, and OpenFlow (meters, TAP flows), which is not in OVSDB -- hvnet puts
back then, the rows the host restored being "already so".

Tools used on the host: sh, mkdir, cat, mv, rm, sleep, setsid, ovsdb-client.
"""

from __future__ import annotations

import json
import math
import re
import secrets
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from datetime import datetime
from typing import Any, Optional

from appliance.core.errors import HvnetError, OutcomeUnknown
from appliance.core.ssh import HostUnreachable
from appliance.policy import ApplyResult, PolicyEngine
from appliance.policy.apply import journal
from appliance.policy.plan import hostundo
from appliance.policy.plan.planner import Change
from appliance.switch.host import Host

SUBDIR = "no-commit"  # under hvnet's state directory path, on the host
_TOKEN = re.compile(r"^[0-9a-f]{16}$")
MISSING_TOOL = 16
EXISTS = 17

# $1 the timer's directory, $2 seconds to wait, $3 the host's OVSDB: claim the token, then undo.
TIMER = r"""d=$1 secs=$2 db=$3
sleep "$secs"
mv -- "$d/armed" "$d/fired" 2>/dev/null || exit 0
st=0
while IFS= read -r t; do
  ovsdb-client transact "$db" "$t" </dev/null >>"$d/result" 2>>"$d/result.err" || st=$?
done <"$d/undo.jsonl"
echo "$st" >"$d/status.tmp" && mv -f -- "$d/status.tmp" "$d/status"
"""

# $1 the directory, $2 seconds, $3 the OVSDB, $4 TIMER; stdin the transactions, one per line.
ARM = r"""d=$1 secs=$2 db=$3 timer=$4
for t in ovsdb-client setsid; do
  command -v "$t" >/dev/null 2>&1 || { echo "$t"; exit 16; }
done
umask 077
mkdir -p -- "${d%/*}" || exit 17
[ -O "${d%/*}" ] && [ ! -L "${d%/*}" ] || { echo "${d%/*} is not this user's own directory"; exit 18; }
mkdir -- "$d" || exit 17
cat >"$d/undo.jsonl" && echo "$secs" >"$d/seconds" && echo armed >"$d/armed" || exit 1
setsid sh -c "$timer" hvnet-no-commit "$d" "$secs" "$db" </dev/null >/dev/null 2>&1 &
echo started
"""

# $1 the directory, $2 the token's new name: who won, in one word.
CLAIM = r"""d=$1
mv -- "$d/armed" "$d/$2" 2>/dev/null && { echo claimed; exit 0; }
for s in fired committed taken superseded; do [ -e "$d/$s" ] && { echo "$s"; exit 0; }; done
echo gone
"""

# $1 the directory: its token, the undo's exit status, ovsdb-client's answers and errors.
PROBE = r"""d=$1
[ -d "$d" ] || { echo gone; exit 0; }
for s in armed fired committed taken superseded; do [ -e "$d/$s" ] && echo "token $s"; done
[ -f "$d/status" ] && echo "status $(cat -- "$d/status")"
[ -f "$d/result" ] && while IFS= read -r l; do echo "result $l"; done <"$d/result"
[ -f "$d/result.err" ] && while IFS= read -r l; do echo "error $l"; done <"$d/result.err"
exit 0
"""


class HostTimerError(HvnetError):
    """The on-host rollback could not be armed: nothing was applied."""


@dataclass(frozen=True)
class Timer:
    """One armed timer, as the pending record keeps it (``host_timer``)."""

    dir: str
    seconds: int
    armed_at: float  # this machine's clock when the timer started
    covered: int  # changes the host undoes itself
    left_out: list[str] = field(default_factory=list)  # what it does not, for the operator

    @property
    def deadline(self) -> float:
        return self.armed_at + self.seconds

    @classmethod
    def of(cls, record: dict[str, Any]) -> Optional[Timer]:
        data = record.get("host_timer")
        return cls(**data) if isinstance(data, dict) else None

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def base_dir(host: Host) -> str:
    """Where timers live on ``host``: hvnet's state directory path, there."""
    return f"{host.paths.state_dir}/{SUBDIR}"


def database(host: Host) -> str:
    """The host's OVSDB as ``ovsdb-client`` on the host reaches it."""
    return f"unix:{host.ovs_rundir}/db.sock"


def arm(host: Host, changes: list[Change], window: float, label: str) -> Timer:
    """Arm the host's own undo of ``changes`` to fire ``window`` seconds from now (before they are applied).

    Raises :class:`HostTimerError` when the host cannot run it (a tool
    missing): the apply must not go ahead without its dead-man switch.
    """
    undo = hostundo.plan(changes, label)
    seconds = max(1, math.ceil(window))
    directory = f"{base_dir(host)}/{secrets.token_hex(8)}"
    armed_at = time.time()
    res = host.runner.run(["sh", "-c", ARM, "hvnet-arm", directory, str(seconds), database(host), TIMER],
                          check=False, timeout=30, input_text="".join(t + "\n" for t in undo.texts()))  # fmt: skip
    if res.returncode == MISSING_TOOL:
        tool = res.stdout.strip()
        raise HostTimerError(f"cannot arm the rollback on the host: {tool} is not installed there; nothing was applied",
                             hint=f"install {tool} on the host, or apply without --no-commit")  # fmt: skip
    if res.returncode != 0 or "started" not in res.stdout:
        why = (res.stderr or res.stdout).strip() or f"exit {res.returncode}"
        raise HostTimerError(f"cannot arm the rollback on the host ({directory}): {why}; nothing was applied")
    left = [f"{c.target} {c.kind}" for c, _ in undo.skipped]
    return Timer(directory, seconds, armed_at, len(undo.covered), left)


def claim(host: Host, timer: Timer, as_: str) -> str:
    """Take the token (``committed``, ``taken``, ``superseded``): "claimed", or who had it, or "gone"."""
    _check(timer)
    res = host.runner.run(["sh", "-c", CLAIM, "hvnet-claim", timer.dir, as_], timeout=30)
    return res.stdout.strip() or "gone"


def remove(host: Host, timer: Timer) -> None:
    """Remove the timer's directory once the console knows its end (best effort: a leftover is harmless)."""
    _check(timer)
    try:
        host.runner.run(["rm", "-rf", "--", timer.dir], check=False, timeout=30)
    except HvnetError:
        pass


def _check(timer: Timer) -> None:
    """Only ever a directory hvnet named: ``.../no-commit/<16 hex digits>``."""
    parent, _, token = timer.dir.rpartition("/")
    if not parent.endswith(f"/{SUBDIR}") or not _TOKEN.match(token):
        raise HvnetError(f"not an hvnet timer directory: {timer.dir!r}; the pending record is damaged")


# -- what the host did ----------------------------------------------------------------------


@dataclass(frozen=True)
class Probe:
    """The timer's directory as read on the host."""

    token: str  # armed | fired | committed | taken | superseded | gone
    status: Optional[int] = None  # the undo's exit status, once it ran
    results: list[Any] = field(default_factory=list)  # ovsdb-client's answers (one JSON array per transaction)
    errors: list[str] = field(default_factory=list)

    @property
    def verdict(self) -> str:
        """``waiting`` (armed), ``running`` (fired, not finished), ``rolled back``, ``guard failed``
        (nothing changed: the rows were not as the apply left them), ``failed``, or the token's name."""
        if self.token == "armed":
            return "waiting"
        if self.token != "fired":
            return self.token
        if self.status is None:
            return "running"
        if self.status != 0 or (self.errors and not self.results):
            return "failed"
        failed = [op for r in self.results for op in (r if isinstance(r, list) else [r])
                  if isinstance(op, dict) and "error" in op]  # fmt: skip
        if not failed and all(isinstance(r, list) for r in self.results):
            return "rolled back"
        if failed and all(op.get("error") == "timed out" for op in failed):
            return "guard failed"
        return "failed"

    def detail(self) -> str:
        """ovsdb-client's complaints, for the audit line."""
        said = [f"{op.get('error')}: {op.get('details', '')}".strip(": ") for r in self.results
                if isinstance(r, list) for op in r if isinstance(op, dict) and "error" in op]  # fmt: skip
        return "; ".join([*said, *self.errors])[:500]


def parse_probe(text: str) -> Probe:
    """:data:`PROBE`'s output (pure)."""
    token, status, results, errors = "gone", None, [], []
    for line in text.splitlines():
        word, _, rest = line.partition(" ")
        if word == "token" and token in ("gone", "armed"):
            token = rest.strip()
        elif word == "status":
            try:
                status = int(rest.strip())
            except ValueError:
                status = -1
        elif word == "result":
            try:
                results.append(json.loads(rest))
            except ValueError:
                errors.append(rest)
        elif word == "error" and rest.strip():
            errors.append(rest.strip())
    return Probe(token, status, results, errors)


def probe(host: Host, timer: Timer) -> Probe:
    """Read what the timer did (one round trip)."""
    _check(timer)
    res = host.runner.run(["sh", "-c", PROBE, "hvnet-probe", timer.dir], timeout=30)
    return parse_probe(res.stdout)


def wait_done(host: Host, timer: Timer, patience: float = 10.0) -> Probe:
    """:func:`probe`, waiting up to ``patience`` seconds for an undo that is running to finish."""
    found = probe(host, timer)
    end = time.monotonic() + patience
    while found.verdict == "running" and time.monotonic() < end:
        time.sleep(0.5)
        found = probe(host, timer)
    return found


def coverage(timer: Timer) -> str:
    """What the host undoes by itself and what it leaves to hvnet, in one sentence."""
    left = f"; {', '.join(timer.left_out[:4])}{' ...' if len(timer.left_out) > 4 else ''} by hvnet at its next contact"
    return (f"the host itself undoes {timer.covered} change(s) in OVSDB"
            + (left if timer.left_out else "")
            + "; OpenFlow meters and TAP flows are put back by hvnet's next run there (or its agent)")  # fmt: skip


def unreachable(exc: BaseException) -> bool:
    """Whether ``exc`` says the host could not be reached (the timer is then the host's own business)."""
    return isinstance(exc, HostUnreachable)


def record_for(rec: dict[str, Any]) -> dict[str, Any]:
    """The pending record of an intent (the engine's write-ahead record without its process fields)."""
    return {k: v for k, v in rec.items() if k not in ("pid", "keep")}


# -- the console's side: arming before the commit, learning after the deadline --------------


class Arming:
    """The engine's ``before_commit`` for a host over SSH: arms the host's undo of each attempt's changes."""

    def __init__(
        self, engine: PolicyEngine, window: float, pend: Callable[[PolicyEngine, dict[str, Any], Timer], Any]
    ) -> None:
        self.engine = engine
        self.window = window
        self.pend = pend  # records the apply as pending (and starts this machine's watcher)
        self.timer: Optional[Timer] = None
        self.record: Optional[dict[str, Any]] = None

    def __call__(self, record: dict[str, Any]) -> None:
        self.disarm()  # an earlier attempt's (re-planned after TRY_AGAIN): never two timers for one apply
        label = f"hvnet: rollback of {record['id']} on the host (not committed in time)"
        self.timer = arm(self.engine.host, journal.record_changes(record), self.window, label)
        self.record = record

    def disarm(self) -> None:
        if self.timer is None:
            return
        timer, self.timer = self.timer, None
        try:
            claim(self.engine.host, timer, "superseded")
            remove(self.engine.host, timer)
        except HvnetError:
            pass  # its guards keep it from touching rows that are not as this attempt would have left them

    def failed(self, exc: HvnetError) -> None:
        """The apply raised: nothing changed (disarm), or maybe it did -- the host's timer stays, recorded."""
        if self.timer is None or self.record is None:
            return
        if not isinstance(exc, OutcomeUnknown) and not unreachable(exc):
            self.disarm()
            return
        record = record_for(self.record)
        self.pend(self.engine, record, self.timer)
        self.engine.journal.clear_intent(record["id"])  # the pending record settles it now, with the host's word
        at = f"{datetime.fromtimestamp(self.timer.deadline):%H:%M:%S}"
        exc.hint = (
            f"{exc.hint + '; ' if exc.hint else ''}the host undoes it by itself at {at} unless "
            "'hvnet commit' reaches it first; any hvnet command on the host after that says what it did"
        )


def late(record: dict[str, Any]) -> str:
    """Why a pending change can no longer be committed: who rolled it back."""
    if record.get("rolled_back_by") == "host":
        return f"{record['id']} was not confirmed in time: {HOST_SAID[record.get('host_verdict', 'failed')]}"
    return f"{record['id']} was not confirmed in time; its watcher was gone, so it has been rolled back now"


HOST_SAID = {
    "rolled back": "the host rolled it back by itself",
    "guard failed": "the host's own rollback found its rows changed since (or never changed) and left them",
    "failed": "the host's own rollback failed (see the audit log); hvnet put back what it could",
    "waiting": "the host's timer did not fire (gone with a reboot?); hvnet rolled it back",
}


def settle(
    engine: PolicyEngine, record: dict[str, Any], timer: Timer, *, force: bool
) -> Optional[tuple[dict[str, Any], ApplyResult]]:
    """Learn what the host's timer did with ``record`` and finish the job here; None while undecided.

    The host's undo covers part of the change; :meth:`PolicyEngine.undo` of
    the whole record then puts back the rest (the rows the host restored are
    "already so") and brings OpenFlow in line.  A timer still armed well past
    its deadline was lost (the host rebooted): with ``force`` (its watcher,
    or the watcher gone) hvnet takes the token and rolls back itself.
    """
    found = wait_done(engine.host, timer)
    verdict = found.verdict
    if verdict == "waiting":
        if not force or claim(engine.host, timer, "taken") != "claimed":
            return None
    elif verdict == "committed":  # a commit stopped between the host and the journal
        engine.journal.clear_pending(record["id"])
        remove(engine.host, timer)
        return None
    elif verdict not in ("rolled back", "guard failed", "failed"):
        return None  # running, or taken by another hvnet process
    if not engine.journal.clear_pending(record["id"]):
        return None  # another hvnet process learned it first
    changes = journal.record_changes(record)
    if verdict != "waiting":
        said = HOST_SAID[verdict] + (f" ({found.detail()})" if found.detail() else "")
        engine.journal.audit(f"hvnet (the host's rollback of {record['id']}: not committed in time)", changes,
                             said, record_id=record["id"], covered=timer.covered)  # fmt: skip
    engine.command = f"hvnet (automatic rollback of {record['id']}: not committed in time)"
    result = engine.undo(changes, label=f"hvnet automatic rollback of {record['id']} (after the host's)", record=False)
    done = {**record, "rolled_back_by": "host", "host_verdict": verdict}
    engine.journal.mark_rolled_back(done)
    remove(engine.host, timer)
    result.plan.warnings.insert(0, f"{record['id']}: {HOST_SAID[verdict]}")
    return done, result
