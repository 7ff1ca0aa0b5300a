"""hvnet: the host networking engine for XenServer and KVM hypervisors.

Public API (front ends use only these):

* :func:`connect` -- open an OVSDB connection (target resolution included);
* :func:`read_inventory`, :class:`LiveInventory` -- what is on the switch;
* :class:`Lab`, :func:`load_topology` -- the built-in lab;
* :class:`HvnetError` and its subclasses -- expected failures, with exit codes.
"""

from __future__ import annotations

__version__ = "0.1.0"

from .api import LiveInventory, connect, read_inventory
from .errors import ConfigError, HvnetError, OvsdbUnreachable
from .inventory import Inventory, Vif
from .lab import Lab
from .topology import load as load_topology

__all__ = [
    "ConfigError",
    "HvnetError",
    "Inventory",
    "Lab",
    "LiveInventory",
    "OvsdbUnreachable",
    "Vif",
    "__version__",
    "connect",
    "load_topology",
    "read_inventory",
]
