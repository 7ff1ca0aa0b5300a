"""A case's ``cpus:`` at run time: its processes pinned while its steps run, every thread given back after.

Before anything starts, :func:`refusal` and :func:`failures` check the suite's
placements against the machine: a ``guests:`` list pins only what hvnet starts
on this host's CPUs (namespace guests), and every CPU asked for must be online
where its processes run.  For a case, :class:`Pinning` reads the affinity of
every thread of each pinned process (``taskset -a -p -c PID``), sets the new
list on all of them, reads back what the kernel then reports (what the
results record), and on the way out -- a failure and Ctrl-C included --
gives each thread the list it had; a thread the process started during the
case gets the list its main thread had.  Commands are argument lists through
the host's runner (quoted one by one over SSH), never a shell string.

A run killed outright (SIGKILL, a power cut of the controlling machine)
runs no exit: before pinning, the saved lists are written to a ledger in
the host's state directory, removed once every thread has its list back.
The next run on that host finds a ledger left behind and settles it first
(:func:`settle_left`), for a process that is still the one pinned -- its
start time is recorded beside its pid, so a recycled pid is left alone.
"""

from __future__ import annotations

import contextlib
import json
import os
import time
from pathlib import Path
from types import TracebackType
from typing import Any, Callable, Optional

from appliance.core import safedirs
from appliance.core.errors import CommandFailed, HvnetError, UsageError
from appliance.core.runner import CommandRunner
from appliance.netperf.define.cases import Case
from appliance.netperf.define.cpus import CpuPlacement, cpu_set
from appliance.netperf.parse import taskset
from appliance.netperf.run.launch import Endpoint
from appliance.switch.host import Host

ONLINE = "/sys/devices/system/cpu/online"
GUESTS = "guests"  # the target whose processes run on this machine (the others on the host)
LEDGER = "cpus-pinned.json"  # in the host's state directory while a case's processes are pinned


def ledger_of(host: Host) -> Path:
    """The host's ledger of pinned CPUs; a host over SSH keeps its own under ``STATE_DIR/hosts/NAME``, as its
    journal does, so one machine driving several hosts settles each host's with that host's runner."""
    state_dir = host.paths.state_dir
    return (state_dir / "hosts" / host.label if host.label is not None else state_dir) / LEDGER


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


Saved = tuple[str, CommandRunner, int, dict[int, str]]  # (label, runner, pid, each thread's own CPU list)


class Pinning:
    """A case's placement around its steps: ``with Pinning(...) as p:`` pins, the exit restores each thread.

    ``targets``: (what, runner, pids) -- ovs-vswitchd on the host's runner, the servers hvnet started on
    this machine's.  ``record`` is what the results keep: what was asked and what the kernel reported after.
    ``ledger``: where the saved lists wait until they are given back (None: kept in memory only).
    """

    def __init__(
        self,
        placement: CpuPlacement,
        targets: list[tuple[str, CommandRunner, list[int], str]],
        problem: Callable[[str], None],
        ledger: Optional[Path] = None,
    ) -> None:
        self.placement = placement
        self.targets = targets  # (label, runner, pids, cpu list)
        self.problem = problem  # what could not be given back: a restore problem of the run
        self.ledger = ledger
        self.wrote_ledger = False
        self.saved: list[Saved] = []
        self.record: dict[str, Any] = {"asked": placement.to_json(), "read_back": {}}

    def __enter__(self) -> Pinning:
        try:
            for label, runner, pids, _ in self.targets:
                self.saved += [(label, runner, pid, _read(runner, pid)) for pid in pids]
            self._write_ledger()
            for label, runner, pids, cpus in self.targets:
                for pid in pids:
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

    def _write_ledger(self) -> None:
        """The saved lists, durably, before anything is pinned; refused while another live run's ledger
        is there (two runs pinning one host at once would each save the other's pinned lists as own)."""
        if self.ledger is None or not self.saved:
            return
        owner = _live_owner(self.ledger)
        if owner is not None and owner != os.getpid():
            raise HvnetError(f"cpus: another hvnet run (pid {owner}) has this host's CPUs pinned; run cases with "
                             "cpus: one run at a time")  # fmt: skip
        entries = [{"label": label, "local": label == GUESTS, "pid": pid,
                    "start": _start_time(runner, pid), "threads": {str(t): c for t, c in threads.items()}}
                   for label, runner, pid, threads in self.saved]  # fmt: skip
        me = {"pid": os.getpid(), "start": _local_start_time(os.getpid())}
        try:
            safedirs.write_json_durably(self.ledger, {"written": time.time(), "owner": me, "pinned": entries})
            self.wrote_ledger = True
        except OSError as exc:
            raise HvnetError(f"cpus: cannot record the CPUs to give back in {self.ledger}: {exc.strerror or exc}; "
                             "nothing was pinned") from None  # fmt: skip

    def _restore(self) -> None:
        """Each saved thread gets its list back, and the ledger goes once nothing is left pinned."""
        saved, self.saved = self.saved, []
        left = 0
        for label, runner, pid, threads in saved:
            left += give_back(label, runner, pid, threads, self.problem)
        if self.ledger is not None and self.wrote_ledger and not left:
            _remove(self.ledger)  # only its own: another run's ledger is that run's to remove
            self.wrote_ledger = False


def give_back(label: str, runner: CommandRunner, pid: int, threads: dict[int, str],
              problem: Callable[[str], None]) -> int:  # fmt: skip
    """Each saved thread its own list; a thread started since gets the main thread's.  How many could not
    be given back (a thread that has ended since had nothing to give back)."""
    left = 0
    main = threads.get(pid) or next(iter(threads.values()))
    try:
        now = _read(runner, pid) if runner.exists(f"/proc/{pid}") else {}
    except HvnetError:
        now = {}
    for tid, cpus in {**{t: main for t in now if t not in threads}, **threads}.items():
        res = runner.run(["taskset", "-p", "-c", cpus, str(tid)], check=False, timeout=10)
        if res.returncode != 0 and runner.exists(f"/proc/{tid}"):
            left += 1
            problem(f"cpus: {label} thread {tid} keeps its case's CPUs; its own were {cpus}: "
                    f"{(res.stderr or res.stdout).strip()}")  # fmt: skip
    return left


def settle_left(ledger: Path, host_runner: CommandRunner, local: CommandRunner) -> list[str]:
    """A ledger a killed run left: each process still the one it pinned gets its threads' lists back.
    The warnings say what was found and done (nothing when there was no ledger)."""
    try:
        doc = json.loads(ledger.read_text())
    except FileNotFoundError:
        return []
    except OSError as exc:
        return [f"cpus: the record of pinned CPUs {ledger} cannot be read: {exc}"]
    except ValueError as exc:
        _remove(ledger)
        return [f"cpus: an unreadable record of pinned CPUs was removed ({ledger}: {exc})"]
    if _owner_runs(doc):
        return []  # the run that pinned is still running (another hvnet on this host): its exit gives back
    entries = doc.get("pinned") if isinstance(doc, dict) else None
    out: list[str] = []
    problems: list[str] = []
    for e in entries if isinstance(entries, list) else []:
        try:
            label, pid, start = _label(e["label"]), int(e["pid"]), e.get("start")
            threads = {int(t): str(c) for t, c in dict(e["threads"]).items()}
        except (KeyError, TypeError, ValueError):
            continue
        runner = local if e.get("local") else host_runner
        if start is None or _start_time(runner, pid) != start:
            out.append(f"cpus: a run that did not finish had pinned {label} (pid {pid}); that process is gone")
            continue
        threads = {t: c for t, c in threads.items() if _cpu_list(c)}
        if not threads:
            continue
        give_back(label, runner, pid, threads, problems.append)
        lists = ", ".join(sorted(set(threads.values())))
        out.append(f"cpus: a run that did not finish had left {label} (pid {pid}) pinned; its threads have their "
                   f"own CPUs back ({lists})")  # fmt: skip
    _remove(ledger)
    return out + problems


def _owner_runs(doc: Any) -> bool:
    """Whether the ledger's writer is a process still running on this machine (its pid and start time)."""
    owner = doc.get("owner") if isinstance(doc, dict) else None
    return (
        isinstance(owner, dict) and bool(owner.get("start")) and _local_start_time(owner.get("pid")) == owner["start"]
    )


def _live_owner(ledger: Path) -> Optional[int]:
    """The pid of the running process whose ledger is there (None: none, or its writer is gone)."""
    try:
        doc = json.loads(ledger.read_text())
    except (OSError, ValueError):
        return None
    return int(doc["owner"]["pid"]) if _owner_runs(doc) else None


def _remove(ledger: Path) -> None:
    with contextlib.suppress(OSError):
        ledger.unlink()


def _local_start_time(pid: Any) -> Optional[str]:
    """This machine's process ``pid``'s start time (None: no such process): whether a ledger's owner runs."""
    if not isinstance(pid, int) or pid <= 0:
        return None
    try:
        return _stat_start(Path(f"/proc/{pid}/stat").read_text())
    except OSError:
        return None


def _label(value: Any) -> str:
    """What a ledger entry pinned, as hvnet wrote it (anything else a hand edit: not shown as written)."""
    return value if value in ("ovs-vswitchd", GUESTS) else "a process"


def _cpu_list(text: str) -> bool:
    """A list as taskset prints it (a hand-edited ledger never reaches taskset with anything else)."""
    return bool(text) and cpu_set(text) is not None


def _start_time(runner: CommandRunner, pid: int) -> Optional[str]:
    """The process's start time in clock ticks since boot (/proc/PID/stat field 22): with the pid, which
    process it is -- a pid recycled after a reboot or a restart of ovs-vswitchd has another."""
    return _stat_start(runner.read_text(f"/proc/{pid}/stat") or "")


def _stat_start(text: str) -> Optional[str]:
    """Field 22 of /proc/PID/stat (after the command in parentheses, which may hold spaces and parentheses)."""
    fields = text.rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 else None


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
