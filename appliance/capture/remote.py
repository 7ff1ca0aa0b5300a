"""Captures on a hypervisor reached over SSH, agentless: the shell scripts and what they print.

Nothing of hvnet runs there (no Python, as on a XenServer dom0).  A capture
is a detached POSIX shell (:data:`WRAPPER`) started through the Host's
runner -- each argument quoted for the remote shell, the scripts fixed text
-- that runs tcpdump in the capture's directory under hvnet's data directory
*on that host*, writes tcpdump's pid, stops it when the duration has passed
(SIGTERM: a background job of a non-interactive shell ignores SIGINT), and
once tcpdump has ended writes the port's kernel counters and tcpdump's exit
status beside the pcaps.  hvnet keeps ``capture.json`` there too, so every
machine that reaches the host sees the same captures.

:data:`PROBE` reports on captures in one round trip (their records, whether
their processes run, the end the wrapper recorded, tcpdump's log, the files'
sizes), asking running tcpdumps for their counts with SIGUSR1 when told.
The parsing here is pure; the workflows are :mod:`appliance.services.captures_remote`.

Tools used on the host: sh (its ``kill``), id, df, readlink, mkdir, mv, rm, cat, grep, stat, sleep, tcpdump.
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass, field
from typing import Any

from appliance.capture import limits
from appliance.capture.completeness import completeness
from appliance.capture.disk import under_floor_reason
from appliance.capture.record import CaptureRecord, final_counts_text
from appliance.capture.spec import ended_by_itself
from appliance.core.safedirs import judge_dir, judge_link
from appliance.isolation.pcap import TcpdumpCounts, parse_tcpdump_counts
from appliance.switch.counters import Counters, parse_kernel_many

STOP_SIGNAL = "TERM"  # tcpdump prints its counts and closes its file on SIGTERM as on SIGINT

# df -P -k's output on stdin -> the KiB still free (its "Available") on stdout.  The figure before the
# first all-digit "N%" word: a file system's name may hold spaces (as parse_df reads it).
DF_AVAILABLE = r"""{ read -r _; read -r l; set -f; set -- $l; p=
  for w; do case $w in [0-9]*%) case ${w%\%} in *[!0-9]*) ;; *) echo "$p"; break ;; esac ;; esac; p=$w; done; }"""

# $1 the capture's directory, $2 the port whose counters are read at the end, $3 the duration in
# seconds or "-", $4 the free-space floor in KiB, $5 the cap on the files' bytes or "-" (a capture
# rotated by time), then tcpdump's argv.  Detached by START (its output goes nowhere, ssh returns).
# umask 077: what tcpdump creates is root's alone.  A watcher checks every second that free space
# (df's "Available") is not under the floor and the files not over their cap; either stops tcpdump
# and says why in ended-by ("floor KIB", "size BYTES").
WRAPPER = (
    r"""umask 077
d=$1 port=$2 dur=$3 floor=$4 cap=$5; shift 5
cd -- "$d" || exit 1
echo $$ >wrapper.pid
"$@" </dev/null >/dev/null 2>>tcpdump.log &
tp=$!
echo "$tp" >tcpdump.pid
if [ "$dur" != - ]; then
  ( sleep "$dur" & echo $! >timer.pid; wait $!
    [ -e status ] || { [ -e ended-by ] || echo duration >ended-by; kill -TERM "$tp"; } ) </dev/null >/dev/null 2>&1 &
fi
( while kill -0 "$tp" 2>/dev/null && [ ! -e status ]; do
    free=$(df -P -k -- . | """
    + DF_AVAILABLE
    + r""")
    case $free in ''|*[!0-9]*) free= ;; esac
    if [ -n "$free" ] && [ "$free" -lt "$floor" ]; then
      [ -e ended-by ] || echo "floor $free" >ended-by; kill -TERM "$tp"; break
    fi
    if [ "$cap" != - ]; then
      total=0
      for f in ./*.pcap*; do [ -f "$f" ] && [ ! -L "$f" ] && total=$((total + $(stat -c %s -- "$f"))); done
      if [ "$total" -ge "$cap" ]; then
        [ -e ended-by ] || echo "size $total" >ended-by; kill -TERM "$tp"; break
      fi
    fi
    sleep 1
  done ) </dev/null >/dev/null 2>&1 &
echo $! >watch.pid
wait "$tp"; st=$?
grep -r -H "" -- "/sys/class/net/$port/statistics" >counters-after 2>/dev/null
echo "$st" >status.tmp && mv -f status.tmp status
[ -f timer.pid ] && kill "$(cat timer.pid)" 2>/dev/null
kill "$(cat watch.pid)" 2>/dev/null
exit 0
"""
)

# $1 WRAPPER, then its arguments: start it detached, print its pid.
START = 'w=$1; shift; sh -c "$w" hvnet-capture "$@" </dev/null >/dev/null 2>&1 & echo $!'

# $1 an absolute path: walked from / one component at a time (nothing created), printing the host's
# uid ("me UID"), each directory entered ("dir UID MODE PATH"), each symlink followed ("link UID PATH",
# its target then walked the same way), and how the walk ended ("end", "missing PATH", "notdir PATH",
# "loop PATH", "unreadable PATH").  hvnet judges each line as it judges its own directories.
WALK = r"""rest=$1 hops=0
echo "me $(id -u)"
cd / || exit 1
echo "dir $(stat -c '%u %a' .) /"
while :; do
  while :; do case $rest in /*) rest=${rest#/} ;; *) break ;; esac; done
  [ -n "$rest" ] || break
  c=${rest%%/*}
  case $rest in */*) rest=${rest#*/} ;; *) rest= ;; esac
  [ "$c" = . ] && continue
  here=$(pwd -P); here=${here%/}/$c
  if [ -L "./$c" ]; then
    hops=$((hops+1))
    [ $hops -le 40 ] || { echo "loop $here"; exit 0; }
    echo "link $(stat -c %u -- "./$c") $here"
    t=$(readlink -- "./$c") || { echo "unreadable $here"; exit 0; }
    case $t in /*) cd / || exit 1 ;; esac
    rest=$t/$rest
    continue
  fi
  [ -e "./$c" ] || { echo "missing $here"; exit 0; }
  [ -d "./$c" ] || { echo "notdir $here"; exit 0; }
  cd -P -- "./$c" || { echo "unreadable $here"; exit 0; }
  echo "dir $(stat -c '%u %a' .) $(pwd -P)"
done
echo end
"""

# $1 hvnet's captures directory, every existing part of it judged safe: the missing ones made, 0700.
MAKE = 'umask 077; mkdir -p -- "$1"'

# $1 the capture's directory, $2 its record: a new private directory (never an existing one), then the record.
CREATE = (
    'umask 077; mkdir -m 0700 -- "$1" || exit 17; '
    'cat >"$1/.capture.json.tmp" && mv -f -- "$1/.capture.json.tmp" "$1/capture.json"'
)

# $1 a file, replaced whole with stdin (a reader sees the old record or the new one).
WRITE = 'umask 077; cat >"$1.tmp" && mv -f -- "$1.tmp" "$1"'

# $1 the capture's directory: wait up to 10 s for tcpdump to listen (or to have ended).
WAIT_LISTENING = r"""d=$1; i=0
while [ $i -lt 100 ]; do
  grep -q 'listening on' "$d/tcpdump.log" 2>/dev/null && { echo listening; exit 0; }
  [ -e "$d/status" ] && { echo ended; exit 0; }
  sleep 0.1; i=$((i+1))
done
echo timeout
"""

# $1 the capture's directory: SIGTERM its tcpdump (if it is still that capture's), wait up to 20 s for the
# wrapper to record the end (not at all when the wrapper is gone: killed behind hvnet's back), and end
# the wrapper's disk watcher (left behind when the wrapper was killed).
STOP = r"""umask 077; d=$1
tp=$(cat "$d/tcpdump.pid" 2>/dev/null); wp=$(cat "$d/wrapper.pid" 2>/dev/null)
if [ -n "$tp" ] && kill -0 "$tp" 2>/dev/null && grep -qF -- "$d/" "/proc/$tp/cmdline" 2>/dev/null; then
  [ -e "$d/ended-by" ] || echo stop >"$d/ended-by"
  kill -TERM "$tp"
fi
i=0
while [ ! -e "$d/status" ] && [ $i -lt 200 ] && { [ -n "$wp" ] && kill -0 "$wp" 2>/dev/null; }; do
  sleep 0.1; i=$((i+1))
done
wt=$(cat "$d/watch.pid" 2>/dev/null)
[ -n "$wt" ] && grep -qF -- "$d/" "/proc/$wt/cmdline" 2>/dev/null && kill "$wt" 2>/dev/null
exit 0
"""

# $1 hvnet's captures directory, $2 1 to ask running tcpdumps for counts, $3 the section marker, then
# the capture directories to report on (none: every one).  A process counts as the capture's only
# when its command line names the capture's directory (a reused pid is not taken for it).
PROBE = r"""base=$1 live=$2 m=$3; shift 3
[ "$#" -gt 0 ] || set -- "$base"/*
alive() { [ -n "$1" ] && kill -0 "$1" 2>/dev/null && grep -qF -- "$2/" "/proc/$1/cmdline" 2>/dev/null; }
for d; do
  [ -f "$d/capture.json" ] && [ ! -L "$d" ] || continue
  n=${d##*/}
  tp=$(cat "$d/tcpdump.pid" 2>/dev/null); wp=$(cat "$d/wrapper.pid" 2>/dev/null)
  t=gone; alive "$tp" "$d" && t=alive
  w=gone; alive "$wp" "$d" && w=alive
  fresh=no
  if [ "$live" = 1 ] && [ $t = alive ] && [ ! -e "$d/status" ]; then
    s0=$(stat -c %s -- "$d/tcpdump.log")
    kill -USR1 "$tp"; i=0
    while [ $i -lt 20 ]; do
      sleep 0.05; i=$((i+1))
      [ "$(stat -c %s -- "$d/tcpdump.log")" != "$s0" ] && { sleep 0.05; fresh=yes; break; }
    done
  fi
  printf '%s %s record\n' "$m" "$n"; cat -- "$d/capture.json"; echo
  printf '%s %s procs %s %s\n' "$m" "$n" $t $w
  [ -f "$d/status" ] && { printf '%s %s status %s\n' "$m" "$n" "$(stat -c %Y -- "$d/status")"; cat -- "$d/status"; }
  [ -f "$d/ended-by" ] && { printf '%s %s ended-by\n' "$m" "$n"; cat -- "$d/ended-by"; }
  [ -f "$d/counters-after" ] && { printf '%s %s counters\n' "$m" "$n"; cat -- "$d/counters-after"; }
  printf '%s %s log %s\n' "$m" "$n" $fresh; cat -- "$d/tcpdump.log" 2>/dev/null
  printf '%s %s files\n' "$m" "$n"
  for f in "$d"/*.pcap*; do [ -f "$f" ] && [ ! -L "$f" ] && stat -c '%s %n' -- "$f"; done
done
exit 0
"""

# $1 the capture's directory: removed.
DELETE = 'rm -rf -- "$1"'


def judge_walk(text: str, path: str) -> tuple[str | None, bool]:
    """WALK's output for ``path`` -> (why another user could choose where hvnet writes, or None; whether
    a part of ``path`` is missing).  Judged as :mod:`appliance.core.safedirs` judges this machine's (pure)."""
    me: int | None = None
    for line in text.splitlines():
        kind, _, rest = line.partition(" ")
        try:
            if kind == "me":
                me = int(rest)
                continue
            if me is None:
                break
            if kind == "dir":
                uid, mode, where = rest.split(" ", 2)
                problem = judge_dir(where, int(uid), int(mode, 8), me)
            elif kind == "link":
                uid, where = rest.split(" ", 1)
                problem = judge_link(where, int(uid), me)
            elif kind == "end":
                return None, False
            elif kind == "missing":
                return None, True
            else:
                why = {"notdir": "is not a directory", "loop": "has too many symlinks on the way",
                       "unreadable": "cannot be entered"}.get(kind, f"could not be checked ({line!r})")  # fmt: skip
                return f"{rest or path} {why}", False
        except ValueError:
            break
        if problem is not None:
            return problem, False
    return f"{path} could not be checked: the host's walk printed {text.strip()[-200:]!r}", False


def marker() -> str:
    """A section marker no record, log or file name will hold."""
    return f"hvnet-{secrets.token_hex(8)}"


@dataclass
class Probe:
    """What PROBE printed for one capture."""

    name: str
    record: CaptureRecord | None = None
    error: str | None = None  # why the record could not be read
    tcpdump_alive: bool = False
    wrapper_alive: bool = False
    status: int | None = None  # tcpdump's exit status, written by the wrapper when it ended
    ended_at: float | None = None  # when (the status file's time)
    ended_by: str | None = None  # "stop" or "duration" (None: tcpdump ended by itself)
    counters_after: Counters | None = None
    log: str = ""
    fresh: bool = False  # the log ends with counts tcpdump printed on this probe's SIGUSR1
    files: list[tuple[str, int]] = field(default_factory=list)  # (file name, bytes)

    @property
    def ended(self) -> bool:
        return self.status is not None

    @property
    def bytes(self) -> int:
        return sum(size for _, size in self.files)

    def live_counts(self) -> TcpdumpCounts | None:
        """The counts tcpdump printed on this probe's SIGUSR1 (None: none arrived, so none is shown)."""
        if not self.fresh:
            return None
        lines = [line for line in self.log.splitlines() if line.startswith("tcpdump: ") and "captured" in line]
        return parse_tcpdump_counts(lines[-1]) if lines else None


def parse_probe(text: str, mark: str) -> dict[str, Probe]:
    """PROBE's output, by capture name (pure: unit-tested on real output)."""
    sections: list[tuple[str, str, list[str], list[str]]] = []  # (name, kind, args, lines)
    for line in text.split("\n"):
        if line.startswith(mark + " "):
            words = line.split(" ")
            if len(words) >= 3:
                sections.append((words[1], words[2], words[3:], []))
                continue
        if sections:
            sections[-1][3].append(line)
    probes: dict[str, Probe] = {}
    for name, kind, args, lines in sections:
        p = probes.setdefault(name, Probe(name))
        body = "\n".join(lines).strip("\n")
        if kind == "record":
            try:
                p.record = CaptureRecord.from_json(json.loads(body))
            except (ValueError, TypeError, KeyError) as exc:
                p.error = f"unreadable capture record: {exc}"
        elif kind == "procs" and len(args) == 2:
            p.tcpdump_alive, p.wrapper_alive = args[0] == "alive", args[1] == "alive"
        elif kind == "status":
            p.status = int(body) if body.strip().lstrip("-").isdigit() else -1
            p.ended_at = float(args[0]) if args and args[0].isdigit() else None
        elif kind == "ended-by":
            p.ended_by = body.strip() or None
        elif kind == "counters":
            port = p.record.spec.port if p.record else None
            p.counters_after = parse_kernel_many(body).get(port) if port else None
        elif kind == "log":
            p.log, p.fresh = body, args[:1] == ["yes"]
        elif kind == "files":
            for entry in lines:
                size, _, path = entry.partition(" ")
                if size.isdigit() and path:
                    p.files.append((path.rpartition("/")[2], int(size)))
    return probes


def outcome(record: CaptureRecord, probe: Probe) -> tuple[str, str]:
    """The final state and why, from what the wrapper recorded (the local supervisor's words)."""
    if probe.ended_by == "stop":
        return "stopped", "stopped by 'hvnet capture stop'"
    if probe.ended_by == "duration":
        return "finished", f"its duration of {record.spec.limits.duration:g} s passed"
    kind, _, figure = (probe.ended_by or "").partition(" ")
    if kind == "floor" and figure.isdigit() and record.disk is not None:
        return "stopped", under_floor_reason(int(figure) * 1024, record.disk)
    if kind == "size":
        return "finished", f"its files reached their cap of {record.spec.limits.max_mb} MB"
    if probe.status == 0:
        if record.spec.limits.count is not None:
            return "finished", f"tcpdump stopped at its limit of {record.spec.limits.count} packets"
        return "finished", ended_by_itself(record.spec.limits)
    if probe.status is not None and probe.status > 128:
        return "dead", f"tcpdump was killed by signal {probe.status - 128}, not by hvnet"
    lines = [line for line in probe.log.strip().splitlines() if line.strip()]
    return "dead", f"tcpdump exited with status {probe.status}: {lines[-1] if lines else 'no output'}"


def finished(record: CaptureRecord, probe: Probe, before: Counters | None, now: float) -> CaptureRecord:
    """The final record of a capture whose wrapper recorded its end (figures taken then, not now)."""
    final = final_counts_text(probe.log)
    counts = parse_tcpdump_counts(final)
    kind, _, figure = (probe.ended_by or "").partition(" ")
    if kind == "floor" and figure.isdigit() and record.disk is not None:
        record.disk["free_at_stop"] = int(figure) * 1024
    record.stopped = probe.ended_at or now
    record.counters_after = None if probe.counters_after is None else counters_json(probe.counters_after)
    record.tcpdump = limits.counts(final)
    record.tcpdump_cpu = limits.not_measured(f"tcpdump ran on {record.host} under a detached shell, whose "
                                             "children's times are not read there")  # fmt: skip
    record.completeness = completeness(
        counts, before, probe.counters_after, bpf=record.spec.bpf, count_limit=record.spec.limits.count
    ).to_json()
    record.state, record.reason = outcome(record, probe)
    record.files = [name for name, _ in probe.files]
    return record


def counters_json(c: Counters) -> dict[str, Any]:
    return {**c.as_dict(), "source": c.source}
