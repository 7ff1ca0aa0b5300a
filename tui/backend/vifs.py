"""What the VIF screen and its table show: the switch's VIFs, as the inventory service reads them.

Only names: :meth:`tui.backend.Backend.inventory` does the reading, and
editing one VIF is the Backend's too (:meth:`tui.backend.Backend.edit_vif`).
"""

from __future__ import annotations

from appliance.services.inventory import Inventory, Vif, filter_vifs

# What the VIF screen shows, named here so that it depends on the console's backend.
__all__ = ["Inventory", "Vif", "filter_vifs"]
