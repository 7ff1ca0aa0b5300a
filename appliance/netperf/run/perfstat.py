"""``perf stat`` on ovs-vswitchd's threads over one measured repetition (a suite's ``perf_stat:``).

perf runs where ovs-vswitchd runs -- this machine, or a remote hypervisor
through the Host's runner -- as one job of an endpoint group
(:func:`appliance.endpoints.launcher_for`): an argument list, never a shell,
and stopped by its own PID.  It attaches to ovs-vswitchd's pid as the
repetition's batch is spawned and counts for the test's length (its own
``--timeout``); a batch that ended sooner (confidence iterations, a stop)
sends it SIGINT, on which perf prints what it counted so far.

Whatever goes wrong is recorded per event as "not measured" with the
reason -- perf missing on the host, ovs-vswitchd's pid unknown, permission
refused by ``perf_event_paranoid``, the process gone, perf's own
``<not supported>`` -- so a repetition never carries a number perf did not
print.  perf's output is kept in the repetition's raw directory.
"""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any, Optional

from appliance.core.errors import HvnetError
from appliance.endpoints import Group, Job, JobResult, launcher_for, wait_all
from appliance.netperf.define.perfstat import PerfStatSpec
from appliance.netperf.parse import perfstat
from appliance.switch.host import Host

STOP_WAIT_S = 10.0  # perf prints and exits at once on SIGINT; beyond this it is stopped (TERM, KILL)
RAW_NAME = "perf-stat.txt"
_labels = itertools.count()


def missing(host: Host) -> list[str]:
    """The start-of-run warning when perf is not where ovs-vswitchd runs: the run goes on (its throughput
    figures do not need perf) and every repetition records the events as not measured, but an operator who
    asked for counters should know before a long run, not from its report."""
    where = host.label or "this machine"
    try:
        found = host.runner.which_optional("perf")
    except HvnetError as exc:
        return [f"perf_stat: perf not looked for on {where}: {exc}; its events will be recorded as not measured"]
    if found is None:
        return [f"perf_stat: perf is not installed on {where} (Debian: linux-perf; EL: perf); "
                "its events will be recorded as not measured"]  # fmt: skip
    return []


class PerfStat:
    """``start()`` as the batch is spawned, ``stop()`` once it is reaped: the repetition's ``perf_stat`` record."""

    def __init__(self, host: Host, pid: Optional[int], spec: PerfStatSpec, seconds: float, raw: Path) -> None:
        self.host, self.pid, self.spec, self.seconds, self.raw = host, pid, spec, seconds, raw
        self.where = host.label or "this machine"
        self.group: Optional[Group] = None
        self.problem: Optional[str] = None
        self.result: Optional[dict[str, Any]] = None

    def start(self) -> None:
        """perf attached to ovs-vswitchd; when it cannot be, the reason is kept for :meth:`stop`."""
        if self.pid is None:
            self.problem = f"ovs-vswitchd's pid is not known on {self.where} (no pidfile in its run directory)"
            return
        try:
            perf = self.host.runner.which_optional("perf")
        except HvnetError as exc:
            self.problem = f"perf not looked for on {self.where}: {exc}"
            return
        if perf is None:
            self.problem = f"perf is not installed on {self.where} (Debian: linux-perf; EL: perf)"
            return
        argv = perfstat.argv(perf, self.spec.events, self.pid, self.seconds)
        try:
            self.group = launcher_for(self.host).group(f"perf-stat-{next(_labels)}")
            self.group.start([Job("perf", tuple(argv))], hold=False)
        except HvnetError as exc:
            self.problem = f"perf stat did not start on {self.where}: {exc}"
            self._close()

    def stop(self) -> dict[str, Any]:
        """The record (idempotent): perf's counts per event and thread group, CPI, or why not measured."""
        if self.result is None:
            self.result = self._collect()
        return self.result

    def _collect(self) -> dict[str, Any]:
        head: dict[str, Any] = {"target": f"ovs-vswitchd (pid {self.pid}) on {self.where}", "seconds": self.seconds}
        if self.group is None:
            return {**head, **perfstat.not_measured(self.spec.events, self.problem or "perf stat did not start")}
        try:
            ended = self.group.poll()
            if "perf" not in ended and self.group.results.get("perf", JobResult()).returncode is None:
                self.group.signal(["perf"], "INT")  # the batch ended first: perf prints its counts on SIGINT
                head["stopped_early"] = True
            result = wait_all(self.group, ["perf"], STOP_WAIT_S, lambda: False)["perf"]
            text = self.group.read_text("perf.err") or ""
        except HvnetError as exc:
            return {**head, **perfstat.not_measured(self.spec.events, f"perf stat not read on {self.where}: {exc}")}
        finally:
            self._close()
        self._keep(text)
        return {**head, **perfstat.parse(text, self.spec.events, result.returncode, self.pid or 0, self.where)}

    def _keep(self, text: str) -> None:
        """perf's own output beside the instances' (what the record was read from)."""
        try:
            self.raw.mkdir(parents=True, exist_ok=True)
            (self.raw / RAW_NAME).write_text(text)
        except OSError:
            pass  # the record holds what was read; the raw copy is a convenience

    def _close(self) -> None:
        if self.group is not None:
            self.group.close()
            self.group = None
