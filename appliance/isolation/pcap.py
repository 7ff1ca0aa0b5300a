"""Reading the ARP frames out of a classic pcap file (what tcpdump -w writes), and
tcpdump's own packet counts (what it prints on stderr when it stops).

Pure and small on purpose: the isolation verdict rests on it, so it is unit
tested on real captures.  Handles both byte orders, micro- and nanosecond
timestamps, and 802.1Q (also stacked) tags.
"""

from __future__ import annotations

import ipaddress
import os
import re
import struct
from dataclasses import dataclass
from pathlib import Path

_MAGIC = {
    b"\xd4\xc3\xb2\xa1": ("<", 1e-6),
    b"\xa1\xb2\xc3\xd4": (">", 1e-6),
    b"\x4d\x3c\xb2\xa1": ("<", 1e-9),
    b"\xa1\xb2\x3c\x4d": (">", 1e-9),
}
LINKTYPE_ETHERNET = 1
ETH_P_ARP = 0x0806
VLAN_TPIDS = (0x8100, 0x88A8)


@dataclass(frozen=True)
class ArpFrame:
    time: float
    vlan: int | None  # outer 802.1Q VLAN id, None if untagged
    op: int  # 1 request (who-has), 2 reply (is-at)
    eth_src: str
    eth_dst: str
    sender_mac: str
    sender_ip: str
    target_ip: str
    target_mac: str = ""  # a who-has leaves it zero; hvnet's audit probes carry their mark there

    @property
    def is_request(self) -> bool:
        return self.op == 1


def _mac(b: bytes) -> str:
    return ":".join(f"{x:02x}" for x in b)


def parse_frame(ts: float, data: bytes) -> ArpFrame | None:
    """One Ethernet frame -> :class:`ArpFrame`, or None if it is not (IPv4) ARP."""
    if len(data) < 14:
        return None
    dst, src = data[0:6], data[6:12]
    (etype,) = struct.unpack("!H", data[12:14])
    offset, vlan = 14, None
    while etype in VLAN_TPIDS and len(data) >= offset + 4:
        tci, etype = struct.unpack("!HH", data[offset : offset + 4])
        if vlan is None:
            vlan = tci & 0x0FFF
        offset += 4
    if etype != ETH_P_ARP or len(data) < offset + 28:
        return None
    htype, ptype, hlen, plen, op = struct.unpack("!HHBBH", data[offset : offset + 8])
    if htype != 1 or ptype != 0x0800 or hlen != 6 or plen != 4:
        return None
    body = data[offset + 8 : offset + 28]
    return ArpFrame(
        time=ts,
        vlan=vlan,
        op=op,
        eth_src=_mac(src),
        eth_dst=_mac(dst),
        sender_mac=_mac(body[0:6]),
        sender_ip=str(ipaddress.IPv4Address(body[6:10])),
        target_ip=str(ipaddress.IPv4Address(body[16:20])),
        target_mac=_mac(body[10:16]),
    )


def read_arp(path: str | Path) -> list[ArpFrame]:
    """Every ARP frame in the pcap file at ``path`` (a truncated tail is ignored)."""
    fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)  # a link planted in place of a capture is not read
    with os.fdopen(fd, "rb") as fh:
        data = fh.read()
    if len(data) < 24:
        return []  # tcpdump stopped before writing its header: nothing captured
    try:
        endian, scale = _MAGIC[data[:4]]
    except KeyError:
        raise ValueError(f"{path}: not a pcap file") from None
    (linktype,) = struct.unpack(endian + "I", data[20:24])
    if linktype & 0xFFFF != LINKTYPE_ETHERNET:
        raise ValueError(f"{path}: link type {linktype} is not Ethernet")
    frames: list[ArpFrame] = []
    pos = 24
    while pos + 16 <= len(data):
        sec, frac, incl, _orig = struct.unpack(endian + "IIII", data[pos : pos + 16])
        pos += 16
        if pos + incl > len(data):
            break
        frame = parse_frame(sec + frac * scale, data[pos : pos + incl])
        if frame is not None:
            frames.append(frame)
        pos += incl
    return frames


# -- what tcpdump says when it stops ---------------------------------------------
#
# On exit tcpdump prints its counters to stderr, one a line (``info()`` in
# tcpdump.c; the "dropped by interface" line only when that count is not 0):
#
#     3 packets captured
#     3 packets received by filter
#     0 packets dropped by kernel
#     2 packets dropped by interface
#
# SIGUSR1 prints the same on one line, comma-separated, after "tcpdump: ".
# When libpcap cannot read the counters it prints "pcap_stats: ..." instead.

_COUNT = re.compile(
    r"\b(?P<n>[0-9]{1,20}) packets? (?P<what>captured|received by filter|dropped by (?:kernel|interface))\b"
)


@dataclass(frozen=True)
class TcpdumpCounts:
    """tcpdump's own counters for one capture (the last ones it printed)."""

    captured: int | None
    received: int | None
    dropped_by_kernel: int
    dropped_by_interface: int

    @property
    def dropped(self) -> int:
        return self.dropped_by_kernel + self.dropped_by_interface

    def describe_drops(self) -> str:
        parts = [(self.dropped_by_kernel, "kernel"), (self.dropped_by_interface, "interface")]
        return " and ".join(f"{n} {'packet' if n == 1 else 'packets'} dropped by {by}" for n, by in parts if n)


def parse_tcpdump_counts(stderr: str) -> TcpdumpCounts | None:
    """tcpdump's counters from its stderr, or None when it printed none (drops then unknown).

    The "dropped by kernel" count is what makes a summary: without it nothing
    says whether frames were lost.  Never raises.
    """
    found: dict[str, int] = {}
    for m in _COUNT.finditer(stderr):
        found[m.group("what")] = int(m.group("n"))
    if "dropped by kernel" not in found:
        return None
    return TcpdumpCounts(
        captured=found.get("captured"),
        received=found.get("received by filter"),
        dropped_by_kernel=found["dropped by kernel"],
        dropped_by_interface=found.get("dropped by interface", 0),
    )
