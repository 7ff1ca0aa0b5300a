"""The engine's public API: what the CLI, the TUI and the agent call.

Front ends never reach into the IDL or the lab's files directly; they
connect here and read the inventory here, so that target resolution, VM
name sources and counters work the same everywhere.
"""

from __future__ import annotations

import os
import time

from . import inventory, lab, names
from .counters import RateMeter
from .inventory import Inventory
from .ovsdb import Connection
from .target import DbTarget, resolve

# OVS writes Interface.statistics every 5 s by default (other_config:
# stats-update-interval); rates from those counters need at least that long.
OVSDB_STATS_INTERVAL_S = 5.0


def connect(
    db: str | None = None,
    *,
    ssl_key: str | None = None,
    ssl_cert: str | None = None,
    ssl_ca: str | None = None,
    timeout: float = 5.0,
    columns: dict[str, list[str]] | None = None,
) -> Connection:
    """Resolve the target (--db, HVNET_DB, lab, system) and open a connection."""
    target = resolve(db, ssl_key=ssl_key, ssl_cert=ssl_cert, ssl_ca=ssl_ca)
    return Connection.open(target, columns or inventory.COLUMNS, timeout=timeout)


# The front end's choice of libvirt URI (``hvnet --libvirt URI``; ``none`` turns
# libvirt off).  One per process, like the name sources' shared connections:
# every reader (inventory, the policy engine, the console) asks the same libvirt.
_libvirt_choice: str | None = None


def use_libvirt(uri: str | None) -> None:
    """Ask libvirt at ``uri`` (``none``: not at all); None goes back to
    ``$HVNET_LIBVIRT_URI``, ``$LIBVIRT_DEFAULT_URI`` or a local ``qemu:///system``."""
    global _libvirt_choice
    _libvirt_choice = uri


def name_sources(target: DbTarget) -> list[names.NameSource]:
    """VM name sources for ``target``: libvirt, XAPI, and the lab's records."""
    return names.default_sources(lab.lab_vm_names(target.remote), os.environ, _libvirt_choice)


def read_inventory(conn: Connection, *, kernel_counters: bool = True) -> Inventory:
    """The current inventory, VM names resolved."""
    return inventory.read(conn, names=name_sources(conn.target), kernel_counters=kernel_counters)


class LiveInventory:
    """Successive inventory reads with per-VIF rates between them.

    The TUI calls :meth:`refresh` about once a second; the CLI's
    ``status --rates N`` calls it twice, N seconds apart.  Rates derived from
    OVSDB statistics over less than their 5 s update interval would be
    fiction, so they are left unset (shown as "-") rather than as 0.
    """

    def __init__(self, conn: Connection) -> None:
        self.conn = conn
        self.meter = RateMeter()
        self._sources = name_sources(conn.target)

    def refresh(self) -> Inventory:
        inv = inventory.read(self.conn, names=self._sources)
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
        return inventory.read(self.conn, names=self._sources, kernel_counters=kernel_counters)
