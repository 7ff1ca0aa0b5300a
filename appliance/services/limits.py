"""What limits and samples a switch's traffic, read: ``hvnet vif show``, ``qos show``, ``sflow show``,
``ipfix show``.

Views of the one inventory read (:func:`appliance.switch.api.read_inventory_once`, what ``hvnet
status`` shows): no second reader of OVSDB.  A VIF's limits are given in bits (hvnet's unit, OVS's)
and, beside them, in the units the operator's other tools take for the same limit -- XenServer's
``qos_algorithm_params:kbps`` and libvirt's ``<bandwidth>`` -- computed, since both are bytes where
OVS is bits (see :mod:`appliance.core.units`).

Directions, from the VM's side: *ingress* policing is what the VM may send (xe's ``kbps``, the
only limit xe sets; libvirt's ``<outbound>``), *egress* shaping what it may receive (libvirt's
``<inbound>``; xe has none).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from appliance.core import units
from appliance.core.errors import UsageError
from appliance.switch.inventory import SAMPLING_KEY

if TYPE_CHECKING:
    from appliance.switch.host import Host
    from appliance.switch.inventory import BridgeInfo, Inventory, Vif

OVS_DEFAULT_POLICING_BURST_KBIT = 8000  # what ovs-vswitchd uses for ingress_policing_burst 0 (tc police)
SAMPLING_KINDS = ("sflow", "ipfix")


def read(host: Host, *, timeout: float = 5.0) -> Inventory:
    """The switch's inventory from one consistent read (the one ``hvnet status`` makes)."""
    from appliance.switch.api import read_inventory_once

    return read_inventory_once(host, timeout=timeout)


# -- a VIF's limits -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Limits:
    """One VIF's ingress policing and egress shaping as the switch holds them (kbit, OVS's unit)."""

    bridge: str
    port: str
    alias_ports: tuple[str, ...]
    vm: str | None
    mac: str | None
    vlan: str
    ingress_rate_kbit: int | None  # None: not policed
    ingress_burst_kbit: int | None
    ingress_burst_is_default: bool  # tc police with burst 0: ovs-vswitchd's 8000 kbit
    ingress_mechanism: str | None  # "tc" or "meter"
    egress_qos_type: str | None  # the port's QoS type, None when it has none
    egress_rate_kbit: float | None  # linux-htb max-rate / 1000
    egress_burst_bits: int | None

    @property
    def limited(self) -> bool:
        return self.ingress_rate_kbit is not None or self.egress_qos_type is not None

    def equivalents(self) -> dict[str, Any]:
        """The same limits as XenServer and libvirt take them (their attribute names, their units)."""
        out: dict[str, Any] = {"xe": None, "libvirt": None}
        libvirt: dict[str, Any] = {}
        if self.ingress_rate_kbit is not None:
            out["xe"] = {"qos_algorithm_type": "ratelimit",
                         "qos_algorithm_params:kbps": units.xe_kbps(self.ingress_rate_kbit)}  # fmt: skip
            libvirt["outbound"] = {"average": units.libvirt_average(self.ingress_rate_kbit)}
            if self.ingress_burst_kbit:  # unknown (a meter's, unset): no burst, never a 0 libvirt would take
                libvirt["outbound"]["burst"] = units.libvirt_burst(self.ingress_burst_kbit)
        if self.egress_rate_kbit is not None:
            libvirt["inbound"] = {"average": units.libvirt_average(round(self.egress_rate_kbit))}
            if self.egress_burst_bits:
                libvirt["inbound"]["burst"] = units.libvirt_burst(self.egress_burst_bits / 1000)
        out["libvirt"] = libvirt or None
        return out

    def to_json(self) -> dict[str, Any]:
        ingress = None
        if self.ingress_rate_kbit is not None:
            burst = None if self.ingress_burst_kbit is None else self.ingress_burst_kbit * 1000
            ingress = {
                "rate_bits_per_s": self.ingress_rate_kbit * 1000, "burst_bits": burst,
                "burst_is_ovs_default": self.ingress_burst_is_default, "mechanism": self.ingress_mechanism,
            }  # fmt: skip
        egress = None
        if self.egress_qos_type is not None:
            rate = None if self.egress_rate_kbit is None else round(self.egress_rate_kbit * 1000)
            egress = {"qos_type": self.egress_qos_type, "rate_bits_per_s": rate, "burst_bits": self.egress_burst_bits}
        return {"bridge": self.bridge, "port": self.port, "alias_ports": list(self.alias_ports), "vm": self.vm,
                "mac": self.mac, "vlan": self.vlan, "ingress": ingress, "egress": egress,
                "equivalents": self.equivalents()}  # fmt: skip


def limits_of(v: Vif) -> Limits:
    rate = v.ingress_policing_rate_kbps or None
    burst = v.ingress_policing_burst_kbit or None
    default = rate is not None and burst is None and v.ingress_mechanism == "tc"
    return Limits(
        bridge=v.bridge, port=v.port, alias_ports=tuple(v.alias_ports), vm=v.vm_name, mac=v.mac,
        vlan=v.vlan_summary(), ingress_rate_kbit=rate,
        ingress_burst_kbit=OVS_DEFAULT_POLICING_BURST_KBIT if default else burst,
        ingress_burst_is_default=default, ingress_mechanism=v.ingress_mechanism if rate else None,
        egress_qos_type=v.egress_qos_type, egress_rate_kbit=v.egress_max_rate_kbps,
        egress_burst_bits=v.egress_burst_bits,
    )  # fmt: skip


def select_vifs(inv: Inventory, selector: str) -> list[Vif]:
    """The VIFs ``selector`` names, as ``hvnet vif set`` takes it: a port (or its alias, ``tap1.0``),
    ``vm:NAME`` (every VIF of that VM) or ``mac:MAC``; :class:`UsageError` when it names none."""
    kind, _, rest = selector.partition(":")
    vifs = [v for v in inv.vifs if v.is_vif]
    if kind == "vm" and rest:
        found = [v for v in vifs if rest in (v.vm_name, v.vm_uuid)]
    elif kind == "mac" and rest:
        found = [v for v in vifs if (v.mac or "").lower() == rest.lower()]
    else:
        found = [v for v in inv.vifs if selector == v.port or selector in v.alias_ports]
    if not found:
        raise UsageError(f"no VIF {selector!r} on this switch", hint="'hvnet status' lists the VIFs (port, vm:NAME, "
                         "mac:MAC)")  # fmt: skip
    return found


def qos_view(inv: Inventory, selector: str | None = None) -> list[Limits]:
    """Every VIF's limits (those with none too), or those of the VIFs ``selector`` names."""
    vifs = select_vifs(inv, selector) if selector else [v for v in inv.vifs if v.is_vif]
    return [limits_of(v) for v in vifs]


def vif_view(inv: Inventory, selector: str) -> tuple[Vif, Limits]:
    """The one VIF ``selector`` names, and its limits; a VM with several VIFs asks for one of them."""
    found = select_vifs(inv, selector)
    if len(found) > 1:
        raise UsageError(f"{selector} has {len(found)} VIFs: {', '.join(v.port for v in found)}",
                         hint="name one by its port")  # fmt: skip
    return found[0], limits_of(found[0])


# -- a bridge's sampling --------------------------------------------------------------------------

# The settings of each kind, as the policy file names them, and the key --json gives each: the keys
# 'hvnet status --json' gives the same settings (its unit in the name where it has one; sampling is 1 in N)
_SAMPLING_KEYS = {
    "sflow": ("targets", "sampling", "polling", "header", "agent"),
    "ipfix": ("targets", "sampling", "obs_domain_id", "obs_point_id", "cache_active_timeout", "cache_max_flows"),
}
SAMPLING_JSON_KEYS = {kind: {k: SAMPLING_KEY.get(k, k) for k in keys} for kind, keys in _SAMPLING_KEYS.items()}


@dataclass(frozen=True)
class Sampling:
    """One bridge's sFlow or IPFIX settings as stored (None: unset, OVS's default applies), or none."""

    bridge: str
    kind: str
    settings: dict[str, Any] | None  # the policy file's keys; None: the bridge has no such row
    owner: str | None
    text: str  # the one line hvnet status prints, defaults spelled out

    def to_json(self) -> dict[str, Any]:
        keys = SAMPLING_JSON_KEYS[self.kind]
        settings = None if self.settings is None else {keys[k]: self.settings.get(k) for k in keys}
        return {"bridge": self.bridge, "kind": self.kind, "configured": self.settings is not None,
                "owner": self.owner, "settings": settings, "text": self.text}  # fmt: skip


def sampling_view(inv: Inventory, kind: str, bridge: str | None = None) -> list[Sampling]:
    """Each bridge's ``kind`` (sflow, ipfix) settings, or ``bridge``'s; :class:`UsageError` for no such bridge."""
    if kind not in SAMPLING_KINDS:
        raise ValueError(kind)
    bridges = [b for b in inv.bridges if bridge is None or b.name == bridge]
    if bridge is not None and not bridges:
        raise UsageError(f"no bridge named {bridge!r}",
                         hint=f"bridges: {', '.join(b.name for b in inv.bridges) or 'none'}")  # fmt: skip
    return [_sampling(b, kind) for b in bridges]


def _sampling(b: BridgeInfo, kind: str) -> Sampling:
    value = getattr(b, kind)
    if value is None:
        return Sampling(b.name, kind, None, None, f"no {'sFlow' if kind == 'sflow' else 'IPFIX'}")
    settings = {k: v for k, v in value.items() if k not in ("owner", "text")}
    return Sampling(b.name, kind, settings, value.get("owner"), value["text"])
