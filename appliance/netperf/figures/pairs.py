"""Per-pair figures of a step with several client -> server pairs (``endpoints: {pairs: [...]}``).  Pure.

A step starts its concurrency for every pair at once, pair after pair in
the batch: instance ``i`` belongs to pair ``i // concurrency``.  The step's
own aggregate stays the total over every instance (what a single pair's
step always had); beside it, each pair gets the sum and mean of what its
instances achieved and how many it lost -- per repetition, then across
repetitions as a mean and 95% interval like every other figure.  Which
pair carried more is what a shared receiver (two senders into one
monitor) is about.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from appliance.netperf.figures import stats
from appliance.netperf.store.records import Figure, RepetitionResult

Json = dict[str, Any]


def pair_of(index: int, per_pair: int) -> int:
    """The pair instance ``index`` belongs to, ``per_pair`` instances each (the step's concurrency)."""
    return index // max(1, per_pair)


def repetition(instances: Sequence[Any], pairs: Sequence[Json], per_pair: int) -> list[Json]:
    """Each pair's figures in one repetition: {client, server, instances, ok, lost, sum, mean}.

    ``instances``: parsed instances (netperf's or iperf3's: ``ok`` and ``throughput``), in batch order;
    ``pairs``: {client, server} in the step's order.  A pair whose instances all failed has no sum, never 0."""
    out = []
    for k, pair in enumerate(pairs):
        mine = [x for x in instances if pair_of(x.index, per_pair) == k]
        values = [x.throughput for x in mine if x.ok and x.throughput is not None]
        out.append({
            "client": pair["client"], "server": pair["server"], "instances": len(mine), "ok": len(values),
            "lost": len(mine) - len(values), "sum": _round(sum(values)) if values else None,
            "mean": _round(stats.mean(values)),
        })  # fmt: skip
    return out


def summary(reps: Sequence[RepetitionResult]) -> Optional[list[Json]]:
    """Each pair across repetitions: {client, server, sum, mean (each {mean, ci95, n}), lost, instances}.

    None when the repetitions carry no per-pair figures (a single pair's step)."""
    per_rep = [r.aggregate.pairs for r in reps if r.aggregate.pairs]
    if not per_rep:
        return None
    out = []
    for k, first in enumerate(per_rep[0]):
        rows = [got[k] for got in per_rep if k < len(got)]
        row: Json = {"client": first["client"], "server": first["server"]}
        for key in ("sum", "mean"):
            interval = stats.ci([x[key] for x in rows if x.get(key) is not None])
            row[key] = (
                Figure(_round(interval.mean), _round(interval.half_width), interval.n).to_json() if interval else None
            )
        row["lost"] = sum(x.get("lost", 0) for x in rows)
        row["instances"] = sum(x.get("instances", 0) for x in rows)
        out.append(row)
    return out


def _round(x: Optional[float], digits: int = 3) -> Optional[float]:
    return None if x is None else round(x, digits)
