"""Per-step figures from per-instance results: pure, so reports and comparisons recompute them.

A repetition of a step is summarised by the sum and mean of what its
instances achieved (Mbit/s, or transactions/s for request/response tests),
the per-instance min/max and Jain's fairness index, the lost count with the
reasons, TCP retransmissions and, for UDP, what was sent against what
arrived.  Across repetitions each figure gets a mean and a 95% confidence
interval (Student's t): one repetition gives a mean and no interval.
"""

from __future__ import annotations

from collections import Counter
from typing import Optional

from appliance.netperf.figures import stats
from appliance.netperf.parse.omni import Instance
from appliance.netperf.store.records import (
    CPU_FIGURES,
    LATENCY_FIGURES,
    SUMMARY_FIGURES,
    UDP_FIGURES,
    Aggregate,
    Figure,
    RepetitionResult,
    StepResult,
    Summary,
)


def _round(x: Optional[float], digits: int = 3) -> Optional[float]:
    return None if x is None else round(x, digits)


def repetition(instances: list[Instance], *, rr: bool, udp_stream: bool) -> Aggregate:
    """The figures of one repetition of a step."""
    ok = [i for i in instances if i.ok and i.throughput is not None]
    values = [i.throughput for i in ok if i.throughput is not None]
    # figures that do not apply to the test type are left out of the record, not set to 0
    skip = frozenset(() if udp_stream else UDP_FIGURES) | frozenset(() if rr else LATENCY_FIGURES)
    out = Aggregate(
        instances=len(instances),
        ok=len(ok),
        lost=len(instances) - len(ok),
        lost_reasons=dict(Counter(i.lost for i in instances if not i.ok)),
        sum=_round(sum(values)) if values else None,
        mean=_round(stats.mean(values)),
        min=_round(min(values)) if values else None,
        max=_round(max(values)) if values else None,
        jain=_round(stats.jain(values), 4),
        absent=skip,
    )
    retrans = [i.retransmissions for i in ok if i.retransmissions is not None]
    if retrans:
        out.retransmissions = int(sum(retrans))
    if udp_stream:
        _udp(out, ok)
    if rr:
        _latency(out, ok)
    widths = [i.confidence["achieved_width_pct"] for i in ok if i.confidence]
    if widths:
        out.confidence_width_pct_max = _round(max(widths), 2)
        out.confidence_met = all(
            i.confidence["achieved_width_pct"] <= i.confidence["interval_pct"] for i in ok if i.confidence
        )
    return out


def _udp(out: Aggregate, ok: list[Instance]) -> None:
    """Sent against received: only the receive side is what got through; loss is from bytes."""
    sent = sum(i.bytes_sent or 0.0 for i in ok)
    received = sum(i.bytes_received or 0.0 for i in ok)
    out.sent_mbps = _round(sum(i.sent_mbps or 0.0 for i in ok))
    out.received_mbps = _round(sum(i.received_mbps or 0.0 for i in ok))
    out.udp_loss_pct = _round(100.0 * (1 - received / sent), 2) if sent else None


def _latency(out: Aggregate, ok: list[Instance]) -> None:
    # the mean over instances of each instance's percentile: per-instance
    # histograms are not kept, so this is not the percentile of the union
    lat = {key: [i.latency_us[key] for i in ok if i.latency_us and key in i.latency_us]
           for key in ("mean", "p50", "p90", "p99")}  # fmt: skip
    out.latency_mean_us = _round(stats.mean(lat["mean"]), 1)
    out.latency_p50_us = _round(stats.mean(lat["p50"]), 1)
    out.latency_p90_us = _round(stats.mean(lat["p90"]), 1)
    out.latency_p99_us = _round(stats.mean(lat["p99"]), 1)
    if ok:
        out.transactions = round(sum((i.throughput or 0) * (i.elapsed_s or 0) for i in ok))


def summary(reps: list[RepetitionResult]) -> Summary:
    """Across repetitions: mean ± 95% CI of each figure, lost totals and reasons, CPU means."""
    aggs = [r.aggregate for r in reps]
    reasons: Counter[str] = Counter()
    for a in aggs:
        reasons.update(a.lost_reasons)
    out = Summary(
        repetitions=len(reps),
        lost=sum(a.lost for a in aggs),
        instances=sum(a.instances for a in aggs),
        lost_reasons=dict(reasons),
    )
    for key in SUMMARY_FIGURES:
        interval = stats.ci([x for x in (a.figure(key) for a in aggs) if x is not None])
        if interval is not None:
            setattr(out, key, Figure(_round(interval.mean), _round(interval.half_width), interval.n))
    for key in CPU_FIGURES:
        xs = [r.cpu[key] for r in reps if r.cpu.get(key) is not None]
        if xs:
            setattr(out, f"cpu_{key}", _round(stats.mean(xs), 1))
    spreads = [r.start_spread_ms for r in reps if r.start_spread_ms is not None]
    if spreads:
        out.start_spread_ms_max = _round(max(spreads), 1)
    return out


def spread_ms(started_ns: list[Optional[int]]) -> Optional[float]:
    """Time between the first and the last instance's start (ms), from the launchers' stamps."""
    ts = [t for t in started_ns if t is not None]
    if len(ts) < 2:
        return 0.0 if ts else None
    return (max(ts) - min(ts)) / 1e6


def values_for(step: StepResult, figure: str) -> list[float]:
    """One figure's per-repetition values of a saved step (what ``compare`` tests)."""
    values = (r.aggregate.figure(figure) for r in step.repetitions)
    return [v for v in values if v is not None]
