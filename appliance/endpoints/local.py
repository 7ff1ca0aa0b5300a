"""A group of jobs on this machine: the fast path, with hvnet's own pipes and one shared monotonic clock.

Each job is pre-spawned as a tiny launcher that reports "ready" and blocks on
a shared pipe; when all are ready the pipe is written (one byte each) and
closed, every launcher wakes at once, stamps ``CLOCK_MONOTONIC`` (shared by
all processes) on its stderr and ``exec``s the program in place, keeping its
PID.  hvnet reaps each PID itself (``wait4``), so its CPU (rusage) is known.
Every job is started in its own session: a Ctrl-C at the terminal reaches
hvnet only, which then stops exactly the PIDs it started.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Optional

from appliance.core.runner import CommandRunner, LocalRunner, in_netns
from appliance.endpoints.jobs import STOP_GRACE_S, Job, JobResult, check_name

# The launcher: ready byte, wait for the release, stamp the time, become the program.
# A release is one byte per launcher; end-of-file means hvnet went away: exit without running the program.
# The stamp carries the launcher's own CPU so far (ip netns exec + Python), which the program's rusage inherits.
LAUNCHER = (
    "import os,sys,time,resource\n"
    "os.write(int(sys.argv[2]),b'r');os.close(int(sys.argv[2]))\n"
    "if not os.read(int(sys.argv[1]),1):sys.exit(125)\n"
    "u=resource.getrusage(resource.RUSAGE_SELF)\n"
    "os.write(2,b'hvnet-start %d %.6f\\n'%(time.monotonic_ns(),u.ru_utime+u.ru_stime))\n"
    "os.execv(sys.argv[3],sys.argv[3:])"
)
START_MARK = "hvnet-start "


class LocalLauncher:
    """Groups on this machine (jobs in its namespaces, or wrapped by the caller: a VM's channel client)."""

    def __init__(self, runner: Optional[CommandRunner] = None, base: Optional[Path] = None) -> None:
        self.runner: CommandRunner = runner or LocalRunner()
        self.base = base

    def group(self, label: str, directory: Optional[Path] = None) -> LocalGroup:
        """A group writing into ``directory`` (kept: a run's raw outputs) or a private temporary one (removed)."""
        check_name(label)
        return LocalGroup(self.runner, directory, label, self.base)


class LocalGroup:
    """Jobs on this machine held at a pipe (see the module docstring)."""

    clock = "monotonic"

    def __init__(self, runner: CommandRunner, directory: Optional[Path], label: str, base: Optional[Path]) -> None:
        self.runner = runner
        self._own_dir = directory is None
        path = Path(tempfile.mkdtemp(prefix=f"hvnet-{label}-", dir=base)) if directory is None else directory
        path.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.dir = str(path)
        self.ready = 0
        self.released_ns: Optional[int] = None
        self.results: dict[str, JobResult] = {}
        self.popens: dict[str, subprocess.Popen[bytes]] = {}
        self._go_w: Optional[int] = None
        self._hold = True
        self._closed = False
        self._reaped: set[str] = set()

    def out_path(self, name: str) -> Path:
        return self.path / f"{name}.out"

    def err_path(self, name: str) -> Path:
        return self.path / f"{name}.err"

    def start(self, jobs: Sequence[Job], *, hold: bool = True, ready_timeout: float = 30.0) -> None:
        """Start every job; with ``hold``, wait until all are blocked on the release pipe."""
        self._hold = hold
        if not hold:
            for job in jobs:
                self._spawn(job, list(job.argv), ())
            self.ready = len(jobs)
            return
        go_r, self._go_w = os.pipe()
        ready_r, ready_w = os.pipe()
        try:
            try:
                launcher = [sys.executable, "-I", "-S", "-c", LAUNCHER, str(go_r), str(ready_w)]
                for job in jobs:
                    self._spawn(job, [*launcher, *job.argv], (go_r, ready_w))
            finally:
                os.close(go_r)
                os.close(ready_w)
            self.ready = _count_ready(ready_r, len(jobs), ready_timeout)
        finally:
            os.close(ready_r)

    def _spawn(self, job: Job, argv: list[str], fds: tuple[int, ...]) -> None:
        cmd = in_netns(job.netns, argv) if job.netns else argv
        with open(self.out_path(job.name), "wb") as out, open(self.err_path(job.name), "wb") as err:
            self.popens[job.name] = self.runner.popen(
                cmd, stdout=out, stderr=err, pass_fds=fds, start_new_session=True, env=dict(job.env) or None
            )
        self.results[job.name] = JobResult()

    def release(self) -> Optional[int]:
        """Let every ready launcher go; returns the release time (monotonic ns)."""
        if self._go_w is None:
            return self.released_ns
        self.released_ns = time.monotonic_ns()
        os.write(self._go_w, b"g" * len(self.popens))  # one byte each: at most 256, far below the pipe's capacity
        self._close_go()
        return self.released_ns

    def _close_go(self) -> None:
        if self._go_w is not None:
            os.close(self._go_w)
            self._go_w = None

    def poll(self) -> dict[str, JobResult]:
        """Reap by PID (``wait4(pid, WNOHANG)``, never ``wait(-1)``: other threads' children keep their status)."""
        ended = {}
        for name, p in self.popens.items():
            if name in self._reaped:
                continue
            r = self.results[name]
            try:
                pid, status, usage = os.wait4(p.pid, os.WNOHANG)
            except ChildProcessError:
                pid, status, usage = p.pid, 0, None
            if pid == 0:
                continue
            if usage is not None:
                p.returncode = os.waitstatus_to_exitcode(status)
            r.returncode = p.returncode
            r.cpu_s = usage.ru_utime + usage.ru_stime if usage is not None else 0.0
            stamp = read_start(self.err_path(name)) if self._hold else None
            if stamp is not None:
                r.started_ns, r.launcher_cpu_s = stamp
            self._reaped.add(name)
            ended[name] = r
        return ended

    def pids(self) -> dict[str, int]:
        return {n: p.pid for n, p in self.popens.items()}

    def signal(self, names: Sequence[str], sig: str) -> None:
        number = getattr(signal, f"SIG{sig}")
        for n in names:
            p = self.popens.get(n)
            if p is not None and p.returncode is None:
                try:
                    p.send_signal(number)
                except ProcessLookupError:
                    pass

    def fetch(self, local_dir: Path) -> None:
        """The outputs are already here; copied when another directory is asked for."""
        if Path(local_dir).resolve() == self.path.resolve():
            return
        local_dir.mkdir(parents=True, exist_ok=True)
        for name in self.popens:
            for f in (self.out_path(name), self.err_path(name)):
                shutil.copyfile(f, local_dir / f.name)

    def read_text(self, name: str) -> Optional[str]:
        check_name(name)
        try:
            return (self.path / name).read_text(errors="replace")
        except OSError:
            return None

    def kill(self) -> None:
        """Error paths: launchers not yet released see end-of-file and exit; the rest are killed."""
        self._close_go()
        for p in self.popens.values():
            if p.poll() is None:
                try:
                    p.send_signal(signal.SIGKILL)
                except ProcessLookupError:
                    pass
                p.wait()

    def close(self) -> None:
        """TERM what still runs, KILL it after the grace, remove a private temporary dir."""
        if self._closed:
            return
        self._closed = True
        self._close_go()
        running = [p for p in self.popens.values() if p.poll() is None]
        for p in running:
            p.send_signal(signal.SIGTERM)
        for p in running:
            try:
                p.wait(timeout=STOP_GRACE_S)
            except subprocess.TimeoutExpired:
                p.kill()
                p.wait()
        if self._own_dir:
            shutil.rmtree(self.path, ignore_errors=True)

    def __enter__(self) -> LocalGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _count_ready(ready_r: int, wanted: int, timeout: float) -> int:
    got = 0
    deadline = time.monotonic() + timeout
    os.set_blocking(ready_r, False)
    while got < wanted and time.monotonic() < deadline:
        try:
            chunk = os.read(ready_r, 4096)
        except BlockingIOError:
            time.sleep(0.002)
            continue
        if not chunk:  # every launcher has exited or closed its end
            break
        got += len(chunk)
    return got


def read_start(err: Path) -> Optional[tuple[int, float]]:
    """The launcher's stamp: (start time in monotonic ns, its own CPU seconds before becoming the program)."""
    try:
        for line in err.read_text(errors="replace").splitlines():
            if line.startswith(START_MARK):
                ns, cpu = line[len(START_MARK) :].split()
                return int(ns), float(cpu)
    except (OSError, ValueError):
        pass
    return None
