"""The shell texts a group of jobs runs inside a VM through its guest agent, and the parsing of their answers.

A guest agent has no long-lived channel: each ``guest-exec`` is a process
whose output comes back only when it has ended.  So the control shell of
:mod:`.remote` becomes short scripts, each one ``guest-exec`` of ``sh -c
TEXT NAME ARGS...`` (fixed text; every value an argument, and the job words
quoted with :func:`shlex.quote` in the one script that carries them):

* :data:`START` makes the private work dir (``umask 077``, ``mkdir -m
  0700``, a base another user could write refused), a release FIFO, and a
  *holder* (:data:`HOLDER`, its own session) that keeps the FIFO open
  read-write -- so a job opens it without blocking and sees end-of-file when
  the holder is gone -- and enforces a lease: when the ``lease`` file's
  mtime, touched by every later script, is older than the lease, it stops
  the jobs and removes the dir (hvnet was killed, or lost the VM).  Every job
  is started in its own session under a *wrapper* (:data:`WRAP`) that starts
  the job (:data:`JOB`) as its child with ``setsid`` and waits for it,
  writing its exit status to ``NAME.rc``: the start script exits, so nothing
  else could ever ``wait`` for the job.  The job records its PID (its own
  process group) and start time, waits at the barrier, stamps the VM's clock
  and ``exec``s the program (same PID, same start time).  Nothing started
  keeps the exec's pipes open: ``guest-exec`` reports an end only when they
  are closed.  Its last lines are ``pid NAME PID``, ``boot ID`` and ``ready R N``.
* :data:`RELEASE` writes one newline per job into the FIFO and prints the stamp.
* :data:`POLL` prints ``exit NAME STATUS STAMP`` for every ``.rc`` written.
* :data:`SIGNAL` signals the named jobs' process groups, only while the
  start time recorded for the PID still matches (a reused PID is never hit).
* :data:`CAT` prints files between marker lines (:func:`.remote.parse_sections`).
* :data:`CLOSE` stops what runs (TERM, then KILL), the holder, removes the dir.
* :data:`SWEEP` does the same for the dirs an earlier, killed hvnet left,
  on the same boot only.

Also here, as pure functions: virsh's argv for one agent command, its reply,
and its error texts mapped to what the operator must do.

Tools used in the VM: sh (bash where present: ``$EPOCHREALTIME``), setsid,
mkdir, mkfifo, stat, touch, rm, cat, date, sleep, kill.
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import json
import shlex
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from appliance.core.errors import EXIT_UNREACHABLE, HvnetError
from appliance.core.render import terminal
from appliance.endpoints.jobs import Job, check_name
from appliance.endpoints.remote import parse_stamp

# Shared by every script: pst PID sets S (state) and T (start time, /proc/PID/stat field 22);
# ours PID START: that PID is still the process recorded; sig SIG PID: its process group, else it.
COMMON = r"""umask 077
pst() {
  S= T=; l=; read -r l <"/proc/$1/stat" 2>/dev/null || return 1
  l=${l##*) }; set -f; set -- $l; set +f; S=$1 T=${20}
}
ours() { [ -n "$2" ] && pst "$1" && [ "$T" = "$2" ] && [ "$S" != Z ]; }
sig() { kill "-$1" -- "-$2" 2>/dev/null || kill "-$1" "$2" 2>/dev/null; }
now() { if [ -n "${EPOCHREALTIME:-}" ]; then T=$EPOCHREALTIME; else T=$(date +%s%N); fi; }
stopall() {
  A=0
  [ -f "$1/pids" ] && while read -r p t n; do ours "$p" "$t" || continue; A=$((A+1)); sig "$2" "$p"; done <"$1/pids"
}
stopdir() {
  stopall "$1" TERM; i=0
  while [ $i -lt 20 ]; do stopall "$1" 0; [ $A -gt 0 ] || break; sleep 0.1; i=$((i+1)); done
  stopall "$1" KILL
  if [ -f "$1/holder" ] && read -r hp ht <"$1/holder" && ours "$hp" "$ht"; then sig KILL "$hp"; fi
  rm -rf -- "$1"
}
"""

# The job, in its own session: $1 dir, $2 name, $3 hold; then the program's argv.
JOB = r"""d=$1 n=$2 h=$3; shift 3
st() { l=${1##*) }; set -f; set -- $l; set +f; t=${20}; }
l=; read -r l <"/proc/$$/stat"; st "$l"
echo "$$ $t $n" >>"$d/pids"
if [ "$h" = 1 ]; then
  exec 5<"$d/go" || exit 125
  echo "$n" >>"$d/ready"
  IFS= read -r _ <&5 || exit 125
  exec 5<&-
fi
if [ -n "${EPOCHREALTIME:-}" ]; then echo "$EPOCHREALTIME" >"$d/$n.stamp"; else date +%s%N >"$d/$n.stamp"; fi
exec "$@"
"""

# The wrapper, in its own session: $1 shell, $2 dir, $3 name, $4 hold; then the argv.  It waits for the job
# (again when a signal interrupted the wait and the job, by PID and start time, is still there) and writes
# NAME.rc, renamed into place so a poll never reads half of it.
WRAP = r"""js=$1 d=$2 n=$3; shift 2
trap : HUP INT TERM
setsid "$js" -c "$J" hvnet-job "$d" "$@" </dev/null >"$d/$n.out" 2>"$d/$n.err" &
p=$!; pt=; l=; read -r l <"/proc/$p/stat" 2>/dev/null && { l=${l##*) }; set -f; set -- $l; set +f; pt=${20}; }
while :; do
  wait "$p"; st=$?
  l=; read -r l <"/proc/$p/stat" 2>/dev/null || break
  l=${l##*) }; set -f; set -- $l; set +f; [ "${20}" = "$pt" ] || break
done
echo "$st" >"$d/$n.rc.tmp" 2>/dev/null && mv -f -- "$d/$n.rc.tmp" "$d/$n.rc" 2>/dev/null
"""

# The holder, in its own session: $1 dir, $2 lease (s).  FD 3 holds the FIFO open read-write.
HOLDER = r"""d=$1 lease=$2
exec 3<>"$d/go" || exit 1
pst $$; echo "$$ $T" >"$d/holder"
while [ -d "$d" ]; do
  sleep 10  # two forks per look: rarely, so the holder costs a measured VM next to nothing
  m=$(stat -c %Y -- "$d/lease" 2>/dev/null) || break
  [ $(( $(date +%s) - m )) -gt "$lease" ] && break
done
exec 3>&-
[ -d "$d" ] && { rm -f -- "$d/holder"; stopdir "$d"; }
"""

# $1 base, $2 id, $3 hold (1|0), $4 ready polls (10 ms each), $5 lease (s); then the job lines.
START = r"""base=$1 id=$2 hold=$3 tries=$4 lease=$5
d=$base/$id N=0 JS=sh
command -v bash >/dev/null 2>&1 && JS=bash
say() { printf '%s\n' "$*"; }
mkdir -p -- "$base" 2>/dev/null
mkdir -m 0700 -- "$d" || { say "error cannot make $d"; exit 1; }
me=$(stat -c %u -- "$d"); bo=$(stat -c '%u %a' -- "$base")
bu=${bo%% *} bm=${bo#* }
if [ "$bu" != "$me" ] && [ "$bu" != 0 ]; then rm -rf -- "$d"; say "error $base is owned by uid $bu"; exit 1; fi
if [ $((0$bm & 022)) -ne 0 ] && [ $((0$bm & 01000)) -eq 0 ]; then
  rm -rf -- "$d"; say "error $base has mode $bm: another user could write there"; exit 1
fi
B=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)
echo "$B" >"$d/boot"; : >"$d/pids"; : >"$d/ready"; : >"$d/lease"
mkfifo -m 0600 -- "$d/go" || { rm -rf -- "$d"; say "error mkfifo failed"; exit 1; }
export J
setsid "$JS" -c "$C$H" hvnet-holder "$d" "$lease" </dev/null >/dev/null 2>&1 &
i=0; while [ ! -s "$d/holder" ] && [ $i -lt 500 ]; do sleep 0.01; i=$((i+1)); done
[ -s "$d/holder" ] || { rm -rf -- "$d"; say "error the holder did not start"; exit 1; }
job() {
  N=$((N+1)) n=$1; shift
  setsid "$JS" -c "$W" hvnet-wrap "$JS" "$d" "$n" "$hold" "$@" </dev/null >/dev/null 2>&1 &
}
"""

# After the job lines: wait until every job is at the barrier (or has ended), then report.
REPORT = r"""count() { C=0; [ -f "$1" ] && while IFS= read -r _; do C=$((C+1)); done <"$1"; }
ended() { E=0; for f in "$d"/*.rc; do [ -f "$f" ] && E=$((E+1)); done; }
i=0
while :; do
  if [ "$hold" = 1 ]; then count "$d/ready"; else count "$d/pids"; fi
  r=$C; ended
  [ $((r+E)) -ge $N ] && break
  i=$((i+1)); [ $i -ge "$tries" ] && break
  sleep 0.01
done
count "$d/pids"; [ $C -ge $N ] || sleep 0.2
while read -r p t n; do say "pid $n $p $t"; done <"$d/pids"
read -r hp ht <"$d/holder"; say "holder $hp $ht"
say "shell $JS"
say "boot $B"
say "ready $r $N"
"""

# $1 dir, $2 newlines to write (one per job).
RELEASE = r"""d=$1
[ -p "$d/go" ] || { echo "error the work dir $d is gone"; exit 1; }
touch -- "$d/lease"
now; printf "$2" >"$d/go"; echo "released $T"
"""

POLL = r"""d=$1
[ -d "$d" ] || { echo "error the work dir $d is gone"; exit 1; }
touch -- "$d/lease"
for f in "$d"/*.rc; do
  [ -f "$f" ] || continue
  n=${f##*/}; n=${n%.rc}; st=; s=
  read -r st <"$f"; [ -f "$d/$n.stamp" ] && read -r s <"$d/$n.stamp"
  echo "exit $n ${st:--} ${s:--}"
done
echo polled
"""

# $1 dir, $2 signal; then the names.
SIGNAL = r"""d=$1 s=$2; shift 2
[ -d "$d" ] || exit 0
touch -- "$d/lease"
while read -r p t n; do
  for w; do [ "$w" = "$n" ] && ours "$p" "$t" && sig "$s" "$p"; done
done <"$d/pids"
echo signalled
"""

# $1 dir, $2 marker; then the file names.
CAT = r"""d=$1 m=$2; shift 2
[ -d "$d" ] && touch -- "$d/lease"
for f; do
  [ -f "$d/$f" ] || { echo "$m absent $f"; continue; }
  echo "$m begin $f"; cat -- "$d/$f"; printf '\n%s end %s\n' "$m" "$f"
done
echo "$m done"
"""

CLOSE = r"""d=$1
[ -d "$d" ] && [ ! -L "$d" ] && stopdir "$d"
echo closed
"""

# $1 the record's boot id (empty: unknown); then triples DIR PID START ("-" PID/START: the dir alone).
SWEEP = r"""rb=$1; shift
b=$(cat /proc/sys/kernel/random/boot_id 2>/dev/null)
echo "boot $b"
ARGS="$*"
set -f; set -- $ARGS; set +f
while [ $# -ge 3 ]; do
  p=$2 t=$3; shift 3
  if [ "$p" != - ] && [ "$rb" = "$b" ] && ours "$p" "$t"; then sig TERM "$p"; echo "stopped $p"; fi
done
set -f; set -- $ARGS; set +f
while [ $# -ge 3 ]; do
  d=$1; shift 3
  [ -d "$d" ] && [ ! -L "$d" ] || continue
  db=; read -r db <"$d/boot" 2>/dev/null
  if [ "$db" = "$b" ]; then
    [ -f "$d/pids" ] && while read -r q u n; do ours "$q" "$u" && echo "stopped $q"; done <"$d/pids"
    stopdir "$d"
  else
    rm -rf -- "$d"
  fi
  echo "removed $d"
done
set -f; set -- $ARGS; set +f
while [ $# -ge 3 ]; do
  p=$2 t=$3; shift 3
  [ "$p" != - ] && [ "$rb" = "$b" ] && ours "$p" "$t" && sig KILL "$p"
done
echo swept
"""


def start_script(jobs: Sequence[Job]) -> str:
    """The start script: the fixed parts, and one ``job`` line per job with every word quoted."""
    lines = [
        f"J={shlex.quote(JOB)}",
        f"C={shlex.quote(COMMON)}",
        f"H={shlex.quote(HOLDER)}",
        f"W={shlex.quote(WRAP)}",
        COMMON,
        START,
    ]
    for j in jobs:
        if j.netns:
            raise ValueError(f"job {j.name}: a network namespace inside a VM is not supported through its agent")
        argv = list(j.argv)
        if j.env:
            argv = ["env", *(f"{k}={v}" for k, v in j.env.items()), *argv]
        lines.append("job " + " ".join(shlex.quote(w) for w in [check_name(j.name), *argv]))
    lines.append(REPORT)
    return "\n".join(lines)


def with_common(text: str) -> str:
    """A later script with the shared functions in front of it."""
    return COMMON + text


@dataclass
class Started:
    """What the start script reported."""

    pids: dict[str, tuple[int, str]] = field(default_factory=dict)  # name -> (PID, start time)
    holder: Optional[tuple[int, str]] = None
    shell: str = "sh"
    boot: Optional[str] = None
    ready: int = 0
    error: Optional[str] = None


def parse_start(text: str) -> Started:
    """The start script's lines (unknown ones ignored: a VM's text is data)."""
    out = Started()
    for line in text.splitlines():
        words = line.split()
        if not words:
            continue
        if words[0] == "error":
            out.error = line[6:]
        elif words[0] == "pid" and len(words) == 4 and words[2].isdigit() and words[3].isdigit():
            out.pids[words[1]] = (int(words[2]), words[3])
        elif words[0] == "holder" and len(words) == 3 and words[1].isdigit() and words[2].isdigit():
            out.holder = (int(words[1]), words[2])
        elif words[0] == "shell" and len(words) == 2 and words[1] in ("sh", "bash"):
            out.shell = words[1]
        elif words[0] == "boot" and len(words) == 2:
            out.boot = words[1]
        elif words[0] == "ready" and len(words) == 3 and words[1].isdigit():
            out.ready = int(words[1])
    return out


def parse_poll(text: str) -> dict[str, tuple[Optional[int], Optional[int]]]:
    """POLL's answer: name -> (exit status, start stamp in ns); None where unknown."""
    out: dict[str, tuple[Optional[int], Optional[int]]] = {}
    for line in text.splitlines():
        words = line.split(" ")
        if len(words) == 4 and words[0] == "exit":
            st = int(words[2]) if words[2].isdigit() else None
            out[words[1]] = (st, parse_stamp(words[3]) if words[3] != "-" else None)
    return out


def parse_released(text: str) -> Optional[int]:
    for line in text.splitlines():
        words = line.split()
        if len(words) == 2 and words[0] == "released":
            return parse_stamp(words[1])
    return None


# -- virsh qemu-agent-command: its argv, replies and errors ---------------------------------------

EL_HINT = (
    "the guest's qemu-ga blocks it (EL's default): allow guest-exec, guest-exec-status and guest-file-* -- "
    "on EL remove them from BLOCK_RPCS in /etc/sysconfig/qemu-ga, or add them to the --allow-rpcs= list "
    "there (FILTER_RPC_ARGS; qemu-ga --allow-rpcs=guest-exec,guest-exec-status,guest-file-open,"
    "guest-file-read,guest-file-close), "
    "then restart qemu-guest-agent"
)
NOT_RUNNING_HINT = (
    "install and start qemu-guest-agent in the guest, and give the domain the virtio-serial channel "
    "org.qemu.guest_agent.0 (<channel type='unix'><target type='virtio' name='org.qemu.guest_agent.0'/></channel>)"
)


class AgentUnavailable(HvnetError):
    """The guest agent cannot do what is asked: absent, not connected, not answering, or the command disabled."""

    exit_code = 4


class DomainNotFound(HvnetError):
    """libvirt knows no such domain (or it does not run)."""

    exit_code = EXIT_UNREACHABLE


# -- pure: replies and errors ----------------------------------------------------------------


def agent_argv(domain: str, execute: str, arguments: Optional[Mapping[str, Any]], timeout: float,
               uri: Optional[str] = None) -> list[str]:  # fmt: skip
    """virsh's argv: ``--domain``/``--cmd`` so that a domain name starting with '-' stays data."""
    cmd: dict[str, Any] = {"execute": execute}
    if arguments is not None:
        cmd["arguments"] = dict(arguments)
    return ["virsh", *(["-c", uri] if uri else []), "qemu-agent-command", "--domain", domain,
            "--timeout", str(max(1, round(timeout))), "--cmd", json.dumps(cmd, separators=(",", ":"))]  # fmt: skip


def parse_reply(text: str, what: str) -> Any:
    """The ``return`` of virsh's reply (the last JSON line), or HvnetError naming ``what``."""
    for line in reversed(text.strip().splitlines()):
        try:
            reply = json.loads(line)
        except ValueError:
            continue
        if isinstance(reply, dict) and "return" in reply:
            return reply["return"]
        if isinstance(reply, dict) and "error" in reply:
            err = reply["error"]
            desc = err.get("desc") if isinstance(err, dict) else err
            raise classify_error(f"error: {desc}", what)
    raise HvnetError(f"{what}: the guest agent's reply is not JSON: {text.strip()[:200]!r}")


def classify_error(stderr: str, what: str) -> HvnetError:
    """virsh's error text as the error hvnet reports (``what`` names the domain, already escaped)."""
    lines = [ln.strip() for ln in stderr.strip().splitlines() if ln.strip()]
    text = " ".join(lines)
    low = text.lower()
    shown = terminal(text[:300])  # virsh repeats the domain's name: shown, never obeyed
    if "failed to get domain" in low or "domain not found" in low or "no domain with matching" in low:
        return DomainNotFound(f"{what}: libvirt knows no such domain ({shown})", hint="virsh list --all")
    if "domain is not running" in low:
        return DomainNotFound(f"{what}: the domain is not running ({shown})", hint="start it: virsh start DOMAIN")
    if "disabled" in low or "blocked" in low or "not allowed" in low:
        return AgentUnavailable(f"{what}: {shown}", hint=EL_HINT)
    if "agent" in low and ("not connected" in low or "not responding" in low or "not configured" in low
                           or "not available" in low or "timeout" in low or "timed out" in low):  # fmt: skip
        return AgentUnavailable(f"{what}: the guest agent does not answer ({shown})", hint=NOT_RUNNING_HINT)
    return HvnetError(f"{what}: {shown or 'virsh failed with no message'}")


def decode(data: Optional[str]) -> str:
    """base64 output of a guest process as text (bytes that are not UTF-8 replaced, shown literally)."""
    if not data:
        return ""
    try:
        return base64.b64decode(data).decode("utf-8", errors="replace")
    except (binascii.Error, ValueError):
        return ""


def status_code(status: Mapping[str, Any]) -> int:
    """guest-exec-status's exit code: ``exitcode``, or -N when signal N ended the process (as subprocess)."""
    if isinstance(status.get("exitcode"), int):
        return int(status["exitcode"])
    if isinstance(status.get("signal"), int):
        return -int(status["signal"])
    return -1


def record_name(domain: str, uri: Optional[str]) -> str:
    """The console-side record's file name: a hash, never the domain's own name."""
    return hashlib.sha256(f"{uri or ''}\0{domain}".encode()).hexdigest()[:32] + ".json"
