"""Many hypervisors at a glance: each inventory host checked over SSH, in parallel, each bounded in time.

``hvnet hosts`` renders these rows as a table or JSON; the console's Fleet
screen shows them and switches to one.  The front end hands in how a Host is
opened (the front door's ``build_host``): this layer reads the switch and
never parses an option or the environment itself.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ..errors import HvnetError
from ..host import Host
from ..hosts import InventoryHost
from .inventory import read_inventory_once

LOCAL = "local"  # the console's own machine: its switch or its lab, always reachable by name
MAX_PARALLEL = 16

Opener = Callable[[str, float], Host]  # (inventory name, timeout) -> an open Host


def probe(entry: InventoryHost, timeout: float, opener: Opener) -> dict[str, Any]:
    """One host: reachable over SSH, its OVS version, bridges' datapaths and VIFs (one OVSDB read).

    Never raises for the host's own faults: an unreachable host is a row
    with ``reachable`` false and the error, so one host cannot hide the others.
    """
    row: dict[str, Any] = {"name": entry.name, "group": entry.group, "kind": entry.kind, "address": entry.address}
    return survey(row, lambda: opener(entry.name, timeout), timeout)


def survey(row: dict[str, Any], open_host: Callable[[], Host], timeout: float) -> dict[str, Any]:
    """Fill ``row`` from one read of the Host ``open_host`` gives (closed again after)."""
    started = time.monotonic()
    host = None
    try:
        host = open_host()
        inv = read_inventory_once(host, timeout=timeout)
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


def probe_all(entries: Sequence[InventoryHost], timeout: float, opener: Opener) -> list[dict[str, Any]]:
    """Every entry's row, in the inventory's order; the slowest host bounds the wait (``timeout``)."""
    if not entries:
        return []
    with ThreadPoolExecutor(max_workers=max(1, min(MAX_PARALLEL, len(entries)))) as pool:
        return list(pool.map(lambda e: probe(e, timeout, opener), entries))
