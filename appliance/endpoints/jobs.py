"""What a group of endpoint jobs is made of: a job, its result, and the group and launcher interfaces.

Apart from :mod:`appliance.endpoints` itself so that its two implementations (:mod:`.local`,
:mod:`.remote`) and the package that chooses between them import these without a cycle.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional, Protocol

from appliance.core.errors import UsageError

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
