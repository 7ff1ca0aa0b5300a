"""The built-in lab, beside the product: a private switch with namespace and QEMU guests.

Nothing in the engine or the services imports this package: the front ends
(``hvnet lab``, suites and isolation checks run against the lab, the
console) bring it in and hand its guests to the engine as a
:class:`~appliance.endpoints.guests.GuestSource`.  ``hvnet status`` and ``hvnet agent``
never load it.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__all__ = ["Lab", "LabReport"]


def __getattr__(name: str) -> Any:
    """``Lab`` and ``LabReport`` from :mod:`.core` on first use (PEP 562): a module of the lab
    (its private switch, its SSH host) is imported without the whole lab and its guest stacks."""
    if name not in __all__:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    return getattr(importlib.import_module(f"{__name__}.core"), name)


if TYPE_CHECKING:
    from appliance.lab.core import Lab, LabReport
