"""The built-in lab, beside the product: a private switch with namespace and QEMU guests.

Nothing in the engine or the services imports this package: the front ends
(``hvnet lab``, suites and isolation checks run against the lab, the
console) bring it in and hand its guests to the engine as a
:class:`~appliance.endpoints.guests.GuestSource`.  ``hvnet status`` and ``hvnet agent``
never load it.
"""

from __future__ import annotations

from appliance.lab.core import Lab, LabReport

__all__ = ["Lab", "LabReport"]
