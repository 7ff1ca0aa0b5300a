"""The Add TAP dialog's calls into the engine: the form as a policy file's TAP, planned and applied.

The form's fields become the mapping a policy file's ``bridges.BR.taps.NAME``
holds (what ``hvnet tap add``'s flags build too), and that mapping goes
through :func:`appliance.services.taps.tap_rule`: the dialog refuses what the
CLI and a policy file refuse, in the same words.  Plain Python called from
worker threads; nothing here touches widgets.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from appliance.core.errors import UsageError
from appliance.services import taps
from appliance.services.policy import ApplyResult, Plan
from appliance.services.taps import TapRule

if TYPE_CHECKING:
    from tui.backend import Backend

MATCH_FIELDS = ("src_mac", "dst_mac", "src_ip", "dst_ip", "vlan", "protocol", "src_port", "dst_port")
INT_FIELDS = ("vlan", "src_port", "dst_port")
OUTPUT_KINDS = {"port": "port", "gre": "GRE", "erspan": "ERSPAN"}  # an RSPAN VLAN is a mirror's output
METHODS = {"flows": "flows (one copy action per flow)", "group": "group (OpenFlow group of type ALL)"}
DIRECTIONS = {"in": "what the VM sends", "out": "what the VM receives", "both": "both directions"}


@dataclass
class TapForm:
    """The dialog's fields as typed (strings; empty = not given)."""

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


def _int_or_text(text: str) -> int | str:
    """An integer if ``text`` is one, else the text (so the service words the refusal)."""
    try:
        return int(text)
    except ValueError:
        return text


def form_spec(form: TapForm) -> dict[str, Any]:
    """The policy file's mapping for the form (nothing judged here but what the mapping cannot hold)."""
    spec: dict[str, Any] = {
        "vifs": [v for v in form.vifs.replace(",", " ").split() if v],
        "direction": form.direction,
        "method": form.method,
        "allow_isolation_exception": form.allow_isolation_exception,
    }
    match = {}
    for key in MATCH_FIELDS:
        text = form.match.get(key, "").strip()
        if text:
            match[key] = _int_or_text(text) if key in INT_FIELDS else text
    if match:
        spec["match"] = match
    value = form.output_value.strip()
    if value:
        output: dict[str, Any] = {form.output_kind: value}
        if form.key.strip() and form.output_kind in ("gre", "erspan"):
            output["key"] = _int_or_text(form.key.strip())
        spec["output"] = output
    return spec


def form_rule(form: TapForm) -> TapRule:
    """The TAP the form asks for, or the service's UsageError (``field: message``)."""
    if not form.bridge.strip():
        raise UsageError("bridge: choose a bridge")
    if not form.name.strip():
        raise UsageError("name: give the TAP a name")
    return taps.tap_rule(form.bridge.strip(), form.name.strip(), form_spec(form))


def plan_add(backend: Backend, rule: TapRule) -> Plan:
    """What adding the TAP would change (a dry run of the same apply); touches nothing."""
    return taps.add_tap(backend.engine, rule, dry_run=True).plan


def apply_add(backend: Backend, rule: TapRule) -> ApplyResult:
    """Add the TAP: one transaction, its flows installed, verified and audited as ``hvnet tap add``."""
    return backend.run_apply(f"tap add {rule.name} on {rule.bridge}", lambda: taps.add_tap(backend.engine, rule))


def bridges(backend: Backend) -> list[str]:
    """The bridges the dialog offers."""
    return sorted(backend.snapshot().bridges)
