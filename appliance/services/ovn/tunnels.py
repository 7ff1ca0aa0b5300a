"""The tunnels between a pool's chassis, made ready before the traffic method's probes.

Open vSwitch's userspace tunnels send an encapsulated frame only once they
know the underlay MAC of the remote chassis; the frame that makes them ask
(ARP on the underlay) is dropped.  A probe that happens to be that frame
would read as isolation ("No") where there is none.  So before the capture
window each guest sends one broadcast (who-has the unused address), and the
check waits until every chassis knows the underlay neighbour of each chassis
its guests' logical switches span (``ovs-appctl tnl/neigh/show``).  A tunnel
still unresolved after :data:`WAIT_S` cannot carry a "No": those cells read
"unknown", with the reason.
"""

from __future__ import annotations

import ipaddress
import time
from typing import Protocol

from appliance.core.errors import CommandFailed
from appliance.endpoints.guests import GuestEndpoint
from appliance.isolation import model, traffic
from appliance.isolation.model import MethodResult
from appliance.ovn.view import PoolView
from appliance.switch.host import Host


class PoolPort(Protocol):
    """What the tunnels need of a guest's port (:class:`~appliance.services.ovn.isolation.PoolPort`)."""

    @property
    def switch(self) -> str: ...

    @property
    def chassis(self) -> str | None: ...

    @property
    def ip(self) -> str: ...


WAIT_S = 3.0
POLL_S = 0.05


def neighbours(text: str) -> set[str]:
    """The addresses ``ovs-appctl tnl/neigh/show`` lists (the first column of its table)."""
    out = set()
    for line in text.splitlines():
        first = (line.split() or [""])[0]
        try:
            out.add(str(ipaddress.ip_address(first)))
        except ValueError:
            continue
    return out


def needed(ports: dict[str, PoolPort], view: PoolView) -> dict[str, set[str]]:
    """Chassis -> the underlay addresses it sends the scenario's floods to (peers sharing a logical switch)."""
    encaps = {c.name: {e.split()[-1] for e in c.encaps if e.split()} for c in view.chassis}
    need: dict[str, set[str]] = {}
    for p in ports.values():
        for q in ports.values():
            if p.switch == q.switch and p.chassis and q.chassis and p.chassis != q.chassis:
                need.setdefault(p.chassis, set()).update(encaps.get(q.chassis, set()))
    return need


def warm(
    hosts: dict[str, Host],
    ports: dict[str, PoolPort],
    found: dict[str, GuestEndpoint],
    view: PoolView,
    unused_ip: str,
) -> dict[str, set[str]]:
    """One broadcast from each guest, then wait for the tunnels; chassis -> addresses still unresolved."""
    for guest, p in ports.items():
        ep = found.get(guest)
        if ep is None or not ep.netns:  # a QEMU guest's first probe may be lost: its cells say why
            continue
        try:
            with traffic.open_raw_socket(ep.netns) as sock:
                sock.send(traffic.arp_request(ep.mac, p.ip, unused_ip))
        except OSError:
            continue  # the traffic method finds the guest down and says so
    need = needed(ports, view)
    deadline = time.monotonic() + WAIT_S
    while True:
        missing = {c: ips - _known(hosts.get(c)) for c, ips in need.items()}
        missing = {c: ips for c, ips in missing.items() if ips}
        if not missing or time.monotonic() > deadline:
            return missing
        time.sleep(POLL_S)


def _known(host: Host | None) -> set[str]:
    if host is None:
        return set()
    try:
        return neighbours(host.appctl("ovs-vswitchd", "tnl/neigh/show", timeout=5))
    except CommandFailed:
        return set()


def doubt(res: MethodResult, ports: dict[str, PoolPort], view: PoolView, unresolved: dict[str, set[str]]) -> None:
    """A "No" whose frames had to cross a tunnel that never resolved is unknown: they may have been dropped."""
    res.stats["tunnels_unresolved"] = {c: sorted(ips) for c, ips in unresolved.items()}
    if not unresolved:
        return
    encaps = {c.name: {e.split()[-1] for e in c.encaps if e.split()} for c in view.chassis}
    for (listener, sender), value in list(res.cells.items()):
        s, lst = ports[sender].chassis or "", ports[listener].chassis or ""
        if value == model.NO and encaps.get(lst, set()) & unresolved.get(s, set()):
            res.cells[(listener, sender)] = model.UNKNOWN
            res.reasons[(listener, sender)] = (
                f"chassis {s} never resolved the underlay address of {lst} (tnl/neigh/show), so {sender}'s "
                "frames may have been dropped before the tunnel"
            )
