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
from typing import Any, Optional

from . import stats
from .omni import Instance


def _round(x: Optional[float], digits: int = 3) -> Optional[float]:
    return None if x is None else round(x, digits)


def repetition(instances: list[Instance], *, rr: bool, udp_stream: bool) -> dict[str, Any]:
    """The figures of one repetition of a step."""
    ok = [i for i in instances if i.ok and i.throughput is not None]
    values = [i.throughput for i in ok if i.throughput is not None]
    reasons = Counter(i.lost for i in instances if not i.ok)
    out: dict[str, Any] = {
        "instances": len(instances),
        "ok": len(ok),
        "lost": len(instances) - len(ok),
        "lost_reasons": dict(reasons),
        "sum": _round(sum(values)) if values else None,
        "mean": _round(stats.mean(values)),
        "min": _round(min(values)) if values else None,
        "max": _round(max(values)) if values else None,
        "jain": _round(stats.jain(values), 4),
    }
    retrans = [i.retransmissions for i in ok if i.retransmissions is not None]
    if retrans:
        out["retransmissions"] = int(sum(retrans))
    if udp_stream:
        sent = sum(i.bytes_sent or 0.0 for i in ok)
        received = sum(i.bytes_received or 0.0 for i in ok)
        out["sent_mbps"] = _round(sum(i.sent_mbps or 0.0 for i in ok))
        out["received_mbps"] = _round(sum(i.received_mbps or 0.0 for i in ok))
        out["udp_loss_pct"] = _round(100.0 * (1 - received / sent), 2) if sent else None
    if rr:
        for key in ("mean", "p50", "p90", "p99"):
            lat = [i.latency_us[key] for i in ok if i.latency_us and key in i.latency_us]
            # the mean over instances of each instance's percentile: per-instance
            # histograms are not kept, so this is not the percentile of the union
            out[f"latency_{key}_us"] = _round(stats.mean(lat), 1)
        if ok:
            out["transactions"] = round(sum((i.throughput or 0) * (i.elapsed_s or 0) for i in ok))
    widths = [i.confidence["achieved_width_pct"] for i in ok if i.confidence]
    if widths:
        out["confidence_width_pct_max"] = _round(max(widths), 2)
        out["confidence_met"] = all(
            i.confidence["achieved_width_pct"] <= i.confidence["interval_pct"] for i in ok if i.confidence
        )
    return out


SUMMARY_FIGURES = (
    "sum",
    "mean",
    "min",
    "max",
    "jain",
    "retransmissions",
    "udp_loss_pct",
    "sent_mbps",
    "received_mbps",
    "latency_mean_us",
    "latency_p50_us",
    "latency_p90_us",
    "latency_p99_us",
)


def summary(reps: list[dict[str, Any]]) -> dict[str, Any]:
    """Across repetitions: mean ± 95% CI of each figure, lost totals and reasons, CPU means."""
    out: dict[str, Any] = {"repetitions": len(reps)}
    aggs = [r["aggregate"] for r in reps]
    for key in SUMMARY_FIGURES:
        xs = [a[key] for a in aggs if a.get(key) is not None]
        interval = stats.ci(xs)
        if interval is not None:
            out[key] = {"mean": _round(interval.mean), "ci95": _round(interval.half_width), "n": interval.n}
    out["lost"] = sum(a["lost"] for a in aggs)
    out["instances"] = sum(a["instances"] for a in aggs)
    reasons: Counter[str] = Counter()
    for a in aggs:
        reasons.update(a.get("lost_reasons", {}))
    out["lost_reasons"] = dict(reasons)
    for key in (
        "host_pct",
        "busiest_core_pct",
        "vswitchd_pct_of_core",
        "netserver_pct_of_core",
        "hvnet_pct_of_core",
        "netperf_pct_of_core",
    ):
        xs = [r["cpu"][key] for r in reps if r.get("cpu", {}).get(key) is not None]
        if xs:
            out[f"cpu_{key}"] = _round(stats.mean(xs), 1)
    spreads = [r["start_spread_ms"] for r in reps if r.get("start_spread_ms") is not None]
    if spreads:
        out["start_spread_ms_max"] = _round(max(spreads), 1)
    return out


def spread_ms(started_ns: list[Optional[int]]) -> Optional[float]:
    """Time between the first and the last instance's start (ms), from the launchers' stamps."""
    ts = [t for t in started_ns if t is not None]
    if len(ts) < 2:
        return 0.0 if ts else None
    return (max(ts) - min(ts)) / 1e6


def values_for(step: dict[str, Any], figure: str) -> list[float]:
    """One figure's per-repetition values of a saved step (what ``compare`` tests)."""
    return [r["aggregate"][figure] for r in step["repetitions"] if r["aggregate"].get(figure) is not None]
