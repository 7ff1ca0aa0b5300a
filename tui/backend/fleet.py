"""What the Fleet screen and the host picker need: the inventory, each host's probe, a Host to switch to.

The probes are :func:`appliance.services.fleet.probe_entry`, the same rows
``hvnet hosts`` prints; the console adds the ``local`` entry (this machine's
own switch or lab), which is always there, inventory or not.  Opening a host
for the console is the front door's ``build_host`` plus the OVSDB connection
the screens share; both run in worker threads (an unreachable host costs its
connect timeout).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass
from typing import Any

from appliance.core.errors import HvnetError
from appliance.core.hostlist import InventoryHost, load
from appliance.core.ovsdb import Connection
from appliance.frontdoor.hosts import build_host, inventory_file, local_environ
from appliance.services import fleet
from appliance.services import inventory as inv_svc
from appliance.services.fleet import drift_text
from appliance.switch.host import Host

# What the Fleet screen shows, named here so that it depends on the console's backend.
__all__ = ["drift_text"]

LOCAL = fleet.LOCAL
LocalFactory = Callable[[], Host]


def default_local() -> Host:
    """This machine's switch (its lab when one runs), whatever ``$HVNET_HOST`` says."""
    return build_host(environ=local_environ())


def open_remote(name: str, timeout: float) -> Host:
    return build_host(ssh_host=name, timeout=timeout)


@dataclass(frozen=True)
class FleetList:
    """The entries the Fleet screen shows before any probe answers."""

    file: str  # the inventory file, or where it was looked for
    entries: tuple[InventoryHost, ...]
    error: str | None  # an inventory with errors (the local entry is still shown)


def read_list() -> FleetList:
    """The inventory's hosts (none when there is no inventory file; its errors said, not raised)."""
    path = inventory_file()
    if not path.exists():
        return FleetList(str(path), (), None)
    try:
        found = load(path)
    except HvnetError as exc:
        return FleetList(str(path), (), exc.message)
    shadowed = f"{found.file}: host {LOCAL!r} is this machine's entry in the console; rename it" if found.get(
        LOCAL) else None  # fmt: skip
    return FleetList(found.file, tuple(h for h in found.hosts if h.name != LOCAL), shadowed)


def local_row(local: LocalFactory, timeout: float) -> dict[str, Any]:
    row: dict[str, Any] = {"name": LOCAL, "group": None, "kind": "-", "address": "-"}
    return fleet.survey(row, local, timeout)


def probe_each(entries: tuple[InventoryHost, ...], local: LocalFactory, timeout: float) -> Iterator[dict[str, Any]]:
    """Each host's row as soon as it is known (local first in the race, then whoever answers)."""
    with ThreadPoolExecutor(max_workers=max(1, min(fleet.MAX_PARALLEL, len(entries) + 1))) as pool:
        futures = [pool.submit(local_row, local, timeout)]
        futures += [pool.submit(fleet.probe_entry, e, timeout, open_remote) for e in entries]
        for done in as_completed(futures):
            yield done.result()


def open_host(name: str, local: LocalFactory, timeout: float) -> tuple[Host, Connection]:
    """The Host called ``name`` and its OVSDB connection (not yet synced); HvnetError says why not."""
    host = local() if name == LOCAL else open_remote(name, timeout)
    try:
        return host, inv_svc.connect(host, timeout=timeout, sync=False)
    except BaseException:
        host.close()
        raise
