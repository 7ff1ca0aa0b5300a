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

import time
from collections.abc import Callable, Sequence
from pathlib import PurePosixPath
from typing import TYPE_CHECKING, Optional

from appliance.endpoints.jobs import (
    NAME,
    QUIET_POLL_S,
    REAP_POLL_S,
    STOP_GRACE_S,
    Group,
    Job,
    JobResult,
    Launcher,
    check_name,
)

if TYPE_CHECKING:
    from appliance.switch.host import Host

__all__ = ["NAME", "STOP_GRACE_S", "Group", "Job", "JobResult", "Launcher", "check_name", "launcher_for", "spread_ms",
           "wait_all"]  # fmt: skip


def launcher_for(host: Host, *, remote: Optional[bool] = None) -> Launcher:
    """The launcher for ``host``: its runner's remote shell, or this machine's fast path.

    ``remote=False`` forces the local path (a lab host's namespaces are this machine's).
    """
    from appliance.endpoints.local import LocalLauncher
    from appliance.endpoints.remote import RemoteLauncher

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
    measured processes to another core.  A group whose every look starts a
    process where the jobs run (``poll_while_quiet = False``: a VM reached
    through its guest agent) is not looked at during that time at all.
    """
    quiet_poll = getattr(group, "poll_while_quiet", True)
    pending = set(names) - {n for n, r in group.results.items() if r.returncode is not None or r.stopped}
    start = time.monotonic()
    end = start + deadline_s
    stopped: Optional[float] = None
    killed = False
    while pending:
        if quiet_poll or stopped is not None or time.monotonic() >= start + quiet_s:
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
