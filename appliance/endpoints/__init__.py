"""Processes a measurement runs on a host, started together: one interface, here or over SSH.

A measurement starts many programs at once on one host -- netperf instances,
netservers, iperf3, tcpdump captures -- and needs them released together,
stamped by that host's clock, stopped by PID and their output read back.
Started one SSH call each, a hundred captures or 256 netperfs would need a
hundred channels (sshd allows ten per connection) and would start seconds
apart; so a :class:`Group` on a remote host is **one** control shell there
(:mod:`.remote`), and on this machine the pre-spawned launchers of
:mod:`.local`.  The engine asks :func:`launcher_for` and sees the same
:class:`Group` either way::

    group = launcher_for(host).group("rep1")      # a private work dir there (0700, files 0600)
    group.start([Job("i000", argv, netns="ns")], hold=True)   # spawned, blocked at the barrier
    group.release()                               # all go at once; stamps in the host's clock
    results = group.wait(deadline_s, should_stop) # name -> JobResult; stopped at the deadline
    group.fetch(local_dir)                        # NAME.out / NAME.err here
    group.close()                                 # stops what still runs, removes the work dir
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Optional, Protocol

from ..errors import UsageError

if TYPE_CHECKING:
    from ..host import Host

NAME = re.compile(r"^[A-Za-z0-9_.-]{1,64}$")
QUIET_POLL_S = 0.5  # while the jobs measure: hvnet's process stays out of their way
REAP_POLL_S = 0.05  # after the test length: reap promptly
STOP_GRACE_S = 2.0  # after SIGTERM, before SIGKILL


def check_name(name: str) -> str:
    """A job's or group's name: it names files in the work dir, so it is plain."""
    if not NAME.match(name) or name.startswith("."):
        raise UsageError(f"endpoint job name {name!r}: letters, digits, '_', '.', '-' only (at most 64)")
    return name


@dataclass(frozen=True)
class Job:
    """One program to start: its argv (never a shell string), optionally in a network namespace of that host."""

    name: str
    argv: tuple[str, ...]
    netns: Optional[str] = None
    env: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        check_name(self.name)
        object.__setattr__(self, "argv", tuple(self.argv))
        if not self.argv:
            raise ValueError(f"job {self.name}: empty argv")


@dataclass
class JobResult:
    """How one job ended, as far as it is known."""

    returncode: Optional[int] = None  # None: not known (not reaped, or reaped by no one who could say)
    started_ns: Optional[int] = None  # the job's own stamp right before it ran, in the group's clock
    stopped: Optional[float] = None  # stopped by hvnet: after this many seconds (0.0: on request)
    cpu_s: Optional[float] = None  # user + system seconds (rusage): this machine only; None is unknown
    launcher_cpu_s: float = 0.0  # what the local launcher used before it became the program


class Group(Protocol):
    """Jobs started together on one host (see the module docstring)."""

    dir: str  # the work dir on that host, known before start (an argv may name a file in it)
    clock: str  # "monotonic" (this machine) or "realtime" (a remote host's date +%s%N)
    ready: int  # jobs that were at the barrier when it was released
    released_ns: Optional[int]  # the release, in the group's clock
    results: dict[str, JobResult]

    def start(self, jobs: Sequence[Job], *, hold: bool = True, ready_timeout: float = 30.0) -> None: ...

    def release(self) -> Optional[int]: ...

    def poll(self) -> dict[str, JobResult]:
        """Jobs that ended since the last poll (their results)."""
        ...

    def pids(self) -> dict[str, int]:
        """Each job's PID on its host."""
        ...

    def signal(self, names: Sequence[str], sig: str) -> None:
        """``sig`` (TERM, KILL, USR1...) to the named jobs still running -- by PID, only ours."""
        ...

    def fetch(self, local_dir: Path) -> None:
        """Every job's NAME.out and NAME.err into ``local_dir`` (read back from the host)."""
        ...

    def read_text(self, name: str) -> Optional[str]:
        """One small file of the work dir (a job's stderr), None when absent."""
        ...

    def close(self) -> None:
        """Stop what still runs (TERM, then KILL), remove the work dir; idempotent."""
        ...


class Launcher(Protocol):
    """Makes groups on one host."""

    def group(self, label: str) -> Group: ...


def launcher_for(host: Host, *, remote: Optional[bool] = None) -> Launcher:
    """The launcher for ``host``: its runner's remote shell, or this machine's fast path.

    ``remote=False`` forces the local path (a lab host's namespaces are this machine's).
    """
    from .local import LocalLauncher
    from .remote import RemoteLauncher

    if remote is None:
        remote = not host.runner.local
    if not remote:
        return LocalLauncher()
    return RemoteLauncher(host.runner, PurePosixPath(str(host.paths.endpoints_dir)), label=host.label or "local")


def wait_all(
    group: Group,
    names: Sequence[str],
    deadline_s: float,
    should_stop: Callable[[], bool],
    quiet_s: float = 0.0,
) -> dict[str, JobResult]:
    """Reap every job; stop (TERM, then KILL) the ones still running at the deadline or on request.

    For the first ``quiet_s`` seconds (the test length) hvnet looks only
    every half second: on a small host each wake-up of hvnet can move the
    measured processes to another core.
    """
    pending = set(names) - {n for n, r in group.results.items() if r.returncode is not None or r.stopped}
    start = time.monotonic()
    end = start + deadline_s
    stopped: Optional[float] = None
    killed = False
    while pending:
        pending -= set(group.poll())
        if not pending:
            break
        now = time.monotonic()
        if stopped is None and (now > end or should_stop()):
            stopped = deadline_s if now > end else 0.0
            for n in pending:
                group.results.setdefault(n, JobResult()).stopped = stopped
            group.signal(sorted(pending), "TERM")
            end = now + STOP_GRACE_S
        elif stopped is not None and not killed and now > end:
            group.signal(sorted(pending), "KILL")
            killed = True
        elif killed and now > end + STOP_GRACE_S:
            break  # not reaped after SIGKILL: its status stays unknown
        time.sleep(QUIET_POLL_S if now < start + quiet_s and stopped is None else REAP_POLL_S)
    return group.results


def spread_ms(group: Group) -> Optional[float]:
    """Time between the first and the last job's start stamp (ms), one clock: the group's host's."""
    ts = [r.started_ns for r in group.results.values() if r.started_ns is not None]
    if len(ts) < 2:
        return 0.0 if ts else None
    return (max(ts) - min(ts)) / 1e6
