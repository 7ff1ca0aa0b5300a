"""A monitored repetition: the case's collectors read and its phases applied around the batch.

A :class:`Watch` is one part of a :class:`.repetition.Repetition` for a case
that monitors (``monitor:``/``phases:``): before the batch it puts the
switch back in the first phase and notes what the collectors have so far;
from the release a :class:`.collectors.Ticker` reads them about once a
second and applies the phases at their times; after the batch, once the
collector had time to write the last samples, :meth:`Watch.finish` sets the
repetition's collector and phase figures (:mod:`appliance.netperf.figures.collector`).
"""

from __future__ import annotations

import time
from typing import Any, Callable, Optional

from appliance.netperf.define.suite import Step
from appliance.netperf.figures import collector
from appliance.netperf.figures.counters import deltas
from appliance.netperf.parse import omni
from appliance.netperf.run import collectors as monitoring
from appliance.netperf.run.sampler import CpuSampler, thread_series
from appliance.netperf.store.records import RepetitionResult


class Watch:
    """Collector readings and phases around one repetition's batch (nothing when the case does not monitor)."""

    def __init__(
        self,
        cm: Optional[monitoring.CaseMonitoring],
        step: Step,
        before: dict[str, Any],
        port_counters: Callable[[], dict[str, Any]],
    ) -> None:
        self.cm, self.step, self.before, self.port_counters = cm, step, before, port_counters
        self.ticker: Optional[monitoring.Ticker] = None

    def begin(self) -> None:
        """Before the batch: the first phase in force, the collectors' counts and drops so far."""
        if self.cm is None:
            return
        if self.step.case.phases:  # each repetition starts in the first phase
            self.cm.set(self.step.case.phases[0].monitor)
        self.counts = self.cm.counts()
        self.drops = self.cm.drops()
        self.ticker = monitoring.Ticker(
            self.cm, self.step.case.phases, self.port_counters, float(self.step.test.duration)
        )

    def released(self) -> None:
        """The batch was released: the phases' clock starts."""
        self.t0, self.wall0 = time.monotonic(), time.time()
        if self.ticker is not None:
            self.ticker.start(self.t0)

    def stop(self) -> None:
        """Stop the ticker (idempotent: the repetition stops it in order, and again on its way out)."""
        if self.ticker is not None and self.ticker.running:
            self.ticker.stop()

    def finish(
        self, rec: RepetitionResult, after: dict[str, Any], sampler: Optional[CpuSampler], stdouts: list[str]
    ) -> None:
        """The repetition's collector figures (after the collector wrote the last samples) and its phases."""
        cm, ticker = self.cm, self.ticker
        if cm is None or ticker is None:
            return
        time.sleep(cm.settle_s())
        final, drops = cm.counts(), cm.drops()
        ticker.series.append((round(time.monotonic() - self.t0, 3), final))
        if cm.case.monitor is not None:
            rec.collector = self._collector(cm, ticker, after, final, drops)
        if cm.case.phases:
            self._phases(rec, cm, ticker, after, final, sampler, stdouts)
        if sampler is not None:
            rec.cpu["vswitchd_threads_series"] = [[round(b - self.t0, 2), g] for a, b, g in thread_series(sampler)]

    def _collector(
        self,
        cm: monitoring.CaseMonitoring,
        ticker: monitoring.Ticker,
        after: dict[str, Any],
        final: dict[str, tuple[int, int]],
        drops: dict[str, Optional[int]],
    ) -> dict[str, Any]:
        """What the case's collector got over the whole repetition."""
        m = cm.case.monitor
        assert m is not None
        got = (final[m.kind][0] - self.counts[m.kind][0], final[m.kind][1] - self.counts[m.kind][1])
        d0, d1 = self.drops.get(m.kind), drops.get(m.kind)
        return collector.collector_record(
            m, cm.target(m.kind), got, deltas(self.before, after), float(self.step.test.duration),
            None if d0 is None or d1 is None else d1 - d0, collector.rates(ticker.series, m.kind),
        )  # fmt: skip

    def _phases(
        self,
        rec: RepetitionResult,
        cm: monitoring.CaseMonitoring,
        ticker: monitoring.Ticker,
        after: dict[str, Any],
        final: dict[str, tuple[int, int]],
        sampler: Optional[CpuSampler],
        stdouts: list[str],
    ) -> None:
        """Each phase's figures: throughput from netperf's interim lines, CPU per thread, collector."""
        series = [omni.parse_interim(out) for out in stdouts]
        rec.throughput_series = omni.interim_series(series, self.wall0, self.step.test.duration)
        threads = [(a - self.t0, b - self.t0, g) for a, b, g in thread_series(sampler)] if sampler else []
        rec.phases = collector.phase_records(
            cm.case.phases, cm.targets_by_kind(), ticker.boundaries, ticker.series, self.before, after, final,
            threads, rec.throughput_series, float(self.step.test.duration),
        )  # fmt: skip
        if ticker.error:
            rec.notes.append(f"a phase was not applied: {ticker.error}")
