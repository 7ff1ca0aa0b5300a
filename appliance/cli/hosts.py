"""``hvnet hosts``: the inventory's hypervisors, each checked over SSH in parallel.

The exit code is the worst host's, as for any ``--hosts`` verb (:data:`appliance.core.errors.SEVERITY`):
a host that cannot be reached is 3 here as everywhere else, a host lacking a tool 4.
"""

from __future__ import annotations

import argparse
from typing import Any

from appliance.core import documents, render
from appliance.core.errors import EXIT_OK
from appliance.core.hostlist import InventoryHost, load
from appliance.frontdoor.hosts import build_host, inventory_file
from appliance.services import fleet


def cmd_hosts(args: argparse.Namespace) -> int:
    inventory = load(inventory_file())
    entries = inventory.select(args.hosts) if args.hosts else list(inventory.hosts)
    outcomes = fleet.run(
        entries,
        lambda host, entry: (fleet.probe(host, entry, timeout=args.timeout), EXIT_OK),
        lambda entry: build_host(ssh_host=entry.name, timeout=args.timeout),
        deadline_s=max(30.0, 6 * args.timeout),
    )
    rows = [_row(e, o) for e, o in zip(entries, outcomes)]
    if args.json:
        render.print_json(documents.HOSTS.stamp({"inventory": inventory.file, "hosts": rows}))
    else:
        heads = ["HOST", "GROUP", "KIND", "UP", "OVS", "DATAPATH", "VIFS", "AGENT", "DRIFT", "S", "PROBLEM"]
        print(render.table(heads, [_line(r) for r in rows]))
    return fleet.worst([o.exit for o in outcomes])


def _row(entry: InventoryHost, outcome: fleet.HostOutcome[dict[str, Any]]) -> dict[str, Any]:
    row: dict[str, Any] = {"name": entry.name, "group": entry.group, "kind": entry.kind, "address": entry.address}
    if outcome.value is not None:
        row.update(reachable=True, **outcome.value)
    else:
        row.update(reachable=False, error=outcome.error or "no result", policy=entry.policy)
    row["elapsed_s"] = round(outcome.seconds, 3)
    return row


def _line(r: dict[str, Any]) -> list[str]:
    up = bool(r["reachable"])
    problem = r.get("error") or (f"policy: {r['drift_error']}" if r.get("drift_error") else "")
    return [r["name"], r["group"] or "-", r["kind"], "yes" if up else "NO", r.get("ovs_version") or "-",
            ",".join(r.get("datapaths", [])) or "-", str(r["vifs"]) if up else "-", r.get("agent") or "-",
            fleet.drift_text(r) if up else "-", f"{r['elapsed_s']:.2f}", problem]  # fmt: skip
