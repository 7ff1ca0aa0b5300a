"""A group of jobs on a remote host: one control shell over one SSH channel, nothing of hvnet installed there.

The control shell (:data:`CONTROL`, fixed text; each job is a line
``job NAME NETNS ARGV...`` whose every word is quoted with :func:`shlex.quote`)
runs under ``bash`` where the host has it (each job then gets its own process
group, so a netserver's forks are stopped with it), else ``sh``.  It:

* makes a private work dir under hvnet's data dir there (``umask 077``,
  ``mkdir -m 0700``; a base dir another user could write to is refused) and,
  first, removes the dirs of earlier groups whose control shell is gone
  (killed with its host session), stopping their jobs by PID;
* makes a release FIFO and holds it open read-write itself, so a job opens it
  without blocking and reads end-of-file only when the control shell is gone;
* starts every job in the background as ``[ip netns exec NS] sh -c JOB ...``:
  open the FIFO, append its name to ``ready``, read one line, stamp the
  host's own clock (bash's ``$EPOCHREALTIME``, else ``date +%s%N``) and
  ``exec`` the program -- same PID,
  recorded with the process's start time (``/proc/PID/stat``: a PID is only
  ever signalled while that start time matches, so a reused PID is never hit);
* prints ``pid NAME PID`` for each job and ``ready R N`` once every job still
  alive is at the barrier;
* then answers hvnet's lines: ``go`` (one write of a newline per job into the
  FIFO: every job wakes at once and takes one; ``released STAMP``), ``poll`` (``exit NAME STATUS`` for the
  jobs that ended, then ``polled``), ``signal SIG NAME...``, ``cat FILE...``
  (each file between marker lines) and ``close``;
* on ``close``, or on end-of-file (hvnet gone, even SIGKILLed: its ssh client
  closes the channel), TERMs then KILLs every job still running and removes
  the work dir.

Tools used on the host: sh or bash (builtins), mkdir, mkfifo, stat, rm, cat, date, sleep, ip.
"""

from __future__ import annotations

import queue
import secrets
import shlex
import subprocess
import tempfile
import threading
import time
from collections.abc import Sequence
from pathlib import Path, PurePosixPath
from typing import IO, Optional

from appliance.core.errors import HvnetError
from appliance.core.runner import CommandRunner
from appliance.endpoints.jobs import Job, JobResult, check_name

# Run in each job (by bash where the host has it: its $EPOCHREALTIME stamps without a fork, so 70 jobs
# woken at once are not queued behind 70 runs of date): $1 work dir, $2 name, $3 hold (1: wait at the
# barrier), then the program's argv.
JOB = r"""d=$1 n=$2 h=$3; shift 3
if [ "$h" = 1 ]; then
  exec 5<"$d/go" || exit 125
  echo "$n" >>"$d/ready"
  IFS= read -r _ <&5 || exit 125
  exec 5<&-
fi
if [ -n "${EPOCHREALTIME:-}" ]; then echo "$EPOCHREALTIME" >"$d/$n.stamp"; else date +%s%N >"$d/$n.stamp"; fi
exec "$@"
"""

# $1 base dir, $2 the group's id, $3 hold (1|0), $4 ready polls (10 ms each), $5 marker; then the job lines.
CONTROL = r"""base=$1 id=$2 hold=$3 tries=$4 m=$5
umask 077
set -m 2>/dev/null
d=$base/$id N=0 ended= JS=sh
[ -n "${BASH_VERSION:-}" ] && JS=bash
now() { if [ -n "${EPOCHREALTIME:-}" ]; then T=$EPOCHREALTIME; else T=$(date +%s%N); fi; }
say() { printf '%s\n' "$*"; }
pst() {
  S= T=; l=; read -r l <"/proc/$1/stat" 2>/dev/null || return 1
  l=${l##*) }; set -f; set -- $l; set +f; S=$1 T=${20}
}
ours() { [ -n "$2" ] && pst "$1" && [ "$T" = "$2" ] && [ "$S" != Z ]; }
sig() { kill "-$1" -- "-$2" 2>/dev/null || kill "-$1" "$2" 2>/dev/null; }
stopall() { A=0; while read -r p t n; do ours "$p" "$t" || continue; A=$((A+1)); sig "$1" "$p"; done <"$d/pids"; }
finish() {
  trap '' HUP PIPE; exec 2>/dev/null  # hvnet's side may be gone: nothing may stop the cleaning up
  exec 3>&-
  stopall TERM; i=0
  while [ $i -lt 20 ]; do stopall 0; [ $A -gt 0 ] || break; sleep 0.1; i=$((i+1)); done
  stopall KILL; rm -rf -- "$d"
}
mkdir -p -- "$base" 2>/dev/null
mkdir -m 0700 -- "$d" || { say "error cannot make $d"; exit 1; }
me=$(stat -c %u -- "$d"); bo=$(stat -c '%u %a' -- "$base")
bu=${bo%% *} bm=${bo#* }
if [ "$bu" != "$me" ] && [ "$bu" != 0 ]; then rm -rf -- "$d"; say "error $base is owned by uid $bu"; exit 1; fi
if [ $((0$bm & 022)) -ne 0 ] && [ $((0$bm & 01000)) -eq 0 ]; then
  rm -rf -- "$d"; say "error $base has mode $bm: another user could write there"; exit 1
fi
for o in "$base"/*; do
  [ "$o" != "$d" ] && [ -f "$o/shell" ] && [ ! -L "$o" ] || continue
  read -r sp st <"$o/shell" || continue
  ours "$sp" "$st" && continue
  [ -f "$o/pids" ] && while read -r p t n; do if ours "$p" "$t"; then sig KILL "$p"; fi; done <"$o/pids"
  rm -rf -- "$o"
done
pst $$; echo "$$ $T" >"$d/shell"
: >"$d/pids"; : >"$d/ready"
mkfifo -m 0600 -- "$d/go" || { rm -rf -- "$d"; say "error mkfifo failed"; exit 1; }
exec 3<>"$d/go"
job() {
  n=$1 ns=$2; shift 2
  if [ -n "$ns" ]; then set -- ip netns exec "$ns" "$JS" -c "$J" hvnet-job "$d" "$n" "$hold" "$@"
  else set -- "$JS" -c "$J" hvnet-job "$d" "$n" "$hold" "$@"; fi
  HVNET_ENDPOINT="$id/$n" "$@" </dev/null >"$d/$n.out" 2>"$d/$n.err" 3>&- &
  p=$!; pst "$p"; echo "$p ${T:--} $n" >>"$d/pids"; N=$((N+1))
}
"""

# After the job lines: report, wait at the barrier, then serve hvnet's lines.
SERVE = r"""while read -r p t n; do say "pid $n $p"; done <"$d/pids"
r=0
if [ "$hold" = 1 ]; then
  i=0
  while :; do
    r=0; while IFS= read -r _; do r=$((r+1)); done <"$d/ready"
    [ $r -ge $N ] && break
    a=0; while read -r p t n; do ours "$p" "$t" && a=$((a+1)); done <"$d/pids"
    [ $a -le $r ] && break
    i=$((i+1)); [ $i -ge "$tries" ] && break
    sleep 0.01
  done
fi
say "ready $r $N"
G=; i=0; while [ $i -lt $N ]; do G="$G
"; i=$((i+1)); done
while IFS=' ' read -r cmd args; do
  case $cmd in
  go) now; printf '%s' "$G" >&3; say "released $T" ;;
  poll)
    while read -r p t n; do
      case " $ended " in *" $n "*) continue ;; esac
      ours "$p" "$t" && continue
      wait "$p" 2>/dev/null; st=$?; ended="$ended $n"; say "exit $n $st"
    done <"$d/pids"
    say polled ;;
  signal)
    set -f; set -- $args; set +f; s=$1; shift
    while read -r p t n; do
      case " $* " in *" $n "*) ours "$p" "$t" && sig "$s" "$p" ;; esac
    done <"$d/pids"
    say signalled ;;
  cat)
    set -f; set -- $args; set +f
    for f; do
      [ -f "$d/$f" ] || { say "$m absent $f"; continue; }
      say "$m begin $f"; cat -- "$d/$f"; printf '\n%s end %s\n' "$m" "$f"
    done
    say "$m done" ;;
  close) break ;;
  esac
done
[ "$cmd" = close ] || exec >/dev/null
finish
say closed
"""


def script(jobs: Sequence[Job]) -> str:
    """The control shell's text: the fixed parts, and one ``job`` line per job, every word quoted."""
    lines = [CONTROL, f"J={shlex.quote(JOB)}"]
    for j in jobs:
        words = [check_name(j.name), j.netns or "", *j.argv]
        env = [f"{k}={v}" for k, v in j.env.items()]
        if env:
            words = [words[0], words[1], "env", *env, *words[2:]]
        lines.append("job " + " ".join(shlex.quote(w) for w in words))
    lines.append(SERVE)
    return "\n".join(lines)


def parse_stamp(text: Optional[str]) -> Optional[int]:
    """A stamp in ns since the epoch (the host's clock): bash's ``$EPOCHREALTIME`` (seconds, a decimal
    point or the locale's comma, microseconds) or ``date +%s%N``; None when absent or not a stamp (a
    ``date`` without %N prints the letter N)."""
    if text is None:
        return None
    text = text.strip()
    if not text.isascii():
        return None
    whole, sep, frac = text.replace(",", ".").partition(".")
    if sep and whole.isdigit() and frac.isdigit() and 1 <= len(frac) <= 9:
        return int(whole) * 1_000_000_000 + int(frac.ljust(9, "0"))
    return int(text) if text.isdigit() and len(text) >= 16 else None


def parse_sections(lines: list[str], mark: str) -> dict[str, Optional[str]]:
    """``cat``'s answer: each file's text between its marker lines (None for a file that was absent)."""
    out: dict[str, Optional[str]] = {}
    current: Optional[str] = None
    body: list[str] = []
    for line in lines:
        words = line.split(" ", 2)
        if words[0] == mark and len(words) == 3:
            if current is None and words[1] == "begin":
                current, body = words[2], []
                continue
            if current is None and words[1] == "absent":
                out[words[2]] = None
                continue
            if current == words[2] and words[1] == "end":
                out[current] = "\n".join(body)  # cat's text, then the newline printed before the end marker
                current = None
                continue
        if current is not None:
            body.append(line)
    return out


class RemoteLauncher:
    """Groups on one remote host, through its runner (over SSH: one channel per group)."""

    def __init__(self, runner: CommandRunner, base: PurePosixPath, *, label: str = "host") -> None:
        self.runner = runner
        self.base = base
        self.label = label
        self._shell: Optional[str] = None

    def shell(self) -> str:
        """bash where the host has it (job control: a job and its children are one process group), else sh."""
        if self._shell is None:
            self._shell = "bash" if self.runner.which_optional("bash") else "sh"
        return self._shell

    def group(self, label: str) -> RemoteGroup:
        return RemoteGroup(self, f"{check_name(label)}-{secrets.token_hex(6)}")


class RemoteGroup:
    """Jobs on a remote host held by one control shell (see the module docstring)."""

    clock = "realtime"

    def __init__(self, launcher: RemoteLauncher, gid: str) -> None:
        self.launcher = launcher
        self.id = gid
        self.dir = str(launcher.base / gid)
        self.mark = f"hvnet-{secrets.token_hex(8)}"
        self.ready = 0
        self.released_ns: Optional[int] = None
        self.offset_ns: Optional[int] = None  # the host's clock minus this machine's, at the release
        self.results: dict[str, JobResult] = {}
        self._pids: dict[str, int] = {}
        self._names: list[str] = []
        self._proc: Optional[subprocess.Popen[bytes]] = None
        self._lines: queue.Queue[Optional[str]] = queue.Queue()
        self._err: Optional[IO[bytes]] = None
        self._closed = False

    # -- the channel ---------------------------------------------------------------

    def _send(self, line: str) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        try:
            self._proc.stdin.write((line + "\n").encode())
            self._proc.stdin.flush()
        except (BrokenPipeError, OSError):
            raise self._lost() from None

    def _read(self, timeout: float) -> str:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise HvnetError(f"{self.launcher.label}: no answer from the endpoint shell within {timeout:g} s") from None
        if line is None:
            raise self._lost()
        return line

    def _until(self, last: str, timeout: float = 60.0, *, errors: bool = True) -> list[str]:
        """Lines up to (not including) ``last`` (``errors``: an ``error`` line is the shell's failure)."""
        out = []
        deadline = time.monotonic() + timeout
        while True:
            line = self._read(max(0.1, deadline - time.monotonic()))
            if line == last:
                return out
            if errors and line.startswith("error "):
                raise HvnetError(f"{self.launcher.label}: {line[6:]}")
            out.append(line)

    def _lost(self) -> HvnetError:
        why = ""
        if self._err is not None:
            self._err.seek(0)
            text = self._err.read().decode(errors="replace").strip().splitlines()
            why = f": {text[-1]}" if text else ""
        return HvnetError(f"{self.launcher.label}: the endpoint shell ended{why}")

    def _pump(self) -> None:
        assert self._proc is not None and self._proc.stdout is not None
        for raw in self._proc.stdout:
            text = raw.decode(errors="replace")
            self._lines.put(text[:-1] if text.endswith("\n") else text)
        self._lines.put(None)

    # -- the group ------------------------------------------------------------------

    def start(self, jobs: Sequence[Job], *, hold: bool = True, ready_timeout: float = 30.0) -> None:
        """One channel: the control shell starts every job and reports them at the barrier (or running)."""
        self._names = [j.name for j in jobs]
        if len(set(self._names)) != len(self._names):
            raise ValueError("job names must be unique within a group")
        argv = [self.launcher.shell(), "-c", script(jobs), "hvnet-endpoints", str(self.launcher.base), self.id,
                "1" if hold else "0", str(max(1, int(ready_timeout * 100))), self.mark]  # fmt: skip
        self._err = tempfile.TemporaryFile()  # noqa: SIM115 -- the shell's stderr for as long as the group lives
        self._proc = self.launcher.runner.popen(
            argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self._err, start_new_session=True
        )
        threading.Thread(target=self._pump, name=f"endpoints-{self.id}", daemon=True).start()
        for line in self._until_prefix("ready ", ready_timeout + 60):
            words = line.split()
            if words[0] == "pid" and len(words) == 3 and words[2].isdigit():
                self._pids[words[1]] = int(words[2])
        self.results = {n: JobResult() for n in self._names}

    def _until_prefix(self, prefix: str, timeout: float) -> list[str]:
        out = []
        deadline = time.monotonic() + timeout
        while True:
            line = self._read(max(0.1, deadline - time.monotonic()))
            if line.startswith("error "):
                self.close()
                raise HvnetError(f"{self.launcher.label}: {line[6:]}")
            if line.startswith(prefix):
                self.ready = int(line.split()[1])
                return out
            out.append(line)

    def release(self) -> Optional[int]:
        before = time.time_ns()
        self._send("go")
        line = self._read(30.0)
        after = time.time_ns()
        words = line.split()
        if len(words) == 2 and words[0] == "released":
            self.released_ns = parse_stamp(words[1])
            if self.released_ns is not None:
                self.offset_ns = self.released_ns - (before + after) // 2
        return self.released_ns

    def poll(self) -> dict[str, JobResult]:
        if self._closed or self._proc is None:
            return {}
        self._send("poll")
        ended = {}
        for line in self._until("polled", 60.0):
            words = line.split()
            if len(words) == 3 and words[0] == "exit" and words[1] in self.results:
                r = self.results[words[1]]
                r.returncode = int(words[2]) if words[2].lstrip("-").isdigit() else None
                if r.returncode == 127 and self._pids.get(words[1]) is None:
                    r.returncode = None
                ended[words[1]] = r
        return ended

    def pids(self) -> dict[str, int]:
        return dict(self._pids)

    def signal(self, names: Sequence[str], sig: str) -> None:
        if self._closed or not names:
            return
        for n in names:
            check_name(n)
        if not sig.isalnum():
            raise ValueError(f"not a signal: {sig!r}")
        self._send(f"signal {sig} {' '.join(names)}")
        self._until("signalled", 30.0)

    def cat(self, files: Sequence[str]) -> dict[str, Optional[str]]:
        """Files of the work dir, read back over the channel."""
        for f in files:
            check_name(f)
        out: dict[str, Optional[str]] = {}
        for i in range(0, len(files), 64):  # bounded lines
            self._send("cat " + " ".join(files[i : i + 64]))
            out.update(parse_sections(self._until(f"{self.mark} done", 120.0, errors=False), self.mark))
        return out

    def fetch(self, local_dir: Path) -> None:
        """Outputs and stamps read back: NAME.out / NAME.err written here, stamps into the results."""
        local_dir.mkdir(parents=True, exist_ok=True)
        files = [f"{n}.{suffix}" for n in self._names for suffix in ("out", "err", "stamp")]
        got = self.cat(files)
        for n in self._names:
            for suffix in ("out", "err"):
                (local_dir / f"{n}.{suffix}").write_text(got.get(f"{n}.{suffix}") or "")
            self.results.setdefault(n, JobResult()).started_ns = parse_stamp(got.get(f"{n}.stamp"))

    def read_text(self, name: str) -> Optional[str]:
        return self.cat([name]).get(name)

    def close(self) -> None:
        """``close`` to the control shell: it stops what runs and removes the work dir; then the channel ends."""
        if self._closed:
            return
        self._closed = True
        proc = self._proc
        if proc is None:
            return
        try:
            if proc.poll() is None:
                self._send("close")
                self._until("closed", 30.0)
        except HvnetError:
            pass
        finally:
            if proc.stdin is not None:
                try:
                    proc.stdin.close()
                except OSError:
                    pass
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if self._err is not None:
                self._err.close()

    def __enter__(self) -> RemoteGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
