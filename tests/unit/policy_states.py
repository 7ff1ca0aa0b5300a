"""Hand-built switch states for the policy unit tests (the 2010 lab's shape)."""

from __future__ import annotations

from appliance.core.vlan import VlanCols
from appliance.policy.plan.model import OWNER, OWNER_KEY
from appliance.policy.plan.state import PoliceCols, PortState

OWNED = ((OWNER_KEY, OWNER),)


def vif(name: str, vm: str, n: int, tag: int | None, **kw) -> PortState:
    """VM ``vm``'s VIF ``name`` on xenbr0, ofport ``n``, MAC/uuid derived from ``n``."""
    fields = {
        "name": name,
        "bridge": "xenbr0",
        "interface": name,
        "iface_type": "system",
        "vlan": VlanCols(None, tag, ()),
        "police": PoliceCols(),
        "qos": None,
        "ofport": n,
        "error": None,
        "mac": f"52:54:00:00:00:0{n}",
        "vm_uuid": f"00000000-0000-0000-0000-00000000000{n}",
        "vm_name": vm,
        "is_vif": True,
    }
    fields.update(kw)
    return PortState(**fields)
