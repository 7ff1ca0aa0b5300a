"""``hvnet hosts``: the inventory's hypervisors, each checked over SSH in parallel."""

from __future__ import annotations

import argparse
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from . import api, render
from .errors import EXIT_FAILED, EXIT_OK, HvnetError
from .frontdoor import build_host, inventory_file
from .hosts import InventoryHost, load


def cmd_hosts(args: argparse.Namespace) -> int:
    inventory = load(inventory_file())
    entries = inventory.select(args.hosts) if args.hosts else list(inventory.hosts)
    with ThreadPoolExecutor(max_workers=max(1, min(16, len(entries)))) as pool:
        rows = list(pool.map(lambda e: probe(e, args.timeout), entries))
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
    started = time.monotonic()
    row: dict[str, Any] = {"name": entry.name, "group": entry.group, "kind": entry.kind, "address": entry.address}
    host = None
    try:
        host = build_host(ssh_host=entry.name, timeout=timeout)
        inv = api.read_inventory_once(host, timeout=timeout)
        row.update(
            reachable=True,
            ovs_version=inv.host.ovs_version,
            datapaths=sorted({b.datapath_type for b in inv.bridges}),
            vifs=sum(1 for v in inv.vifs if v.is_vif),
        )
    except HvnetError as exc:
        row.update(reachable=False, error=exc.message)
    finally:
        if host is not None:
            host.close()
    row["seconds"] = round(time.monotonic() - started, 3)
    return row
