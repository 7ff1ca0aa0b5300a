"""``hvnet export``: the switch's current VIF, mirror, sFlow and IPFIX settings as a policy file.

The output round-trips: applying it to the same switch plans nothing.  VIFs
are selected by the VM's MAC where the hypervisor recorded a unique one
(stable across reboots and Xen domid changes), else by port name.
"""

from __future__ import annotations

from typing import Any

import yaml

from appliance.core.vlan import format_vlan_list
from appliance.policy.plan.state import MirrorCols, PortState, State


def _vlan(p: PortState) -> Any:
    v = p.vlan.effective()
    if v.is_dead:
        return "remove"  # what isolates a VIF in the dead VLAN (4095 cannot be asked for directly)
    out: dict[str, Any] = {"mode": v.mode}
    if v.tag is not None:
        out["tag"] = v.tag
    if v.mode != "access":
        out["trunks"] = format_vlan_list(list(v.trunks)) if v.trunks else "all"
    return out


def _selector(p: PortState, mac_counts: dict[str, int], by: str) -> dict[str, str]:
    if by == "mac" and p.mac and p.mac != "fe:ff:ff:ff:ff:ff" and mac_counts.get(p.mac) == 1:
        return {"mac": p.mac}
    return {"port": p.name}


def to_policy(state: State, *, by: str = "mac") -> dict[str, Any]:
    """The policy document (plain data) describing ``state``."""
    vifs = sorted(state.vifs(), key=lambda p: (p.bridge, p.name))
    mac_counts: dict[str, int] = {}
    for p in state.ports.values():
        if p.mac:
            mac_counts[p.mac] = mac_counts.get(p.mac, 0) + 1
    rules = []
    for p in vifs:
        rule: dict[str, Any] = _selector(p, mac_counts, by)
        rule["vlan"] = _vlan(p)
        police = p.police.effective()
        if police is not None:
            rule["ingress"] = {"rate": police.rate_kbps, "burst": police.burst_kbit, "mechanism": police.mechanism}
        if p.qos is not None:
            eff = p.qos.effective()
            if eff is not None:
                rule["egress"] = {"rate": eff.rate_kbps, **({"burst": eff.burst_kbit} if eff.burst_kbit else {})}
        rules.append(rule)
    bridges: dict[str, Any] = {}
    for (br, name), m in sorted(state.mirrors.items()):
        spec = _mirror(m.cols, state)
        if spec is not None:
            bridges.setdefault(br, {}).setdefault("mirrors", {})[name] = spec
    for br, b in sorted(state.bridges.items()):
        for name, tap in sorted(b.taps.items()):
            bridges.setdefault(br, {}).setdefault("taps", {})[name] = _tap(tap, state)
        for kind in ("sflow", "ipfix"):
            value = getattr(b, kind)
            if value is not None:
                bridges.setdefault(br, {})[kind] = value.fields()
    doc: dict[str, Any] = {"version": 1, "vifs": rules}
    if bridges:
        doc["bridges"] = bridges
    return doc


def _mirror(m: MirrorCols, state: State) -> dict[str, Any] | None:
    spec: dict[str, Any] = {}
    if m.select_all:
        spec["select"] = {"all": True, "vlans": format_vlan_list(list(m.vlans))} if m.vlans else "all"
    else:
        sel: dict[str, Any] = {}
        if m.src:
            sel["src"] = list(m.src)
        if m.dst:
            sel["dst"] = list(m.dst)
        if m.vlans:
            sel["vlans"] = format_vlan_list(list(m.vlans))
        if not sel:
            return None
        spec["select"] = sel
    if m.tunnel is not None:
        opts = dict(m.tunnel.options)
        out: dict[str, Any] = {m.tunnel.type: opts.get("remote_ip")}
        if "key" in opts:
            out["key"] = int(opts["key"])
        if m.tunnel.type == "erspan" and opts.get("erspan_idx", "1") != "1":
            out["idx"] = int(opts["erspan_idx"])
        spec["output"] = out
    elif m.output_port:
        spec["output"] = {"port": m.output_port}
        target = state.ports.get(m.output_port)
        if target is not None and target.is_vif:
            spec["allow_isolation_exception"] = True
    elif m.output_vlan is not None:
        spec["output"] = {"vlan": m.output_vlan}
    else:
        return None
    if m.snaplen:
        spec["snaplen"] = m.snaplen
    if m.filter:
        spec["filter"] = m.filter
    return spec


def _tap(tap: Any, state: State) -> dict[str, Any]:
    """A TAP's record as the policy file writes it (VIFs by port name, as recorded)."""
    spec: dict[str, Any] = {}
    if tap.match.items():
        spec["match"] = dict(tap.match.items())
    spec["vifs"] = [f"port:{n}" for n in tap.vifs]
    spec["direction"] = tap.direction
    spec["method"] = tap.method
    if tap.tunnel is not None:
        opts = dict(tap.tunnel.options)
        out: dict[str, Any] = {tap.tunnel.type: opts.get("remote_ip")}
        if "key" in opts:
            out["key"] = int(opts["key"])
        if tap.tunnel.type == "erspan" and opts.get("erspan_idx", "1") != "1":
            out["idx"] = int(opts["erspan_idx"])
        spec["output"] = out
    else:
        spec["output"] = {"port": tap.output_port}
        target = state.ports.get(tap.output_port)
        if target is not None and target.is_vif:
            spec["allow_isolation_exception"] = True
    return spec


def to_yaml(state: State, *, by: str = "mac", header: str = "") -> str:
    doc = to_policy(state, by=by)
    names = {p.name: p.vm_name for p in state.ports.values() if p.vm_name}
    text = yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=100)
    # Say which VM each port belongs to (the selectors may be MACs).
    comment = "".join(f"#   {port}: {vm}\n" for port, vm in sorted(names.items()))
    return header + ("# VMs on this switch:\n" + comment if comment else "") + text
