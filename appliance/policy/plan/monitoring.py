"""Planning what watches a bridge's traffic: mirrors (to a port, an RSPAN VLAN, a tunnel) and sFlow/IPFIX.

Neither touches a VIF's own settings: a mirror copies the traffic of the
ports it selects, a sampling row reports on the whole bridge -- together what
the monitoring-cost measurements put on a switch.  Pure, like the planner,
which imports this module (not the reverse): the planner's selector
resolution is handed in, and each change comes back as the columns the
planner makes a :class:`~.planner.Change` of.
"""

from __future__ import annotations

import zlib
from dataclasses import replace
from typing import Any, Callable, Optional

from appliance.core import ovsfeatures
from appliance.policy.plan.model import (
    MAX_MIRRORS_PER_BRIDGE,
    OWNER,
    OWNER_KEY,
    REMOVE,
    MirrorRule,
    SamplingRule,
    Selector,
    is_owned,
)
from appliance.policy.plan.state import MirrorCols, MirrorState, State, TunnelCols
from appliance.switch import sampling

# (bridge, name, before, after) of one mirror: the planner makes it a Change of kind "mirror".
MirrorChange = tuple[str, str, Any, Any]
# (kind, bridge, before, after, note) of one bridge's sFlow or IPFIX row.
SamplingChange = tuple[str, str, Any, Any, str]
# The planner's selector resolution, handed in (the planner imports this module, not the reverse; its
# options, problems and plan come in untyped here for the same reason, as in tapplan).
Select = Callable[..., list[Any]]


def mirror_changes(
    rules: list[MirrorRule], state: State, opts: Any, problems: Any, result: Any, select: Select
) -> list[MirrorChange]:
    """The mirror changes ``rules`` ask for, removals first (they free slots); the count per bridge checked."""
    counts = {br: len(b.mirrors) for br, b in state.bridges.items()}
    out = []
    for rule in sorted(rules, key=lambda r: not r.remove):
        change = _mirror_change(rule, state, opts, problems, result, counts, select)
        if change is not None:
            out.append(change)
    return out


def sampling_changes(rules: list[SamplingRule], state: State) -> list[SamplingChange]:
    """The sFlow/IPFIX changes ``rules`` ask for, in their order."""
    return [c for c in (_sampling_change(rule, state) for rule in rules) if c is not None]


def tunnel_port_name(bridge: str, mirror: str) -> str:
    """A stable kernel-legal name for a mirror's tunnel port (``mir`` + 8 hex)."""
    return f"mir{zlib.crc32(f'{bridge}/{mirror}'.encode()):08x}"


def describe_mirror(m: MirrorCols) -> str:
    from appliance.core.vlan import format_vlan_list

    sel = []
    if m.select_all:
        sel.append("all ports")
    if m.src:
        sel.append("src " + ",".join(m.src))
    if m.dst:
        sel.append("dst " + ",".join(m.dst))
    if m.vlans:
        sel.append("vlans " + format_vlan_list(list(m.vlans)))
    if m.tunnel is not None:
        out = f"{m.tunnel.type.upper()} to {dict(m.tunnel.options).get('remote_ip')} via {m.tunnel.name}"
    elif m.output_port:
        out = f"port {m.output_port}"
    elif m.output_vlan is not None:
        out = f"RSPAN VLAN {m.output_vlan}"
    else:
        out = "no output"
    extra = (f" snaplen {m.snaplen} B" if m.snaplen else "") + (f" filter {m.filter}" if m.filter else "")
    return f"{' '.join(sel) or 'nothing'} -> {out}{extra}"


def _resolve_ports(
    sels: tuple[Selector, ...], state: State, bridge: str, problems: Any, lenient: bool, select: Select
) -> tuple[str, ...]:
    names: set[str] = set()
    for sel in sels:
        ports = [p for p in select(state, sel, vifs_only=False) if p.bridge == bridge]
        if not ports and not lenient:
            problems.add(sel.path, f"{sel} matches no port on bridge {bridge}")
        names.update(p.name for p in ports)
    return tuple(sorted(names))


def _mirror_change(
    rule: MirrorRule,
    state: State,
    opts: Any,
    problems: Any,
    result: Any,
    counts: dict[str, int],
    select: Select,
) -> MirrorChange | None:
    """The change one mirror rule asks for; ``counts`` (mirrors per bridge) follows the plan's removals and adds."""
    if rule.bridge not in state.bridges:
        return None  # reported once for the bridge
    current = state.mirrors.get((rule.bridge, rule.name))
    if rule.remove:
        if current is None:
            return None
        counts[rule.bridge] -= 1
        return rule.bridge, rule.name, current.cols, None

    src = _resolve_ports(rule.src, state, rule.bridge, problems, opts.lenient, select)
    dst = _resolve_ports(rule.dst, state, rule.bridge, problems, opts.lenient, select)
    if opts.lenient and not (rule.select_all or src or dst or rule.vlans):
        result.warnings.append(f"mirror {rule.name}: none of its selected ports is present; left as it is")
        return None
    output = _mirror_output(rule, state, src, dst, opts, problems, result, select)
    if output is None:
        return None
    _check_mirror_columns(rule, state, problems)
    after = _mirror_cols(rule, current, src, dst, output)
    if current is None:
        counts[rule.bridge] += 1
        if counts[rule.bridge] > MAX_MIRRORS_PER_BRIDGE:
            problems.add(
                rule.path,
                f"this would be mirror number {counts[rule.bridge]} on bridge {rule.bridge}; "
                f"OVS allows at most {MAX_MIRRORS_PER_BRIDGE} per bridge",
            )
            return None
        return rule.bridge, rule.name, None, after
    if current.cols.same_config(after):
        return None
    return rule.bridge, rule.name, current.cols, replace(after, external_ids=current.cols.external_ids)


# Where a mirror's copies go, as Mirror columns: output_port, output_vlan, and the tunnel port hvnet makes.
_Output = tuple[Optional[str], Optional[int], Optional[TunnelCols]]


def _mirror_output(
    rule: MirrorRule,
    state: State,
    src: tuple[str, ...],
    dst: tuple[str, ...],
    opts: Any,
    problems: Any,
    result: Any,
    select: Select,
) -> _Output | None:
    """The output columns, or None when the output port is not there (no change is planned for the mirror)."""
    out = rule.output
    assert out is not None
    if out.kind == "port":
        port = _output_port(rule, state, src, dst, opts, problems, result, select)
        return None if port is None else (port, None, None)
    if out.kind == "vlan":
        result.warnings.append(
            f"mirror {rule.name}: RSPAN VLAN {out.vlan} must be in flood_vlans (MAC learning off) on every "
            "physical switch on the path, or the copies will be learned and dropped"
        )
        return None, out.vlan, None
    if out.kind == "erspan" and (why := ovsfeatures.missing("erspan", state.ovs_version)) is not None:
        problems.add((*rule.path, "output"), f"{why}; use gre, or a port or an RSPAN VLAN")
        return None
    name = tunnel_port_name(rule.bridge, rule.name)
    existing = state.ports.get(name)
    if existing is not None and existing.owner_mirror != rule.name:
        problems.add((*rule.path, "output"), f"port {name} exists and is not this mirror's tunnel")
    return name, None, TunnelCols(name, out.kind, out.tunnel_options())


def _output_port(
    rule: MirrorRule,
    state: State,
    src: tuple[str, ...],
    dst: tuple[str, ...],
    opts: Any,
    problems: Any,
    result: Any,
    select: Select,
) -> str | None:
    """The one port on the bridge receiving the copies: not a selected one, nor a VM's without consent.

    A VM's interface as the output lets that VM see traffic of other VLANs,
    so it takes an explicit isolation exception (the rule's or the option).
    """
    out = rule.output
    assert out is not None and out.port is not None
    ports = [p for p in select(state, out.port, vifs_only=False) if p.bridge == rule.bridge]
    if len(ports) != 1 and opts.lenient:
        result.warnings.append(f"mirror {rule.name}: output port {out.port.pattern} is not present; left as is")
        return None
    if len(ports) != 1:
        problems.add(
            (*rule.path, "output", "port"),
            f"{out.port} must name exactly one port on bridge {rule.bridge} (matches {len(ports)})",
        )
        return None
    target = ports[0]
    if target.name in src or target.name in dst:
        problems.add(
            (*rule.path, "output", "port"),
            f"output port {target.name} is also a selected port; a mirror cannot output to what it selects",
        )
    if target.is_vif and not (rule.allow_isolation_exception or opts.allow_isolation_exception):
        who = f"VM {target.vm_name}'s" if target.vm_name else "a VM's"
        problems.add(
            (*rule.path, "output", "port"),
            f"output port {target.name} is {who} interface: the VM would receive copies of "
            f"{'the selected VLANs' if rule.vlans else 'every VLAN'} (an isolation exception); "
            "set allow_isolation_exception: true (--allow-isolation-exception) if that is intended",
        )
    return target.name


def _check_mirror_columns(rule: MirrorRule, state: State, problems: Any) -> None:
    """A filter or snaplen needs an OVS whose Mirror table has that column."""
    if rule.filter is not None and not state.has_mirror_filter:
        problems.add(
            (*rule.path, "filter"),
            f"this OVS ({state.ovs_version or 'unknown version'}) has no Mirror filter column; remove the filter",
        )
    if rule.snaplen is not None and not state.has_mirror_snaplen:
        why = ovsfeatures.missing("mirror-snaplen", state.ovs_version) or "this OVS has no Mirror snaplen column"
        problems.add((*rule.path, "snaplen"), f"{why}; remove snaplen")


def _mirror_cols(
    rule: MirrorRule, current: MirrorState | None, src: tuple[str, ...], dst: tuple[str, ...], output: _Output
) -> MirrorCols:
    """The Mirror row the rule asks for (a new one is marked as hvnet's)."""
    output_port, output_vlan, tunnel = output
    ext = current.cols.external_ids if current is not None else ((OWNER_KEY, OWNER),)
    # OVS applies select_vlan on top of the port selection: VLANs alone mean
    # "every port, these VLANs", which OVS spells select_all + select_vlan.
    # (With select_all, OVS never mirrors the output port's own traffic.)
    vlan_only = bool(rule.vlans) and not (src or dst or rule.src or rule.dst)
    return MirrorCols(
        select_all=rule.select_all or vlan_only,
        src=src,
        dst=dst,
        vlans=tuple(rule.vlans),
        output_port=output_port,
        output_vlan=output_vlan,
        snaplen=rule.snaplen,
        filter=rule.filter,
        external_ids=ext,
        tunnel=tunnel,
    )


def _sampling_change(rule: SamplingRule, state: State) -> SamplingChange | None:
    """A bridge's sFlow or IPFIX row as the rule asks; a row hvnet did not make is updated in place.

    The new row is marked as hvnet's; an existing row keeps its marks (and an
    IPFIX row its ``other_config``), so that only the settings change.
    """
    bridge = state.bridges.get(rule.bridge)
    if bridge is None:
        return None  # reported once for the bridge (the agent: not there yet)
    current = getattr(bridge, rule.kind)
    title = sampling.TITLES[rule.kind]
    if rule.value is REMOVE:
        if current is None:
            return None
        note = "" if is_owned(current.external_ids) else f"{title} settings not made by hvnet: removed as asked"
        return rule.kind, rule.bridge, current, None, note
    if current is not None and current.same_config(rule.value):
        return None
    if current is None:
        after = replace(rule.value, external_ids=((OWNER_KEY, OWNER),))
        return rule.kind, rule.bridge, None, after, ""
    keep: dict[str, Any] = {"external_ids": current.external_ids}
    if isinstance(current, sampling.IpfixCols):
        keep["other_config"] = current.other_config
    note = "" if is_owned(current.external_ids) else f"changes {title} settings not made by hvnet"
    return rule.kind, rule.bridge, current, replace(rule.value, **keep), note
