"""Packet-rate figures of one repetition: sender, receiver, monitor ports and captures.  Pure.

The sender's and the receiver's packets come from iperf3 (:mod:`.iperf`); the
monitor's from the switch's own counters of each mirror or TAP output port
(``tx_packets``: copies the switch sent there), over the length iperf3
measured; a capture's from tcpdump's counts, against what the switch offered
to it.  A figure with nothing to measure it -- no offered rate, no mirror,
no capture -- stays None, shown as "-", never 0.
"""

from __future__ import annotations

from collections import Counter
from typing import Any, Optional

from appliance.netperf.define.frames import FCS
from appliance.netperf.define.suite import Step
from appliance.netperf.figures import stats
from appliance.netperf.parse.omni import Instance
from appliance.netperf.store.records import LATENCY_FIGURES, Aggregate, MirrorInfo


def _round(x: Optional[float], digits: int = 3) -> Optional[float]:
    return None if x is None else round(x, digits)


def repetition(instances: list[Instance], offered_pps: Optional[float]) -> Aggregate:
    """The figures of one repetition of a packet-rate step; ``offered_pps`` is per instance (None: unpaced)."""
    ok = [i for i in instances if i.ok and i.received_pps is not None]
    values = [i.received_pps for i in ok if i.received_pps is not None]
    out = Aggregate(
        instances=len(instances),
        ok=len(ok),
        lost=len(instances) - len(ok),
        lost_reasons=dict(Counter(i.lost for i in instances if not i.ok)),
        sum=_round(sum(values), 1) if values else None,
        mean=_round(stats.mean(values), 1),
        min=_round(min(values), 1) if values else None,
        max=_round(max(values), 1) if values else None,
        jain=_round(stats.jain(values), 4),
        absent=frozenset(LATENCY_FIGURES),
    )
    if not ok:
        return out
    sent = sum(i.packets_sent or 0 for i in ok)
    received = sum(i.packets_received or 0 for i in ok)
    out.sent_pps = _round(sum(i.sent_pps or 0.0 for i in ok), 1)
    out.received_pps = out.sum
    out.sent_mbps = _round(sum(i.sent_mbps or 0.0 for i in ok))
    out.received_mbps = _round(sum(i.received_mbps or 0.0 for i in ok))
    out.udp_loss_pct = _round(100.0 * (1 - received / sent), 3) if sent else None
    if offered_pps:
        offered = offered_pps * len(ok)  # lost instances offered nothing that was measured
        out.achieved_ratio = _round((out.received_pps or 0.0) / offered, 4)
        out.paced_ratio = _round((out.sent_pps or 0.0) / offered, 4)
    return out


def step_figures(
    step: Step, instances: list[Instance], copies: list[MirrorInfo], counters: dict[str, dict[str, int]]
) -> Aggregate:
    """A packet-rate repetition: sender and receiver (iperf3), and the monitor ports over iperf3's own length."""
    offered = step.offered.pps(step.frame_size or 0) if step.offered else None
    agg = repetition(instances, offered)
    ok = [i.elapsed_s for i in instances if i.ok and i.elapsed_s]
    seconds = sum(ok) / len(ok) if ok else float(step.test.duration)
    add_monitor(agg, counters, copy_ports(copies), seconds)
    return agg


def copy_ports(copies: list[MirrorInfo]) -> list[str]:
    """The distinct output ports of a case's mirrors and TAPs, in order (a port fed twice counts once)."""
    return list(dict.fromkeys(c.output_port for c in copies if c.output_port))


def add_monitor(out: Aggregate, counters: dict[str, dict[str, int]], ports: list[str], seconds: float) -> None:
    """Copies/s and Mbit/s each monitor port was sent (mean over ``ports``), from the switch's counter deltas."""
    got = [counters[p] for p in ports if p in counters and counters[p].get("tx_packets") is not None]
    if not got or not ports or len(got) < len(ports) or seconds <= 0:
        return  # a port whose counters were not read: the mean would be of the others only
    pps = [c["tx_packets"] / seconds for c in got]
    wire = [(c.get("tx_bytes", 0) + FCS * c["tx_packets"]) * 8 / seconds / 1e6 for c in got]
    out.monitor_ports = len(got)
    out.monitor_pps = _round(stats.mean(pps), 1)
    out.monitor_mbps = _round(stats.mean(wire), 3)


def offered_to(port: str, copies: list[MirrorInfo], counters: dict[str, dict[str, int]]) -> Optional[int]:
    """Packets the switch selected for copying to ``port`` (a mirror's: selected ports' rx for src, tx for dst),
    else the port's own tx_packets (a TAP's subset, or a port no copy feeds); None: not read."""
    feeding = [c for c in copies if c.output_port == port and c.kind is None]
    if feeding:
        total = 0
        for c in feeding:
            for p, key in [*((p, "rx_packets") for p in c.src), *((p, "tx_packets") for p in c.dst)]:
                value = counters.get(p, {}).get(key)
                if value is None:
                    return None
                total += value
        return total
    return counters.get(port, {}).get("tx_packets")


def add_captures(out: Aggregate, captures: list[dict[str, Any]], seconds: float) -> None:
    """What the case's captures kept of what was offered to them (every capture must have counts)."""
    if not captures:
        return
    captured = [c.get("captured") for c in captures]
    offered = [c.get("offered") for c in captures]
    dropped = [c.get("dropped") for c in captures]
    if any(x is None for x in captured):
        return  # a tcpdump that printed no counts: what was captured is unknown
    out.captured = int(sum(x for x in captured if x is not None))
    out.captured_pps = _round(stats.mean([x / seconds for x in captured if x is not None]), 1) if seconds > 0 else None
    if all(d is not None for d in dropped):
        out.capture_dropped = int(sum(d for d in dropped if d is not None))
    if all(o for o in offered):
        out.captured_ratio = _round(out.captured / sum(o for o in offered if o), 4)
    sent = [c.get("sent_to_port") for c in captures]
    if all(s for s in sent):  # where the rest went: copies the switch never made, or the capture's drops
        out.captured_port_ratio = _round(out.captured / sum(s for s in sent if s), 4)


def add_listened(
    out: Aggregate, listened: list[dict[str, Any]], copies: list[MirrorInfo], counters: dict[str, Any], seconds: float
) -> None:
    """A case's captures set against what the switch offered them and sent their ports (each capture's
    record gains ``offered`` and ``sent_to_port``), then their figures on ``out``."""
    for c in listened:
        c["offered"] = offered_to(c["port"], copies, counters)
        c["sent_to_port"] = counters.get(c["port"], {}).get("tx_packets")
    add_captures(out, listened, seconds)


def _total(captures: list[dict[str, Any]], key: str) -> Optional[int]:
    """The sum of ``key`` over the captures; None when one of them has no such figure."""
    values = [c.get(key) for c in captures]
    return None if not values or any(v is None for v in values) else int(sum(v for v in values if v is not None))


def capture_limits(repetitions: list[Optional[list[dict[str, Any]]]]) -> Optional[dict[str, Any]]:
    """A step's captures over its repetitions, beside what limits them: captured ÷ offered, the drops tcpdump
    reported (kernel: its ring was full; interface: None when tcpdump reported none), the buffer and snaplen
    asked, tcpdump's CPU (mean % of a core) and a one-line reading of where the missing packets went.  None:
    the step has no captures."""
    caps = [c for rep in repetitions for c in (rep or [])]
    if not caps:
        return None
    captured, offered = _total(caps, "captured"), _total(caps, "offered")
    reported = [c["dropped_by_interface"] for c in caps if c.get("dropped_by_interface") is not None]
    cpu = [c["tcpdump_cpu_pct"] for c in caps if c.get("tcpdump_cpu_pct") is not None]
    why = next((str(c["tcpdump_cpu"].get("reason")) for c in caps if isinstance(c.get("tcpdump_cpu"), dict)
                and c["tcpdump_cpu"].get("reason")), None)  # fmt: skip
    out: dict[str, Any] = {
        "captures": len(caps),
        "captured": captured,
        "offered": offered,
        "ratio": _round(captured / offered, 4) if captured is not None and offered else None,
        "sent_to_port": _total(caps, "sent_to_port"),
        "received_by_filter": _total(caps, "received"),
        "dropped_by_kernel": _total(caps, "dropped_by_kernel"),
        "dropped_by_interface": sum(reported) if reported else None,  # None: tcpdump reported none
        "buffer_kib": sorted({c.get("buffer_kib") for c in caps}, key=lambda k: k or 0),
        "buffer": sorted({str(c.get("buffer") or "-") for c in caps}),
        "snaplen": sorted({c.get("snaplen") for c in caps}, key=lambda k: k or 0),
        "tcpdump_cpu_pct": _round(stats.mean(cpu), 1) if len(cpu) == len(caps) else None,
        "tcpdump_cpu_reason": None if len(cpu) == len(caps) else why or "not measured",
    }
    out["reading"] = reading(out)
    return out


def reading(f: dict[str, Any]) -> str:
    """Where the packets a capture missed went, from the measured figures only (``f``: :func:`capture_limits`'s).

    missing = offered - captured, in parts: copies the switch never sent the port (offered - sent to port),
    sent but never received by the capture's socket (sent - received by filter, no drop counted by the
    capture), dropped by the kernel (the ring full), by the interface, and the rest (received, neither
    kept nor counted dropped: in the ring when tcpdump stopped)."""
    captured, offered = f["captured"], f["offered"]
    if captured is None or not offered:
        return "unknown: " + ("a capture printed no counts" if captured is None else "nothing offered was counted")
    missing = offered - captured
    if missing <= 0:
        return f"nothing missing: the captures kept {captured:,} of {offered:,} offered"
    sent, received, kernel = f["sent_to_port"], f["received_by_filter"], f["dropped_by_kernel"]
    interface = f["dropped_by_interface"] or 0
    parts: list[tuple[int, str]] = []
    if sent is not None and offered > sent:
        parts.append((offered - sent, "never sent to the capture's port by the switch"))
    if received is not None and sent is not None and sent > received:
        parts.append((sent - received, "sent to the port but never received by the capture (no drops "
                                       "counted by the capture)"))  # fmt: skip
    if kernel:
        cpu = f["tcpdump_cpu_pct"]
        busy = f" while tcpdump used {cpu:.0f}% of a core" if cpu is not None else ""
        parts.append((kernel, f"dropped by the kernel: the buffer ({', '.join(f['buffer'])}) filled{busy}"))
    if interface:
        parts.append((interface, "dropped by the interface (tcpdump's count)"))
    if received is not None and kernel is not None and received - kernel - interface > captured:
        parts.append((received - kernel - interface - captured, "received but neither kept nor counted dropped"))
    if not parts:
        return f"{missing:,} of {offered:,} offered missing; no measured figure accounts for them"
    parts.sort(key=lambda p: -p[0])
    return f"{missing:,} of {offered:,} offered missing: " + "; ".join(f"{n:,} {what}" for n, what in parts)
