"""Policy verbs: plan, apply (optionally confirm-within), verify, export, and the imperative edits of one
VIF (the Edit VIF form, VLAN, QoS) or one bridge (sFlow, IPFIX) the CLI's ``vif|qos|sampling`` and the
console's dialogs make.

Every verb takes an open :class:`~appliance.policy.PolicyEngine`
(:func:`appliance.services.engine.open_engine`).  An apply with
``confirm_within`` is recorded pending and undone unless committed
(:mod:`.confirm`); mirrors have their own verbs (:mod:`.mirrors`).

The Edit VIF form is translated here, beside the verb that applies it
(:func:`vif_form_rule`, then :func:`edit_vif`): its VLAN, policing and
shaping fields go through the field rules of ``hvnet vif set`` and ``hvnet
qos set``, so the console accepts and refuses exactly what the command line
does, in the same words.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, ClassVar, Optional

from appliance.core.errors import ConfigError, HvnetError, Problem, UsageError
from appliance.core.validate import FieldError
from appliance.core.vlan import VLAN_MODES, vlan_change, vlan_from_fields
from appliance.policy import REMOVE, ApplyResult, Plan, Policy, PolicyEngine, Selector, VifRule, require_one
from appliance.policy.apply.enforcement import Enforcement
from appliance.policy.apply.engine import change_json
from appliance.policy.plan import export as exp
from appliance.policy.plan import reach
from appliance.policy.plan.document import DEFAULT_POLICY
from appliance.policy.plan.document import load as load_policy
from appliance.policy.plan.fields import egress_from_fields, ingress_from_fields
from appliance.policy.plan.intents import qos_rule
from appliance.policy.plan.model import Egress, Ingress, SamplingRule
from appliance.policy.plan.state import PortState, State
from appliance.services import confirm, deadman
from appliance.switch import sampling

# What front ends show and build, named here so that they depend on this module
# and not on the engine's inside.
__all__ = [
    "DEFAULT_POLICY",
    "ApplyResult",
    "Enforcement",
    "FieldError",
    "Plan",
    "Policy",
    "PolicyEngine",
    "SamplingRule",
    "State",
    "VifRule",
    "change_json",
    "load_policy",
    "qos_rule",
]


# -- declarative ----------------------------------------------------------------


def plan(engine: PolicyEngine, policy: Policy) -> Plan:
    """What applying ``policy`` would change, before -> after; touches nothing."""
    return engine.plan(policy)


def apply(
    engine: PolicyEngine,
    policy: Policy,
    *,
    dry_run: bool = False,
    verify: bool = True,
    wait: bool = True,
    confirm_within: Optional[float] = None,
    guard: Optional[Callable[[State], None]] = None,
    record: bool = True,
) -> ApplyResult:
    """Make the switch match ``policy`` in one transaction (verified, audited, recorded for rollback).

    ``record=False`` (the agent's passes, never with ``confirm_within``):
    audited, but not made what :func:`.confirm.rollback` undoes -- that stays the
    operator's last apply.

    ``confirm_within=N``: the change stays only if :func:`.confirm.commit` runs within
    N seconds; otherwise a watcher process rolls it back (a lost console or
    SSH session cannot leave a half-tested change behind).  One such change is
    pending at a time, so a later one cannot make the first impossible to undo.
    On a host over SSH the undo is also armed on the host itself, before the
    commit (:mod:`appliance.services.deadman`): a change that cuts SSH is
    still undone in time.
    """
    if confirm_within is None or dry_run:
        result = engine.apply(policy, dry_run=dry_run, verify=verify, wait=wait, record=record, guard=guard)
        warn_unrouted(engine, result)
        return result
    confirm.settle_overdue(engine)
    slot = f"reserved-{os.getpid()}-{time.monotonic_ns()}"
    try:
        engine.journal.reserve_pending(slot)  # atomic: of two such applies at once, one goes ahead
    except HvnetError as exc:
        raise UsageError(exc.message, hint=exc.hint) from None
    arming = deadman.Arming(engine, confirm_within, confirm.pend) if engine.host.label is not None else None
    engine.before_commit = arming
    try:
        try:
            result = engine.apply(policy, verify=verify, wait=wait, guard=guard)
        except HvnetError as exc:
            if arming is not None:
                arming.failed(exc)
            raise
        finally:
            engine.before_commit = None
        timer = arming.timer if arming is not None else None
        if result.status == "applied" and result.record_id:
            confirm.arm_watcher(engine, result, confirm_within, timer)  # the pending record replaces the reservation
            if timer is not None and time.time() >= timer.deadline:
                confirm.late_apply(engine, result, timer)
        elif arming is not None:
            arming.disarm()  # nothing of it stayed (the meters failed and the change was undone)
    finally:
        engine.journal.release_pending(slot)  # a no-op once replaced
    warn_unrouted(engine, result)
    return result


def warn_unrouted(engine: PolicyEngine, result: ApplyResult) -> None:
    """Warn of each new GRE/ERSPAN destination the host has no route to (see :mod:`..policy.plan.reach`):
    its copies would be dropped there without a word.  A lookup that cannot run says nothing."""
    outs = reach.new_destinations(result.plan.changes)
    if not outs:
        return
    host = engine.host
    bridges = engine.snapshot().bridges
    for out in outs:
        datapath = bridges[out.bridge].datapath_type if out.bridge in bridges else ""
        argv = reach.lookup_argv(datapath, out.remote_ip)
        if reach.userspace(datapath):
            argv = ["ovs-appctl", "-t", host.daemon_ctl("ovs-vswitchd") or "ovs-vswitchd", *argv]
        try:
            res = host.runner.run(argv, check=False, env=host.ovs_env, timeout=10)
        except HvnetError:
            continue
        if reach.routed(datapath, res.returncode, res.stdout, res.stderr) is False:
            result.plan.warnings.append(reach.warning(out, datapath, host.label or "this host"))


@dataclass
class Drift:
    """How the switch differs from a policy (``hvnet verify``)."""

    drift: list[dict[str, str]] = field(default_factory=list)  # target, setting, expected, found
    warnings: list[str] = field(default_factory=list)
    matched: dict[str, list[str]] = field(default_factory=dict)  # rule field -> ports (as Plan.matched)

    @property
    def in_sync(self) -> bool:
        return not self.drift


def verify(engine: PolicyEngine, policy: Policy) -> Drift:
    """Every setting that differs from ``policy``, and whether hvnet's OpenFlow meters drifted."""
    p = engine.plan(policy)
    drift = [
        {"target": c.target, "setting": c.kind, "expected": c.describe(c.after), "found": c.describe(c.before)}
        for c in p.changes
    ]
    if engine.openflow_drift():
        drift.append({"target": "OpenFlow", "setting": "meters", "expected": "as recorded in OVSDB", "found": "differ"})
    return Drift(drift, p.warnings, p.matched)


@dataclass(frozen=True)
class Exported:
    """The switch's VIF and mirror settings as a policy: the document, its YAML, what it covers."""

    document: dict[str, Any]
    yaml: str
    vifs: int
    mirrors: int


def export(engine: PolicyEngine, by: str = "mac") -> Exported:
    """The current settings as a policy that round-trips (VIFs selected by VM MAC or by port)."""
    state = engine.snapshot()
    header = f"# hvnet policy exported {datetime.now():%Y-%m-%d %H:%M:%S} from {engine.remote}\n"
    return Exported(
        exp.to_policy(state, by=by), exp.to_yaml(state, by=by, header=header), len(state.vifs()), len(state.mirrors)
    )


# -- imperative: VIFs --------------------------------------------------------------


@dataclass
class VifForm:
    """The Edit VIF form's fields as typed (strings; empty = none)."""

    MODES: ClassVar[tuple[str, ...]] = VLAN_MODES  # the mode choices: exactly the modes the VLAN rule takes

    mode: str
    tag: str = ""
    trunks: str = ""
    ingress_rate: str = ""
    ingress_burst: str = ""
    egress_rate: str = ""

    @staticmethod
    def of(port: PortState) -> VifForm:
        """The form filled with what the port has now."""
        vlan = port.vlan.effective()
        ingress = port.police.effective()
        egress = port.qos.effective() if port.qos else None
        return VifForm(
            mode=vlan.mode,
            tag="" if vlan.tag is None else str(vlan.tag),
            trunks=",".join(str(t) for t in vlan.trunks) if vlan.trunks else ("all" if vlan.mode != "access" else ""),
            ingress_rate=str(ingress.rate_kbps) if ingress else "",
            ingress_burst=str(ingress.burst_kbit) if ingress else "",
            egress_rate=str(egress.rate_kbps) if egress else "",
        )


def vif_form_rule(port: PortState, form: VifForm, source: str = "Edit VIF") -> VifRule:
    """The whole-VIF rule a submitted form means, or ConfigError naming every bad field.

    An emptied rate removes that limit; fields equal to the current setting
    still go into the rule (the planner drops what does not change).  The
    ingress mechanism and the egress burst are kept as they are.
    """
    problems: list[Problem] = []
    rule = VifRule(Selector("port", port.name))

    def bad(field: str, message: str) -> None:
        problems.append(Problem(source, None, field, message))

    mode = form.mode.strip()
    tag: Any = form.tag.strip() or None
    if tag is not None and tag.lstrip("-").isdigit():
        tag = int(tag)  # typed text; the CLI's argument parser does the same
    trunks = form.trunks.strip() or None
    try:
        rule.vlan = vlan_from_fields(mode, tag, trunks)
    except FieldError as exc:
        bad("mode" if exc.field == "(vlan)" else exc.field, str(exc))

    current_in = port.police.effective()
    rate, burst = form.ingress_rate.strip(), form.ingress_burst.strip()
    if rate:
        mechanism = current_in.mechanism if isinstance(current_in, Ingress) else "auto"
        try:
            rule.ingress = ingress_from_fields(rate, burst or None, mechanism)
        except FieldError as exc:
            bad(f"ingress {exc.field}", str(exc))
    elif burst:
        bad("ingress burst", "a burst needs a rate; empty both to remove policing")
    elif current_in is not None:
        rule.ingress = REMOVE

    current_out = port.qos.effective() if port.qos else None
    out_rate = form.egress_rate.strip()
    if out_rate:
        keep_burst = current_out.burst_kbit if isinstance(current_out, Egress) else None
        try:
            rule.egress = egress_from_fields(out_rate, keep_burst)
        except FieldError as exc:
            bad(f"egress {exc.field}", str(exc))
    elif current_out is not None:
        rule.egress = REMOVE
    if problems:
        raise ConfigError(problems)
    return rule


def vlan_rule(engine: PolicyEngine, vif: str, *, mode: Optional[str], tag: Any, trunks: Any) -> VifRule:
    """The rule setting ``vif``'s VLAN (port, ``vm:NAME`` or ``mac:MAC``): unset fields keep their value.

    Raises :class:`~appliance.core.validate.FieldError` naming ``mode``, ``tag``
    or ``trunks``, for the front end to point at its own field.
    """
    state = engine.snapshot()
    port = require_one(state, vif, "VIF")
    return VifRule(Selector("port", port), vlan=vlan_change(state.ports[port].vlan.effective(), mode, tag, trunks))


def plan_vif(engine: PolicyEngine, rule: VifRule) -> Plan:
    """What applying one VIF's rule would change, before -> after; touches nothing."""
    return engine.plan(Policy(vifs=[rule]))


def edit_vif(
    engine: PolicyEngine, rule: VifRule, *, dry_run: bool = False, confirm_within: Optional[float] = None
) -> ApplyResult:
    """Apply one VIF's rule (VLAN, ingress, egress): one transaction, like a one-rule policy file."""
    return apply(engine, Policy(vifs=[rule]), dry_run=dry_run, confirm_within=confirm_within)


def set_qos(
    engine: PolicyEngine, vif: str, rule: VifRule, *, dry_run: bool = False, confirm_within: Optional[float] = None
) -> ApplyResult:
    """Apply ``rule``'s ingress/egress limits (from :func:`intents.qos_rule`) to ``vif``."""
    rule.selector = Selector("port", require_one(engine.snapshot(), vif, "VIF"))
    return edit_vif(engine, rule, dry_run=dry_run, confirm_within=confirm_within)


def clear_qos(
    engine: PolicyEngine, vif: str, *, dry_run: bool = False, confirm_within: Optional[float] = None
) -> ApplyResult:
    """Remove ``vif``'s ingress policing and egress shaping."""
    port = require_one(engine.snapshot(), vif, "VIF")
    rule = VifRule(Selector("port", port), ingress=REMOVE, egress=REMOVE)
    return edit_vif(engine, rule, dry_run=dry_run, confirm_within=confirm_within)


# -- imperative: sFlow and IPFIX ---------------------------------------------------------


def sampling_rule(bridge: str, kind: str, values: dict[str, Any]) -> SamplingRule:
    """The rule setting ``bridge``'s sFlow or IPFIX to ``values`` (the policy file's keys).

    Raises :class:`~appliance.switch.sampling.SamplingFieldError` naming every bad
    field, for the front end to point at its own flags or form fields.
    """
    return SamplingRule(bridge, kind, sampling.from_fields(kind, values), (kind,))


def set_sampling(
    engine: PolicyEngine,
    rule: SamplingRule,
    *,
    bridge_field: str = "BRIDGE",
    dry_run: bool = False,
    confirm_within: Optional[float] = None,
) -> ApplyResult:
    """Apply one bridge's sFlow/IPFIX rule (set, or REMOVE): one transaction, like a policy file.

    A bridge that does not exist is refused by the planner, naming the ones that do.
    """
    policy = Policy(sampling=[rule], bridges={rule.bridge: (bridge_field,)})
    return apply(engine, policy, dry_run=dry_run, confirm_within=confirm_within)


def clear_sampling(
    engine: PolicyEngine,
    bridge: str,
    kind: str,
    *,
    dry_run: bool = False,
    confirm_within: Optional[float] = None,
) -> ApplyResult:
    """Take ``bridge``'s sFlow or IPFIX away (nothing to do when it has none)."""
    rule = SamplingRule(bridge, kind, REMOVE, (kind,))
    return set_sampling(engine, rule, dry_run=dry_run, confirm_within=confirm_within)
