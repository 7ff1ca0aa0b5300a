"""One repetition of a step: its batch of instances, and everything measured around it, as one context manager.

Around a measured repetition's batch, in this order: the case's listeners
start (before the counters are read: every packet counted was offered to a
listener); the switch's port counters, the collector guest's interface
counters and the client's policer's drops (its meter or tc police action) are read; a monitored case's
:class:`.watch.Watch` begins; the batch is spawned; the CPU sampler starts, and ``perf stat`` on
ovs-vswitchd when the suite asks for it (:mod:`.perfstat`).
Then the batch is released and reaped (:meth:`Repetition.run`), and the
after-readings are taken in the order they matter (:meth:`Repetition.finish`).

Each part that must be undone is registered on an :class:`~contextlib.ExitStack`
as it starts, so when a part, the batch or the operator's stop fails the
repetition, what had started is undone in reverse order -- sampler, batch,
watch, listeners -- and nothing is left running.  A warm-up is the batch
alone: nothing is read around it.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any, Callable, Optional

from appliance.core.errors import HvnetError
from appliance.netperf.define.suite import Step
from appliance.netperf.parse import procstat
from appliance.netperf.run.fragments import CaseState
from appliance.netperf.run.launch import Batch
from appliance.netperf.run.perfstat import PerfStat
from appliance.netperf.run.pktgen import Listeners, listener_prefix
from appliance.netperf.run.rig import Rig, now
from appliance.netperf.run.sampler import CpuSampler, interval_for
from appliance.netperf.run.watch import Watch
from appliance.netperf.store.records import Policing

GRACE_S = 15.0  # beyond the test length before an instance counts as hung
HOST_ONLY = ("host_pct", "per_core_pct", "busiest_core_pct")  # this machine's cores: not another host's figures


@dataclass
class Readings:
    """What was read around a measured repetition; a reading that failed is None (and why, in the problems)."""

    started: str = ""
    before: dict[str, Any] = field(default_factory=dict)  # the bridge's port counters
    after: dict[str, Any] = field(default_factory=dict)
    arrived_before: Optional[dict[str, int]] = None  # the collector guest's interface counters
    arrived_after: Optional[dict[str, int]] = None
    arrival_problems: list[Optional[str]] = field(default_factory=list)
    drops_before: Optional[int] = None  # the client VIF's policer (its meter or tc police action)
    drops_after: Optional[int] = None
    listened: list[dict[str, Any]] = field(default_factory=list)  # each capture's counts
    listen_problems: list[str] = field(default_factory=list)
    cpu: dict[str, Any] = field(default_factory=dict)  # the sampler's summary
    vm_cpu: dict[str, Any] = field(default_factory=dict)  # a real VM's own /proc/stat: role -> its busy share
    perf_stat: Optional[dict[str, Any]] = None  # perf stat's counts on ovs-vswitchd (the suite's perf_stat:)


class Repetition:
    """``with Repetition(...) as r: r.run(stopping); got = r.finish()`` -- see the module's docstring."""

    def __init__(
        self,
        rig: Rig,
        step: Step,
        rep: int,
        case: CaseState,
        policing: Optional[Policing],
        receiver: Callable[[], Optional[int]],
        *,
        warmup: bool,
    ) -> None:
        self.rig, self.step, self.rep, self.case = rig, step, rep, case
        self.warmup = warmup
        self.receiver = receiver  # the receiving process whose CPU the sampler reads
        self.seconds = step.test.warmup if warmup else step.test.duration
        self.raw = rig.raw_dir(step, rep, warmup)
        self.batch = Batch(rig.argvs(step, self.seconds, warmup), rig.client, self.raw, runner=rig.host.local_runner,
                           host=rig.host, clients=rig.instance_clients(step) if rig.pairs else [])  # fmt: skip
        self.policed = None if warmup else policing  # its policer's drops are read around the repetition
        self.bridge: Optional[str] = None
        self.ofport: Optional[int] = None
        self.readings = Readings()
        self.listeners: Optional[Listeners] = None
        self.watch: Optional[Watch] = None
        self.sampler: Optional[CpuSampler] = None
        self.perf: Optional[PerfStat] = None
        self._sampling = False
        self._reaped = False
        self._stack = ExitStack()

    # -- set-up and tear-down ----------------------------------------------------------

    def __enter__(self) -> Repetition:
        with ExitStack() as stack:
            if not self.warmup:
                self._measure_around(stack)
            stack.callback(self._kill_unreaped)
            self.batch.spawn()
            self._sample(stack)
            self._perf_stat(stack)
            self._stack = stack.pop_all()  # entered: __exit__ undoes it
        return self

    def __exit__(
        self, kind: Optional[type[BaseException]], exc: Optional[BaseException], tb: Optional[TracebackType]
    ) -> bool:
        return self._stack.__exit__(kind, exc, tb)

    def _measure_around(self, stack: ExitStack) -> None:
        """The parts of a measured repetition, started in order (see the module's docstring)."""
        rig, r = self.rig, self.readings
        self.bridge, self.ofport = rig.switch.client_port(rig.client.vif)
        self._listen(stack)
        r.before = rig.switch.port_counters(self.bridge)
        if self.case.collector is not None:
            r.arrived_before, problem = self.case.collector.read()
            r.arrival_problems.append(problem)
        r.drops_before = rig.switch.policer_drops(self.policed, self.bridge, self.ofport) if self.policed else None
        self.watch = Watch(self.case.monitoring, self.step, r.before, lambda: rig.switch.port_counters(self.bridge))
        stack.callback(self.watch.stop)
        self.watch.begin()

    def _listen(self, stack: ExitStack) -> None:
        """The case's captures on its listeners' VIFs, each listening before this returns."""
        capture = self.step.case.capture
        if not self.case.capture_vifs or capture is None or self.rig.listen is None:
            return
        prefix = listener_prefix(self.step.index, self.rep)
        self.listeners = Listeners(self.rig.listen, self.case.capture_vifs, capture.snaplen, prefix,
                                   buffer_kib=capture.buffer_kib)  # fmt: skip
        self.listeners.start()
        stack.callback(self.listeners.stop)

    def _sample(self, stack: ExitStack) -> None:
        """The CPU sampler: found ovs-vswitchd's threads for every batch, sampling only a measured one."""
        self.sampler = CpuSampler(
            interval_for(self.seconds),
            self.rig.switch.vswitchd_pid(self.rig.kernel_here),
            self.receiver,
            seconds=float(self.step.test.max_seconds()),
        )
        if not self.warmup:
            stack.callback(self._stop_sampling)
            self.sampler.start()
            self._sampling = True

    def _perf_stat(self, stack: ExitStack) -> None:
        """``perf stat`` on ovs-vswitchd over a measured repetition, when the suite asks for it."""
        spec = self.step.case.perf_stat
        if self.warmup or spec is None:
            return
        pid = self.rig.switch.vswitchd_pid(True)  # read where ovs-vswitchd runs: perf runs there too
        self.perf = PerfStat(self.rig.host, pid, spec, float(self.step.test.max_seconds()), self.raw)
        stack.callback(self.perf.stop)
        self.perf.start()

    def _stop_sampling(self) -> dict[str, Any]:
        """The sampler's summary (idempotent: {} once stopped)."""
        if not self._sampling or self.sampler is None:
            return {}
        self._sampling = False
        return self.sampler.stop()

    def _kill_unreaped(self) -> None:
        """Stop every instance not reaped (a failed or stopped repetition); by PID, only ours."""
        if not self._reaped:
            self.batch.kill()

    # -- the repetition ---------------------------------------------------------------

    def run(self, stopping: Callable[[], bool]) -> None:
        """Release the batch and reap it: at the test's end plus a grace, or once ``stopping`` says so."""
        self.readings.started = now()
        vms = {} if self.warmup else self._vms()
        before = {role: self._vm_stat(ep) for role, ep in vms.items()}
        self.batch.release()
        if self.watch is not None:
            self.watch.released()
        limit = self.seconds if self.warmup else self.step.test.max_seconds()
        self.batch.wait(limit + GRACE_S, stopping, quiet_s=self.seconds)
        self._reaped = True
        for role, ep in vms.items():
            self.readings.vm_cpu[role] = procstat.usage(before[role], self._vm_stat(ep), ep.vm or ep.name)

    def _vms(self) -> dict[str, Any]:
        """The run's real VMs by role: their CPU is read from their own /proc/stat around the batch."""
        found = {"client": self.rig.client, "server": self.rig.server}
        return {role: ep for role, ep in found.items() if ep is not None and ep.vm is not None}

    def _vm_stat(self, ep: Any) -> Optional[procstat.CpuTotals]:
        try:
            return procstat.parse(ep.runner_for(self.rig.host).read_text("/proc/stat"))
        except HvnetError:
            return None

    def finish(self) -> Readings:
        """The after-readings of a measured repetition: CPU, port counters, the collector guest's counters
        (once the uplink drained), the captures' counts, the watch stopped, the policer's drops."""
        rig, r = self.rig, self.readings
        r.cpu = self._stop_sampling()
        r.perf_stat = self.perf.stop() if self.perf is not None else None
        if not rig.kernel_here:  # this machine's cores are not the host's: not the host's figures
            r.cpu = {k: v for k, v in r.cpu.items() if k not in HOST_ONLY}
        r.after = rig.switch.port_counters(self.bridge)
        if self.case.collector is not None:
            r.arrived_after, problem = self.case.collector.after()
            r.arrival_problems.append(problem)
        if self.listeners is not None:
            r.listened, r.listen_problems = self.listeners.stop()
        if self.watch is not None:
            self.watch.stop()
        r.drops_after = rig.switch.policer_drops(self.policed, self.bridge, self.ofport) if self.policed else None
        return r
