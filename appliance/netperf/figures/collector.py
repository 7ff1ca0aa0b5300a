"""What a case's sFlow/IPFIX collector got in a repetition, and in each of its phases.  Pure.

The readings are taken at run time (:mod:`appliance.netperf.run.collectors`,
:mod:`appliance.netperf.run.watch`): the collectors' counts, read about once a
second as a series from the release, and each phase boundary the switch
acknowledged with the bridge's port counters there.  This module sets them
against what the bridge's packets predict, so a phase gets its own
received ÷ expected.
"""

from __future__ import annotations

from typing import Any, Optional

from appliance.netperf.define import monitoring as mon
from appliance.netperf.figures.counters import deltas

Series = list[tuple[float, dict[str, tuple[int, int]]]]  # (seconds since release, {kind: (samples, bytes)})


def _at(series: Series, t: float, kind: str) -> tuple[int, int]:
    """A collector's counts as first written at or after ``t`` (the last reading if none is that late)."""
    for when, counts in series:
        if when >= t and kind in counts:
            return counts[kind]
    return series[-1][1].get(kind, (0, 0))


def rates(series: Series, kind: str) -> list[list[float]]:
    """[seconds since release, samples/s, bytes/s] between readings: the collector's load over time."""
    out = []
    for (t0, c0), (t1, c1) in zip(series, series[1:]):
        if t1 > t0 and kind in c0 and kind in c1:
            dt = t1 - t0
            out.append([t1, round((c1[kind][0] - c0[kind][0]) / dt, 1), round((c1[kind][1] - c0[kind][1]) / dt)])
    return out


def collector_record(
    monitor: mon.Monitor,
    target: str,
    received: tuple[int, int],
    counters: dict[str, dict[str, int]],
    seconds: float,
    drops: Optional[int],
    series: Optional[list[list[float]]] = None,
) -> dict[str, Any]:
    """What one collector got during a repetition or a phase, against what the bridge's packets predict."""
    packets, nbytes = received
    return mon.reception(
        monitor.kind,
        monitor.sampling,
        mon.samples_from(monitor.kind, monitor.sampling, packets),
        counters,
        seconds,
        variant=monitor.variant,
        collector=target,
        accounted_packets=packets,
        accounted_bytes=nbytes,
        accounted_bytes_per_s=round(nbytes / seconds) if seconds > 0 else None,
        socket_drops=drops,
        **({"series": series} if series is not None else {}),
    )


def mean_between(points: list[tuple[float, float, dict[str, float]]], lo: float, hi: float) -> dict[str, float]:
    """Per-thread CPU averaged over [lo, hi), each sampling interval weighted by its overlap."""
    weights: dict[str, float] = {}
    total = 0.0
    for a, b, groups in points:
        overlap = min(b, hi) - max(a, lo)
        if overlap <= 0:
            continue
        total += overlap
        for g, pct in groups.items():
            weights[g] = weights.get(g, 0.0) + pct * overlap
    return {g: round(v / total, 1) for g, v in weights.items()} if total else {}


def phase_records(
    phases: tuple[mon.Phase, ...],
    targets: dict[str, str],
    boundaries: list[dict[str, Any]],
    series: Series,
    before: dict[str, Any],
    after: dict[str, Any],
    final: dict[str, tuple[int, int]],
    threads: list[tuple[float, float, dict[str, float]]],
    throughput: list[Optional[float]],
    seconds: float,
) -> list[dict[str, Any]]:
    """Each phase of a repetition: when the switch took it, its throughput, CPU per thread and collector figures.

    ``targets`` are the collectors by kind; ``boundaries`` the phases the switch took after the first (when,
    its acknowledgement, the port counters there); ``threads`` are relative to the release (seconds);
    ``throughput`` is the 1-second interim series."""
    starts = [0.0] + [b["applied_s"] for b in boundaries]
    counters = [before] + [b["counters"] for b in boundaries] + [after]
    out = []
    for i, phase in enumerate(phases):
        rec: dict[str, Any] = {"at": phase.at, "monitor": phase.monitor.to_json() if phase.monitor else None}
        if i >= len(starts):
            rec["not_reached"] = "the run ended (or a phase failed) before this phase"
            out.append(rec)
            continue
        lo = starts[i]
        hi = starts[i + 1] if i + 1 < len(starts) else seconds
        rec["applied_s"] = lo
        rec["ack"] = boundaries[i - 1]["ack"] if i else {"status": "in force at the start"}
        bins = [v for v in throughput[int(lo) : max(int(lo) + 1, int(hi))] if v is not None]
        rec["throughput"] = round(sum(bins) / len(bins), 3) if bins else None
        rec["vswitchd_threads_pct"] = mean_between(threads, lo, hi)
        if phase.monitor is not None:
            received = _received(
                series, final, phase.monitor.kind, lo if i else None, None if i + 1 >= len(starts) else hi
            )
            rec["collector"] = collector_record(
                phase.monitor,
                targets[phase.monitor.kind],
                received,
                deltas(counters[i], counters[i + 1]),
                hi - lo,
                None,
            )
        out.append(rec)
    return out


def _received(
    series: Series, final: dict[str, tuple[int, int]], kind: str, lo: Optional[float], hi: Optional[float]
) -> tuple[int, int]:
    """What a collector got in a phase: from its first reading (``lo`` None) or a second after the phase was
    taken, to a second after the next one was (``hi`` None: the final reading)."""
    first = series[0][1].get(kind, (0, 0)) if lo is None else _at(series, lo + 1.0, kind)
    last = final.get(kind, (0, 0)) if hi is None else _at(series, hi + 1.0, kind)
    return last[0] - first[0], last[1] - first[1]
