"""Processes the runner starts: netservers, and batches of netperf instances started together.

Concurrent netperfs are not synchronised by netperf itself; started one
after another, the first runs alone for as long as the rest take to spawn.
A batch therefore pre-spawns every instance at a barrier and releases them
together; each stamps its start in its host's clock right before it becomes
netperf, and the stamps give the start spread reported with every step.
The barrier, the stamps and stopping by PID are :mod:`appliance.endpoints`':
this machine's pipes and ``CLOCK_MONOTONIC`` for a guest here, one control
shell over SSH (a FIFO, ``date +%s%N`` on that host) for a guest on a remote
host.

Every process is started in its own session (or, remotely, by the control
shell), so a Ctrl-C at the terminal reaches hvnet only; hvnet then stops
exactly the PIDs it started.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Optional

import psutil

from appliance.core.runner import CommandRunner, LocalRunner
from appliance.endpoints import Group, Job, JobResult, launcher_for, wait_all
from appliance.endpoints.guests import GuestEndpoint
from appliance.endpoints.local import START_MARK, LocalLauncher, read_start

if TYPE_CHECKING:
    from appliance.switch.host import Host

__all__ = ["Batch", "Endpoint", "Netserver", "Outcome", "read_start", "stop_tree", "strip_start"]

GUEST_CPU_MARK = "hvnet-guest-cpu "  # appliance.lab.vm.gexec's last stderr line: the guest process's CPU seconds


@dataclass(frozen=True)
class Endpoint:
    """Where a process runs: a guest (a lab namespace, a probe's namespace on a remote host, a QEMU VM
    through its agent channel), or, with no guest, this host."""

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

    @property
    def remote(self) -> bool:
        """Not this machine's: a namespace on the driven host (its processes start over that host's runner)
        or a real VM (through its own access); either way a group there starts them and reads them back."""
        return self.guest is not None and (self.guest.remote or self.guest.access is not None)

    @property
    def vm(self) -> Optional[str]:
        """A real VM's label (None: a lab guest or a probe)."""
        return self.guest.access.label if self.guest is not None and self.guest.access is not None else None

    @property
    def netns(self) -> Optional[str]:
        return self.guest.netns if self.guest is not None and not self.in_vm else None

    def wrap(self, argv: list[str]) -> list[str]:
        """The argv that runs ``argv`` in the guest, for :meth:`runner_for`'s runner."""
        if self.guest is None:
            return list(argv)
        return self.guest.argv(argv, stdin=False if self.in_vm else None)  # never hvnet's own stdin in a VM

    def runner_for(self, host: Host) -> CommandRunner:
        """Where a one-off command in this guest runs: a real VM's own runner, the host's runner for a remote
        guest, else this machine."""
        if self.guest is not None and self.guest.access is not None:
            return self.guest.access.runner
        return host.runner if self.remote else host.local_runner

    def group(self, host: Optional[Host], runner: CommandRunner, out_dir: Path, label: str) -> Group:
        """A group of :mod:`appliance.endpoints` for processes in this guest (outputs end up in ``out_dir``)."""
        if self.guest is not None and self.guest.access is not None:
            return self.guest.access.launcher.group(label)
        if self.remote:
            if host is None:
                raise ValueError(f"{self.name} is on a remote host: the batch needs that host")
            return launcher_for(host, remote=True).group(label)
        return LocalLauncher(runner).group(label, out_dir)

    def tool(self, name: str, host_path: str) -> str:
        """The program to run here: the host's (found by preflight) or, in a VM, the guest's own on its PATH."""
        return name if self.in_vm or self.vm else host_path


class Netserver:
    """A netserver hvnet started in a guest; stopped by its PID (and the children it forked)."""

    def __init__(
        self,
        endpoint: Endpoint,
        port: int,
        log: Path,
        program: str,
        runner: Optional[CommandRunner] = None,
        host: Optional[Host] = None,
    ) -> None:
        self.runner: CommandRunner = runner or LocalRunner()
        self.endpoint = endpoint
        self.program = program  # the netserver preflight found
        self.port = port
        self.log = log
        self.host = host
        self.popen: Optional[subprocess.Popen[bytes]] = None
        self.group: Optional[Group] = None  # a remote guest's: one control shell on its host

    def start(self) -> None:
        argv = [self.program, "-D", "-4", "-p", str(self.port)]
        if self.endpoint.remote:
            self.group = self.endpoint.group(self.host, self.runner, self.log.parent, "netserver")
            self.group.start([Job("netserver", tuple(argv), netns=self.endpoint.netns)], hold=False)
            return
        with open(self.log, "ab") as log:
            self.popen = self.runner.popen(
                self.endpoint.wrap(argv), stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )

    @property
    def pid(self) -> Optional[int]:
        if self.group is not None:
            return self.group.pids().get("netserver")
        return self.popen.pid if self.popen else None

    def alive(self) -> bool:
        if self.group is not None:
            return self.exit_status() is None
        return self.popen is not None and self.popen.poll() is None

    def exit_status(self) -> Optional[int]:
        if self.group is not None:
            self.group.poll()
            return self.group.results.get("netserver", JobResult()).returncode
        return self.popen.poll() if self.popen else None

    def stop(self) -> None:
        if self.group is not None:
            self.group.signal(["netserver"], "TERM")
            wait_all(self.group, ["netserver"], 2.0, lambda: False)
            self.group.fetch(self.log.parent)  # netserver.out / netserver.err beside the run
            self.group.close()
            self.group = None
            return
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
    """N instances, pre-spawned and released together: a group of :mod:`appliance.endpoints` on the
    endpoint's host (this machine's fast path, or one control shell on a remote host).

    ``clients``: where each instance runs when the step has several client -> server pairs (guests the
    endpoint's group can start: this machine's namespaces and QEMU guests, or one remote host's); empty:
    every instance in ``endpoint``."""

    argvs: list[list[str]]
    endpoint: Endpoint
    out_dir: Path
    runner: CommandRunner = field(default_factory=LocalRunner)
    host: Optional[Host] = None  # the driven host: a remote endpoint's instances start there
    group: Optional[Group] = None
    released_ns: Optional[int] = None
    outcomes: dict[int, Outcome] = field(default_factory=dict)
    ready: int = 0  # launchers that reported ready before the release
    finished_ns: Optional[int] = None  # when the last instance was reaped (the group's clock)
    cpu_unmeasured: int = 0  # instances whose CPU never came back (a VM's, a remote host's): unknown, not 0
    clients: list[Endpoint] = field(default_factory=list)

    def client(self, i: int) -> Endpoint:
        """Where instance ``i`` runs."""
        return self.clients[i] if self.clients else self.endpoint

    def out_path(self, i: int) -> Path:
        return self.out_dir / f"{_name(i)}.out"

    def err_path(self, i: int) -> Path:
        return self.out_dir / f"{_name(i)}.err"

    def spawn(self, ready_timeout: float = 30.0) -> None:
        """Start every instance and wait until all are blocked at the barrier."""
        self.out_dir.mkdir(parents=True, exist_ok=True)
        self.group = self.endpoint.group(self.host, self.runner, self.out_dir, "batch")
        self.group.start([self._job(i, argv) for i, argv in enumerate(self.argvs)], ready_timeout=ready_timeout)
        self.ready = self.group.ready

    def _job(self, i: int, argv: list[str]) -> Job:
        client = self.client(i)
        if client.in_vm:
            # The launcher waits on the host and becomes the channel client; netperf runs in the
            # guest, whose CPU comes back on the client's last stderr line.
            return Job(_name(i), tuple(client.wrap(argv)), env={"HVNET_GEXEC_CPU": "1"})
        return Job(_name(i), tuple(argv), netns=client.netns)

    def release(self) -> Optional[int]:
        """Let every ready instance go; returns the release time (the group's clock, ns)."""
        assert self.group is not None
        self.released_ns = self.group.release()
        return self.released_ns

    def wait(self, deadline_s: float, should_stop: Callable[[], bool], quiet_s: float = 0.0) -> None:
        """Reap every instance; stop the ones still running at the deadline or on request (see wait_all).

        A remote group's outputs and stamps are read back into ``out_dir`` and its work dir removed.
        """
        assert self.group is not None
        names = [_name(i) for i in range(len(self.argvs))]
        results = wait_all(self.group, names, deadline_s, should_stop, quiet_s)
        self.finished_ns = time.monotonic_ns() if self.group.clock == "monotonic" else time.time_ns() + (
            getattr(self.group, "offset_ns", None) or 0)  # fmt: skip
        if self.endpoint.remote:
            self.group.fetch(self.out_dir)
            self.group.close()
        for i, name in enumerate(names):
            r = results.get(name) or JobResult()
            self.outcomes[i] = Outcome(r.returncode, r.cpu_s or 0.0, r.stopped, r.started_ns, r.launcher_cpu_s)
            if self.client(i).in_vm:
                # Host rusage is the channel client's, not netperf's: use what the guest measured, or nothing.
                guest_cpu = read_guest_cpu(self.err_path(i))
                self.outcomes[i].cpu_s = guest_cpu if guest_cpu is not None else 0.0
                self.outcomes[i].launcher_cpu_s = 0.0
                self.cpu_unmeasured += guest_cpu is None
            elif r.cpu_s is None:
                self.cpu_unmeasured += 1

    def kill(self) -> None:
        """Stop every instance still running (error paths); by PID, only ours."""
        if self.group is None:
            return
        kill = getattr(self.group, "kill", None)
        if kill is not None:
            kill()  # launchers not yet released see end-of-file and exit without running netperf
        else:
            self.group.close()


def _name(i: int) -> str:
    return f"instance-{i:03d}"


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
