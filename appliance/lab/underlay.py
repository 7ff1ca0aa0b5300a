"""Tunnel endpoints of the one-switch lab: a bridge's own address, its route and its neighbours in OVS.

The userspace datapath sends a GRE/ERSPAN port's packets itself (native
tunnelling): it looks the remote IP up in its own routing table
(``ovs-appctl ovs/route``), which must name a bridge carrying a local IP --
the tunnel's source -- and the remote's MAC in its tunnel neighbour table
(``tnl/arp``), then pushes the headers and sends the packet out through that
bridge as if its own interface had sent it.  A lab bridge with ``address:``
gets that address on its interface (the userspace bridge's tap, in this
machine's namespace), a route to its network through it, and each namespace
guest on it as a static neighbour, so the first mirrored packets do not wait
for ARP.  All of it is recorded before it is made and undone by ``lab down``
(deleting the bridge takes its tap, the address and the kernel's route with it).
"""

from __future__ import annotations

import ipaddress
import time
from typing import Callable

from appliance.core import proc
from appliance.endpoints.topology import Topology
from appliance.lab.switch import Switch


def up(switch: Switch, t: Topology, record: Callable[[str, str], None]) -> list[str]:
    """Address each bridge that has one, route its network through it in OVS, pin its guests' MACs."""
    actions = []
    for b in (b for b in t.bridges if b.address):
        assert b.address is not None
        net = str(ipaddress.ip_interface(b.address).network)
        record("routes", f"{b.name} {net}")
        proc.run(["ip", "addr", "replace", b.address, "dev", b.name])
        proc.run(["ip", "link", "set", b.name, "up"])
        _route_add(switch, net, b.name)
        guests = [g for g in t.guests if g.bridge == b.name and g.kind == "netns"]
        for g in guests:
            switch.appctl("ovs-vswitchd", "tnl/arp/set", b.name, g.address, g.mac)
        actions.append(f"tunnel endpoint {b.address} on {b.name}: ovs/route {net} via {b.name}, "
                       f"{len(guests)} neighbour(s) in tnl/arp")  # fmt: skip
    return actions


def _route_add(switch: Switch, net: str, bridge: str, tries: int = 20) -> None:
    """``ovs/route/add``, retried briefly: ovs-vswitchd learns the bridge's new address from netlink, and
    until it has, it refuses a route through that bridge ("Error while inserting route")."""
    for _ in range(tries - 1):
        if proc.run(["ovs-appctl", "-t", switch.ctl("ovs-vswitchd"), "ovs/route/add", net, bridge],
                    env=switch.env, check=False).returncode == 0:  # fmt: skip
            return
        time.sleep(0.1)
    switch.appctl("ovs-vswitchd", "ovs/route/add", net, bridge)  # the last try raises with OVS's message


def down(switch: Switch, recorded: list[str]) -> list[str]:
    """Remove the routes recorded and flush the tunnel neighbours (before the bridges go)."""
    actions = []
    if not recorded or switch.pid("ovs-vswitchd") is None:
        return actions
    for entry in recorded:
        bridge, net = entry.split(" ", 1)
        switch.appctl("ovs-vswitchd", "ovs/route/del", net, check=False)
        actions.append(f"removed ovs/route {net} via {bridge}")
    switch.appctl("ovs-vswitchd", "tnl/neigh/flush", check=False)
    return actions


def routes(switch: Switch) -> str:
    """OVS's routing table as it prints it (the lab tests' witness)."""
    return switch.appctl("ovs-vswitchd", "ovs/route/show")
