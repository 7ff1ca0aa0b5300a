"""Operator intents (``qos set``, ``mirror add``) as policy fragments.

The CLI's flags and the console's form fields (the services' form translators)
are two spellings of the same intents; building the fragment from the same
field rules means both apply the same rules and refuse the same input with
the same words.  Everything here is pure, and raises :class:`FieldError`
naming the one bad field.  A VLAN edit (``vif set``) is the VLAN's own
grammar: :func:`appliance.core.vlan.vlan_change`.
"""

from __future__ import annotations

from typing import Any

from appliance.core.validate import FieldError
from appliance.core.vlan import vlan_list
from appliance.policy.plan.fields import egress_from_fields, ingress_from_fields, mirror_output, parse_selector
from appliance.policy.plan.model import MirrorRule, Selector, VifRule


def qos_rule(
    port: str,
    *,
    ingress_rate: Any = None,
    ingress_burst: Any = None,
    mechanism: str = "auto",
    egress_rate: Any = None,
    egress_burst: Any = None,
) -> VifRule:
    """Ingress policing and/or egress shaping for one port; FieldError fields are ``ingress.*``/``egress.*``."""
    rule = VifRule(Selector("port", port))
    if ingress_rate is not None:
        try:
            rule.ingress = ingress_from_fields(ingress_rate, ingress_burst, mechanism)
        except FieldError as exc:
            raise FieldError(f"ingress.{exc.field}", str(exc)) from None
    elif ingress_burst is not None:
        raise FieldError("ingress.burst", "an ingress burst needs an ingress rate")
    if egress_rate is not None:
        try:
            rule.egress = egress_from_fields(egress_rate, egress_burst)
        except FieldError as exc:
            raise FieldError(f"egress.{exc.field}", str(exc)) from None
    elif egress_burst is not None:
        raise FieldError("egress.burst", "an egress burst needs an egress rate")
    return rule


def mirror_rule(
    bridge: str,
    name: str,
    *,
    output: dict[str, Any],
    src: list[str] | None = None,
    dst: list[str] | None = None,
    vlans: str | None = None,
    select_all: bool = False,
    snaplen: int | None = None,
    filter: str | None = None,
    allow_isolation_exception: bool = False,
    where: dict[str, str] | None = None,
) -> MirrorRule:
    """A new mirror; FieldError fields are ``name``, ``src``, ``dst``, ``vlan``, ``select``, ``output.*``."""
    if not name or len(name) > 64:
        raise FieldError("name", "mirror names are non-empty strings of at most 64 characters")
    where = where or {}  # how each field is named where it came from (e.g. --src), for messages
    rule = MirrorRule(bridge, name, output=mirror_output(output), snaplen=snaplen, filter=filter)
    rule.allow_isolation_exception = allow_isolation_exception
    for field, values in (("src", src), ("dst", dst)):
        sels = []
        for v in values or []:
            try:
                kind, pattern = parse_selector(v)
            except ValueError as exc:
                raise FieldError(field, str(exc)) from None
            sels.append(Selector(kind, pattern, False, (where.get(field, field),)))
        setattr(rule, field, tuple(sels))
    if vlans is not None:
        try:
            rule.vlans = tuple(vlan_list(vlans))
        except ValueError as exc:
            raise FieldError("vlan", str(exc)) from None
    rule.select_all = select_all
    if rule.select_all and (rule.src or rule.dst):
        raise FieldError("select", "'all' already selects every port; drop the sources/destinations or 'all'")
    if not (rule.select_all or rule.src or rule.dst or rule.vlans):
        raise FieldError("select", "the mirror selects nothing: give sources, destinations, VLANs or all")
    if snaplen is not None and not 14 <= snaplen <= 65535:
        raise FieldError("snaplen", "snaplen must be an integer 14..65535 (bytes kept of each copy)")
    rule.path = ("mirror",)
    return rule
