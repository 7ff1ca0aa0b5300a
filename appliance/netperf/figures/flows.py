"""Many-flows figures of one repetition (TCP_IPERF): per instance and per step, and per-flow fairness.  Pure.

An instance is one iperf3 client of ``flows`` parallel TCP streams; its
throughput is what its streams delivered together (received Mbit/s of
payload).  The step's sum, mean, min, max and ``jain`` are over instances,
as for every other test; ``flow_*`` are over every stream of every instance
that reported, so 8 instances x 125 flows give one fairness index over the
1,000 flows: how evenly the switch (and TCP) shared the path between them,
which the instances' sums would average away.
"""

from __future__ import annotations

from typing import Optional

from appliance.netperf.define.suite import Step
from appliance.netperf.figures import aggregate, stats
from appliance.netperf.parse.iperf import FlowsInstance
from appliance.netperf.store.records import Aggregate


def _round(x: Optional[float], digits: int = 3) -> Optional[float]:
    return None if x is None else round(x, digits)


def fairness(flow_mbps: list[float]) -> Optional[float]:
    """Jain's index over the flows' received rates, (sum x)^2 / (n * sum x^2): 1 when every flow got the
    same, 1/n when one flow got everything; None without flows or when none received anything (0/0:
    "fair" is undefined, and 1.0 would hide a stall)."""
    return stats.jain(flow_mbps)


def repetition(instances: list[FlowsInstance], offered_mbps: Optional[float]) -> Aggregate:
    """The figures of one repetition of a TCP_IPERF step; ``offered_mbps`` is per flow (None: unpaced)."""
    out = aggregate.repetition(list(instances), rr=False, udp_stream=False)
    out.absent = out.absent - {"sent_mbps", "received_mbps"}  # both measured: iperf3 reports both sides
    ok = [i for i in instances if i.ok and i.streams]
    flows = [x for i in ok for x in i.flow_mbps]
    if not flows:
        return out
    out.sent_mbps = _round(sum(i.sent_mbps or 0.0 for i in ok))
    out.received_mbps = _round(sum(i.received_mbps or 0.0 for i in ok))
    out.flows = len(flows)
    out.flow_mean_mbps = _round(stats.mean(flows))
    out.flow_min_mbps = _round(min(flows))
    out.flow_max_mbps = _round(max(flows))
    out.flow_jain = _round(fairness(flows), 4)
    if offered_mbps:
        offered = offered_mbps * len(flows)  # a lost instance's flows offered nothing that was measured
        out.achieved_ratio = _round((out.received_mbps or 0.0) / offered, 4)
        out.paced_ratio = _round((out.sent_mbps or 0.0) / offered, 4)
    return out


def step_figures(step: Step, instances: list[FlowsInstance]) -> Aggregate:
    """A TCP_IPERF repetition's figures at the step's offered rate per flow."""
    return repetition(instances, step.offered.value if step.offered else None)


def offered_json(step: Step, pairs: int = 1) -> Optional[dict[str, float | str]]:
    """What a step records of its offered rate: per flow, and in all, every pair's instances (None: unpaced)."""
    if step.offered is None:
        return None
    total = step.offered.value * step.test.flows * step.concurrency * pairs
    return {"value": step.offered.value, "unit": step.offered.unit, "per": "flow", "mbps": round(total, 3)}
