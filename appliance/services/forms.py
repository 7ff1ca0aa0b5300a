"""The console's mirror and TAP forms as rules: what the Add mirror and Add TAP dialogs' fields mean.

A form holds the operator's text as typed (strings; empty = not given).
Each one is translated by the builders its CLI verb uses --
:func:`~appliance.policy.plan.intents.mirror_rule` of ``hvnet mirror add``,
:func:`~appliance.services.taps.tap_rule` of ``hvnet tap add`` -- so a dialog
accepts and refuses exactly what the command line does, in the same words.
The translation lives here, once, so no front end keeps a second copy of it.
Everything here is pure.  (The Edit VIF form is translated beside the verb
that applies it: :func:`appliance.services.policy.vif_form_rule`.)
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from appliance.core.errors import UsageError
from appliance.core.validate import FieldError
from appliance.policy.plan.intents import mirror_rule
from appliance.policy.plan.model import MirrorRule, TapRule
from appliance.services.mirrors import mirror_taken
from appliance.services.taps import tap_rule


def _int_or_text(text: str) -> int | str:
    """An integer if ``text`` is one, else the text (so the rule's own validator words the refusal)."""
    try:
        return int(text)
    except ValueError:
        return text


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
