"""Reading the switch as front ends see it: a connection and the inventory on it.

The :class:`~appliance.switch.host.Host` (built at the front door) knows the target
and the VM name sources; these helpers turn it into the inventory that the
CLI's ``status``, the console's VIF table and the policy engine all read.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from appliance.core.ovsdb import Connection
from appliance.switch import inventory, reader
from appliance.switch.counters import RateMeter
from appliance.switch.host import Host
from appliance.switch.inventory import Inventory

if TYPE_CHECKING:
    from appliance.switch.snapshot import Pending

# OVS writes Interface.statistics every 5 s by default (other_config:
# stats-update-interval); rates from those counters need at least that long.
OVSDB_STATS_INTERVAL_S = 5.0


def connect(
    host: Host, *, timeout: float = 5.0, columns: dict[str, list[str]] | None = None, sync: bool = True
) -> Connection:
    """Open the host's OVSDB connection (the inventory's columns unless told otherwise).

    ``sync=False`` leaves the replica to be built later (the console's start).
    """
    return host.connect(columns or reader.COLUMNS, timeout=timeout, sync=sync)


def read_inventory(conn: Connection, host: Host, *, kernel_counters: bool = True) -> Inventory:
    """The current inventory, VM names resolved through the host's name sources."""
    return inventory.read(conn, names=host.name_sources(), kernel_counters=kernel_counters, runner=host.runner)


def read_inventory_once(host: Host, *, timeout: float = 5.0) -> Inventory:
    """The inventory from one consistent read, without a replica (one-shot verbs)."""
    return read_once_with_bridge_ids(host, timeout=timeout)[0]


def read_once_with_bridge_ids(
    host: Host, *, timeout: float = 5.0, started: Pending | None = None
) -> tuple[Inventory, dict[str, dict[str, str]]]:
    """The inventory and each bridge's external_ids by name, from one consistent read without a replica.

    The engine keeps on a bridge's external_ids what OVS has no table for (flow TAPs): ``hvnet
    status`` lists them from this same read instead of opening a second session, most often to
    learn that there are none.  ``started``: that read, already asked for (of :data:`reader.COLUMNS`;
    see :mod:`appliance.services.status`).
    """
    from appliance.switch import snapshot

    snap = (started or snapshot.start(host.target, reader.COLUMNS, timeout)).result()
    bridge_ids = {str(br.name): dict(br.external_ids) for br in snap.idl.tables["Bridge"].rows.values()}
    return inventory.read(snap, names=host.name_sources(), runner=host.runner), bridge_ids


class LiveInventory:
    """Successive inventory reads with per-VIF rates between them.

    The TUI calls :meth:`refresh` about once a second; the CLI's
    ``status --rates N`` calls it twice, N seconds apart.  Rates derived from
    OVSDB statistics over less than their 5 s update interval would be
    fiction, so they are left unset (shown as "-") rather than as 0.
    """

    def __init__(self, conn: Connection, host: Host) -> None:
        self.conn = conn
        self.meter = RateMeter()
        self._sources = host.name_sources()
        self._runner = host.runner

    def refresh(self, *, once: bool = False, timeout: float = 5.0) -> Inventory:
        """The inventory now, with rates since the previous call.

        ``once``: from one consistent select instead of the replica (before
        the replica is built; see :func:`read_inventory_once`).
        """
        if once:
            from appliance.switch import snapshot

            source = snapshot.take(self.conn.target, reader.COLUMNS, timeout, schema_json=self.conn.schema_json)
            inv = inventory.read(source, names=self._sources, runner=self._runner)
        else:
            inv = inventory.read(self.conn, names=self._sources, runner=self._runner)
        now = time.monotonic()
        for v in inv.vifs:
            rates = self.meter.update(v.interface, now, v.counters)
            if rates is not None and v.counters.source == "ovsdb" and rates.interval_s < OVSDB_STATS_INTERVAL_S:
                rates = None
            v.rates = rates
        self.meter.forget_missing({v.interface for v in inv.vifs})
        return inv

    def snapshot(self, *, kernel_counters: bool = False) -> Inventory:
        """The inventory now, with the same VM name sources, leaving the rate meter alone."""
        return inventory.read(self.conn, names=self._sources, kernel_counters=kernel_counters, runner=self._runner)
