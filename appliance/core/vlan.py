"""The one VLAN rule: how OVS reads a Port's ``vlan_mode``, ``tag`` and ``trunks``.

ovs-vswitchd.conf.db(5): an empty ``vlan_mode`` means access when a tag is
set and trunk otherwise; a trunk or native port with an empty ``trunks`` list
carries every VLAN; OVS ignores the tag of a trunk port and the trunks of an
access port.  The planner, the display, the export and the isolation model all
read VLANs through :meth:`VlanCols.effective`, so they cannot disagree.
"""

from __future__ import annotations

from dataclasses import dataclass

from appliance.core.validate import format_vlan_list

DEAD_VLAN = 4095  # reserved: "trunk [4095]" is hvnet's fail-closed dead VLAN


@dataclass(frozen=True)
class Vlan:
    """A VIF's whole VLAN configuration, as OVS applies it.

    ``trunks`` empty in trunk or native modes means "every VLAN" -- hvnet
    writes that only when ``all_vlans`` says so explicitly.
    """

    mode: str  # access | trunk | native-tagged | native-untagged
    tag: int | None = None
    trunks: tuple[int, ...] = ()

    @property
    def trunks_every_vlan(self) -> bool:
        return self.mode != "access" and not self.trunks

    @property
    def is_dead(self) -> bool:
        return self.mode == "trunk" and self.trunks == (DEAD_VLAN,)

    def describe(self) -> str:
        if self.is_dead:
            return f"dead VLAN {DEAD_VLAN} (isolated)"
        if self.mode == "access":
            return f"access tag {self.tag}" if self.tag is not None else "access untagged"
        trunks = format_vlan_list(list(self.trunks)) if self.trunks else "ALL"
        if self.mode == "trunk":
            return f"trunk {trunks}"
        return f"{self.mode} tag {self.tag} trunks {trunks}"


@dataclass(frozen=True)
class VlanCols:
    """A Port's VLAN columns exactly as stored."""

    vlan_mode: str | None = None
    tag: int | None = None
    trunks: tuple[int, ...] = ()

    def effective(self) -> Vlan:
        mode = self.mode
        # OVS ignores the tag of a trunk port and the trunks of an access port.
        tag = None if mode == "trunk" else self.tag
        if mode == "access" and tag is None:
            tag = 0  # OVS treats an untagged access port as VLAN 0
        trunks = () if mode == "access" else tuple(sorted(self.trunks))
        return Vlan(mode, tag, trunks)

    @staticmethod
    def of(vlan: Vlan) -> VlanCols:
        return VlanCols(vlan.mode, vlan.tag, tuple(vlan.trunks))

    @property
    def mode(self) -> str:
        """The mode OVS applies (an empty ``vlan_mode`` decided by the tag)."""
        return self.vlan_mode or ("access" if self.tag is not None else "trunk")

    @property
    def every_vlan(self) -> bool:
        """True when the port carries every VLAN: a trunk or native port with no trunks list.
        On a VM's VIF this is the fail-open state an accidentally cleared tag produces."""
        return self.effective().trunks_every_vlan
