"""Planning: desired state (a :class:`~.model.Policy`) against current state (a :class:`~.state.State`).

A pure function.  It resolves selectors, refuses what must not be done
(problems carry ``file:line: field``), and returns the list of changes with
their before and after values as stored columns.  The same plan drives
``hvnet plan`` (printed), ``apply`` (written in one transaction), ``verify``
(any change is drift) and rollback (each change inverted).
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from appliance.core import ovsfeatures
from appliance.core.errors import ConfigError, Problem
from appliance.core.vlan import DEAD, Vlan, VlanCols
from appliance.core.yamldoc import dotted
from appliance.policy.plan import monitoring, tapplan
from appliance.policy.plan.fields import parse_selector
from appliance.policy.plan.model import (
    OWNER,
    OWNER_KEY,
    REMOVE,
    Egress,
    Ingress,
    Policy,
    Selector,
    is_owned,
)
from appliance.policy.plan.state import (
    PoliceCols,
    PortState,
    QosCols,
    QueueCols,
    State,
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
        return monitoring.describe_mirror(value)
    if kind == "protocols":
        return ",".join(value) if value else "(default)"
    if kind == "tap":
        return "absent" if value is None else value.describe()
    if kind in sampling.KINDS:
        mine = value is None or is_owned(value.external_ids)
        return sampling.describe(value, kind) + ("" if mine else ", not hvnet's")
    return str(value)


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
    result.changes += [
        Change("mirror", *c) for c in monitoring.mirror_changes(policy.mirrors, state, opts, problems, result, select)
    ]
    taps = [Change("tap", *c) for c in tapplan.changes(policy.taps, state, opts, problems, result, select)]
    result.changes += taps
    protocols_needed |= {c.bridge for c in taps if c.after is not None}
    result.changes += _protocol_changes(protocols_needed, state)
    result.changes += [
        Change(kind, br, br, before, after, note=note)
        for kind, br, before, after, note in monitoring.sampling_changes(policy.sampling, state)
    ]

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
            if kind == "ingress" and (why := _meter_missing(value, port, state, opts)) is not None:
                problems.add(path, f"{why}; use mechanism: tc")
                continue
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


def _meter_missing(value: Any, port: PortState, state: State, opts: PlanOptions) -> str | None:
    """Why this switch cannot police ``port`` with a meter (too old an OVS), or None.

    A meter lives in hvnet's OpenFlow pipeline, installed as one bundle and read back with
    ``--no-names``; the kernel datapath has meters only from OVS 2.10."""
    if not isinstance(value, Ingress):
        return None
    mech = value.mechanism if value.mechanism != "auto" else ("tc" if opts.tc_police else "meter")
    if mech != "meter":
        return None
    bridge = state.bridges.get(port.bridge)
    dp = ovsfeatures.meter_feature(bridge.datapath_type if bridge is not None else "system")
    return ovsfeatures.first_missing(["ofctl-bundle", "ofctl-names", dp], state.ovs_version)


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
