"""Fixed frame sizes and offered rates: the arithmetic between a frame on the wire and a UDP payload.

A packet-rate test (``UDP_PPS``) names the size of the Ethernet frame on the
wire, as the studies and RFC 2544 do (64..1518 bytes, FCS included, preamble
and inter-frame gap not), and hvnet derives the UDP payload it sends::

    frame = payload + 8 (UDP) + 20 (IPv4) + 14 (Ethernet) + 4 (FCS)

so 64 B carries 18 bytes of payload and 1518 B carries 1472 (a 1500-byte IP
packet: no fragments).  An offered rate is given in packets/s or in Mbit/s of
such frames; one is the other at a fixed frame size, and the generator
(iperf3) is asked for the payload bit rate that makes that many packets.
Pure: nothing here measures.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

UDP_HEADER = 8
IPV4_HEADER = 20
ETHERNET_HEADER = 14
FCS = 4
OVERHEAD = UDP_HEADER + IPV4_HEADER + ETHERNET_HEADER + FCS  # 46: frame on the wire minus UDP payload
MIN_FRAME = 64  # Ethernet's minimum
MAX_FRAME = 1518  # a 1500-byte MTU: the largest frame that needs no IP fragment
MAX_OFFERED_MBPS = 100_000
MAX_OFFERED_PPS = 100_000_000
OFFERED_UNITS = ("Mbit/s", "packets/s")


def payload_of(frame: int) -> int:
    """The UDP payload (bytes) that makes an IPv4 Ethernet frame of ``frame`` bytes on the wire."""
    if not MIN_FRAME <= frame <= MAX_FRAME:
        raise ValueError(f"frame size {frame} is outside {MIN_FRAME}..{MAX_FRAME} bytes")
    return frame - OVERHEAD


def mbps(pps: float, frame: int) -> float:
    """Mbit/s of ``pps`` frames of ``frame`` bytes (FCS included, preamble and gap not)."""
    return pps * frame * 8 / 1e6


@dataclass(frozen=True)
class Offered:
    """A rate the generator is asked to keep: ``value`` in ``unit`` (Mbit/s of frames, or packets/s)."""

    value: float
    unit: str  # "Mbit/s" | "packets/s"

    def pps(self, frame: int) -> float:
        return self.value if self.unit == "packets/s" else self.value * 1e6 / (frame * 8)

    def mbps(self, frame: int) -> float:
        return mbps(self.pps(frame), frame)

    def payload_bps(self, frame: int) -> int:
        """iperf3's ``-b``: it counts UDP payload bits, so this is the payload rate of ``pps(frame)`` frames."""
        return max(1, round(self.pps(frame) * payload_of(frame) * 8))

    @property
    def label(self) -> str:
        """Short, stable text for step keys and table headers: ``100Mbps``, ``50000pps``."""
        return f"{self.value:g}{'Mbps' if self.unit == 'Mbit/s' else 'pps'}"

    def to_json(self, frame: int) -> dict[str, Any]:
        return {
            "value": self.value,
            "unit": self.unit,
            "pps": round(self.pps(frame), 1),
            "mbps": round(self.mbps(frame), 3),
        }


def offered_from_json(data: Optional[dict[str, Any]]) -> Optional[Offered]:
    """A step's recorded offered rate (None: the generator was not paced)."""
    if not isinstance(data, dict) or data.get("unit") not in OFFERED_UNITS:
        return None
    try:
        return Offered(float(data["value"]), str(data["unit"]))
    except (KeyError, TypeError, ValueError):
        return None
