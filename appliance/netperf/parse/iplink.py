"""``ip -s -j link``'s receive counters: what a guest's interface received, whatever a capture kept.  Pure."""

from __future__ import annotations

import json

INTERFACE = "eth0"  # a lab guest's interface (the VIF's peer)


def parse_link_stats(text: str, ifname: str = INTERFACE) -> dict[str, int]:
    """``ip -s -j link show dev IF``'s receive counters: ``{rx_packets, rx_bytes, rx_dropped}``.

    Raises ValueError when the output has no such interface or no stats64 (an iproute2 without JSON)."""
    try:
        links = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"not JSON from ip -j: {exc}") from None
    link = next((x for x in links if isinstance(x, dict) and x.get("ifname") == ifname), None)
    if link is None:
        raise ValueError(f"ip -j link shows no interface {ifname}")
    rx = (link.get("stats64") or link.get("stats") or {}).get("rx")
    if not isinstance(rx, dict) or not all(isinstance(rx.get(k), int) for k in ("packets", "bytes")):
        raise ValueError(f"ip -j -s link shows no receive counters for {ifname}")
    return {"rx_packets": rx["packets"], "rx_bytes": rx["bytes"], "rx_dropped": int(rx.get("dropped") or 0)}
