"""iperf3 as the packet-rate and the paced-TCP generator: the command line one instance runs and what its
JSON means.

Why iperf3 and not netperf: Debian's netperf 2.7.0 is built without
``--enable-intervals`` ("Packet burst size is not compiled in"), so it cannot
pace a stream; iperf3 (3.12 here) paces UDP to ``-b`` (payload bits/s) with
its pacing timer (a burst every 1000 µs at most), sends fixed-size datagrams
(``-l``), and its ``-J`` report carries the packets the client sent *and* the
packets the server received (``end.sum_sent``, ``end.sum_received``) --
both sides from one process.  trafgen paces better but sends raw frames with
no receiver side: hvnet would have to count arrivals itself.

For TCP (``TCP_IPERF``) iperf3 paces each stream to ``-b`` too (bits of
payload per second, *per stream* when ``-P`` runs several), and its report
has every stream's bytes on both sides and the sender's retransmits
(``end.streams[i].sender/receiver``): the per-flow figures a many-flows
step's fairness is computed from.  ``-i 0``: no per-second intervals, so a
125-stream report stays a few tens of kilobytes.

Pure: builds argument lists and parses captured output; runs nothing.  An
instance is *lost* when iperf3 exits non-zero, reports an ``error``, or
prints no JSON; the reason is kept (as for netperf, see :mod:`.omni`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any, Optional

from appliance.netperf.define import frames
from appliance.netperf.define.frames import Offered
from appliance.netperf.parse.omni import Instance, killed_by

PPS_UNITS = "packets/s"
MBPS_UNITS = "Mbit/s"
DEFAULT_PORT = 5201  # iperf3's own; instance i of a step talks to the server on port + i


def client_argv(
    iperf3: str, address: str, port: int, *, frame: int, offered: Optional[Offered], seconds: int
) -> list[str]:
    """One sender: UDP datagrams of ``frame``'s payload for ``seconds``, paced to ``offered`` (or as fast as it can)."""
    rate = str(offered.payload_bps(frame)) if offered is not None else "0"  # -b 0: unpaced
    return [
        iperf3, "-c", address, "-p", str(port), "-u", "-b", rate, "-l", str(frames.payload_of(frame)),
        "-t", str(seconds), "-J",
    ]  # fmt: skip


def server_argv(iperf3: str, port: int) -> list[str]:
    """One receiver, serving one test after another until hvnet stops it; ``--forceflush``: its
    "Server listening" line reaches the log at once (hvnet waits for it), not when a buffer fills."""
    return [iperf3, "-s", "-p", str(port), "--forceflush"]


def _number(data: Any, key: str) -> Optional[float]:
    value = data.get(key) if isinstance(data, dict) else None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        return None
    return float(value)


def tcp_client_argv(
    iperf3: str, address: str, port: int, *, flows: int, offered: Optional[Offered], seconds: int
) -> list[str]:
    """One TCP sender of ``flows`` parallel streams for ``seconds``, each paced to ``offered`` Mbit/s of payload
    (iperf3's ``-b`` applies to each stream), or as fast as TCP goes."""
    rate = str(max(1, round(offered.value * 1e6))) if offered is not None else "0"
    return [
        iperf3, "-c", address, "-p", str(port), "-P", str(flows), "-b", rate, "-t", str(seconds), "-i", "0", "-J",
    ]  # fmt: skip


def _report(
    inst: Instance, stdout: str, stderr: str, returncode: Optional[int], stopped: Optional[str]
) -> Optional[dict[str, Any]]:
    """iperf3's JSON document, or None with ``inst.lost`` saying why there is no result."""
    doc: Any = None
    try:
        doc = json.loads(stdout) if stdout.strip() else None
    except ValueError:
        doc = None
    error = doc.get("error") if isinstance(doc, dict) else None
    if stopped is not None:
        inst.lost = stopped
    elif error:
        inst.lost = f"iperf3: {error}"
    elif returncode is not None and returncode < 0:
        inst.lost = killed_by(returncode)
    elif returncode:
        last = next((ln.strip() for ln in reversed(stderr.splitlines()) if ln.strip()), "no message")
        inst.lost = f"iperf3 exited {returncode}: {last}"
    elif not isinstance(doc, dict):
        inst.lost = "no JSON report in iperf3's output"
    return doc if inst.lost is None else None


def parse(
    index: int, frame: int, stdout: str, stderr: str, returncode: Optional[int], stopped: Optional[str] = None
) -> Instance:
    """One iperf3 client's output as an :class:`~.omni.Instance`: packets/s sent and received, Mbit/s of frames."""
    inst = Instance(index, returncode)
    doc = _report(inst, stdout, stderr, returncode, stopped)
    if doc is None:
        return inst
    end = doc.get("end") or {}
    sent, received = end.get("sum_sent"), end.get("sum_received")
    n_sent, s_sent = _number(sent, "packets"), _number(sent, "seconds")
    n_seen, n_gaps = _number(received, "packets"), _number(received, "lost_packets")
    s_recv = _number(received, "seconds")
    if None in (n_sent, s_sent, n_seen, n_gaps, s_recv) or not s_sent or not s_recv:
        inst.lost = "iperf3's report has no sent and received packet counts (end.sum_sent, end.sum_received)"
        return inst
    assert n_sent is not None and s_sent is not None and n_seen is not None and n_gaps is not None
    assert s_recv is not None
    n_received = max(0.0, n_seen - n_gaps)  # iperf3's receiver: highest sequence seen minus the gaps
    inst.units = PPS_UNITS
    inst.elapsed_s = s_sent
    inst.packets_sent = int(n_sent)
    inst.packets_received = int(n_received)
    inst.sent_pps = round(n_sent / s_sent, 1)
    inst.received_pps = round(n_received / s_recv, 1)
    inst.throughput = inst.received_pps
    inst.sent_mbps = round(frames.mbps(inst.sent_pps, frame), 3)
    inst.received_mbps = round(frames.mbps(inst.received_pps, frame), 3)
    inst.bytes_sent = _number(sent, "bytes")
    inst.bytes_received = _number(received, "bytes")
    inst.loss_pct = round(max(0.0, 100.0 * (1 - n_received / n_sent)), 3) if n_sent else None
    return inst


@dataclass
class FlowsInstance(Instance):
    """A TCP_IPERF instance: its streams' totals (as an :class:`~.omni.Instance`) and each stream's own figures."""

    # per stream, in iperf3's order: {stream, sent_mbps, received_mbps, retransmissions, bytes_received}
    streams: Optional[list[dict[str, Any]]] = None

    @property
    def flow_mbps(self) -> list[float]:
        """Each stream's received Mbit/s (what the fairness index is computed over)."""
        return [s["received_mbps"] for s in self.streams or []]


def parse_tcp(
    index: int, flows: int, stdout: str, stderr: str, returncode: Optional[int], stopped: Optional[str] = None
) -> FlowsInstance:
    """One iperf3 TCP client's output: Mbit/s of payload sent and received and retransmits, in total and per
    stream.  A report with fewer streams than ``flows`` is lost: a fairness index over the streams that
    happened to report would hide the ones that did not."""
    inst = FlowsInstance(index, returncode)
    doc = _report(inst, stdout, stderr, returncode, stopped)
    if doc is None:
        return inst
    end = doc.get("end") or {}
    streams = [_stream(i, s) for i, s in enumerate(end.get("streams") or [])]
    sent, received = end.get("sum_sent"), end.get("sum_received")
    seconds, retrans = _number(sent, "seconds"), _number(sent, "retransmits")
    if not streams or None in streams or not seconds or retrans is None or _number(received, "bytes") is None:
        inst.lost = "iperf3's report has no per-stream sent and received figures (end.streams, end.sum_sent)"
        return inst
    if len(streams) != flows:
        inst.lost = f"iperf3 reported {len(streams)} of {flows} streams"
        return inst
    inst.units = MBPS_UNITS
    inst.elapsed_s = seconds
    inst.streams = [s for s in streams if s is not None]
    inst.sent_mbps = round(sum(s["sent_mbps"] for s in inst.streams), 3)
    inst.received_mbps = round(sum(s["received_mbps"] for s in inst.streams), 3)
    inst.throughput = inst.received_mbps
    inst.retransmissions = retrans
    inst.bytes_sent = _number(sent, "bytes")
    inst.bytes_received = _number(received, "bytes")
    return inst


def _stream(i: int, data: Any) -> Optional[dict[str, Any]]:
    """One stream's figures from ``end.streams[i]`` (None: a side or a figure is missing)."""
    sender, receiver = (data.get(k) if isinstance(data, dict) else None for k in ("sender", "receiver"))
    sent_bps, recv_bps = _number(sender, "bits_per_second"), _number(receiver, "bits_per_second")
    retrans, got = _number(sender, "retransmits"), _number(receiver, "bytes")
    if sent_bps is None or recv_bps is None or retrans is None or got is None:
        return None
    return {"stream": i, "sent_mbps": round(sent_bps / 1e6, 3), "received_mbps": round(recv_bps / 1e6, 3),
            "retransmissions": int(retrans), "bytes_received": int(got)}  # fmt: skip
