"""What the Host screen shows: the switch, this machine's CPU and memory, the agent.

CPU figures are psutil deltas between two samples (the first sample has
none and says so).  ovs-vswitchd is found through the switch's own pid file,
so a remote target (``--db tcp:...``) reports "not on this host" instead of
some other process's figures.  A hypervisor reached over SSH (``--host``)
has no psutil: its ``/proc`` is read through the runner (:mod:`.procfs`), and
its agent is the one that keeps it in line from this machine.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from typing import Any, Optional

import psutil

from appliance.core.runner import CommandRunner
from appliance.services.inventory import Inventory
from appliance.services.taps import TapRow, list_taps
from tui.backend import Backend
from tui.backend.procfs import RemoteProc

AGENT_UNIT = "hvnet-agent.service"
AGENT_INTERVAL_S = 5.0  # a systemctl run or a walk of every process: not with every one-second sample
TAPS_INTERVAL_S = 2.0  # a dump-flows per bridge with TAPs: the Mirrors screen's pace, not every sample


@dataclass
class AgentStatus:
    running: Optional[bool]  # None: could not tell
    text: str


@dataclass
class HostSample:
    inventory: Inventory
    cpu_per_core: Optional[list[float]]  # % busy per core since the last sample; None on the first
    vswitchd_pid: Optional[int]
    vswitchd_cpu: Optional[float]  # % of one core
    vswitchd_rss: Optional[int]
    mem_total: int
    mem_used: int
    agent: AgentStatus
    audit: list[dict[str, Any]] = field(default_factory=list)
    taps: list[TapRow] = field(default_factory=list)  # flow TAPs with their flows' counts (None: not measured)


def remote_agent_status(name: str) -> AgentStatus:
    """The agent keeping a remote host in line runs on this machine (``hvnet --host NAME agent``)."""
    for p in psutil.process_iter(["pid", "cmdline"]):
        cmd = p.info.get("cmdline") or []
        if "agent" in cmd and any(a == "--host" and b == name for a, b in zip(cmd, cmd[1:])):
            return AgentStatus(True, f"running here as pid {p.info['pid']} (hvnet --host {name} agent)")
    return AgentStatus(False, f"not running here (start it with 'hvnet --host {name} agent')")


def agent_status(runner: CommandRunner) -> AgentStatus:
    """The agent as systemd sees it, else as a process on this host."""
    if os.path.isdir("/run/systemd/system") and runner.which_optional("systemctl"):
        r = runner.run(["systemctl", "is-active", AGENT_UNIT], check=False, timeout=5)
        state = r.stdout.strip() or "unknown"
        return AgentStatus(state == "active", f"{AGENT_UNIT}: {state}")
    me = os.getpid()
    for p in psutil.process_iter(["pid", "cmdline", "create_time"]):
        cmd = p.info.get("cmdline") or []
        if p.info["pid"] == me or "agent" not in cmd:
            continue
        if any(part.endswith("hvnet") or part == "appliance" for part in cmd):
            return AgentStatus(True, f"running as pid {p.info['pid']} (no systemd here)")
    return AgentStatus(False, "not running (no systemd here; start with 'hvnet agent')")


class HostSampler:
    """Successive host samples; holds the psutil objects whose deltas give CPU shares."""

    def __init__(self, backend: Backend, name: str | None = None) -> None:
        self.backend = backend
        self.name = name  # the host as the operator named it (the agent's --host)
        runner = backend.host.runner
        self._remote = None if runner.local else RemoteProc(runner)
        self._primed = False
        self._vswitchd: Optional[psutil.Process] = None
        self._agent: Optional[tuple[float, AgentStatus]] = None  # (when asked, status)
        self._taps: Optional[tuple[float, list[TapRow]]] = None  # (when read, rows)

    def _tap_rows(self) -> list[TapRow]:
        """The TAPs and their counts, read again every TAPS_INTERVAL_S (an error shows as no rows)."""
        now = time.monotonic()
        if self._taps is None or now - self._taps[0] >= TAPS_INTERVAL_S:
            self._taps = (now, list_taps(self.backend.engine))
        return self._taps[1]

    def _agent_status(self) -> AgentStatus:
        now = time.monotonic()
        if self._agent is None or now - self._agent[0] >= AGENT_INTERVAL_S:
            host = self.backend.host
            status = (
                agent_status(host.runner) if self._remote is None else remote_agent_status(self.name or str(host.label))
            )
            self._agent = (now, status)
        return self._agent[1]

    def _find_vswitchd(self) -> Optional[psutil.Process]:
        of = self.backend.engine.of
        pid = of.vswitchd_pid() if of is not None else None
        if pid is None:
            return None
        if self._vswitchd is None or self._vswitchd.pid != pid:
            try:
                self._vswitchd = psutil.Process(pid)
                self._vswitchd.cpu_percent(None)  # prime: the next call gives a share
            except psutil.Error:
                self._vswitchd = None
        return self._vswitchd

    def sample(self) -> HostSample:
        if self._remote is not None:
            return self._remote_sample(self._remote)
        cores = psutil.cpu_percent(None, percpu=True)
        per_core = cores if self._primed else None
        self._primed = True
        vs = self._find_vswitchd()
        vs_cpu = vs_rss = None
        if vs is not None:
            try:
                vs_cpu = vs.cpu_percent(None)
                vs_rss = vs.memory_info().rss
            except psutil.Error:
                self._vswitchd = None
        mem = psutil.virtual_memory()
        return HostSample(
            inventory=self.backend.inventory_snapshot(),
            cpu_per_core=per_core,
            vswitchd_pid=vs.pid if vs is not None else None,
            vswitchd_cpu=vs_cpu,
            vswitchd_rss=vs_rss,
            mem_total=mem.total,
            mem_used=mem.total - mem.available,
            agent=self._agent_status(),
            audit=self.backend.audit(last=8),
            taps=self._tap_rows(),
        )

    def _remote_sample(self, remote: RemoteProc) -> HostSample:
        of = self.backend.engine.of
        pid = of.vswitchd_pid() if of is not None else None
        now, per_core, vs_cpu = remote.read(pid)
        return HostSample(
            inventory=self.backend.inventory_snapshot(),
            cpu_per_core=per_core,
            vswitchd_pid=pid,
            vswitchd_cpu=vs_cpu if now.pid_jiffies is not None else None,
            vswitchd_rss=now.pid_rss,
            mem_total=now.mem_total,
            mem_used=now.mem_total - now.mem_available,
            agent=self._agent_status(),
            audit=self.backend.audit(last=8),
            taps=self._tap_rows(),
        )
