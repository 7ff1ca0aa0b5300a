"""CPU, memory and ovs-vswitchd's share on a host hvnet reaches over SSH: its ``/proc``, read with ``cat``.

A remote hypervisor has no Python (nothing to run psutil there), but every
Linux has ``/proc``: one ``cat`` of ``/proc/stat``, ``/proc/meminfo`` and
ovs-vswitchd's ``stat`` and ``status`` per sample, over the host's SSH
master.  CPU shares are deltas of the jiffy counters between two samples,
as psutil computes them locally; the clock-tick rate is not needed because
the elapsed time is measured in the same jiffies.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from appliance.core.runner import CommandRunner

_CPU = re.compile(r"^cpu(\d+)\s+(.*)$", re.M)
_MEM = re.compile(r"^(MemTotal|MemAvailable):\s+(\d+)\s*kB", re.M)
_RSS = re.compile(r"^VmRSS:\s+(\d+)\s*kB", re.M)


@dataclass(frozen=True)
class ProcSample:
    """The counters of one read: per-core (busy, total) jiffies, memory, the daemon's jiffies and RSS."""

    cores: tuple[tuple[int, int], ...]
    mem_total: int  # bytes
    mem_available: int
    pid_jiffies: Optional[int]  # utime + stime of ovs-vswitchd
    pid_rss: Optional[int]  # bytes


def parse(text: str, pid: int | None) -> ProcSample:
    """The counters in ``cat /proc/stat /proc/meminfo /proc/PID/stat /proc/PID/status`` output."""
    cores = []
    for _n, rest in _CPU.findall(text):
        fields = [int(f) for f in rest.split() if f.isdigit()]
        total = sum(fields[:8])  # user nice system idle iowait irq softirq steal (guest is inside user)
        idle = sum(fields[3:5])
        cores.append((total - idle, total))
    mem = {k: int(v) * 1024 for k, v in _MEM.findall(text)}
    jiffies = rss = None
    if pid is not None:
        stat = re.search(rf"^{pid} \(.*\) (.*)$", text, re.M)  # the name may hold spaces and ')'
        if stat is not None:
            fields = stat.group(1).rsplit(") ", 1)[-1].split()
            if len(fields) > 12 and fields[11].isdigit() and fields[12].isdigit():
                jiffies = int(fields[11]) + int(fields[12])  # fields 14 and 15 of proc(5), counted from 3
        found = _RSS.search(text)
        rss = int(found.group(1)) * 1024 if found else None
    return ProcSample(tuple(cores), mem.get("MemTotal", 0), mem.get("MemAvailable", 0), jiffies, rss)


def shares(before: ProcSample, after: ProcSample) -> tuple[list[float], Optional[float]]:
    """% busy per core between two samples, and the daemon's % of one core (None when not known)."""
    per_core = []
    for (b0, t0), (b1, t1) in zip(before.cores, after.cores):
        per_core.append(100.0 * (b1 - b0) / (t1 - t0) if t1 > t0 else 0.0)
    daemon = None
    elapsed = sum(t for _b, t in after.cores) - sum(t for _b, t in before.cores)
    if before.pid_jiffies is not None and after.pid_jiffies is not None and elapsed > 0 and after.cores:
        per_cpu = elapsed / len(after.cores)  # jiffies one core had in the interval
        daemon = 100.0 * (after.pid_jiffies - before.pid_jiffies) / per_cpu
    return per_core, daemon


class RemoteProc:
    """Successive samples of a host's ``/proc`` through its runner."""

    def __init__(self, runner: CommandRunner) -> None:
        self.runner = runner
        self._last: Optional[tuple[int | None, ProcSample]] = None

    def read(self, pid: int | None) -> tuple[ProcSample, Optional[list[float]], Optional[float]]:
        """This sample, the per-core shares since the last (None on the first) and the daemon's share."""
        paths = ["/proc/stat", "/proc/meminfo"] + ([f"/proc/{pid}/stat", f"/proc/{pid}/status"] if pid else [])
        res = self.runner.run(["cat", "--", *paths], check=False, timeout=10)  # a gone pid: the rest is still read
        now = parse(res.stdout, pid)
        last, self._last = self._last, (pid, now)
        if last is None:
            return now, None, None
        per_core, daemon = shares(last[1], now)
        return now, per_core, daemon if last[0] == pid else None
