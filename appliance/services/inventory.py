"""Inventory verbs: what is on the switch, once or live with rates.

The console and ``hvnet status`` read the switch through here: a live
inventory on the front end's connection (rates between refreshes), or one
consistent read without a replica for one-shot verbs (``hvnet status``'s:
:mod:`appliance.services.status`).
"""

from __future__ import annotations

from appliance.switch.api import (
    OVSDB_STATS_INTERVAL_S,
    LiveInventory,
    connect,
    read_inventory,
    read_inventory_once,
)
from appliance.switch.inventory import Inventory, MirrorInfo, Vif, filter_vifs

__all__ = [
    "OVSDB_STATS_INTERVAL_S",
    "Inventory",
    "LiveInventory",
    "MirrorInfo",
    "Vif",
    "connect",
    "filter_vifs",
    "read_inventory",
    "read_inventory_once",
]
