"""netperf's omni output, by selector: the command line one instance runs and what its output means.

Pure: builds argument lists and parses captured output; runs nothing.  The
figures are read through omni output selectors (``-P 0 -- -k SEL,...``,
one ``NAME=value`` line each), never by column position, so a netperf that
prints a warning first, or a different column layout, cannot shift a value.

An instance is *lost* -- as the 2010 study counted them -- when netperf
exits non-zero, prints ``establish control``, or returns no result; the
reason is kept.  A UDP stream whose datagrams were all dropped is *not*
lost: it ran and measured 0 received, which is the finding.
"""

from __future__ import annotations

import math
import re
import signal
from dataclasses import asdict, dataclass
from typing import Any, Optional

from appliance.netperf.define.tests import Test

SELECTORS = (
    "THROUGHPUT",
    "THROUGHPUT_UNITS",
    "ELAPSED_TIME",
    "PROTOCOL",
    "DIRECTION",
    "LOCAL_SEND_SIZE",
    "REQUEST_SIZE",
    "RESPONSE_SIZE",
    "LOCAL_SEND_THROUGHPUT",
    "REMOTE_RECV_THROUGHPUT",
    "LOCAL_BYTES_SENT",
    "REMOTE_BYTES_RECVD",
    "LOCAL_SEND_CALLS",
    "REMOTE_RECV_CALLS",
    "LOCAL_TRANSPORT_RETRANS",
    "REMOTE_TRANSPORT_RETRANS",
    "TRANSACTION_RATE",
    "MEAN_LATENCY",
    "MIN_LATENCY",
    "MAX_LATENCY",
    "P50_LATENCY",
    "P90_LATENCY",
    "P99_LATENCY",
    "STDDEV_LATENCY",
    "CONFIDENCE_LEVEL",
    "CONFIDENCE_INTERVAL",
    "CONFIDENCE_ITERATION",
    "THROUGHPUT_CONFID",
)
MBPS_UNITS = "10^6bits/s"
TPS_UNITS = "Trans/s"

_ESTABLISH = re.compile(r"establish control: are you sure there is a netserver listening on (\S+) at port (\d+)")


def argv(
    netperf: str,
    test: Test,
    address: str,
    port: int,
    *,
    message_size: Optional[int],
    seconds: int,
    confidence: bool = True,
    interim_s: Optional[float] = None,
) -> list[str]:
    """One instance's command line (an argument list: values never pass through a shell).

    ``interim_s``: netperf's demo mode (``-D``), an interim result about every that many seconds
    (``NETPERF_INTERIM_RESULT[i]`` lines, see :func:`parse_interim`): a time series within one run.
    """
    out = [netperf, "-H", address, "-p", str(port), "-t", test.type, "-l", str(seconds), "-P", "0"]
    if interim_s:
        out += ["-D", f"{interim_s:g}"]
    if test.is_rr:
        out.append("-j")  # keep latency statistics: MEAN/P50/P90/P99_LATENCY
    if confidence and test.confidence:
        out += test.confidence.argv()
    out += ["--", "-k", ",".join(SELECTORS)]
    if test.is_rr:
        out += ["-r", f"{test.request_size},{test.response_size}"]
    elif message_size:
        out += ["-m", str(message_size)]
    if test.type == "UDP_STREAM":
        out += ["-R", "1"]  # netperf sets SO_DONTROUTE on UDP streams unless told; a server may be routed
    return out


def reachability_argv(netperf: str, address: str, port: int) -> list[str]:
    """One TCP_RR transaction: proves the control connection *and* a data connection, in milliseconds."""
    return [netperf, "-H", address, "-p", str(port), "-t", "TCP_RR", "-l", "-1", "-P", "0", "--", "-k", "THROUGHPUT"]


def parse_fields(text: str) -> dict[str, str]:
    """``NAME=value`` lines -> dict; other lines (warnings, banners) ignored."""
    fields: dict[str, str] = {}
    for line in text.splitlines():
        name, sep, value = line.strip().partition("=")
        if sep and name.isupper() and re.fullmatch(r"[A-Z0-9_]+", name):
            fields[name] = value.strip().strip('"')
    return fields


def _num(fields: dict[str, str], name: str) -> Optional[float]:
    """A numeric selector; netperf's ``-1`` / ``nan`` mean "not measured" and become None."""
    raw = fields.get(name)
    if raw is None:
        return None
    try:
        value = float(raw)
    except ValueError:
        return None
    if value != value or value < 0:  # nan, or netperf's -1 sentinel
        return None
    return value


@dataclass
class Instance:
    """One netperf process's outcome: figures when it produced a result, else why it was lost."""

    index: int
    returncode: Optional[int]
    lost: Optional[str] = None  # reason; None = a result was produced
    throughput: Optional[float] = None  # Mbit/s (streams, received side for UDP) or transactions/s (RR)
    units: Optional[str] = None
    elapsed_s: Optional[float] = None
    sent_mbps: Optional[float] = None
    received_mbps: Optional[float] = None
    bytes_sent: Optional[float] = None
    bytes_received: Optional[float] = None
    loss_pct: Optional[float] = None  # UDP streams: bytes sent but not received
    retransmissions: Optional[float] = None  # TCP segments the client retransmitted (Linux)
    latency_us: Optional[dict[str, float]] = None  # mean/min/max/p50/p90/p99/stddev, RR tests
    confidence: Optional[dict[str, float]] = None  # level, iterations, achieved width (% of mean)
    start_offset_ms: Optional[float] = None  # when this instance started, after the step's first
    # packet-rate tests (iperf3, see .iperf): datagrams the client sent and the server received
    packets_sent: Optional[int] = None
    packets_received: Optional[int] = None
    sent_pps: Optional[float] = None
    received_pps: Optional[float] = None

    @property
    def ok(self) -> bool:
        return self.lost is None

    def to_json(self) -> dict[str, Any]:
        return {k: v for k, v in asdict(self).items() if v is not None}

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Instance:
        return cls(**data)


def killed_by(returncode: int) -> str:
    """Why a generator that died of a signal (negative ``returncode``) left no result, in words."""
    try:
        return f"killed by {signal.Signals(-returncode).name}"
    except ValueError:
        return f"killed by signal {-returncode}"


def parse(
    index: int, test: Test, stdout: str, stderr: str, returncode: Optional[int], stopped: Optional[str] = None
) -> Instance:
    """Turn one instance's captured output into an :class:`Instance` (lost ones keep their reason)."""
    inst = Instance(index, returncode)
    text = f"{stdout}\n{stderr}"
    m = _ESTABLISH.search(text)
    if stopped is not None:  # the runner stopped it: whatever it printed covers part of the test only
        inst.lost = stopped
    elif m:
        inst.lost = f"establish control: no netserver answered at {m.group(1)} port {m.group(2)}"
    elif returncode is not None and returncode < 0:
        inst.lost = killed_by(returncode)
    elif returncode:
        last = next((ln.strip() for ln in reversed(text.splitlines()) if ln.strip() and "=" not in ln), "no message")
        inst.lost = f"netperf exited {returncode}: {last}"
    fields = parse_fields(stdout)
    throughput = _num(fields, "THROUGHPUT")
    if inst.lost is None and throughput is None:
        inst.lost = "no result in netperf's output"
    if inst.lost is not None:
        return inst

    inst.units = fields.get("THROUGHPUT_UNITS")
    expected = TPS_UNITS if test.is_rr else MBPS_UNITS
    if inst.units != expected:  # a sum of figures in mixed units would be meaningless
        inst.lost = f"unexpected throughput units {inst.units!r} (expected {expected})"
        return inst
    inst.throughput = throughput
    inst.elapsed_s = _num(fields, "ELAPSED_TIME")
    retrans = _num(fields, "LOCAL_TRANSPORT_RETRANS")
    inst.retransmissions = retrans if fields.get("PROTOCOL") == "TCP" else None
    if test.is_rr:
        lat = {k.lower(): _num(fields, f"{k}_LATENCY") for k in ("MEAN", "MIN", "MAX", "P50", "P90", "P99", "STDDEV")}
        inst.latency_us = {k: v for k, v in lat.items() if v is not None} or None
    else:
        inst.sent_mbps = _num(fields, "LOCAL_SEND_THROUGHPUT")
        inst.received_mbps = _num(fields, "REMOTE_RECV_THROUGHPUT")
        inst.bytes_sent = _num(fields, "LOCAL_BYTES_SENT")
        inst.bytes_received = _num(fields, "REMOTE_BYTES_RECVD")
        if test.type == "UDP_STREAM" and inst.bytes_sent:
            received = inst.bytes_received or 0.0
            inst.loss_pct = max(0.0, 100.0 * (1 - received / inst.bytes_sent))
    level = _num(fields, "CONFIDENCE_LEVEL")
    if level:  # 0 when -I was not asked for
        inst.confidence = {
            "level": level,
            "iterations": _num(fields, "CONFIDENCE_ITERATION") or 0,
            "interval_pct": _num(fields, "CONFIDENCE_INTERVAL") or 0,
            "achieved_width_pct": _num(fields, "THROUGHPUT_CONFID") or 0,
        }
    return inst


_INTERIM = re.compile(r"^NETPERF_(INTERIM_RESULT|UNITS|INTERVAL|ENDING)\[(\d+)\]=(.*)$")


def parse_interim(stdout: str) -> list[tuple[float, float, float]]:
    """Demo mode's interim results: (ending, as Unix time; interval, s; rate) in netperf's order.

    An interim result cut short (the instance was stopped while printing it) is left out, and so is one
    that is not a finite, non-negative rate over a positive interval: netperf's output may come from a
    guest, and a planted ``nan`` must not reach results.json (whose JSON has no NaN)."""
    parts: dict[int, dict[str, str]] = {}
    for line in stdout.splitlines():
        m = _INTERIM.match(line.strip())
        if m:
            parts.setdefault(int(m.group(2)), {})[m.group(1)] = m.group(3).strip()
    out = []
    for i in sorted(parts):
        p = parts[i]
        try:
            got = (float(p["ENDING"]), float(p["INTERVAL"]), float(p["INTERIM_RESULT"]))
        except (KeyError, ValueError):
            continue
        if all(math.isfinite(x) for x in got) and got[1] > 0 and got[2] >= 0:
            out.append(got)
    return out


def interim_series(
    instances: list[list[tuple[float, float, float]]], start: float, seconds: float, bin_s: float = 1.0
) -> list[Optional[float]]:
    """The instances' interim rates summed in ``bin_s`` bins from ``start`` (Unix time) for ``seconds``.

    Each interim result covers (ending - interval, ending]; its rate counts in each bin in proportion to the
    overlap, so the sum is the step's rate over time.  A bin no interim result covers is None (not measured).
    """
    n = max(1, round(seconds / bin_s))
    volume = [0.0] * n
    covered = [0.0] * n
    for series in instances:
        for ending, interval, rate in series:
            lo, hi = ending - interval - start, ending - start
            for b in range(max(0, int(lo // bin_s)), min(n, int(hi // bin_s) + 1)):
                overlap = min(hi, (b + 1) * bin_s) - max(lo, b * bin_s)
                if overlap > 0:
                    volume[b] += rate * overlap
                    covered[b] += overlap
    return [round(v / bin_s, 3) if c > 0 else None for v, c in zip(volume, covered)]


def aligned_series(
    instances: list[list[tuple[float, float, float]]], offsets_s: list[Optional[float]], bin_s: float = 1.0
) -> Optional[list[Optional[float]]]:
    """The instances' interim rates summed in ``bin_s`` bins from the batch's release, each instance on its own
    clock: its first interim result starts when it started (``offsets_s``, after the release, as the launcher
    saw it; None: 0), so a client VM's clock that differs from this machine's shifts nothing.

    The series runs to the last interim result's end (all of a confidence run's iterations).  None when no
    instance printed one (a run without ``-D``, or none finished an interval): not measured, never zeros."""
    shifted = []
    for series, offset in zip(instances, offsets_s):
        if not series:
            continue
        shift = (offset or 0.0) - (series[0][0] - series[0][1])
        shifted.append([(ending + shift, interval, rate) for ending, interval, rate in series])
    if not shifted:
        return None
    end = max(ending for series in shifted for ending, _, _ in series)
    return interim_series(shifted, 0.0, max(1, round(end / bin_s)) * bin_s, bin_s)
