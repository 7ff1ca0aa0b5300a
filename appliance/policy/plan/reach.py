"""Whether a GRE/ERSPAN output can reach its collector: the words, and how to ask the host (pure).

OVS accepts a tunnel port to any address, and a mirror or TAP on it counts its copies as sent whether or
not they ever leave the host.  Where they go is decided by the host's routing: on the kernel datapath
(``system``) the kernel routes the encapsulated packets itself; on the userspace datapath (``netdev``)
OVS's own router does (``ovs-appctl ovs/route/lookup``, the routes of the bridge holding the tunnel's
local address).  With no route, every copy is dropped there and nothing says so -- so hvnet asks, after
an apply that gave a mirror or TAP a new tunnel destination, and warns.  The services run the lookup
(:func:`lookup_argv`); this module says what its answer means.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class TunnelOut:
    """A mirror's or TAP's tunnel output an apply gave a (new) destination."""

    kind: str  # "mirror" or "tap"
    name: str
    bridge: str
    type: str  # gre, erspan
    remote_ip: str


def _remote(cols: Any) -> tuple[str, str] | None:
    tunnel = getattr(cols, "tunnel", None)
    if tunnel is None:
        return None
    ip = dict(tunnel.options).get("remote_ip")
    return (tunnel.type, ip) if ip else None


def new_destinations(changes: Iterable[Any]) -> list[TunnelOut]:
    """The tunnel outputs the changes create or point elsewhere (a change that keeps the destination is none)."""
    found = []
    for c in changes:
        if c.kind not in ("mirror", "tap") or c.after is None:
            continue
        after = _remote(c.after)
        if after is not None and after != _remote(c.before):
            found.append(TunnelOut(c.kind, c.name, c.bridge, after[0], after[1]))
    return found


def userspace(datapath_type: str) -> bool:
    return datapath_type == "netdev"


def lookup_argv(datapath_type: str, remote_ip: str) -> list[str]:
    """What asks the host's router for ``remote_ip`` (ovs-appctl's target is added by the caller)."""
    if userspace(datapath_type):
        return ["ovs/route/lookup", remote_ip]
    return ["ip", "route", "get", remote_ip]


def routed(datapath_type: str, returncode: int, stdout: str, stderr: str) -> bool | None:
    """Whether the lookup found a route; None when its answer says nothing either way (the lookup failed).

    ``ip route get`` exits 2 for an unreachable address ("Network is unreachable", "No route to host") and
    names an ``unreachable``/``prohibit``/``blackhole`` route when one says so; OVS's router replies the
    error "Not found" (ovs-appctl exits 2)."""
    if userspace(datapath_type):
        if returncode == 2 and "not found" in stderr.lower():
            return False
        return True if returncode == 0 else None
    if returncode == 2 and re.search(r"unreachable|no route to host", stderr, re.I):
        return False
    if returncode != 0:
        return None
    first = stdout.strip().split(" ", 1)[0] if stdout.strip() else ""
    return first not in ("unreachable", "prohibit", "blackhole", "throw")


def warning(out: TunnelOut, datapath_type: str, host: str) -> str:
    """What hvnet says of a tunnel output with no route to its collector."""
    what = f"{out.kind} {out.name}: {host} has no route to {out.remote_ip}"
    if userspace(datapath_type):
        return (
            f"{what} in OVS's own router (ovs-appctl ovs/route/show; bridge {out.bridge} is on the userspace "
            f"datapath): every {out.type.upper()} copy is dropped there; give a bridge an address on the way "
            "to the collector"
        )
    return (
        f"{what} (the kernel routes the kernel datapath's tunnels): every {out.type.upper()} copy is dropped "
        "there, though the copies are counted as sent; add a route to the collector on the host"
    )
