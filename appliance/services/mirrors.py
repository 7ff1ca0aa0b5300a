"""Mirror verbs: list, plan an add, add (``--may-exist``), delete (``--if-exists``).

What ``hvnet mirror`` and the console's mirror dialogs do.  Each builds a
one-mirror policy and applies it like a policy file would
(:func:`appliance.services.policy.apply`: one transaction, verified,
audited, optionally confirm-within); the rule itself comes from
:func:`~appliance.policy.plan.intents.mirror_rule`, the CLI's flags and the
console's form alike.
"""

from __future__ import annotations

from collections.abc import Container
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Optional

from appliance.core.errors import ConflictError, UsageError
from appliance.core.validate import FieldError, int_or_text
from appliance.policy import ApplyResult, MirrorRule, Plan, Policy, PolicyEngine
from appliance.policy.plan.intents import mirror_rule
from appliance.policy.plan.monitoring import describe_mirror
from appliance.policy.plan.planner import describe
from appliance.policy.plan.state import State
from appliance.services.policy import apply

# What front ends show and build, named here so that they depend on this module.
__all__ = ["MirrorRule", "describe_mirror", "mirror_rule"]


@dataclass(frozen=True)
class Origin:
    """Where an imperative mirror intent came from, so refusals point at what the operator used."""

    source: str = "(command line)"  # the policy's source in planner messages
    bridge_field: str = "--bridge"  # what named the bridge
    delete_hint: str = "hvnet mirror del it first"


COMMAND_LINE = Origin()


def mirror_taken(mirrors: Container[tuple[str, str]], bridge: str, name: str) -> Optional[str]:
    """Why ``name`` cannot be added on ``bridge`` (it exists), or None."""
    return f"mirror {name} already exists on {bridge}" if (bridge, name) in mirrors else None


def find_mirror(state: State, name: str, bridge: Optional[str] = None) -> str:
    """The bridge of the one mirror called ``name`` (on ``bridge`` when given); refuses none or several."""
    found = [br for (br, n) in state.mirrors if n == name and (not bridge or br == bridge)]
    if not found:
        raise UsageError(f"no mirror named {name}" + (f" on {bridge}" if bridge else ""))
    if len(found) > 1:
        raise UsageError(f"mirror {name} exists on {', '.join(found)}", hint="give --bridge")
    return found[0]


def list_mirrors(engine: PolicyEngine) -> list[dict[str, Any]]:
    """Every mirror on the switch, by bridge and name: whose it is (``hvnet`` or ``other``), what it selects
    and where it sends (as the plans describe it), and the packets and bytes it sent (None: not counted)."""
    out = []
    for (br, name), m in sorted(engine.snapshot().mirrors.items()):
        stats = m.statistics
        out.append({
            "bridge": br,
            "name": name,
            "owner": "hvnet" if m.cols.owned else "other",
            "config": describe("mirror", m.cols),
            "tx_packets": stats.get("tx_packets"),
            "tx_bytes": stats.get("tx_bytes"),
        })  # fmt: skip
    return out


def _add_policy(engine: PolicyEngine, rule: MirrorRule, origin: Origin) -> Policy:
    """The one-mirror policy of an add, after refusing a name that exists now (re-read, not remembered)."""
    taken = mirror_taken(engine.snapshot().mirrors, rule.bridge, rule.name)
    if taken:
        raise UsageError(taken, hint=origin.delete_hint)
    return Policy(source=origin.source, mirrors=[rule], bridges={rule.bridge: (origin.bridge_field,)})


def plan_mirror_add(engine: PolicyEngine, rule: MirrorRule, origin: Origin = COMMAND_LINE) -> Plan:
    """What adding the mirror would change (refused when the name exists)."""
    return engine.plan(_add_policy(engine, rule, origin))


def add_mirror(
    engine: PolicyEngine,
    rule: MirrorRule,
    origin: Origin = COMMAND_LINE,
    *,
    dry_run: bool = False,
    confirm_within: Optional[float] = None,
    may_exist: bool = False,
) -> ApplyResult:
    """Add the mirror ``rule`` (from :func:`intents.mirror_rule`); an existing name is refused.

    Refused before the transaction (a clear error without a commit attempt)
    and again inside it, against the state the commit is built on: of two
    adds of one name at once, the second re-plans and is refused.

    ``may_exist`` (ovs-vsctl's ``--may-exist``): a mirror of that name with
    these very settings is success with nothing changed, so a script can say
    "this mirror exists" and run twice; one with other settings is still
    refused, naming the differences -- silently keeping the old settings would
    report success for a mirror that is not the one asked for.
    """

    def still_free(state: State) -> None:
        taken = mirror_taken(state.mirrors, rule.bridge, rule.name)
        if taken and may_exist:  # it was free a moment ago: someone else's add won the race
            raise ConflictError(f"{taken}: added by a concurrent change; nothing was changed",
                                hint="run the command again to compare its settings")  # fmt: skip
        if taken:
            raise UsageError(taken, hint=origin.delete_hint)

    if may_exist and mirror_taken(engine.snapshot().mirrors, rule.bridge, rule.name):
        return _existing_mirror(engine, rule, origin)
    policy = _add_policy(engine, rule, origin)
    return apply(engine, policy, dry_run=dry_run, confirm_within=confirm_within, guard=still_free)


def _existing_mirror(engine: PolicyEngine, rule: MirrorRule, origin: Origin) -> ApplyResult:
    """``--may-exist`` on a mirror that exists: nothing to do when it is as asked, refused when it differs."""
    policy = Policy(source=origin.source, mirrors=[rule], bridges={rule.bridge: (origin.bridge_field,)})
    plan = engine.plan(policy)
    if plan.changes:
        differs = "; ".join(f"{c.kind} is {c.describe(c.before)}, not {c.describe(c.after)}" for c in plan.changes)
        raise UsageError(
            f"mirror {rule.name} already exists on {rule.bridge} with other settings ({differs}); nothing was changed",
            hint=f"--may-exist keeps an identical mirror; to replace this one, {origin.delete_hint}",
        )
    note = f"mirror {rule.name} already exists on {rule.bridge} with these settings (may exist): nothing changed"
    return ApplyResult(Plan(warnings=[*plan.warnings, note]), "unchanged")


def delete_mirror(
    engine: PolicyEngine,
    name: str,
    bridge: Optional[str] = None,
    origin: Origin = COMMAND_LINE,
    *,
    dry_run: bool = False,
    confirm_within: Optional[float] = None,
    if_exists: bool = False,
) -> ApplyResult:
    """Delete the mirror ``name`` (and the tunnel port hvnet made for it); refused when there is none.

    ``if_exists`` (ovs-vsctl's ``--if-exists``): no such mirror is success with nothing changed.
    """
    state = engine.snapshot()
    if if_exists and not any(n == name and (not bridge or br == bridge) for br, n in state.mirrors):
        where = f" on {bridge}" if bridge else ""
        return ApplyResult(Plan(warnings=[f"no mirror named {name}{where} (if exists): nothing deleted"]), "unchanged")
    found = find_mirror(state, name, bridge)
    policy = Policy(source=origin.source, mirrors=[MirrorRule(found, name, remove=True)])
    return apply(engine, policy, dry_run=dry_run, confirm_within=confirm_within)


# -- the console's Add mirror form -----------------------------------------------------
# The operator's text as typed (strings; empty = not given), translated by the builder ``hvnet mirror add``
# uses (intents.mirror_rule): the dialog accepts and refuses exactly what the command line does.


@dataclass
class MirrorForm:
    """The Add mirror dialog's fields as entered (strings; empty = not given)."""

    DIRECTIONS: ClassVar[dict[str, str]] = {
        "sends": "what the VM sends",
        "receives": "what the VM receives",
        "both": "both directions",
    }
    OUTPUT_KINDS: ClassVar[dict[str, str]] = {
        "port": "port",
        "vlan": "RSPAN VLAN",
        "gre": "GRE",
        "erspan": "ERSPAN",
    }
    # Which form field shows an intents FieldError.
    FIELD_OF_ERROR: ClassVar[dict[str, str]] = {
        "bridge": "bridge",
        "name": "name",
        "src": "sources",
        "dst": "sources",
        "select": "sources",
        "vlan": "vlans",
        "output": "output",
        "output.port": "output",
        "output.vlan": "output",
        "output.gre": "output",
        "output.erspan": "output",
        "output.key": "key",
        "output.idx": "key",
    }

    bridge: str = ""
    name: str = ""
    sources: tuple[str, ...] = ()
    direction: str = "both"  # one of DIRECTIONS
    vlans: str = ""
    output_kind: str = "port"  # one of OUTPUT_KINDS
    output_value: str = ""
    key: str = ""
    allow_isolation_exception: bool = False


def mirror_form_rule(form: MirrorForm, existing: set[tuple[str, str]] | None = None) -> MirrorRule:
    """The mirror the form asks for, or FieldError: the CLI's rules, through ``intents.mirror_rule``."""
    bridge = form.bridge.strip()
    if not bridge:
        raise FieldError("bridge", "choose a bridge")
    name = form.name.strip()
    taken = mirror_taken(existing or (), bridge, name)
    if taken:
        raise FieldError("name", f"{taken}; delete it first")
    value = form.output_value.strip()
    if not value:
        what = {"port": "an output port", "vlan": "an RSPAN VLAN", "gre": "a collector IP", "erspan": "a collector IP"}
        raise FieldError("output", f"give {what.get(form.output_kind, 'an output')}")
    spec: dict[str, object] = {form.output_kind: int_or_text(value) if form.output_kind == "vlan" else value}
    key = form.key.strip()
    if key and form.output_kind in ("gre", "erspan"):
        spec["key"] = int_or_text(key)
    sources = list(form.sources)
    return mirror_rule(
        bridge,
        name,
        output=spec,
        src=sources if form.direction in ("sends", "both") else None,
        dst=sources if form.direction in ("receives", "both") else None,
        vlans=form.vlans.strip() or None,
        allow_isolation_exception=form.allow_isolation_exception,
    )


def mirror_form_errors(form: MirrorForm, existing: set[tuple[str, str]] | None = None) -> dict[str, str]:
    """Every bad field's message, keyed by form field ({} when the form is valid).

    ``mirror_rule`` stops at the first bad field; to name each bad field at
    once, every field is also checked alone against known-good values for the
    others (so the words are still the CLI's).
    """
    field_of = MirrorForm.FIELD_OF_ERROR
    try:
        mirror_form_rule(form, existing)
    except FieldError as exc:
        errors = {field_of.get(exc.field, "sources"): str(exc)}
    else:
        return {}
    good = MirrorForm(bridge=form.bridge or "-", name="-", vlans="1", output_kind="vlan", output_value="1")
    probes = [
        replace(good, name=form.name),
        replace(good, vlans=form.vlans) if form.vlans.strip() else None,
        replace(good, output_kind=form.output_kind, output_value=form.output_value, key=form.key),
        replace(good, sources=form.sources, direction=form.direction, vlans="1" if form.vlans.strip() else ""),
    ]
    for probe in probes:
        if probe is None:
            continue
        try:
            mirror_form_rule(probe, existing)
        except FieldError as exc:
            errors.setdefault(field_of.get(exc.field, "sources"), str(exc))
    return errors
