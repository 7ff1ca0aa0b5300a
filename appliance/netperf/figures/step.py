"""A step's figures over the repetitions it has so far.  Pure.

Recomputed after each repetition, so a run stopped half-way still has a
summary, ovs-vswitchd's threads, its collector's figures and a bottleneck for
what it measured.
"""

from __future__ import annotations

from typing import Any, Optional

from appliance.netperf.define.monitoring import combine, thread_summary
from appliance.netperf.figures import aggregate, pairs, pps, verdict
from appliance.netperf.store.records import StepResult


def update(rec: StepResult, facts: dict[str, Any], client_vif: Optional[str]) -> Optional[verdict.Verdict]:
    """Set ``rec``'s figures from its repetitions; the bottleneck found (None: none can be named yet)."""
    rec.summary = aggregate.summary(rec.repetitions)
    rec.summary.pairs = pairs.summary(rec.repetitions)
    rec.vswitchd_threads = thread_summary(rec.repetitions)
    if rec.capture is not None:  # the captures' own limits beside their completeness
        rec.capture = {**rec.capture, "limits": pps.capture_limits([x.captures for x in rec.repetitions])}
    rec.collector = combine([x.collector for x in rec.repetitions if x.collector]) if rec.monitor else None
    found = verdict.of_step(rec, facts=facts, client_vif=client_vif)
    rec.verdict = found.to_json() if found else None
    return found
