"""A suite's ``endpoints:``: its client and server, or several client -> server pairs.

The server is a lab guest, whose netserver hvnet starts and stops, or an
address where someone else's netserver listens; ``pairs:`` are lab guests
whose instances every step starts at once (a server shared by pairs gets one
netserver).  Every problem is reported through the suite's checker, so the
messages keep their ``file:line: field``; nothing here reads the suite file.
"""

from __future__ import annotations

import ipaddress
from dataclasses import dataclass
from typing import Any, Optional

from appliance.core import yamldoc
from appliance.netperf.define.tests import Checks, Test

DEFAULT_NETSERVER_PORT = 12865
_ENDPOINT_KEYS = {"client", "server", "pairs"}
_PAIR_KEYS = {"client", "server"}
# Pairs in one step (``endpoints: {pairs: [...]}``).  The studies need two senders into one monitor (the vTAP
# thesis' Tables 5.5/5.6); eight is the senders MAX_STEP_FLOWS is sized for (8 clients), and since a step's
# instances are concurrency x pairs (at most MAX_CONCURRENCY), eight pairs still leave 32 instances per pair.
MAX_PAIRS = 8
_SERVER_KEYS = {"address", "port"}


@dataclass(frozen=True)
class Server:
    """Where the netservers listen: a lab guest (managed by hvnet) or an address (someone else's)."""

    guest: Optional[str] = None
    address: Optional[str] = None
    port: int = DEFAULT_NETSERVER_PORT

    @property
    def managed(self) -> bool:
        return self.guest is not None

    def describe(self) -> str:
        return f"{self.guest} (lab guest)" if self.guest else f"{self.address}:{self.port}"


@dataclass(frozen=True)
class Pair:
    """One client -> server pair of a step with several (``endpoints: {pairs: [...]}``): both lab guests."""

    client: str
    server: str

    def label(self) -> str:
        return f"{self.client}->{self.server}"

    def to_json(self) -> dict[str, str]:
        return {"client": self.client, "server": self.server}


def parse_endpoints(
    ck: Checks, value: Any, port_value: Any, guests: set[str]
) -> tuple[Optional[str], Optional[Server], tuple[Pair, ...]]:
    """``{client, server}`` (one pair) or ``{pairs: [{client, server}, ...]}`` (several, each step's
    concurrency per pair); with pairs, ``client`` and ``server`` are the first pair's."""
    known = ", ".join(sorted(guests)) or "(none)"
    if not isinstance(value, dict):
        ck.bad(("endpoints",), "required: {client: GUEST, server: GUEST or {address: IP, port: N}} "
               "or {pairs: [{client: GUEST, server: GUEST}, ...]}")  # fmt: skip
        return None, None, ()
    ck.unknown(value, ("endpoints",), _ENDPOINT_KEYS)
    port = DEFAULT_NETSERVER_PORT
    if port_value is not None:
        port = ck.integer(port_value, ("netserver_port",), 1, 65535, "netserver_port") or DEFAULT_NETSERVER_PORT
    if "pairs" in value:
        for key in ("client", "server"):
            if key in value:
                ck.bad(("endpoints", key), "give client and server (one pair) or pairs (several), not both")
        pairs = _pairs(ck, value["pairs"], guests)
        if not pairs:
            return None, None, ()
        return pairs[0].client, Server(guest=pairs[0].server, port=port), pairs
    client = value.get("client")
    if not isinstance(client, str) or client not in guests:
        ck.bad(("endpoints", "client"), f"unknown guest {client!r}: the client is a lab guest; guests: {known}")
        client = None
    return client, _server(ck, value.get("server"), client, port, guests), ()


def _server(ck: Checks, raw: Any, client: Optional[str], port: int, guests: set[str]) -> Optional[Server]:
    """The single form's server: a lab guest other than the client, or ``{address: IP, port: N}``."""
    known = ", ".join(sorted(guests)) or "(none)"
    if isinstance(raw, str):
        if raw not in guests:
            ck.bad(("endpoints", "server"), f"unknown guest {raw!r}; guests: {known} (or {{address: IP}})")
        elif raw == client:
            ck.bad(("endpoints", "server"), "the server must be another guest than the client")
        else:
            return Server(guest=raw, port=port)
        return None
    if isinstance(raw, dict):
        ck.unknown(raw, ("endpoints", "server"), _SERVER_KEYS)
        try:
            addr = str(ipaddress.ip_address(raw.get("address")))
        except ValueError:
            ck.bad(("endpoints", "server", "address"), f"must be an IP address, not {raw.get('address')!r}")
            addr = None
        if "port" in raw:
            port = ck.integer(raw["port"], ("endpoints", "server", "port"), 1, 65535, "port") or port
        return Server(address=addr, port=port) if addr else None
    ck.bad(("endpoints", "server"), f"required: a lab guest ({known}) or {{address: IP, port: N}}")
    return None


def _pairs(ck: Checks, value: Any, guests: set[str]) -> tuple[Pair, ...]:
    """``pairs: [{client: GUEST, server: GUEST}, ...]``: 1..MAX_PAIRS distinct pairs of lab guests (a server
    may serve several pairs: hvnet starts its netserver once)."""
    path: yamldoc.PathKey = ("endpoints", "pairs")
    if not isinstance(value, list) or not value:
        ck.bad(path, "a non-empty list of {client: GUEST, server: GUEST}: each step runs its concurrency per pair")
        return ()
    if len(value) > MAX_PAIRS:
        ck.bad(path, f"{len(value)} pairs; at most {MAX_PAIRS} (senders into one receiver at once)")
        return ()
    out: list[Pair] = []
    for i, raw in enumerate(value):
        pair = _pair(ck, raw, (*path, i), guests)
        if pair is not None and pair in out:
            ck.bad((*path, i), f"pair {pair.label()} is listed twice (more instances of a pair: concurrency)")
        elif pair is not None:
            out.append(pair)
    return tuple(out) if len(out) == len(value) else ()


def _pair(ck: Checks, raw: Any, path: yamldoc.PathKey, guests: set[str]) -> Optional[Pair]:
    known = ", ".join(sorted(guests)) or "(none)"
    if not isinstance(raw, dict):
        ck.bad(path, "each pair is a mapping {client: GUEST, server: GUEST}")
        return None
    ck.unknown(raw, path, _PAIR_KEYS)
    names = {}
    for role in ("client", "server"):
        name = raw.get(role)
        if not isinstance(name, str) or name not in guests:
            ck.bad((*path, role), f"unknown guest {name!r}: in pairs the {role} is a lab guest (hvnet starts "
                   f"each server's netserver); guests: {known}")  # fmt: skip
            return None
        names[role] = name
    if names["client"] == names["server"]:
        ck.bad((*path, "server"), f"the pair's server is its client {names['client']!r}: netperf needs two guests")
        return None
    return Pair(names["client"], names["server"])


def check_pairs(ck: Checks, data: dict[str, Any], pairs: tuple[Pair, ...]) -> None:
    """Pairs start instances in several guests through one group: lab guests and probes, not real VMs (each
    has its own access)."""
    if len(pairs) > 1 and "vms" in data:
        ck.bad(("endpoints", "pairs"), "pairs run on lab guests and probes; real VMs (vms:) run one pair")


def check_iperf_server(ck: Checks, tests: list[Test], server: Optional[Server]) -> None:
    """iperf3 needs its server: hvnet starts it in the server guest, so the server must be one."""
    types = sorted({t.type for t in tests if t.is_iperf})
    if server is not None and not server.managed and types:
        ck.bad(("endpoints", "server"), f"{' and '.join(types)} tests need the server to be a lab guest (hvnet "
               "starts iperf3 -s there); an address's netserver cannot answer iperf3")  # fmt: skip
