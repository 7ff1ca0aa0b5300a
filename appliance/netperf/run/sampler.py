"""Host CPU during a step, sampled with psutil from a background thread.

The 2010 study could not say whether OVS or the receiving VM was the
bottleneck because it measured no CPU.  Each step records: the whole host and
each core (% busy), ovs-vswitchd and each of its threads (% of one core; with
the userspace datapath, packets are switched in the ``ovs-vswitchd`` main
thread or the ``pmd`` threads), the netservers hvnet started (sampled), and
hvnet's own process, so its overhead is on record too.  netperf clients'
CPU is exact, from their rusage when reaped (see :mod:`.launch`).

Sampling reads a handful of /proc files; once a second (faster for short
steps) it costs well under 1% of a core, so it does not disturb what it
measures.
"""

from __future__ import annotations

import os
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Optional

import psutil


def interval_for(duration_s: float) -> float:
    """About eight samples per step, never faster than 4 Hz nor slower than 1 Hz."""
    return max(0.25, min(1.0, duration_s / 8))


def _total(t: Any) -> float:
    return sum(t) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)


def _thread_group(comm: str) -> str:
    """``handler12`` -> ``handler``, ``pmd-c03/id:5`` -> ``pmd``: the thread's role."""
    return re.sub(r"[-\d].*$", "", comm) or comm


@dataclass
class _Snap:
    t: float
    cores: list[Any]
    vswitchd: dict[int, float]  # tid -> cpu seconds
    servers: dict[int, float]  # pid -> cpu seconds
    own: float


@dataclass
class CpuSampler:
    """Start before releasing a step's instances, stop after reaping them; :meth:`summary` is the record."""

    interval: float
    vswitchd_pid: Optional[int]
    server_root: Callable[[], Optional[int]] = lambda: None
    seconds: Optional[float] = None  # the test length: sampling ends then, not when the last netperf exits
    snaps: list[_Snap] = field(default_factory=list)
    _names: dict[int, str] = field(default_factory=dict)
    _server_first: dict[int, float] = field(default_factory=dict)
    _server_last: dict[int, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="hvnet-cpu-sampler", daemon=True)
        self._me = psutil.Process()
        self._end: Optional[float] = None
        self._ended = False

    def start(self) -> None:
        self._take()
        self._end = None if self.seconds is None else self.snaps[0].t + self.seconds
        self._thread.start()

    def stop(self) -> dict[str, Any]:
        """The summary; the last sample is taken now unless the test length already ended sampling."""
        self._stop.set()
        self._thread.join()
        if not self._ended:
            self._take()
        return self.summary()

    def _loop(self) -> None:
        # Some netperf tests linger after their measured interval (TCP_CRR closes
        # its last connections for seconds): that tail is not the measurement.
        self._ended = False
        while True:
            wait = self.interval
            if self._end is not None:
                wait = min(wait, self._end - time.monotonic())
            if wait > 0 and self._stop.wait(wait):
                return
            self._take()
            if self._end is not None and time.monotonic() >= self._end:
                self._ended = True
                return

    def _vswitchd_threads(self) -> dict[int, float]:
        if not self.vswitchd_pid:
            return {}
        base = f"/proc/{self.vswitchd_pid}/task"
        out: dict[int, float] = {}
        try:
            tids = os.listdir(base)
        except OSError:
            return {}
        tick = os.sysconf("SC_CLK_TCK")
        for tid in tids:
            try:
                with open(f"{base}/{tid}/stat", "rb") as fh:
                    stat = fh.read().decode(errors="replace")
            except OSError:
                continue
            rest = stat[stat.rfind(")") + 2 :].split()
            out[int(tid)] = (int(rest[11]) + int(rest[12])) / tick  # utime, stime
            if int(tid) not in self._names:
                comm = stat[stat.find("(") + 1 : stat.rfind(")")]
                self._names[int(tid)] = _thread_group(comm)
        return out

    def _servers(self) -> dict[int, float]:
        root = self.server_root()
        if root is None:
            return {}
        out: dict[int, float] = {}
        try:
            procs = [psutil.Process(root), *psutil.Process(root).children(recursive=True)]
        except psutil.Error:
            return {}
        for p in procs:
            try:
                ct = p.cpu_times()
            except psutil.Error:
                continue
            out[p.pid] = ct.user + ct.system
        return out

    def _take(self) -> None:
        servers = self._servers()
        for pid, cpu in servers.items():
            # a netserver child forked during the step started from zero
            self._server_first.setdefault(pid, cpu if not self.snaps else 0.0)
            self._server_last[pid] = cpu
        own = self._me.cpu_times()
        self.snaps.append(
            _Snap(
                time.monotonic(),
                psutil.cpu_times(percpu=True),
                self._vswitchd_threads(),
                servers,
                own.user + own.system,
            )
        )

    def summary(self) -> dict[str, Any]:
        if len(self.snaps) < 2:
            return {}
        a, b = self.snaps[0], self.snaps[-1]
        wall = b.t - a.t
        if wall <= 0:
            return {}
        cores = []
        for ca, cb in zip(a.cores, b.cores):
            # guest and guest_nice are already inside user and nice: counted once
            total = _total(cb) - _total(ca)
            idle = (cb.idle + getattr(cb, "iowait", 0)) - (ca.idle + getattr(ca, "iowait", 0))
            cores.append(round(100.0 * (1 - idle / total), 1) if total > 0 else 0.0)
        groups: dict[str, float] = {}
        for tid, cpu in b.vswitchd.items():
            delta = cpu - a.vswitchd.get(tid, 0.0)
            group = self._names.get(tid, "?")
            groups[group] = groups.get(group, 0.0) + delta
        server_s = sum(self._server_last[p] - self._server_first.get(p, 0.0) for p in self._server_last)
        out: dict[str, Any] = {
            "wall_s": round(wall, 3),
            "samples": len(self.snaps),
            "host_pct": round(sum(cores) / len(cores), 1) if cores else None,
            "per_core_pct": cores,
            "busiest_core_pct": max(cores) if cores else None,
            "hvnet_pct_of_core": round(100.0 * (b.own - a.own) / wall, 2),
        }
        if self.vswitchd_pid:
            out["vswitchd_pct_of_core"] = round(100.0 * sum(groups.values()) / wall, 1)
            out["vswitchd_threads_pct"] = {g: round(100.0 * s / wall, 1) for g, s in sorted(groups.items())}
        if self._server_last:
            out["netserver_pct_of_core"] = round(100.0 * server_s / wall, 1)
        return out


def thread_series(sampler: CpuSampler) -> list[tuple[float, float, dict[str, float]]]:
    """ovs-vswitchd's CPU per thread group over time: (start, end as monotonic s, {group: % of a core}) per
    sampling interval -- what the summary averages, kept so a report can show it move (phases, bursts)."""
    out = []
    for a, b in zip(sampler.snaps, sampler.snaps[1:]):
        wall = b.t - a.t
        if wall <= 0 or not b.vswitchd:
            continue
        groups: dict[str, float] = {}
        for tid, cpu in b.vswitchd.items():
            group = sampler._names.get(tid, "?")
            groups[group] = groups.get(group, 0.0) + cpu - a.vswitchd.get(tid, 0.0)
        out.append((a.t, b.t, {g: round(100.0 * s / wall, 1) for g, s in sorted(groups.items())}))
    return out
