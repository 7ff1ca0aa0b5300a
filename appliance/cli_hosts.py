"""``hvnet hosts``: the inventory's hypervisors, each checked over SSH in parallel."""

from __future__ import annotations

import argparse
from typing import Any

from . import render
from .errors import EXIT_FAILED, EXIT_OK
from .frontdoor import build_host, inventory_file
from .host import Host
from .hosts import InventoryHost, load
from .services import fleet


def cmd_hosts(args: argparse.Namespace) -> int:
    inventory = load(inventory_file())
    entries = inventory.select(args.hosts) if args.hosts else list(inventory.hosts)
    rows = fleet.probe_all(entries, args.timeout, _open)
    if args.json:
        render.print_json({"inventory": inventory.file, "hosts": rows})
    else:
        table = [_line(r) for r in rows]
        print(render.table(["HOST", "GROUP", "KIND", "UP", "OVS", "DATAPATH", "VIFS", "S", "PROBLEM"], table))
    return EXIT_OK if all(r["reachable"] for r in rows) else EXIT_FAILED


def _line(r: dict[str, Any]) -> list[str]:
    up = bool(r["reachable"])
    return [r["name"], r["group"] or "-", r["kind"], "yes" if up else "NO", r.get("ovs_version") or "-",
            ",".join(r.get("datapaths", [])) or "-", str(r["vifs"]) if up else "-", f"{r['seconds']:.2f}",
            r.get("error", "")]  # fmt: skip


def probe(entry: InventoryHost, timeout: float) -> dict[str, Any]:
    """One host: reachable over SSH, its OVS version, bridges' datapaths and VIFs (one OVSDB read)."""
    return fleet.probe(entry, timeout, _open)


def _open(name: str, timeout: float) -> Host:
    return build_host(ssh_host=name, timeout=timeout)
