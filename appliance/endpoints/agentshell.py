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

Tools used in the VM: sh (bash where present: ``$EPOCHREALTIME``), setsid,
mkdir, mkfifo, stat, touch, rm, cat, date, sleep, kill.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Optional

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
  sleep 2
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
