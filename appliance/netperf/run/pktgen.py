"""What runs beside a packet-rate step: iperf3's servers, and captures listening on the monitor ports.

iperf3's server serves one test at a time, so a step of N concurrent senders
needs N servers (ports 5201..5201+N-1 in the server guest), started once for
the run and stopped by PID afterwards, as the netserver is.  A case's
``capture:`` starts a capture (hvnet's capture service, handed in by the
service layer as a :class:`Listen`: tcpdump supervised by its own process,
counts and drops in its record) on each listed guest's VIF before each
measured repetition and stops it after; the pcaps are deleted once their
counts are read (a 64-byte stream fills a disk quickly),
and only the figures are kept in the run's results.
"""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional, Protocol

from appliance.core.errors import HvnetError
from appliance.core.runner import CommandRunner
from appliance.endpoints import Group, Job, wait_all
from appliance.netperf.define.cases import Case
from appliance.netperf.parse import iperf
from appliance.netperf.run.launch import Endpoint, stop_tree
from appliance.netperf.run.preflight import PreflightFailed

if TYPE_CHECKING:
    from appliance.switch.host import Host

LISTEN_TIMEOUT_S = 5.0


@dataclass
class Iperf3Servers:
    """``count`` iperf3 servers in the server guest, on consecutive ports from ``port``."""

    endpoint: Endpoint
    program: str
    port: int
    count: int
    log_dir: Path
    runner: CommandRunner
    host: Optional[Host] = None  # the driven host: a remote guest's servers start there
    popens: list[subprocess.Popen[bytes]] = field(default_factory=list)
    group: Optional[Group] = None  # a guest that is not this machine's: one group there

    def log(self, i: int) -> Path:
        return self.log_dir / f"iperf3-server-{self.port + i}.log"

    def start(self) -> None:
        """Start them and wait until each listens; a server that exits at once (port in use) fails the run.

        In a guest that is not this machine's (a real VM, a probe over ``--host``) they are one group of
        :mod:`appliance.endpoints` there, started unheld, their output read back from the group."""
        if self.endpoint.remote:
            self.group = self.endpoint.group(self.host, self.runner, self.log_dir, "iperf3")
            self.group.start([Job(_job(i), tuple(iperf.server_argv(self.program, self.port + i)),
                                  netns=self.endpoint.netns) for i in range(self.count)], hold=False)  # fmt: skip
        else:
            for i in range(self.count):
                argv = self.endpoint.wrap(iperf.server_argv(self.program, self.port + i))
                with open(self.log(i), "ab") as log:
                    self.popens.append(self.runner.popen(argv, stdout=log, stderr=subprocess.STDOUT,
                                                         start_new_session=True))  # fmt: skip
        deadline = time.monotonic() + LISTEN_TIMEOUT_S
        waiting = set(range(self.count))
        while waiting and time.monotonic() < deadline:
            for i in list(waiting):
                text, ended = self._state(i)
                if "Server listening" in text:
                    waiting.discard(i)
                elif ended is not None:
                    last = text.strip().splitlines()[-1] if text.strip() else f"exit {ended}"
                    raise PreflightFailed([f"iperf3 server on {self.endpoint.name} port {self.port + i}: {last}"])
            time.sleep(0.05 if self.group is None else 0.25)
        if waiting:
            ports = ", ".join(str(self.port + i) for i in sorted(waiting))
            raise PreflightFailed([f"iperf3 servers on {self.endpoint.name} (ports {ports}) did not listen within "
                                   f"{LISTEN_TIMEOUT_S:g} s"])  # fmt: skip

    def _state(self, i: int) -> tuple[str, Optional[int]]:
        """Server i's output so far and its exit status (None: still running)."""
        if self.group is None:
            return self.log(i).read_text(errors="replace"), self.popens[i].poll()
        self.group.poll()
        result = self.group.results.get(_job(i))
        return self.group.read_text(f"{_job(i)}.out") or "", result.returncode if result else None

    @property
    def pids(self) -> list[int]:
        """This machine's server PIDs (a remote group's are not this machine's processes to sample)."""
        return [p.pid for p in self.popens]

    def stop(self) -> None:
        for p in self.popens:
            stop_tree(p)
        self.popens = []
        if self.group is not None:
            names = [_job(i) for i in range(self.count)]
            self.group.signal(names, "TERM")
            wait_all(self.group, names, 2.0, lambda: False)
            self.group.fetch(self.log_dir)  # iperf3-NNNN.out beside the run
            self.group.close()
            self.group = None


def _job(i: int) -> str:
    return f"iperf3-{i:04d}"


class Listen(Protocol):
    """Captures for a case's listeners, provided by the service layer (hvnet's capture service)."""

    def start(self, port: str, name: str, snaplen: Optional[int], buffer_kib: Optional[int] = None) -> None:
        """Start a capture on switch port ``port``; return once tcpdump listens."""

    def stop(self, name: str) -> dict[str, Any]:
        """Stop it and remove its files: ``{captured, dropped, state}`` (None: tcpdump printed no count), with
        its drops as tcpdump reported them, its buffer and tcpdump's CPU."""
        return {}


@dataclass
class Listeners:
    """One repetition's captures on the monitor guests' VIFs (``vifs``: guest -> VIF)."""

    listen: Listen
    vifs: dict[str, str]
    snaplen: Optional[int]
    prefix: str  # unique per repetition: the captures' names
    started: list[tuple[str, str, str]] = field(default_factory=list)  # (guest, vif, capture name)
    buffer_kib: Optional[int] = None  # tcpdump -B (None: libpcap's default)

    def start(self) -> None:
        """Start every capture (each returns once tcpdump listens); stop the ones started if one fails."""
        try:
            for guest, vif in self.vifs.items():
                name = f"{self.prefix}-{guest}"[:64]
                self.listen.start(vif, name, self.snaplen, self.buffer_kib)
                self.started.append((guest, vif, name))
        except BaseException:
            self.stop()
            raise

    def stop(self) -> tuple[list[dict[str, Any]], list[str]]:
        """Stop them all: each one's counts (None where not known), and the problems met."""
        out: list[dict[str, Any]] = []
        problems = []
        for guest, vif, name in self.started:
            try:
                got = self.listen.stop(name)
            except HvnetError as exc:
                problems.append(f"capture {name}: {exc}")
                got = {"captured": None, "dropped": None, "state": "unknown"}
            out.append({"guest": guest, "port": vif, **got, "snaplen": self.snaplen})
        self.started = []
        return out, problems


def find_iperf3(runner: CommandRunner) -> tuple[str, str]:
    """iperf3's path and its version as the run records it (``iperf3 3.12``); MissingTool when absent."""
    path = runner.which("iperf3")
    res = runner.run([path, "--version"], check=False, timeout=10)
    words = (res.stdout.splitlines() or [""])[0].split()
    return path, f"iperf3 {words[1]}" if len(words) > 1 and words[0] == "iperf" else "iperf3"


def listener_failures(cases: Sequence[Case], have_listen: bool, host_label: Optional[str]) -> list[str]:
    """Why the suite's ``cases``' captures cannot run here (none: they can, or none captures)."""
    if not any(c.capture for c in cases):
        return []
    if not have_listen:
        return ["cases with capture: need hvnet's capture service (run the suite with hvnet suite run)"]
    if host_label is not None:
        return [f"cases with capture: run on the built-in lab's switch, not on {host_label} "
                "(captures over SSH are not supported)"]  # fmt: skip
    return []


def servers_for(
    concurrency: int,
    endpoint: Endpoint,
    iperf3: str,
    log_dir: Path,
    runner: CommandRunner,
    host: Optional[Host] = None,
    senders: int = 1,
) -> Optional[Iperf3Servers]:
    """The iperf3 servers a suite needs in ``endpoint``: one per concurrent sender of its busiest iperf3 step
    (``concurrency``, 0: no packet-rate or many-flows test, None returned), for each of the ``senders`` pairs
    it serves.  A server serves all the streams of its client's test (-P)."""
    count = senders * concurrency
    if not count:
        return None
    return Iperf3Servers(endpoint, endpoint.tool("iperf3", iperf3), iperf.DEFAULT_PORT, count, log_dir, runner,
                         host)  # fmt: skip


def listener_prefix(step_index: int, rep: int) -> str:
    """Capture names unique to this process, step and repetition (kept short: names are at most 64 characters)."""
    return f"suite{os.getpid()}-{step_index:03d}-r{rep}"


def packet_rate(
    types: Sequence[str], cases: Sequence[Case], runner: CommandRunner, *, have_listen: bool,
    host_label: Optional[str],
) -> tuple[list[str], str, Optional[str]]:  # fmt: skip
    """iperf3 for the iperf3 test ``types``, the capture service for ``cases`` that listen: (failures,
    iperf3's path and its version as the run records it; "" and None without iperf3 tests)."""
    failures = listener_failures(cases, have_listen, host_label)
    iperf3, generator = "", None
    if types:
        try:
            iperf3, generator = find_iperf3(runner)
        except HvnetError as exc:
            failures.append(f"{' and '.join(types)} tests are generated by iperf3: {exc}")
    return failures, iperf3, generator


def remote_failures(iperf: bool, endpoints: list[Optional[Endpoint]]) -> list[str]:
    """What a suite with iperf3 tests (``iperf``) cannot do yet with a probe on a remote host (a real VM's
    iperf3 runs in the VM: its guest source checked it there)."""
    if iperf and any(e is not None and e.remote and e.vm is None for e in endpoints):
        return [
            "iperf3 tests (UDP_PPS, TCP_IPERF) need iperf3 started on this machine: not yet on a remote host's guests"
        ]
    return []
