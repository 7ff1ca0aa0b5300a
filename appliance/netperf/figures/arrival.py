"""What arrived at a remote collector, set against what was mirrored.  Pure.

The dissertation's remote-mirroring test (its Table 4.2) sent a mirror's
copies over GRE to a second machine behind a 1 Gbit/s link and compared what
Wireshark received there with what was mirrored.  Here a case names the
guest its tunnel leads to (``collector_guest``); around each measured
repetition hvnet reads that guest's own interface counters
(:mod:`appliance.netperf.run.arrival`) and this module sets them against
what was **mirrored**: the packets the mirror selected (its selected ports'
switch counters: rx for ``src``, tx for ``dst``; a TAP's, the tunnel port's
tx).  Not the tunnel port's own tx counters (``monitor_*``, kept beside):
OVS 3.1's userspace datapath counts each tunnelled packet there twice --
measured 1.82..2.00x what VM1 sent, while the collector, below its uplink's
rate, received each copy once.

Sizes, honestly: the collector counts encapsulated frames (outer Ethernet,
IP, GRE and for ERSPAN its own header, around the mirrored frame);
``arrived_mbps`` is that, as the uplink carried it (plus 4 FCS bytes per
frame, as every wire figure here).  ``arrived_inner_mbps`` subtracts the
outer headers' fixed size per packet (:func:`overhead`) -- computed, not
captured.  ``arrived_ratio`` compares packets (one copy, one tunnel packet),
which needs no size at all.  A figure without both readings stays None.
"""

from __future__ import annotations

from typing import Any, Optional

from appliance.netperf.define.frames import FCS
from appliance.netperf.parse.iplink import INTERFACE
from appliance.netperf.store.records import Aggregate, MirrorInfo

ETHERNET, IPV4 = 14, 20
GRE_BASE, GRE_KEY = 4, 4  # GRE's flags/protocol word; the key when the tunnel has one
ERSPAN_GRE = 8  # ERSPAN type II rides GRE with a sequence number
ERSPAN_V1 = 8  # the ERSPAN type II header (OVS erspan_ver 1)


def overhead(tunnel: Optional[dict[str, Any]]) -> Optional[int]:
    """Bytes the tunnel adds to each mirrored frame (outer Ethernet + IPv4 + GRE [+ key] [+ ERSPAN]);
    None for an output that is not a GRE/ERSPAN tunnel."""
    if not tunnel:
        return None
    options = tunnel.get("options") or {}
    if tunnel.get("type") == "gre":
        return ETHERNET + IPV4 + GRE_BASE + (GRE_KEY if "key" in options else 0)
    if tunnel.get("type") == "erspan":
        return ETHERNET + IPV4 + ERSPAN_GRE + ERSPAN_V1
    return None


def tunnel_ports(copies: list[MirrorInfo]) -> list[MirrorInfo]:
    """The case's copies that leave through a GRE/ERSPAN tunnel port (one per port)."""
    seen: dict[str, MirrorInfo] = {}
    for c in copies:
        if c.tunnel and c.output_port and c.output_port not in seen:
            seen[c.output_port] = c
    return list(seen.values())


def figures(
    out: Aggregate,
    guest: str,
    before: Optional[dict[str, int]],
    after: Optional[dict[str, int]],
    copies: list[MirrorInfo],
    counters: dict[str, dict[str, int]],
    seconds: float,
) -> dict[str, Any]:
    """Set the arrival figures on ``out`` from the collector's readings; the record kept with the repetition."""
    tunnels = tunnel_ports(copies)
    kinds = {c.tunnel.get("type") for c in tunnels if c.tunnel}
    sizes = {overhead(c.tunnel) for c in tunnels}
    per_packet = sizes.pop() if len(sizes) == 1 else None  # tunnels of different sizes: no single overhead
    rec: dict[str, Any] = {"guest": guest, "interface": INTERFACE, "encapsulation": "/".join(sorted(kinds)) or None,
                           "overhead_bytes": per_packet, "tunnel_ports": [c.output_port for c in tunnels]}  # fmt: skip
    if before is None or after is None or seconds <= 0:
        return rec
    got = {k: after[k] - before[k] for k in after if k in before}
    rec.update(got)
    packets, wire = got["rx_packets"], got["rx_bytes"]
    out.arrived = packets
    out.arrived_pps = round(packets / seconds, 1)
    out.arrived_mbps = round((wire + FCS * packets) * 8 / seconds / 1e6, 3)
    if per_packet is not None:
        inner = max(0, wire - per_packet * packets)
        out.arrived_inner_mbps = round((inner + FCS * packets) * 8 / seconds / 1e6, 3)
    sent = [counters.get(str(c.output_port), {}).get("tx_packets") for c in tunnels]
    if tunnels and all(s is not None for s in sent):
        rec["tunnel_tx_packets"] = sum(s for s in sent if s is not None)
    selected = mirrored(copies, tunnels, counters)
    if selected is not None:
        rec["mirrored"], rec["mirrored_bytes"] = selected
        out.mirrored_pps = round(selected[0] / seconds, 1)
        out.mirrored_mbps = round((selected[1] + FCS * selected[0]) * 8 / seconds / 1e6, 3)
        out.arrived_ratio = round(packets / selected[0], 4) if selected[0] else None
    return rec


def mirrored(
    copies: list[MirrorInfo], tunnels: list[MirrorInfo], counters: dict[str, dict[str, int]]
) -> Optional[tuple[int, int]]:
    """Packets and bytes copied into the tunnels: a port mirror's selected ports (rx of ``src``, tx of
    ``dst``), a TAP's tunnel port tx (its copies are a subset only its flows know); None: a counter unread."""
    packets = octets = 0
    for t in tunnels:
        feeding = [c for c in copies if c.output_port == t.output_port and c.kind is None]
        pairs = [(p, "rx") for c in feeding for p in c.src] + [(p, "tx") for c in feeding for p in c.dst]
        if not feeding:
            pairs = [(str(t.output_port), "tx")]
        for port, side in dict.fromkeys(pairs):
            got = counters.get(port, {})
            n, b = got.get(f"{side}_packets"), got.get(f"{side}_bytes")
            if n is None or b is None:
                return None
            packets, octets = packets + n, octets + b
    return packets, octets
