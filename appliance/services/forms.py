"""The console's forms as rules: what the Edit VIF, Add mirror and Add TAP dialogs' fields mean.

A form holds the operator's text as typed (strings; empty = not given).
Each one is translated by the builders its CLI verb uses -- the VLAN,
policing and shaping field rules of ``hvnet vif set`` and ``hvnet qos set``,
:func:`~appliance.policy.plan.intents.mirror_rule` of ``hvnet mirror add``,
:func:`~appliance.services.taps.tap_rule` of ``hvnet tap add`` -- so a dialog
accepts and refuses exactly what the command line does, in the same words.
The translation lives here, once, beside the verbs that apply the rule, so
no front end keeps a second copy of it.  Everything here is pure: it reads
a :class:`~appliance.policy.plan.state.PortState` at most.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from appliance.core.errors import ConfigError, Problem, UsageError
from appliance.core.validate import VLAN_MODES
from appliance.policy.plan.fields import FieldError, egress_from_fields, ingress_from_fields, vlan_from_fields
from appliance.policy.plan.intents import mirror_rule
from appliance.policy.plan.model import REMOVE, Egress, Ingress, MirrorRule, Selector, TapRule, VifRule
from appliance.policy.plan.state import PortState
from appliance.services.policy import mirror_taken
from appliance.services.taps import tap_rule


def _int_or_text(text: str) -> int | str:
    """An integer if ``text`` is one, else the text (so the rule's own validator words the refusal)."""
    try:
        return int(text)
    except ValueError:
        return text


# -- Edit VIF ------------------------------------------------------------------------


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


# -- Add mirror ------------------------------------------------------------------------


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
    spec: dict[str, object] = {form.output_kind: _int_or_text(value) if form.output_kind == "vlan" else value}
    key = form.key.strip()
    if key and form.output_kind in ("gre", "erspan"):
        spec["key"] = _int_or_text(key)
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


# -- Add TAP ---------------------------------------------------------------------------


@dataclass
class TapForm:
    """The Add TAP dialog's fields as typed (strings; empty = not given)."""

    MATCH_FIELDS: ClassVar[tuple[str, ...]] = ("src_mac", "dst_mac", "src_ip", "dst_ip", "vlan", "protocol",
                                               "src_port", "dst_port")  # fmt: skip
    INT_FIELDS: ClassVar[tuple[str, ...]] = ("vlan", "src_port", "dst_port")
    # an RSPAN VLAN is a mirror's output, not a TAP's
    OUTPUT_KINDS: ClassVar[dict[str, str]] = {"port": "port", "gre": "GRE", "erspan": "ERSPAN"}
    METHODS: ClassVar[dict[str, str]] = {
        "flows": "flows (one copy action per flow)",
        "group": "group (OpenFlow group of type ALL)",
    }
    DIRECTIONS: ClassVar[dict[str, str]] = {
        "in": "what the VM sends",
        "out": "what the VM receives",
        "both": "both directions",
    }

    bridge: str = ""
    name: str = ""
    vifs: str = ""  # selectors separated by spaces or commas: vif1.0, vm:VM1, ...
    direction: str = "both"
    match: dict[str, str] = field(default_factory=dict)  # MATCH_FIELDS -> text
    output_kind: str = "port"
    output_value: str = ""
    key: str = ""
    method: str = "flows"
    allow_isolation_exception: bool = False


def tap_form_spec(form: TapForm) -> dict[str, Any]:
    """The policy file's mapping for the form (nothing judged here but what the mapping cannot hold).

    It is what a policy file's ``bridges.BR.taps.NAME`` holds, and what ``hvnet tap add``'s flags build.
    """
    spec: dict[str, Any] = {
        "vifs": [v for v in form.vifs.replace(",", " ").split() if v],
        "direction": form.direction,
        "method": form.method,
        "allow_isolation_exception": form.allow_isolation_exception,
    }
    match = {}
    for key in TapForm.MATCH_FIELDS:
        text = form.match.get(key, "").strip()
        if text:
            match[key] = _int_or_text(text) if key in TapForm.INT_FIELDS else text
    if match:
        spec["match"] = match
    value = form.output_value.strip()
    if value:
        output: dict[str, Any] = {form.output_kind: value}
        if form.key.strip() and form.output_kind in ("gre", "erspan"):
            output["key"] = _int_or_text(form.key.strip())
        spec["output"] = output
    return spec


def tap_form_rule(form: TapForm) -> TapRule:
    """The TAP the form asks for, or the service's UsageError (``field: message``)."""
    if not form.bridge.strip():
        raise UsageError("bridge: choose a bridge")
    if not form.name.strip():
        raise UsageError("name: give the TAP a name")
    return tap_rule(form.bridge.strip(), form.name.strip(), tap_form_spec(form))
