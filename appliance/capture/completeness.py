"""How complete a capture was: packets captured ÷ packets the port carried meanwhile.

The switch's counters of the captured port are read before tcpdump starts
and after it has stopped; every frame the port received or sent in between
was offered to the capture (tcpdump on a port, or on the guest's eth0 behind
a VIF, sees both directions).  The window is a little wider than the
capture's own (tcpdump starting and stopping), so a frame in that margin is
offered and not captured: the ratio errs low, never high.

When the offered count cannot be known the answer is "unknown" with the
reason, never a ratio: a filter keeps a subset the counters cannot single
out, a packet-count limit stops the capture while the port goes on, counters
that went backwards or could not be read compare nothing, and a tcpdump that
printed no counts (killed) says neither what it captured nor what it lost.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from appliance.isolation.pcap import TcpdumpCounts
from appliance.switch.counters import Counters


@dataclass(frozen=True)
class Completeness:
    """captured ÷ offered, or why it cannot be said."""

    captured: int | None
    offered: int | None
    dropped: int | None  # tcpdump's own drops (kernel and interface)
    ratio: float | None
    reason: str | None = None  # why ``ratio`` is None

    def describe(self) -> str:
        if self.ratio is None:
            return f"unknown: {self.reason}"
        drops = f", {self.dropped} dropped by the capture" if self.dropped else ""
        return f"{self.ratio:.1%} ({self.captured} of {self.offered} offered{drops})"

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def offered_between(before: Counters | None, after: Counters | None) -> tuple[int | None, str | None]:
    """Frames the port received plus sent between two readings, or None and why not."""
    if before is None or after is None:
        return None, f"the port's counters could not be read {'before' if before is None else 'after'} the capture"
    total = []
    for reading in (before, after):
        if reading.rx_packets is None or reading.tx_packets is None:
            return None, "the port's counters do not report packets"
        total.append(reading.rx_packets + reading.tx_packets)
    if total[1] < total[0]:
        return None, "the port's counters went backwards (the interface was re-created)"
    return total[1] - total[0], None


def completeness(
    counts: TcpdumpCounts | None,
    before: Counters | None,
    after: Counters | None,
    *,
    bpf: str | None,
    count_limit: int | None,
) -> Completeness:
    """The completeness of one stopped capture (see the module docstring for when it is unknown)."""
    captured = counts.captured if counts else None
    dropped = counts.dropped if counts else None

    def unknown(reason: str, offered: int | None = None) -> Completeness:
        return Completeness(captured, offered, dropped, None, reason)

    if counts is None or captured is None:
        return unknown("tcpdump printed no packet counts when it stopped (was it killed?)")
    offered, why = offered_between(before, after)
    if bpf:
        return unknown(f"the filter {bpf!r} keeps a subset of the port's traffic, which its counters cannot single out",
                       offered)  # fmt: skip
    if count_limit is not None and captured >= count_limit:
        return unknown(f"the capture stopped at its limit of {count_limit} packets while the port carried on",
                       offered)  # fmt: skip
    if offered is None:
        return unknown(why or "no counters")
    if offered == 0:
        return unknown("the port carried no packets during the capture", 0)
    return Completeness(captured, offered, dropped, captured / offered)
