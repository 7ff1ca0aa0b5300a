"""A run's steps as flent data files (``.flent.gz``), so flent's own plots and comparisons open them.

flent (https://flent.org) keeps one test run per file: gzipped JSON with
``metadata`` (its settings, ``SERIES_META`` per series), ``x_values`` (seconds
from ``T0``), ``results`` (one value per x for each series, None where
nothing was measured), ``raw_values`` (each series' measurements, absolute
``t``) and a format ``version`` (4, flent 2.x).  flent draws a file with the
plots of the test named by its ``NAME``, so a step is exported under the flent
test whose series is the same measurement: a netperf stream in one direction.

One file per measured repetition of a step: a repetition is one run of the
test, as a flent file is, and flent overlays several files
(``flent -i A -i B -p totals``).  Its series is the step's netperf interim
results summed per second (:attr:`RepetitionResult.throughput_series`);
a repetition recorded without them (runs before every step recorded them)
is exported with its aggregate only -- the series all None, the aggregate as
flent's ``MEAN_VALUE`` -- and says so in its ``NOTE`` and in the export's notes.
Steps flent has no test for (request/response, packet-rate, iperf3 streams)
are not exported, and the notes say which.

Pure: builds the documents; :func:`write` only writes files.
"""

from __future__ import annotations

import gzip
import json
import os
import re
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

from appliance.netperf.store.records import RepetitionResult, StepResult, SuiteResult

FORMAT_VERSION = 4  # flent's resultset.FILEFORMAT_VERSION (flent 2.x)
SUFFIX = ".flent.gz"
STEP_S = 1.0  # the interim series' bins

# netperf test type -> (flent test, its series, what the series is); flent's netperf_demo series are these
FLENT_TESTS = {
    "TCP_STREAM": ("tcp_1up_noping", "TCP upload", "netperf's interim results: what the client sent"),
    "TCP_SENDFILE": ("tcp_1up_noping", "TCP upload", "netperf's interim results: what the client sent"),
    "TCP_MAERTS": ("tcp_1down", "TCP download", "netperf's interim results: what the client received"),
    "UDP_STREAM": (
        "udp_flood",
        "UDP upload",
        "netperf's interim results: what the client SENT (the step's aggregate is what arrived)",
    ),
}
PLOTS = {"tcp_1up_noping": "totals", "tcp_1down": "totals", "udp_flood": "totals"}


@dataclass
class Export:
    """The files of one run's export and what the operator must know about them."""

    files: list[tuple[str, dict[str, Any]]] = field(default_factory=list)  # (file name, flent document)
    notes: list[str] = field(default_factory=list)


def export(doc: SuiteResult) -> Export:
    """Every exportable step's measured repetitions as flent documents, with notes on what was left out."""
    out = Export()
    skipped: dict[str, list[str]] = {}
    aggregates_only = 0
    for step in doc.steps:
        if step.type not in FLENT_TESTS or step.generator:
            skipped.setdefault(step.type, []).append(step.key)
            continue
        for rep in step.repetitions:
            name, document = repetition_file(doc, step, rep)
            out.files.append((name, document))
            aggregates_only += rep.throughput_series is None
    for kind, keys in skipped.items():
        out.notes.append(f"not exported: {len(keys)} {kind} step(s): flent has no test plotting that measurement")
    if aggregates_only:
        out.notes.append(
            f"{aggregates_only} repetition(s) recorded no interim results (a run before every step recorded "
            "them): exported with their aggregate only (flent's MEAN_VALUE), no time series"
        )
    return out


def repetition_file(doc: SuiteResult, step: StepResult, rep: RepetitionResult) -> tuple[str, dict[str, Any]]:
    """One repetition of a step as a flent document, and its file name."""
    test, series_name, what = FLENT_TESTS[step.type]
    series = rep.throughput_series
    t0 = _utc(rep.started) or _utc(doc.meta.started)
    if series:
        x_values = [STEP_S * (i + 1) for i in range(len(series))]  # each second by its end, as netperf's ENDING
        values: list[Optional[float]] = list(series)
        note = f"{what}, summed over the step's {step.concurrency} instance(s) per {STEP_S:g} s"
    else:
        x_values, values = [float(step.duration or 0) or STEP_S], [None]
        note = "no interim results were recorded: the aggregate only (MEAN_VALUE); no time series"
    mean = _aggregate(step, rep)
    t0_s = t0.timestamp() if t0 else None
    raw = [] if t0_s is None else [{"t": t0_s + x, "val": v} for x, v in zip(x_values, values) if v is not None]
    suite = doc.meta.suite.name
    meta = {
        "NAME": test,
        "TITLE": f"hvnet {suite} {step.key} rep {rep.repetition}",
        "NOTE": note,
        "TIME": _iso(t0),
        "T0": _iso(t0),
        "HOST": doc.meta.server.address or None,
        "HOSTS": [doc.meta.server.address] if doc.meta.server.address else [],
        "LOCAL_HOST": doc.meta.client.guest or None,
        "LENGTH": step.duration,
        "TOTAL_LENGTH": x_values[-1],
        "STEP_SIZE": STEP_S,
        "TEST_PARAMETERS": {},
        "FLENT_VERSION": None,  # written by hvnet, not by flent
        "IP_VERSION": None,
        "DATA_FILENAME": None,
        "SERIES_META": {series_name: {"UNITS": "Mbits/s", "MEAN_VALUE": mean, "RUNNER": "hvnet (netperf -D)"}},
        "HVNET": {
            "hvnet_version": doc.meta.hvnet_version,
            "suite": suite,
            "host": doc.meta.host,
            "client": doc.meta.client.guest,
            "server": doc.meta.server.guest,
            "step": step.key,
            "case": step.case,
            "test": step.test,
            "type": step.type,
            "concurrency": step.concurrency,
            "message_size": step.message_size,
            "repetition": rep.repetition,
            "interim_results": series is not None,
            "aggregate_mbps": rep.aggregate.sum,
            "sent_mbps": rep.aggregate.sent_mbps,
            "lost_instances": rep.aggregate.lost,
            "x_values": "seconds from T0 (the repetition's start, to the second), each bin by its end",
        },
    }
    name = f"{step.index:03d}-{_safe(step.key)}-rep{rep.repetition}{SUFFIX}"
    meta["DATA_FILENAME"] = name
    document = {
        "version": FORMAT_VERSION,
        "metadata": meta,
        "x_values": x_values,
        "results": {series_name: values},
        "raw_values": {series_name: raw},
    }
    return name, document


def write(ex: Export, directory: Path) -> list[Path]:
    """Each document gzipped into ``directory`` (created); the paths written.  Every document is
    encoded before the first file is opened: one that cannot be (ValueError: a NaN) leaves no file."""
    encoded = [(name, json.dumps(document, indent=1, sort_keys=True, allow_nan=False).encode())
               for name, document in ex.files]  # fmt: skip
    directory.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, data in encoded:
        path = directory / name
        # never through a link planted at the name (hvnet runs as root; the directory may be shared)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o666)
        with os.fdopen(fd, "wb") as raw, gzip.GzipFile(fileobj=raw, mode="wb", filename=name) as gz:
            gz.write(data)
        paths.append(path)
    return paths


def plot_of(document: dict[str, Any]) -> str:
    """The flent plot that shows a document's series (``flent -i FILE -p PLOT``)."""
    return PLOTS[document["metadata"]["NAME"]]


def _aggregate(step: StepResult, rep: RepetitionResult) -> Optional[float]:
    """The repetition's aggregate in the series' own terms: UDP's series is what was sent."""
    return rep.aggregate.sent_mbps if step.type == "UDP_STREAM" else rep.aggregate.sum


def _utc(text: Optional[str]) -> Optional[datetime]:
    if not text:
        return None
    try:
        t = datetime.fromisoformat(text)
    except ValueError:
        return None
    return (t if t.tzinfo else t.replace(tzinfo=timezone.utc)).astimezone(timezone.utc)


def _iso(t: Optional[datetime]) -> Optional[str]:
    """flent's UTC form (``...T12:00:00.000000Z``); None when the run recorded no time."""
    return None if t is None else t.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _safe(key: str) -> str:
    """A step's key as part of a file name: anything but letters, digits, ``.-_`` becomes ``_``."""
    return re.sub(r"[^A-Za-z0-9._-]+", "_", key).strip("._") or "step"
