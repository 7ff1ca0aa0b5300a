"""Planning and writing TAPs: the rule against the switch's state, then the Bridge record in the transaction.

The refusals are the mirrors' (:func:`.monitoring._output_port`): the output
must be one port on the bridge, not a selected VIF, and a VM's interface
only with the isolation exception.  A TAP's record names its VIFs by port,
so a VIF that goes away simply drops out of the flows at the next sync.
"""

from __future__ import annotations

from typing import Any, Callable

from appliance.core import ovsfeatures
from appliance.policy.plan.model import MAX_TAPS_PER_BRIDGE, TapRule, TunnelCols
from appliance.policy.plan.state import State
from appliance.policy.plan.taps import TapCols, max_taps_message, owner, tunnel_port_name

# (bridge, name, before, after) of one TAP: the planner makes it a Change of kind "tap".
TapChange = tuple[str, str, Any, Any]
# The planner's selector resolution, handed in (the planner imports this module, not the reverse).
Select = Callable[..., list[Any]]


def changes(
    rules: list[TapRule], state: State, opts: Any, problems: Any, result: Any, select: Select
) -> list[TapChange]:
    """The TAP changes ``rules`` ask for, removals first; the count per bridge checked against the pipeline."""
    out: list[TapChange] = []
    counts = {br: len(b.taps) for br, b in state.bridges.items()}
    for rule in sorted(rules, key=lambda r: not r.remove):
        change = _change(rule, state, opts, problems, result, select)
        if change is None:
            continue
        if change[2] is None and change[3] is not None:
            counts[rule.bridge] += 1
            if counts[rule.bridge] > MAX_TAPS_PER_BRIDGE:
                problems.add(rule.path, max_taps_message(rule.bridge, counts[rule.bridge]))
                continue
        elif change[3] is None:
            counts[rule.bridge] -= 1
        out.append(change)
    return out


def _change(rule: TapRule, state: State, opts: Any, problems: Any, result: Any, select: Select) -> TapChange | None:
    bridge = state.bridges.get(rule.bridge)
    if bridge is None:
        return None  # reported once for the bridge
    current = bridge.taps.get(rule.name)
    if rule.remove:
        return (rule.bridge, rule.name, current, None) if current is not None else None
    needs = ["ofctl-bundle", "ofctl-names"] + (["erspan"] if rule.output and rule.output.kind == "erspan" else [])
    if (why := ovsfeatures.first_missing(needs, state.ovs_version)) is not None:
        problems.add(rule.path, f"TAP {rule.name}: {why}")
        return None
    vifs = _vifs(rule, state, opts, problems, select)
    if not vifs:
        if opts.lenient:
            result.warnings.append(f"TAP {rule.name}: none of its VIFs is present; left as it is")
        return None
    output = _output(rule, state, vifs, opts, problems, result, select)
    if output is None:
        return None
    port, tunnel = output
    if rule.match.vlan is not None:
        _check_vlan(rule, state, vifs, result)
    after = TapCols(rule.match, vifs, rule.direction, port, rule.method, tunnel)
    if current == after:
        return None
    return (rule.bridge, rule.name, current, after)


def _vifs(rule: TapRule, state: State, opts: Any, problems: Any, select: Select) -> tuple[str, ...]:
    names: set[str] = set()
    for sel in rule.vifs:
        ports = [p for p in select(state, sel, vifs_only=True) if p.bridge == rule.bridge]
        if not ports and not opts.lenient:
            problems.add(sel.path, f"{sel} matches no VIF on bridge {rule.bridge}")
        names.update(p.name for p in ports)
    return tuple(sorted(names))


def _output(
    rule: TapRule, state: State, vifs: tuple[str, ...], opts: Any, problems: Any, result: Any, select: Select
) -> tuple[str, TunnelCols | None] | None:
    """The output port (a tunnel port hvnet creates for GRE/ERSPAN), refused as a mirror's would be."""
    out = rule.output
    assert out is not None
    if out.kind == "port":
        port = _output_port(rule, state, vifs, opts, problems, result, select)
        return None if port is None else (port, None)
    name = tunnel_port_name(rule.bridge, rule.name)
    existing = state.ports.get(name)
    if existing is not None and existing.owner_mirror != owner(rule.name):
        problems.add((*rule.path, "output"), f"port {name} exists and is not this TAP's tunnel")
    return name, TunnelCols(name, out.kind, out.tunnel_options())


def _output_port(
    rule: TapRule, state: State, vifs: tuple[str, ...], opts: Any, problems: Any, result: Any, select: Select
) -> str | None:
    """One port on the bridge, not a selected VIF, and a VM's interface only with the isolation exception."""
    out = rule.output
    assert out is not None and out.port is not None
    path = (*rule.path, "output", "port")
    ports = [p for p in select(state, out.port, vifs_only=False) if p.bridge == rule.bridge]
    if len(ports) != 1:
        if opts.lenient:
            result.warnings.append(f"TAP {rule.name}: output port {out.port.pattern} is not present; left as is")
        else:
            problems.add(path, f"{out.port} must name exactly one port on bridge {rule.bridge} (matches {len(ports)})")
        return None
    target = ports[0]
    if target.name in vifs:
        problems.add(path, f"output port {target.name} is also a selected VIF; a TAP cannot output to what it taps")
    if target.is_vif and not (rule.allow_isolation_exception or opts.allow_isolation_exception):
        who = f"VM {target.vm_name}'s" if target.vm_name else "a VM's"
        problems.add(
            path,
            f"output port {target.name} is {who} interface: the VM would receive copies of other VMs' traffic "
            "(an isolation exception); set allow_isolation_exception: true (--allow-isolation-exception) "
            "if that is intended",
        )
    return target.name


def _check_vlan(rule: TapRule, state: State, vifs: tuple[str, ...], result: Any) -> None:
    """A VLAN match on access ports of other VLANs can never match: said, not silently empty."""
    other = [n for n in vifs if state.ports[n].vlan.effective().mode == "access"
             and state.ports[n].vlan.effective().tag != rule.match.vlan]  # fmt: skip
    if other:
        result.warnings.append(
            f"TAP {rule.name}: {', '.join(other)} are access ports of another VLAN than {rule.match.vlan}; "
            "nothing of theirs matches"
        )
