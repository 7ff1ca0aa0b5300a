"""Planning: desired state (a :class:`~.model.Policy`) against current state (a :class:`~.state.State`).

A pure function.  It resolves selectors, refuses what must not be done
(problems carry ``file:line: field``), and returns the list of changes with
their before and after values as stored columns.  The same plan drives
``hvnet plan`` (printed), ``apply`` (written in one transaction), ``verify``
(any change is drift) and rollback (each change inverted).
"""

from __future__ import annotations

import zlib
from dataclasses import dataclass, field, replace
from typing import Any, Optional

from appliance.core.errors import ConfigError, Problem
from appliance.core.vlan import DEAD, Vlan, VlanCols
from appliance.core.yamldoc import dotted
from appliance.policy.plan import tapplan
from appliance.policy.plan.fields import parse_selector
from appliance.policy.plan.model import (
    MAX_MIRRORS_PER_BRIDGE,
    OWNER,
    OWNER_KEY,
    REMOVE,
    Egress,
    Ingress,
    MirrorRule,
    Policy,
    SamplingRule,
    Selector,
    is_owned,
)
from appliance.policy.plan.state import (
    MirrorCols,
    MirrorState,
    PoliceCols,
    PortState,
    QosCols,
    QueueCols,
    State,
    TunnelCols,
)
from appliance.switch import sampling

KINDS = ("vlan", "ingress", "egress", "mirror", "protocols", "sflow", "ipfix", "tap")


@dataclass(frozen=True)
class Change:
    """One setting of one row going from ``before`` to ``after`` (stored-column values)."""

    kind: str  # one of KINDS
    bridge: str
    name: str  # port name (vlan/ingress/egress), mirror name, or bridge name (protocols)
    before: Any
    after: Any
    vm: str | None = None
    note: str = ""

    def inverse(self) -> Change:
        return Change(self.kind, self.bridge, self.name, self.after, self.before, self.vm)

    @property
    def target(self) -> str:
        if self.kind == "mirror":
            return f"mirror {self.name} on {self.bridge}"
        if self.kind == "tap":
            return f"TAP {self.name} on {self.bridge}"
        if self.kind in ("protocols", *sampling.KINDS):
            return f"bridge {self.name}"
        return f"{self.name}" + (f" ({self.vm})" if self.vm else "")

    def describe(self, value: Any) -> str:
        return describe(self.kind, value)


def describe(kind: str, value: Any) -> str:
    """Human text for a stored value, units included."""
    if kind == "vlan":
        return value.effective().describe() if value is not None else "-"
    if kind == "ingress":
        eff = value.effective() if value is not None else None
        return f"{eff.describe()} ({eff.mechanism})" if eff else "none"
    if kind == "egress":
        if value is None:
            return "none"
        eff = value.effective()
        owner = "" if value.owned else ", not hvnet's"
        return f"{eff.describe()}{owner}" if eff else f"QoS {value.type}{owner}"
    if kind == "mirror":
        if value is None:
            return "absent"
        return describe_mirror(value)
    if kind == "protocols":
        return ",".join(value) if value else "(default)"
    if kind == "tap":
        return "absent" if value is None else value.describe()
    if kind in sampling.KINDS:
        mine = value is None or is_owned(value.external_ids)
        return sampling.describe(value, kind) + ("" if mine else ", not hvnet's")
    return str(value)


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


@dataclass
class PlanOptions:
    """Facts about the host the planner needs but must not go and find out itself."""

    tc_police: bool = False  # the kernel's tc police action works (probed)
    openflow: bool = True  # hvnet can reach ovs-vswitchd's OpenFlow management sockets
    allow_isolation_exception: bool = False
    # The agent's mode: VIFs come and go, so a selector matching nothing is not
    # an error, and a VIF two rules disagree about is isolated, not refused.
    lenient: bool = False
    # One of several hosts given the same policy (--hosts): a VM runs on one host of the pool, so a
    # VIF rule matching nothing here is not an error; whether it matches on some host is checked across them.
    pool: bool = False


@dataclass
class Plan:
    changes: list[Change] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    matched: dict[str, list[str]] = field(default_factory=dict)  # rule field -> ports
    dead: dict[str, str] = field(default_factory=dict)  # port -> why it is isolated

    @property
    def empty(self) -> bool:
        return not self.changes

    def bridges(self) -> set[str]:
        return {c.bridge for c in self.changes}


def tunnel_port_name(bridge: str, mirror: str) -> str:
    """A stable kernel-legal name for a mirror's tunnel port (``mir`` + 8 hex)."""
    return f"mir{zlib.crc32(f'{bridge}/{mirror}'.encode()):08x}"


def owned_qos(egress: Egress) -> QosCols:
    """The QoS row (linux-htb, one queue) hvnet writes for an egress cap; rates in bit/s."""
    rate_bps = str(egress.rate_kbps * 1000)
    q_config = {"max-rate": rate_bps}
    if egress.burst_kbit:
        q_config["burst"] = str(egress.burst_kbit * 1000)
    owner = ((OWNER_KEY, OWNER),)
    return QosCols(
        "linux-htb",
        (("max-rate", rate_bps),),
        owner,
        (QueueCols(0, tuple(sorted(q_config.items())), owner, None),),
    )


class _Problems:
    def __init__(self, policy: Policy) -> None:
        self.policy = policy
        self.items: list[Problem] = []

    def add(self, path: tuple[Any, ...], message: str) -> None:
        problem = Problem(self.policy.source, self.policy.line(path), dotted(path), message)
        if problem not in self.items:
            self.items.append(problem)


class _Index:
    """Exact-value lookups over a state's ports, built once per plan (1000 rules x 1000 ports)."""

    def __init__(self, state: State) -> None:
        self.by: dict[str, dict[str, list[PortState]]] = {k: {} for k in Selector.KINDS}
        for p in state.ports.values():
            mac = p.mac.lower() if p.mac else None
            for kind, value in (("vm", p.vm_name), ("vm_uuid", p.vm_uuid), ("mac", mac), ("port", p.name)):
                if value is not None:
                    self.by[kind].setdefault(value, []).append(p)


def select(state: State, sel: Selector, *, vifs_only: bool, index: _Index | None = None) -> list[PortState]:
    """The ports ``sel`` picks, in name order."""
    if index is not None and not sel.is_glob:
        found = index.by[sel.kind].get(sel.pattern, [])
        return sorted((p for p in found if p.is_vif or not vifs_only or sel.kind == "port"), key=lambda p: p.name)
    out = []
    for p in state.ports.values():
        if vifs_only and not p.is_vif and (sel.kind != "port" or sel.is_glob):
            continue
        value = {"vm": p.vm_name, "vm_uuid": p.vm_uuid, "mac": p.mac, "port": p.name}[sel.kind]
        if sel.matches(value):
            out.append(p)
    return sorted(out, key=lambda p: p.name)


def require_one(state: State, text: str, what: str) -> str:
    """Resolve a CLI VIF argument (``vif1.0``, ``vm:VM3``, ``mac:...``) to exactly one port."""
    try:
        kind, pattern = parse_selector(text)
    except ValueError as exc:
        raise ConfigError([Problem("command line", None, what, str(exc))]) from None
    ports = select(state, Selector(kind, pattern), vifs_only=True)
    if len(ports) != 1:
        listing = ", ".join(p.name for p in ports[:6])
        raise ConfigError(
            [
                Problem(
                    "command line",
                    None,
                    what,
                    f"{kind} {pattern} matches {len(ports)} VIFs{': ' + listing if listing else ''}; "
                    "this command needs exactly one",
                )
            ]
        )
    return ports[0].name


def _nothing_matched(state: State, sel: Selector) -> str:
    known = sorted({p.vm_name for p in state.vifs() if p.vm_name}) if sel.kind == "vm" else []
    if sel.kind == "port":
        known = sorted(p.name for p in state.vifs())
    hint = f" (known: {', '.join(known[:8])}{', ...' if len(known) > 8 else ''})" if known else ""
    return f"{sel} matches no VIF on this switch{hint}; mark the rule 'optional: true' if that is expected"


def plan(policy: Policy, state: State, options: PlanOptions | None = None) -> Plan:
    """Compute the changes that make ``state`` satisfy ``policy`` (raises ConfigError)."""
    opts = options or PlanOptions()
    problems = _Problems(policy)
    result = Plan()

    for br, path in policy.bridges.items():
        if br not in state.bridges and not opts.lenient:
            problems.add(path, f"bridge {br} does not exist (bridges: {', '.join(sorted(state.bridges)) or 'none'})")
    wanted, conflicted = _wanted(policy, state, opts, problems, result)
    protocols_needed = _vif_changes(wanted, conflicted, state, opts, problems, result)
    counts = {br: len(b.mirrors) for br, b in state.bridges.items()}
    for rule in sorted(policy.mirrors, key=lambda r: not r.remove):  # removals free slots first
        change = _mirror_change(rule, state, opts, problems, result, counts)
        if change is not None:
            result.changes.append(change)
    taps = [Change("tap", *c) for c in tapplan.changes(policy.taps, state, opts, problems, result, select)]
    result.changes += taps
    protocols_needed |= {c.bridge for c in taps if c.after is not None}
    result.changes += _protocol_changes(protocols_needed, state)
    for srule in policy.sampling:
        change = _sampling_change(srule, state)
        if change is not None:
            result.changes.append(change)

    if problems.items:
        raise ConfigError(problems.items)
    return result


# Per port name, per kind (vlan/ingress/egress): the value wanted and the policy field asking for it.
_Wanted = dict[str, dict[str, tuple[Any, tuple[Any, ...]]]]


def _wanted(
    policy: Policy, state: State, opts: PlanOptions, problems: _Problems, result: Plan
) -> tuple[_Wanted, set[str]]:
    """Resolve every VIF rule to ports and merge them: what each port should have, and the conflicted ports.

    Rules may overlap as long as they agree.  Two rules giving one VIF different
    settings are refused -- except by the agent (lenient), which isolates a VIF
    whose VLAN they disagree about (the conflicted ports) and skips the rest.
    """
    wanted: _Wanted = {}
    conflicted: set[str] = set()
    index = _Index(state)
    for rule in policy.vifs:
        ports = select(state, rule.selector, vifs_only=True, index=index)
        result.matched[dotted(rule.selector.path)] = [p.name for p in ports]
        if not ports:
            if not (rule.selector.optional or opts.lenient or opts.pool):
                problems.add(rule.selector.path, _nothing_matched(state, rule.selector))
            continue
        for p in ports:
            slots = wanted.setdefault(p.name, {})
            for kind in ("vlan", "ingress", "egress"):
                value = getattr(rule, kind)
                if value is None:
                    continue
                if kind in slots and slots[kind][0] != value:
                    other = slots[kind][1]
                    if opts.lenient:
                        if kind == "vlan":
                            slots[kind] = (REMOVE, (*rule.path, kind))
                            conflicted.add(p.name)
                        continue
                    problems.add(
                        (*rule.path, kind),
                        f"conflicts with {dotted(other)} (line {policy.line(other)}) for {p.name}: "
                        "two rules give this VIF different settings",
                    )
                    continue
                slots[kind] = (value, (*rule.path, kind))
    return wanted, conflicted


def _vif_changes(
    wanted: _Wanted, conflicted: set[str], state: State, opts: PlanOptions, problems: _Problems, result: Plan
) -> set[str]:
    """Append each port's VLAN/ingress/egress changes; return the bridges whose meters need OpenFlow 1.3."""
    protocols_needed: set[str] = set()
    for name in sorted(wanted):
        port = state.ports[name]
        for kind, (value, path) in wanted[name].items():
            change = _vif_change(kind, value, port, path, opts, problems, result)
            if name in conflicted and kind == "vlan":
                result.dead[name] = "two policy rules give this VIF different VLANs: isolated in dead VLAN 4095"
                if change is not None:
                    change = replace(change, note=result.dead[name])
            if change is not None:
                result.changes.append(change)
            if kind == "ingress" and isinstance(value, Ingress):
                mech = value.mechanism if value.mechanism != "auto" else ("tc" if opts.tc_police else "meter")
                if mech == "meter":
                    protocols_needed.add(port.bridge)
    return protocols_needed


def _protocol_changes(protocols_needed: set[str], state: State) -> list[Change]:
    """OpenFlow13 added to bridges whose meters or TAPs need it but whose protocols leave it out.

    Meters need OpenFlow 1.3, and so do the bundles hvnet installs its pipeline with (OVS carries
    OpenFlow 1.4's bundles in 1.3 as the ONF extension).
    """
    changes = []
    for br in sorted(protocols_needed):
        b = state.bridges[br]
        if b.protocols and "OpenFlow13" not in b.protocols:
            after = tuple(sorted({*b.protocols, "OpenFlow13"}))
            changes.append(Change("protocols", br, br, b.protocols, after, note="OpenFlow 1.3 is needed for meters"))
    return changes


def _vif_change(
    kind: str,
    value: Any,
    port: PortState,
    path: tuple[Any, ...],
    opts: PlanOptions,
    problems: _Problems,
    result: Plan,
) -> Change | None:
    if kind == "vlan":
        return _vlan_change(value, port, result)
    if kind == "ingress":
        return _ingress_change(value, port, path, opts, problems, result)
    return _egress_change(value, port)


def _vlan_change(value: Any, port: PortState, result: Plan) -> Change | None:
    """A removed VLAN isolates the VIF in the dead VLAN: left untagged it would trunk every VLAN."""
    note = ""
    if value is REMOVE:
        value = DEAD
        note = "VLAN removed: the VIF is isolated in the dead VLAN 4095 rather than left trunking every VLAN"
        result.dead[port.name] = note
    assert isinstance(value, Vlan)
    if port.vlan.effective() == value:
        return None
    return Change("vlan", port.bridge, port.name, port.vlan, VlanCols.of(value), port.vm_name, note)


def _ingress_change(
    value: Any, port: PortState, path: tuple[Any, ...], opts: PlanOptions, problems: _Problems, result: Plan
) -> Change | None:
    """Policing by tc (the Interface's ingress_policing_*) or by an OpenFlow meter (needs the switch's socket)."""
    if value is REMOVE:
        after = PoliceCols()
    else:
        assert isinstance(value, Ingress)
        mech = value.mechanism
        if mech == "auto":
            mech = "tc" if opts.tc_police else "meter"
        if mech == "meter" and not opts.openflow:
            problems.add(
                path,
                "meter policing needs ovs-vswitchd's OpenFlow socket on this host (the database is remote); "
                "use mechanism: tc, or run hvnet on the hypervisor",
            )
            return None
        if mech == "meter" and port.iface_type not in ("system", "internal", "tap", "dpdk", "dpdkvhostuser"):
            result.warnings.append(f"{port.name}: meter on a {port.iface_type} interface")
        if mech == "tc":
            after = PoliceCols(value.rate_kbps, value.burst_kbit)
        else:
            after = PoliceCols(0, 0, value.rate_kbps, value.burst_kbit)
        if port.police.effective() == Ingress(value.rate_kbps, value.burst_kbit, mech):
            return None
    if port.police == after:
        return None
    return Change("ingress", port.bridge, port.name, port.police, after, port.vm_name)


def _egress_change(value: Any, port: PortState) -> Change | None:
    """Shaping by a QoS row hvnet owns; a QoS someone else made is detached or replaced, never deleted."""
    vm = port.vm_name
    if value is REMOVE:
        if port.qos is None:
            return None
        note = "" if port.qos.owned else "QoS not created by hvnet: detached from the port, row left in place"
        return Change("egress", port.bridge, port.name, port.qos, None, vm, note)
    assert isinstance(value, Egress)
    if port.qos is not None and port.qos.effective() == value:
        return None
    note = ""
    if port.qos is not None and not port.qos.owned:
        note = f"replaces a QoS ({port.qos.type}) not created by hvnet; that row is left in place"
    return Change("egress", port.bridge, port.name, port.qos, owned_qos(value), vm, note)


def _resolve_ports(
    sels: tuple[Selector, ...], state: State, bridge: str, problems: _Problems, lenient: bool
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
    opts: PlanOptions,
    problems: _Problems,
    result: Plan,
    counts: dict[str, int],
) -> Change | None:
    """The change one mirror rule asks for; ``counts`` (mirrors per bridge) follows the plan's removals and adds."""
    if rule.bridge not in state.bridges:
        return None  # reported once for the bridge
    current = state.mirrors.get((rule.bridge, rule.name))
    if rule.remove:
        if current is None:
            return None
        counts[rule.bridge] -= 1
        return Change("mirror", rule.bridge, rule.name, current.cols, None)

    src = _resolve_ports(rule.src, state, rule.bridge, problems, opts.lenient)
    dst = _resolve_ports(rule.dst, state, rule.bridge, problems, opts.lenient)
    if opts.lenient and not (rule.select_all or src or dst or rule.vlans):
        result.warnings.append(f"mirror {rule.name}: none of its selected ports is present; left as it is")
        return None
    output = _mirror_output(rule, state, src, dst, opts, problems, result)
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
        return Change("mirror", rule.bridge, rule.name, None, after)
    if current.cols.same_config(after):
        return None
    return Change(
        "mirror", rule.bridge, rule.name, current.cols, replace(after, external_ids=current.cols.external_ids)
    )


# Where a mirror's copies go, as Mirror columns: output_port, output_vlan, and the tunnel port hvnet makes.
_Output = tuple[Optional[str], Optional[int], Optional[TunnelCols]]


def _mirror_output(
    rule: MirrorRule,
    state: State,
    src: tuple[str, ...],
    dst: tuple[str, ...],
    opts: PlanOptions,
    problems: _Problems,
    result: Plan,
) -> _Output | None:
    """The output columns, or None when the output port is not there (no change is planned for the mirror)."""
    out = rule.output
    assert out is not None
    if out.kind == "port":
        port = _output_port(rule, state, src, dst, opts, problems, result)
        return None if port is None else (port, None, None)
    if out.kind == "vlan":
        result.warnings.append(
            f"mirror {rule.name}: RSPAN VLAN {out.vlan} must be in flood_vlans (MAC learning off) on every "
            "physical switch on the path, or the copies will be learned and dropped"
        )
        return None, out.vlan, None
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
    opts: PlanOptions,
    problems: _Problems,
    result: Plan,
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


def _check_mirror_columns(rule: MirrorRule, state: State, problems: _Problems) -> None:
    """A filter or snaplen needs an OVS whose Mirror table has that column."""
    if rule.filter is not None and not state.has_mirror_filter:
        problems.add(
            (*rule.path, "filter"),
            f"this OVS ({state.ovs_version or 'unknown version'}) has no Mirror filter column; remove the filter",
        )
    if rule.snaplen is not None and not state.has_mirror_snaplen:
        problems.add((*rule.path, "snaplen"), "this OVS has no Mirror snaplen column; remove snaplen")


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


def _sampling_change(rule: SamplingRule, state: State) -> Change | None:
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
        return Change(rule.kind, rule.bridge, rule.bridge, current, None, note=note)
    if current is not None and current.same_config(rule.value):
        return None
    if current is None:
        after = replace(rule.value, external_ids=((OWNER_KEY, OWNER),))
        return Change(rule.kind, rule.bridge, rule.bridge, None, after)
    keep: dict[str, Any] = {"external_ids": current.external_ids}
    if isinstance(current, sampling.IpfixCols):
        keep["other_config"] = current.other_config
    note = "" if is_owned(current.external_ids) else f"changes {title} settings not made by hvnet"
    return Change(rule.kind, rule.bridge, rule.bridge, current, replace(rule.value, **keep), note=note)
