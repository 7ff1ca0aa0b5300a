"""The path a suite's frames take across an OVN pool: which chassis, which tunnel, which MTUs.

Between two chassis a guest's frames leave the client's ``br-int`` through
a tunnel port (``ovn-controller`` names its peer chassis in the port's
``external_ids:ovn-chassis-id``) and cross the underlay, where Geneve adds
its header: a figure means little without knowing that path and the MTUs
in play (the guests' and the underlay device's).  Everything here is read,
never assumed: the tunnel from the client host's OVSDB, the underlay
device and its MTU from that host's own ``ip`` (through its runner), each
guest's MTU from inside the guest; what could not be read stays None and
the report says "not measured".
"""

from __future__ import annotations

import re
from typing import Any, Optional

from appliance.core.ovsdb import Connection
from appliance.core.ovsdb import column as col
from appliance.core.runner import CommandRunner
from appliance.netperf.run.launch import Endpoint

_DEV = re.compile(r"\bdev (?P<dev>\S+)")
_MTU = re.compile(r"\bmtu (?P<mtu>[0-9]{1,6})\b")
TUNNEL_TYPES = ("geneve", "vxlan", "stt")


def link_mtu(text: str) -> Optional[int]:
    """The MTU in ``ip -o link show`` output, or None."""
    m = _MTU.search(text)
    return int(m.group("mtu")) if m else None


def route_dev(text: str) -> Optional[str]:
    """The device in ``ip -o route get ADDRESS`` output, or None."""
    m = _DEV.search(text)
    return m.group("dev") if m else None


def tunnels(conn: Connection) -> tuple[dict[str, str], dict[str, tuple[str, str]]]:
    """The chassis' own ids (system-id, encap) and its tunnels: peer chassis -> (type, remote_ip)."""
    with conn.lock:
        ovs = next(iter(conn.idl.tables["Open_vSwitch"].rows.values()), None)
        ids = dict(col(ovs, "external_ids")) if ovs is not None else {}
        out: dict[str, tuple[str, str]] = {}
        for port in conn.idl.tables["Port"].rows.values():
            # "hv2", or "hv2@REMOTE_IP%LOCAL_IP" since OVN 22.09 (a chassis may have several encaps)
            peer = dict(col(port, "external_ids")).get("ovn-chassis-id", "").split("@")[0]
            for iface in col(port, "interfaces"):
                if peer and col(iface, "type") in TUNNEL_TYPES:
                    out[peer] = (col(iface, "type"), dict(col(iface, "options")).get("remote_ip", ""))
    return ids, out


def pool_path(
    conn: Connection,
    host_runner: CommandRunner,
    local: CommandRunner,
    client: Endpoint,
    server: Optional[Endpoint],
    server_chassis: Optional[str],
) -> dict[str, Any]:
    """The path from ``client`` (on the chassis ``conn`` is the switch of) to ``server`` on ``server_chassis``."""
    ids, peers = tunnels(conn)
    chassis = ids.get("system-id")
    path: dict[str, Any] = {
        "kind": "ovn",
        "client_chassis": chassis,
        "server_chassis": server_chassis,
        "encap": None,
        "local_ip": ids.get("ovn-encap-ip"),
        "remote_ip": None,
        "underlay_dev": None,
        "underlay_mtu": None,
        "client_mtu": _guest_mtu(local, client),
        "server_mtu": _guest_mtu(local, server) if server is not None else None,
    }
    if server_chassis is None or server_chassis == chassis:
        return path  # one chassis: no tunnel in the path
    tunnel = peers.get(server_chassis)
    if tunnel is None:
        return path
    path["encap"], path["remote_ip"] = tunnel
    if tunnel[1]:
        res = host_runner.run(["ip", "-o", "route", "get", tunnel[1]], check=False, timeout=10)
        dev = route_dev(res.stdout) if res.returncode == 0 else None
        if dev:
            path["underlay_dev"] = dev
            shown = host_runner.run(["ip", "-o", "link", "show", "dev", dev], check=False, timeout=10)
            path["underlay_mtu"] = link_mtu(shown.stdout) if shown.returncode == 0 else None
    return path


def _guest_mtu(local: CommandRunner, ep: Endpoint) -> Optional[int]:
    if ep.guest is None:
        return None
    res = local.run(ep.wrap(["ip", "-o", "link", "show", "dev", "eth0"]), check=False, timeout=10)
    return link_mtu(res.stdout) if res.returncode == 0 else None
