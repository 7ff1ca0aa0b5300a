"""Processes the runner starts: netservers, and batches of netperf instances started together.

Concurrent netperfs are not synchronised by netperf itself; started one
after another, the first runs alone for as long as the rest take to spawn.
A batch therefore pre-spawns every instance as a tiny launcher that reports
"ready" and blocks on a shared pipe; when all are ready the pipe is closed,
every launcher wakes at once, stamps ``CLOCK_MONOTONIC`` (shared by all
processes) and ``exec``s netperf in place, keeping its PID.  The stamps give
the start spread that is reported with every step.

Every process is started in its own session, so a Ctrl-C at the terminal
reaches hvnet only; hvnet then stops exactly the PIDs it started.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

import psutil

from ..guests import GuestEndpoint
from ..runner import CommandRunner, LocalRunner

# The launcher: ready byte, wait for the release, stamp the time, become netperf.
# A release is one byte per launcher; end-of-file means hvnet went away: exit without running netperf.
# The stamp carries the launcher's own CPU so far (ip netns exec + Python), which netperf's rusage inherits.
_LAUNCHER = (
    "import os,sys,time,resource\n"
    "os.write(int(sys.argv[2]),b'r');os.close(int(sys.argv[2]))\n"
    "if not os.read(int(sys.argv[1]),1):sys.exit(125)\n"
    "u=resource.getrusage(resource.RUSAGE_SELF)\n"
    "os.write(2,b'hvnet-start %d %.6f\\n'%(time.monotonic_ns(),u.ru_utime+u.ru_stime))\n"
    "os.execv(sys.argv[3],sys.argv[3:])"
)
START_MARK = "hvnet-start "
QUIET_POLL_S = 0.5  # while the instances measure: hvnet's process stays out of their way
REAP_POLL_S = 0.05  # after the test length: reap promptly
GUEST_CPU_MARK = "hvnet-guest-cpu "  # appliance.lab.vm.gexec's last stderr line: the guest process's CPU seconds


@dataclass(frozen=True)
class Endpoint:
    """Where a process runs: a guest (a lab namespace, a QEMU VM through its agent channel),
    or, with no guest, this host."""

    name: str
    guest: Optional[GuestEndpoint] = None

    @staticmethod
    def of(guest: GuestEndpoint) -> Endpoint:
        return Endpoint(guest.name, guest)

    @property
    def address(self) -> Optional[str]:
        return self.guest.address if self.guest else None

    @property
    def vif(self) -> Optional[str]:
        return self.guest.vif if self.guest else None

    @property
    def in_vm(self) -> bool:
        return self.guest is not None and self.guest.in_vm

    def wrap(self, argv: list[str]) -> list[str]:
        if self.guest is None:
            return list(argv)
        return self.guest.argv(argv, stdin=False if self.in_vm else None)  # never hvnet's own stdin in a VM

    def tool(self, name: str, host_path: str) -> str:
        """The program to run here: the host's (found by preflight) or, in a VM, the guest's own on its PATH."""
        return name if self.in_vm else host_path


class Netserver:
    """A netserver hvnet started in a guest; stopped by its PID (and the children it forked)."""

    def __init__(
        self, endpoint: Endpoint, port: int, log: Path, program: str, runner: Optional[CommandRunner] = None
    ) -> None:
        self.runner: CommandRunner = runner or LocalRunner()
        self.endpoint = endpoint
        self.program = program  # the netserver preflight found
        self.port = port
        self.log = log
        self.popen: Optional[subprocess.Popen[bytes]] = None

    def start(self) -> None:
        argv = self.endpoint.wrap([self.program, "-D", "-4", "-p", str(self.port)])
        with open(self.log, "ab") as log:
            self.popen = self.runner.popen(argv, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)

    @property
    def pid(self) -> Optional[int]:
        return self.popen.pid if self.popen else None

    def alive(self) -> bool:
        return self.popen is not None and self.popen.poll() is None

    def exit_status(self) -> Optional[int]:
        return self.popen.poll() if self.popen else None

    def stop(self) -> None:
        if self.popen is None:
            return
        stop_tree(self.popen)
        self.popen = None


def stop_tree(
    popen: subprocess.Popen, grace: float = 2.0, *, sig: int = signal.SIGTERM, children_too: bool = True
) -> None:
    """``sig`` to a process we started (and to the children it forked, unless ``children_too`` is
    false: a daemon whose parent tells its workers, as pmacct's core does), then SIGKILL what is left."""
    try:
        children = psutil.Process(popen.pid).children(recursive=True)
    except psutil.Error:
        children = []
    for p in [popen, *children] if children_too else [popen]:
        try:
            p.send_signal(sig)
        except (ProcessLookupError, psutil.Error):
            pass
    try:
        popen.wait(timeout=grace)
    except subprocess.TimeoutExpired:
        popen.kill()
        popen.wait(timeout=grace)
    _, alive = psutil.wait_procs(children, timeout=grace)
    for c in alive:
        try:
            c.kill()
        except psutil.Error:
            pass


@dataclass
class Outcome:
    """How one instance ended."""

    returncode: Optional[int]
    cpu_s: float  # user + system seconds of the process (wait4's rusage), launcher included until corrected
    timed_out: Optional[float] = None
    started_ns: Optional[int] = None
    launcher_cpu_s: float = 0.0  # what the launcher used before becoming netperf

    @property
    def netperf_cpu_s(self) -> float:
        return max(0.0, self.cpu_s - self.launcher_cpu_s)


@dataclass
class Batch:
    """N instances, pre-spawned and released together."""

    argvs: list[list[str]]
    endpoint: Endpoint
    out_dir: Path
    runner: CommandRunner = field(default_factory=LocalRunner)
    popens: list[subprocess.Popen] = field(default_factory=list)
    released_ns: Optional[int] = None
    outcomes: dict[int, Outcome] = field(default_factory=dict)
    ready: int = 0  # launchers that reported ready before the release
    finished_ns: Optional[int] = None  # when the last instance was reaped
    cpu_unmeasured: int = 0  # VM instances whose guest CPU never came back (their CPU is unknown, not 0)
    _go_w: Optional[int] = None

    def out_path(self, i: int) -> Path:
        return self.out_dir / f"instance-{i:03d}.out"

    def err_path(self, i: int) -> Path:
        return self.out_dir / f"instance-{i:03d}.err"

    def spawn(self, ready_timeout: float = 30.0) -> None:
        """Start every launcher and wait until all are blocked on the release pipe."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        go_r, self._go_w = os.pipe()
        ready_r, ready_w = os.pipe()
        try:
            self._spawn_all(go_r, ready_w, ready_r, ready_timeout)
        finally:
            os.close(ready_r)

    def _spawn_all(self, go_r: int, ready_w: int, ready_r: int, ready_timeout: float) -> None:
        try:
            launcher = [sys.executable, "-I", "-S", "-c", _LAUNCHER, str(go_r), str(ready_w)]
            env = None
            if self.endpoint.in_vm:
                # The launcher waits on the host and becomes the channel client; netperf runs in the
                # guest, whose CPU comes back on the client's last stderr line.
                env = {"HVNET_GEXEC_CPU": "1"}
            for i, argv in enumerate(self.argvs):
                if self.endpoint.in_vm:
                    cmd = [*launcher, *self.endpoint.wrap(argv)]
                else:
                    cmd = self.endpoint.wrap([*launcher, *argv])
                with open(self.out_path(i), "wb") as out, open(self.err_path(i), "wb") as err:
                    self.popens.append(
                        self.runner.popen(
                            cmd, stdout=out, stderr=err, pass_fds=(go_r, ready_w), start_new_session=True, env=env
                        )
                    )
        finally:
            os.close(go_r)
            os.close(ready_w)
        got = 0
        deadline = time.monotonic() + ready_timeout
        os.set_blocking(ready_r, False)
        while got < len(self.argvs) and time.monotonic() < deadline:
            try:
                chunk = os.read(ready_r, 4096)
            except BlockingIOError:
                time.sleep(0.002)
                continue
            if not chunk:  # every launcher has exited or closed its end
                break
            got += len(chunk)
        self.ready = got

    def release(self) -> int:
        """Let every ready launcher go; returns the release time (monotonic ns)."""
        assert self._go_w is not None
        self.released_ns = time.monotonic_ns()
        os.write(self._go_w, b"g" * len(self.popens))  # one byte each: at most 256, far below the pipe's capacity
        self._close_go()
        return self.released_ns

    def _close_go(self) -> None:
        if self._go_w is not None:
            os.close(self._go_w)
            self._go_w = None

    def wait(self, deadline_s: float, should_stop: Callable[[], bool], quiet_s: float = 0.0) -> None:
        """Reap every instance (rusage included); stop the ones still running at the deadline or on request.

        Each PID is waited for by number (``wait4(pid, WNOHANG)``), never
        ``wait(-1)``: other threads' subprocesses must keep their exit status.
        For the first ``quiet_s`` seconds (the test length) hvnet looks only
        every half second: on a small host every wake-up of hvnet's process
        can move netperf, netserver or the switch to another core, which
        changes a request/response rate; an instance that ends early is
        reaped a little later, its rusage kept by the kernel meanwhile.
        """
        pending = dict(enumerate(self.popens))
        start = time.monotonic()
        end = start + deadline_s
        stopped: Optional[float] = None  # seconds after which instances were stopped
        killed = False
        while pending:
            for i, p in list(pending.items()):
                try:
                    pid, status, usage = os.wait4(p.pid, os.WNOHANG)
                except ChildProcessError:
                    pid, status, usage = p.pid, 0, None
                if pid == 0:
                    continue
                p.returncode = os.waitstatus_to_exitcode(status) if usage is not None else p.returncode
                cpu = usage.ru_utime + usage.ru_stime if usage is not None else 0.0
                self.outcomes[i] = Outcome(p.returncode, cpu, stopped)
                del pending[i]
            if not pending:
                break
            now = time.monotonic()
            if stopped is None and (now > end or should_stop()):
                stopped = deadline_s if now > end else 0.0
                for p in pending.values():
                    _signal(p, signal.SIGTERM)
                end = now + 2.0
            elif stopped is not None and not killed and now > end:
                for p in pending.values():
                    _signal(p, signal.SIGKILL)
                killed = True
            time.sleep(QUIET_POLL_S if now < start + quiet_s and stopped is None else REAP_POLL_S)
        self.finished_ns = time.monotonic_ns()
        for i in range(len(self.popens)):
            stamp = read_start(self.err_path(i))
            if stamp is not None:
                self.outcomes[i].started_ns, self.outcomes[i].launcher_cpu_s = stamp
            if self.endpoint.in_vm:
                # Host rusage is the channel client's, not netperf's: use what the guest measured, or nothing.
                guest_cpu = read_guest_cpu(self.err_path(i))
                self.outcomes[i].cpu_s = guest_cpu if guest_cpu is not None else 0.0
                self.outcomes[i].launcher_cpu_s = 0.0
                self.cpu_unmeasured += guest_cpu is None

    def kill(self) -> None:
        """Stop every instance still running (error paths); by PID, only ours."""
        self._close_go()  # launchers not yet released see end-of-file and exit without running netperf
        for p in self.popens:
            if p.poll() is None:
                _signal(p, signal.SIGKILL)
                p.wait()


def _signal(p: subprocess.Popen, sig: int) -> None:
    try:
        p.send_signal(sig)
    except ProcessLookupError:
        pass


def read_start(err: Path) -> Optional[tuple[int, float]]:
    """The launcher's stamp: (start time in monotonic ns, its own CPU seconds before becoming netperf)."""
    try:
        for line in err.read_text(errors="replace").splitlines():
            if line.startswith(START_MARK):
                ns, cpu = line[len(START_MARK) :].split()
                return int(ns), float(cpu)
    except (OSError, ValueError):
        pass
    return None


def read_guest_cpu(err: Path) -> Optional[float]:
    """A QEMU guest process's CPU seconds, as the channel client reported them."""
    try:
        for line in reversed(err.read_text(errors="replace").splitlines()):
            if line.startswith(GUEST_CPU_MARK):
                return float(line[len(GUEST_CPU_MARK) :])
    except (OSError, ValueError):
        pass
    return None


def strip_start(text: str) -> str:
    """netperf's own stderr, without the launcher's stamp (or the channel client's CPU line)."""
    return "\n".join(ln for ln in text.splitlines() if not ln.startswith((START_MARK, GUEST_CPU_MARK)))
