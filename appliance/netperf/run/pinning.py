"""A case's ``cpus:`` at run time: its processes pinned while its steps run, every thread given back after.

Before anything starts, :func:`refusal` and :func:`failures` check the suite's
placements against the machine: a ``guests:`` list pins only what hvnet starts
on this host's CPUs (namespace guests), and every CPU asked for must be online
where its processes run.  For a case, :class:`Pinning` reads the affinity of
every thread of each pinned process (``taskset -a -p -c PID``), sets the new
list on all of them, reads back what the kernel then reports (what the
results record), and on the way out -- a failure and Ctrl-C included --
gives each thread the list it had.  Commands are argument lists through the
host's runner (quoted one by one over SSH), never a shell string.
"""

from __future__ import annotations

from types import TracebackType
from typing import Any, Callable, Optional

from appliance.core.errors import CommandFailed, HvnetError, UsageError
from appliance.core.runner import CommandRunner
from appliance.netperf.define.cases import Case
from appliance.netperf.define.cpus import CpuPlacement, cpu_set
from appliance.netperf.parse import taskset
from appliance.netperf.run.launch import Endpoint

ONLINE = "/sys/devices/system/cpu/online"


def refusal(cases: list[Case], ends: list[Optional[Endpoint]]) -> None:
    """UsageError (exit 2, nothing started) when a case pins ``guests:`` but an endpoint's processes do not
    run on this machine's CPUs: a VM's run on its vCPUs (over SSH or its guest agent), a remote host's on
    that host's, where hvnet's taskset cannot place them."""
    asked = [c.name for c in cases if c.cpus is not None and c.cpus.guests is not None]
    if not asked:
        return
    far = [ep.name for ep in ends if ep is not None and (ep.remote or ep.in_vm or ep.vm or not ep.netns)]
    if far:
        raise UsageError(
            f"case {asked[0]}: cpus.guests pins netperf, netserver and iperf3 on this machine's CPUs, but "
            f"{', '.join(sorted(set(far)))} run(s) in a VM or on a remote host, whose processes hvnet does not "
            "start on this machine's CPUs; pin ovs-vswitchd alone (cpus: {ovs-vswitchd: LIST})"
        )


def failures(cases: list[Case], host_runner: CommandRunner, local: CommandRunner, host_label: str) -> list[str]:
    """Preflight: every CPU a case asks for exists and is online where its processes run (ovs-vswitchd's on
    the host, the guests' on this machine), and taskset is there to place them."""
    out: list[str] = []
    for where, runner, key in (
        (host_label, host_runner, "vswitchd"),
        ("this machine", local, "guests"),
    ):
        wanted = [(c.name, getattr(c.cpus, key)) for c in cases if c.cpus is not None and getattr(c.cpus, key)]
        if not wanted:
            continue
        if runner.which_optional("taskset") is None:
            out.append(f"cpus: taskset is not installed on {where} (package util-linux)")
            continue
        online = cpu_set((runner.read_text(ONLINE) or "").strip()) or frozenset()
        for name, text in wanted:
            missing = sorted((cpu_set(text) or frozenset()) - online)
            if missing:
                label = "ovs-vswitchd" if key == "vswitchd" else "guests"
                out.append(f"case {name}: cpus.{label} {text}: CPU {', '.join(map(str, missing))} is not online on "
                           f"{where} (online: {(runner.read_text(ONLINE) or '?').strip()})")  # fmt: skip
    return out


class Pinning:
    """A case's placement around its steps: ``with Pinning(...) as p:`` pins, the exit restores each thread.

    ``targets``: (what, runner, pids) -- ovs-vswitchd on the host's runner, the servers hvnet started on
    this machine's.  ``record`` is what the results keep: what was asked and what the kernel reported after.
    """

    def __init__(
        self,
        placement: CpuPlacement,
        targets: list[tuple[str, CommandRunner, list[int], str]],
        problem: Callable[[str], None],
    ) -> None:
        self.placement = placement
        self.targets = targets  # (label, runner, pids, cpu list)
        self.problem = problem  # what could not be given back: a restore problem of the run
        self.saved: list[tuple[str, CommandRunner, dict[int, str]]] = []
        self.record: dict[str, Any] = {"asked": placement.to_json(), "read_back": {}}

    def __enter__(self) -> Pinning:
        try:
            for label, runner, pids, cpus in self.targets:
                for pid in pids:
                    self.saved.append((label, runner, _read(runner, pid)))
                    runner.run(["taskset", "-a", "-p", "-c", cpus, str(pid)], timeout=10)
                    after = _read(runner, pid)
                    self.record["read_back"].setdefault(label, []).append(
                        {"pid": pid, "threads": len(after), "affinity": sorted(set(after.values()))}
                    )
        except BaseException:
            self._restore()
            raise
        return self

    def __exit__(
        self, kind: Optional[type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> None:
        self._restore()

    def _restore(self) -> None:
        """Each saved thread gets its list back; a thread that has ended since has nothing to give back."""
        saved, self.saved = self.saved, []
        for label, runner, threads in saved:
            for tid, cpus in threads.items():
                res = runner.run(["taskset", "-p", "-c", cpus, str(tid)], check=False, timeout=10)
                if res.returncode != 0 and runner.exists(f"/proc/{tid}"):
                    self.problem(f"cpus: {label} thread {tid} keeps its case's CPUs; its own were {cpus}: "
                                 f"{(res.stderr or res.stdout).strip()}")  # fmt: skip


def _read(runner: CommandRunner, pid: int) -> dict[int, str]:
    """Every thread of ``pid`` and its CPU list, as the kernel reports it."""
    try:
        res = runner.run(["taskset", "-a", "-p", "-c", str(pid)], timeout=10)
    except CommandFailed as exc:
        raise HvnetError(f"cpus: cannot read the affinity of pid {pid}: {exc}") from None
    threads = taskset.affinities(res.stdout)
    if not threads:
        raise HvnetError(f"cpus: taskset said nothing of pid {pid}'s threads: {res.stdout.strip()!r}")
    return threads
