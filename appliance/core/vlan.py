"""The one VLAN rule and its grammar: how OVS reads a Port's VLAN columns, and how hvnet reads a VLAN.

ovs-vswitchd.conf.db(5): an empty ``vlan_mode`` means access when a tag is
set and trunk otherwise; a trunk or native port with an empty ``trunks`` list
carries every VLAN; OVS ignores the tag of a trunk port and the trunks of an
access port.  The planner, the display, the export and the isolation model all
read VLANs through :meth:`VlanCols.effective`, so they cannot disagree.

The grammar lives beside the value it defines: a tag (:func:`vlan_id`), a
trunk list (:func:`vlan_list`), a mode, and a whole :class:`Vlan` from its
three fields (:func:`vlan_from_fields`, or :func:`vlan_change` for a partial
edit).  A policy file, ``hvnet vif set`` and the console's Edit VIF form all
build their VLAN here, so the same input is refused with the same words
wherever it is typed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from appliance.core.validate import FieldError

VLAN_MIN, VLAN_MAX = 0, 4094
VLAN_MODES = ("access", "trunk", "native-tagged", "native-untagged")
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


DEAD = Vlan("trunk", None, (DEAD_VLAN,))  # where a VIF goes when its VLAN is removed or cannot be set


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


# -- the grammar ---------------------------------------------------------------------


def vlan_id(value: Any) -> int:
    """A VLAN id a port may be tagged with (0..4094)."""
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"VLAN tag must be an integer {VLAN_MIN}..{VLAN_MAX}, not {value!r}")
    if value == 4095:
        raise ValueError("VLAN 4095 is reserved (hvnet uses it only as the fail-closed dead VLAN); allowed: 0..4094")
    if not VLAN_MIN <= value <= VLAN_MAX:
        raise ValueError(f"VLAN tag {value} is outside {VLAN_MIN}..{VLAN_MAX}")
    return value


def vlan_list(value: Any) -> list[int]:
    """Trunk lists: a YAML list of ids, or a string like ``"10,20-30"``."""
    items: list[Any]
    if isinstance(value, int) and not isinstance(value, bool):
        items = [value]
    elif isinstance(value, list):
        items = value
    elif isinstance(value, str):
        items = []
        for part in value.replace(" ", "").split(","):
            if not part:
                raise ValueError(f"empty element in VLAN list {value!r}; write e.g. 10,20-30")
            m = re.fullmatch(r"(\d+)(?:-(\d+))?", part)
            if not m:
                raise ValueError(f"malformed VLAN range {part!r} in {value!r}; write e.g. 10,20-30")
            lo, hi = int(m.group(1)), int(m.group(2) or m.group(1))
            if hi < lo:
                raise ValueError(f"VLAN range {part!r} runs backwards")
            if hi - lo > VLAN_MAX:
                raise ValueError(f"VLAN range {part!r} is too large")
            items.extend(range(lo, hi + 1))
    else:
        raise ValueError(f"VLAN list must be a list of ids or a string like '10,20-30', not {value!r}")
    return sorted({vlan_id(v) for v in items})


def format_vlan_list(vlans: list[int]) -> str:
    """``[10, 20, 21, 22]`` -> ``"10,20-22"`` (the inverse of :func:`vlan_list`)."""
    out: list[str] = []
    vs = sorted(set(vlans))
    i = 0
    while i < len(vs):
        j = i
        while j + 1 < len(vs) and vs[j + 1] == vs[j] + 1:
            j += 1
        out.append(str(vs[i]) if i == j else f"{vs[i]}-{vs[j]}")
        i = j + 1
    return ",".join(out)


def vlan_mode(value: Any) -> str:
    if value not in VLAN_MODES:
        raise ValueError(f"invalid VLAN mode {value!r}; allowed: {', '.join(VLAN_MODES)}")
    return str(value)


def vlan_from_fields(mode: Any, tag: Any, trunks: Any) -> Vlan:
    """A whole VLAN setting from its three fields, or :class:`FieldError` naming the bad one."""
    if mode is None:
        mode = _implied_mode(tag, trunks)
    try:
        mode = vlan_mode(mode)
    except ValueError as exc:
        raise FieldError("mode", str(exc)) from None
    return Vlan(mode, _vlan_tag(mode, tag), _vlan_trunks(mode, trunks))


def _implied_mode(tag: Any, trunks: Any) -> str:
    """The mode a VLAN given without one means: a tag alone is access, trunks alone a trunk."""
    if tag is not None and trunks is None:
        return "access"
    if trunks is not None and tag is None:
        return "trunk"
    if tag is not None:
        raise FieldError("mode", "tag and trunks together need mode native-tagged or native-untagged")
    raise FieldError("(vlan)", "give tag (access), trunks (trunk) or mode; 'remove' isolates the VIF")


def _vlan_tag(mode: str, tag: Any) -> int | None:
    """The tag (or native VLAN): required by every mode but trunk, refused by trunk."""
    if tag is None:
        if mode != "trunk":
            raise FieldError("tag", f"mode {mode} needs a tag (0..4094)")
        return None
    if mode == "trunk":
        raise FieldError("tag", "a trunk port carries no tag; use native-tagged/native-untagged for a native VLAN")
    try:
        return vlan_id(tag)
    except ValueError as exc:
        raise FieldError("tag", str(exc)) from None


def _vlan_trunks(mode: str, trunks: Any) -> tuple[int, ...]:
    """The trunked VLANs (``()`` is every VLAN, so an empty list must be written ``all``); none on access."""
    if trunks is None:
        if mode != "access":
            raise FieldError("trunks", f"mode {mode} needs trunks: a list like '10,20-30', or 'all' for every VLAN")
        return ()
    if mode == "access":
        raise FieldError("trunks", "an access port has no trunks; use mode trunk or native-*")
    if isinstance(trunks, str) and trunks.strip().lower() == "all":
        return ()
    try:
        trunks_v = tuple(vlan_list(trunks))
    except ValueError as exc:
        raise FieldError("trunks", str(exc)) from None
    if not trunks_v:
        raise FieldError("trunks", "an empty trunk list means every VLAN in OVS; write 'all' if you mean it")
    return trunks_v


def vlan_change(current: Vlan, mode: str | None, tag: Any, trunks: Any) -> Vlan:
    """The VLAN a partial edit asks for: unspecified fields keep their value.

    Giving a tag to a trunk port makes it an access port, giving trunks to an
    access port makes it a trunk (what an operator typing ``--tag 5`` means).
    """
    if mode is None:
        mode = current.mode
        if tag is not None and current.mode == "trunk":
            mode = "access"
        elif trunks is not None and current.mode == "access":
            mode = "trunk"
    if tag is None and mode != "trunk":
        tag = current.tag
    if trunks is None and mode != "access" and current.trunks:
        trunks = ",".join(str(t) for t in current.trunks)
    if trunks is None and mode != "access" and current.mode != "access":
        trunks = "all"  # an existing trunk of every VLAN stays one
    return vlan_from_fields(mode, tag, trunks)
