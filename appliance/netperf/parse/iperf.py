"""iperf3 as the packet-rate generator: the command line one instance runs and what its JSON means.

Why iperf3 and not netperf: Debian's netperf 2.7.0 is built without
``--enable-intervals`` ("Packet burst size is not compiled in"), so it cannot
pace a stream; iperf3 (3.12 here) paces UDP to ``-b`` (payload bits/s) with
its pacing timer (a burst every 1000 µs at most), sends fixed-size datagrams
(``-l``), and its ``-J`` report carries the packets the client sent *and* the
packets the server received (``end.sum_sent``, ``end.sum_received``) --
both sides from one process.  trafgen paces better but sends raw frames with
no receiver side: hvnet would have to count arrivals itself.

Pure: builds argument lists and parses captured output; runs nothing.  An
instance is *lost* when iperf3 exits non-zero, reports an ``error``, or
prints no JSON; the reason is kept (as for netperf, see :mod:`.omni`).
"""

from __future__ import annotations

import json
from typing import Any, Optional

from appliance.netperf.define import frames
from appliance.netperf.define.frames import Offered
from appliance.netperf.parse.omni import Instance, killed_by

PPS_UNITS = "packets/s"
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


def parse(
    index: int, frame: int, stdout: str, stderr: str, returncode: Optional[int], stopped: Optional[str] = None
) -> Instance:
    """One iperf3 client's output as an :class:`~.omni.Instance`: packets/s sent and received, Mbit/s of frames."""
    inst = Instance(index, returncode)
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
    if inst.lost is not None:
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
