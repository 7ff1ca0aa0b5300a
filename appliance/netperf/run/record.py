"""A step's and a repetition's records, as the run builds them from what it started and read.

The figures themselves are pure and live in :mod:`appliance.netperf.figures`;
what is left here reads the batch's outputs (each instance's stdout and
stderr, parsed by :mod:`appliance.netperf.parse`) and says where a figure
could not be measured (a VM's CPU, a remote host's).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable, Optional

from appliance.netperf.define.pairs import Pair
from appliance.netperf.define.suite import Step
from appliance.netperf.figures import aggregate, flows, pairs, pps, verdict
from appliance.netperf.figures import arrival as arrival_figures
from appliance.netperf.figures.counters import deltas
from appliance.netperf.parse import iperf, omni
from appliance.netperf.run.fragments import CaseState
from appliance.netperf.run.launch import Batch, strip_start
from appliance.netperf.run.repetition import Readings, Repetition
from appliance.netperf.store.records import Aggregate, RepetitionResult, StepResult


def step_record(
    step: Step, cs: CaseState, setup: CaseState, generator: Optional[str], step_pairs: Sequence[Pair] = ()
) -> StepResult:
    """A step's record before its first repetition: what it runs (with ``step_pairs``, several client ->
    server pairs, each its concurrency), and the case's policy, copies and monitoring."""
    t = step.test
    rec = StepResult(
        key=step.key, index=step.index, test=t.name, type=t.type, case=step.case.name,
        message_size=step.message_size, request_size=t.request_size, response_size=t.response_size,
        concurrency=step.concurrency, duration=t.duration, warmup=t.warmup, metric=t.metric, units=t.metric,
        confidence=t.confidence.__dict__ if t.confidence else None, policing=cs.policing or setup.policing,
        mirrors=cs.mirrors, enforcement=cs.enforcement,
    )  # fmt: skip
    if t.is_pps:
        rec.frame_size, rec.generator = step.frame_size, generator
        rec.offered = step.offered.to_json(step.frame_size or 0) if step.offered else None
    if t.is_flows:
        rec.flows, rec.generator, rec.offered = t.flows, generator, flows.offered_json(step, max(1, len(step_pairs)))
    rec.pairs = [p.to_json() for p in step_pairs] or None
    rec.collector_guest = step.case.collector_guest
    rec.cpus = cs.cpus
    if step.case.capture is not None:
        rec.capture = {"guests": list(step.case.capture.guests), "ports": list(cs.capture_vifs.values()),
                       "snaplen": step.case.capture.snaplen, "buffer_kib": step.case.capture.buffer_kib}  # fmt: skip
    if cs.monitoring is not None:
        rec.monitor = cs.monitoring.describe()
        rec.phases = [p.to_json() for p in step.case.phases] or None
    return rec


def repetition_record(
    r: Repetition, got: Readings, *, stop_reason: str, facts: dict[str, Any], server_notes: Callable[[], list[str]]
) -> RepetitionResult:
    """A measured repetition's record: its instances, figures, CPU, counters and notes; a monitored case's
    collector and phase figures last (once the collector wrote its last samples)."""
    step, batch = r.step, r.batch
    instances = read_instances(step, batch, stop_reason)
    # netperf's own CPU (launcher excluded) over its whole life, tail included: divide by that span
    released, finished = batch.released_ns, batch.finished_ns
    span = (finished - released) / 1e9 if finished and released else step.test.duration
    cpu = _netperf_cpu(r, got.cpu, span)
    if got.vm_cpu:
        cpu["vms"] = got.vm_cpu  # each real VM's own /proc/stat, all its work (see parse.procstat)
    counters = deltas(got.before, got.after)
    agg, arrived = _figures(r, got, instances, counters)
    notes = verdict.crr_exhaustion(step.test.type, step.test.duration, agg.transactions,
                                   facts.get("ephemeral_ports", {}).get("count"))  # fmt: skip
    notes += got.listen_problems + [p for p in got.arrival_problems if p] + _batch_notes(r) + server_notes()
    result = RepetitionResult(
        repetition=r.rep,
        started=got.started,
        start_spread_ms=_r(aggregate.spread_ms([batch.outcomes[i].started_ns for i in range(len(batch.argvs))])),
        wall_s=round(span, 3),
        instances=_instance_records(instances, step.concurrency, r.rig.step_pairs()),
        aggregate=agg,
        cpu=cpu,
        counters=counters,
        meter_drops=None if got.drops_before is None or got.drops_after is None else got.drops_after - got.drops_before,
        raw=str(r.raw.relative_to(r.rig.out_dir)),
        argv=batch.argvs[0],
        notes=notes,
        captures=got.listened or None,
        arrival=arrived,
        perf_stat=got.perf_stat,
    )
    stdouts = [batch.out_path(i).read_text(errors="replace") for i in range(len(batch.argvs))]
    if not (step.test.is_pps or step.test.is_flows):  # netperf's interim results: the step's rate over time
        offsets = [None if i.start_offset_ms is None else i.start_offset_ms / 1e3 for i in instances]
        result.throughput_series = omni.aligned_series([omni.parse_interim(out) for out in stdouts], offsets)
    if r.watch is not None:  # a phased case's series is re-read on the phases' clock
        r.watch.finish(result, got.after, r.sampler, stdouts)
    return result


def read_instances(step: Step, batch: Batch, stop_reason: str) -> list[Any]:
    """Each instance's output read into its figures (netperf's or iperf3's); stopped ones say why."""
    instances = []
    for i in range(len(batch.argvs)):
        outcome = batch.outcomes[i]
        stopped = None
        if outcome.timed_out is not None:
            stopped = stop_reason if outcome.timed_out == 0.0 else f"no result after {outcome.timed_out:.0f} s: stopped"
        stdout = batch.out_path(i).read_text(errors="replace")
        stderr = strip_start(batch.err_path(i).read_text(errors="replace"))
        if step.test.is_pps:
            inst = iperf.parse(i, step.frame_size or 0, stdout, stderr, outcome.returncode, stopped)
        elif step.test.is_flows:
            inst = iperf.parse_tcp(i, step.test.flows, stdout, stderr, outcome.returncode, stopped)
        else:
            inst = omni.parse(i, step.test, stdout, stderr, outcome.returncode, stopped)
        if outcome.started_ns is not None and batch.released_ns is not None:
            inst.start_offset_ms = round((outcome.started_ns - batch.released_ns) / 1e6, 2)
        instances.append(inst)
    return instances


def _instance_records(instances: list[Any], per_pair: int, step_pairs: Sequence[Pair]) -> list[dict[str, Any]]:
    """Each instance's figures as recorded; with several pairs, the index of the pair it belonged to."""
    if not step_pairs:
        return [i.to_json() for i in instances]
    return [{**i.to_json(), "pair": pairs.pair_of(i.index, per_pair)} for i in instances]


def _netperf_cpu(r: Repetition, cpu: dict[str, Any], span: float) -> dict[str, Any]:
    """The sampler's summary with netperf's own CPU (from the instances' rusage), or why it is not known."""
    client, batch = r.rig.client, r.batch
    netperf_cpu = sum(o.netperf_cpu_s for o in batch.outcomes.values())
    cpu["netperf_pct_of_core"] = round(100.0 * netperf_cpu / max(span, 1e-3), 1)
    if client.in_vm:
        cpu["netperf_cpu_measured_in"] = f"QEMU guest {client.name} (its own accounting of its CPU)"
        if batch.cpu_unmeasured:
            cpu["netperf_pct_of_core"] = None  # unknown, never a made-up 0
    elif client.vm is not None:
        cpu["netperf_pct_of_core"] = None  # a process in a real VM: its rusage never reaches hvnet
        cpu["netperf_cpu_measured_in"] = f"not per process: {client.vm}; its whole CPU is in cpu.vms"
    elif client.remote:
        cpu["netperf_pct_of_core"] = None  # started by a shell on that host: its rusage is not ours to read
        cpu["netperf_cpu_measured_in"] = f"not measured: netperf ran on {r.rig.host.label or 'the host'}"
    return cpu


def _figures(
    r: Repetition, got: Readings, instances: list[Any], counters: dict[str, dict[str, int]]
) -> tuple[Aggregate, Optional[dict[str, Any]]]:
    """The repetition's aggregate (with its captures' and its collector guest's figures) and arrival record."""
    step, cs = r.step, r.case
    t = step.test
    if t.is_pps:
        agg = pps.step_figures(step, instances, cs.mirrors, counters)
    elif t.is_flows:
        agg = flows.step_figures(step, instances)
    else:
        agg = aggregate.repetition(instances, rr=t.is_rr, udp_stream=t.type == "UDP_STREAM")
    step_pairs = r.rig.step_pairs()
    if step_pairs:
        agg.pairs = pairs.repetition(instances, [p.to_json() for p in step_pairs], step.concurrency)
    ok = [i.elapsed_s for i in instances if i.ok and i.elapsed_s]
    seconds_run = sum(ok) / len(ok) if ok else float(t.duration)  # what the figures per second divide by
    if got.listened:  # a case's listeners, whatever generates the traffic
        pps.add_listened(agg, got.listened, cs.mirrors, counters, seconds_run)
    arrived = None
    if cs.collector is not None and step.case.collector_guest:
        arrived = arrival_figures.figures(agg, step.case.collector_guest, got.arrived_before, got.arrived_after,
                                          cs.mirrors, counters, seconds_run)  # fmt: skip
    return agg, arrived


def _batch_notes(r: Repetition) -> list[str]:
    """What the batch itself says of its figures: CPU not measured, a ragged start."""
    notes = []
    batch, concurrency = r.batch, len(r.batch.argvs)
    if batch.cpu_unmeasured and not r.rig.client.remote:
        notes.append(f"netperf CPU not measured: {batch.cpu_unmeasured} instance(s) in the VM reported none")
    if batch.ready < concurrency:
        notes.append(f"only {batch.ready} of {concurrency} instances were ready at the synchronised start")
    return notes


def _r(x: Optional[float]) -> Optional[float]:
    return None if x is None else round(x, 2)
