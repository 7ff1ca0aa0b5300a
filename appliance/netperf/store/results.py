"""A run directory: raw netperf outputs, ``results.json`` (versioned) and ``results.csv``.

Everything a report, a plot or a comparison needs is in ``results.json``
(read and written as :class:`.records.SuiteResult`),
so they are regenerated without re-running.  The file is rewritten after
every step (atomically), so an interrupted run leaves a readable partial
result, marked ``"partial": true`` with the reason.
"""

from __future__ import annotations

import csv
import json
import os
from pathlib import Path
from typing import Any

from appliance.core.documents import SUITE_RESULTS
from appliance.core.errors import HvnetError, UsageError
from appliance.netperf.store.records import RepetitionResult, StepResult, SuiteResult
from appliance.netperf.store.retention import PIN_FILE
from appliance.netperf.store.upgrade import CURRENT, upgrade

SCHEMA = SUITE_RESULTS.name
SCHEMA_VERSION = CURRENT
RESULTS = "results.json"
CSV = "results.csv"


class NotARun(UsageError):
    """A directory that holds no hvnet run."""


def write(run_dir: Path, doc: SuiteResult) -> None:
    """Save ``results.json`` and ``results.csv`` atomically (a reader never sees half a file)."""
    tmp = run_dir / f".{RESULTS}.{os.getpid()}.tmp"
    tmp.write_text(json.dumps(doc.to_json(), indent=1, sort_keys=False) + "\n")
    os.replace(tmp, run_dir / RESULTS)
    tmp_csv = run_dir / f".{CSV}.{os.getpid()}.tmp"
    with open(tmp_csv, "w", newline="") as fh:
        write_csv(fh, doc)
    os.replace(tmp_csv, run_dir / CSV)


CSV_COLUMNS = (
    "step",
    "test",
    "type",
    "case",
    "message_size",
    "concurrency",
    "repetition",
    "units",
    "instances",
    "ok",
    "lost",
    "sum",
    "mean",
    "min",
    "max",
    "jain",
    "retransmissions",
    "sent_mbps",
    "received_mbps",
    "udp_loss_pct",
    "latency_mean_us",
    "latency_p99_us",
    "start_spread_ms",
    "host_pct",
    "vswitchd_pct_of_core",
    "netperf_pct_of_core",
    "netserver_pct_of_core",
    "lost_reasons",
)
# added after those when the run has packet-rate steps (UDP_PPS): a netperf-only run's file is unchanged
PPS_CSV_COLUMNS = (
    "frame_size",
    "offered_pps",
    "sent_pps",
    "received_pps",
    "achieved_ratio",
    "monitor_pps",
    "captured_ratio",
    "mirrored_pps",
    "mirrored_mbps",
    "arrived_pps",
    "arrived_mbps",
    "arrived_ratio",
)

# added last when the run has many-flows steps (TCP_IPERF): flows per instance, the offered rate per flow,
# and the figures over every flow of the step ("flows": how many were measured, all instances together)
FLOW_CSV_COLUMNS = (
    "flows_per_instance",
    "offered_mbps_per_flow",
    "flows",
    "achieved_ratio",
    "flow_mean_mbps",
    "flow_min_mbps",
    "flow_max_mbps",
    "flow_jain",
)


CPU_COLUMNS = ("host_pct", "vswitchd_pct_of_core", "netperf_pct_of_core", "netserver_pct_of_core")


PAIR_CSV_COLUMNS = ("", "_sum", "_mean", "_lost")  # pair1 (client->server), pair1_sum, pair1_mean, pair1_lost


def write_csv(fh: Any, doc: SuiteResult) -> None:
    """One row per step repetition: the figures a spreadsheet wants, units in their own column."""
    w = csv.writer(fh)
    columns = CSV_COLUMNS + (PPS_CSV_COLUMNS if any(s.frame_size is not None for s in doc.steps) else ())
    if any(s.flows is not None for s in doc.steps):
        columns += tuple(c for c in FLOW_CSV_COLUMNS if c not in columns)
    npairs = max((len(s.pairs or []) for s in doc.steps), default=0)
    columns += tuple(f"pair{k + 1}{c}" for k in range(npairs) for c in PAIR_CSV_COLUMNS)
    w.writerow(columns)
    for step in doc.steps:
        for rep in step.repetitions:
            row = {**_csv_row(step, rep), **_pair_cells(rep)}
            w.writerow(["" if row.get(c) is None else row.get(c) for c in columns])


def _pair_cells(rep: RepetitionResult) -> dict[str, Any]:
    """A run of several client -> server pairs: each pair's name, total, mean per instance and lost instances
    in the repetition, in the step's units (a pair none of whose instances reported: empty total and mean)."""
    out: dict[str, Any] = {}
    for k, p in enumerate(rep.aggregate.pairs or []):
        cells = (f"{p.get('client')}->{p.get('server')}", p.get("sum"), p.get("mean"), p.get("lost"))
        out.update({f"pair{k + 1}{c}": v for c, v in zip(PAIR_CSV_COLUMNS, cells)})
    return out


def _csv_row(step: StepResult, rep: RepetitionResult) -> dict[str, Any]:
    agg = rep.aggregate
    # None: not measured, an empty cell
    row = {c: agg.figure(c) for c in CSV_COLUMNS + PPS_CSV_COLUMNS + FLOW_CSV_COLUMNS if c != "lost_reasons"}
    row.update({c: rep.cpu.get(c) for c in CPU_COLUMNS})
    row.update(
        step=step.key,
        test=step.test,
        type=step.type,
        case=step.case,
        message_size=step.message_size,
        concurrency=step.concurrency,
        repetition=rep.repetition,
        units=step.units,
        start_spread_ms=rep.start_spread_ms,
        lost_reasons="; ".join(f"{n}x {r}" for r, n in agg.lost_reasons.items()),
        frame_size=step.frame_size,
        offered_pps=step.offered.get("pps") if isinstance(step.offered, dict) else None,
        flows_per_instance=step.flows,
        offered_mbps_per_flow=step.offered.get("value") if step.flows is not None and step.offered else None,
    )
    return row


def load(path: str | Path) -> SuiteResult:
    """A run's ``results.json`` (``path`` is the run directory or the file); refuses anything else."""
    p = Path(path)
    f = p / RESULTS if p.is_dir() else p
    if not f.exists():
        raise NotARun(f"{path} is not an hvnet run: no {RESULTS}", hint="runs are listed by 'hvnet suite list'")
    try:
        doc = json.loads(f.read_text())
    except (OSError, ValueError, RecursionError) as exc:  # RecursionError: arrays or objects nested too deep
        raise NotARun(f"{f} is not a readable hvnet run: {exc}") from None
    if not isinstance(doc, dict) or doc.get("schema") != SCHEMA:
        raise NotARun(f"{f} is not an hvnet run (schema {doc.get('schema') if isinstance(doc, dict) else None!r})")
    try:
        doc = upgrade(doc)  # a run an older hvnet saved reads as this one writes it
    except ValueError as exc:
        newer = isinstance(doc.get("version"), int) and doc["version"] > SCHEMA_VERSION
        raise NotARun(f"{f}: {exc}", hint="a newer hvnet wrote it: read it with that one" if newer else None) from None
    try:
        return SuiteResult.from_json(doc)
    except (TypeError, ValueError, AttributeError) as exc:
        raise NotARun(f"{f} is not a readable hvnet run: {exc}") from None


def list_runs(base: Path) -> list[dict[str, Any]]:
    """Past runs under ``base``, newest first (name, suite, when, state, steps)."""
    out = []
    for f in sorted(base.glob(f"*/{RESULTS}")):
        try:
            doc = load(f)
        except HvnetError:
            continue
        out.append(
            {
                "run": str(f.parent),
                "suite": doc.meta.suite.name,
                "started": doc.meta.started,
                "state": doc.state,
                "steps": len(doc.steps),
                "lost": sum(s.summary.lost for s in doc.steps if s.summary is not None),
                "pinned": (f.parent / PIN_FILE).is_file(),  # kept from every 'hvnet suite prune'
            }
        )
    out.sort(key=lambda r: r["started"] or "", reverse=True)
    return out
