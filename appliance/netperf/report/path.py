"""A suite's path across an OVN pool on one line of the report (measured by :mod:`appliance.netperf.run.path`)."""

from __future__ import annotations

from typing import Any


def describe(path: dict[str, Any], client: str, server: str) -> str:
    """The path on one line, for the report: what was not read says so."""

    def nm(v: Any) -> str:
        return "not measured" if v is None else str(v)

    where = f"{client} on chassis {nm(path.get('client_chassis'))} -> {server} on chassis " \
            f"{nm(path.get('server_chassis'))}"  # fmt: skip
    if path.get("encap"):
        tunnel = f"{path['encap']} {nm(path.get('local_ip'))} -> {nm(path.get('remote_ip'))}"
        underlay = f"underlay {nm(path.get('underlay_mtu'))} ({path.get('underlay_dev') or 'device not measured'})"
    elif path.get("client_chassis") and path.get("client_chassis") == path.get("server_chassis"):
        tunnel, underlay = "one chassis, no tunnel", "no underlay"
    else:
        tunnel, underlay = "tunnel not measured", "underlay not measured"
    mtus = f"MTU: guests {nm(path.get('client_mtu'))}/{nm(path.get('server_mtu'))}, {underlay}"
    return f"path: {where}, {tunnel}; {mtus}"
