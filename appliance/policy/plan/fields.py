"""The policy's field grammar: one value in, a model value or :class:`FieldError` out.

A policing or shaping limit from rate/burst, a rate with its units, a VIF
selector, a mirror's output (a VLAN's grammar is beside the VLAN, in
:mod:`appliance.core.vlan`).  These rules are
shared by every spelling of a policy -- a policy file (:mod:`.document`
adds ``file:line``), the CLI's flags and the TUI's forms (:mod:`.intents`) --
so the same input is refused with the same words wherever it is typed.
"""

from __future__ import annotations

import ipaddress
from typing import Any

from appliance.core import units, validate
from appliance.core.validate import FieldError
from appliance.core.vlan import vlan_id
from appliance.policy.plan.model import (
    MECHANISMS,
    MIN_BURST_KBIT,
    Egress,
    Ingress,
    MirrorOutput,
    Selector,
    VifRule,
    default_burst_kbit,
)

_OUTPUT_KEYS = {"port", "vlan", "gre", "erspan", "key", "idx"}


def kbit(value: Any, what: str, in_file: bool = False) -> int:
    """A rate in kbit/s or a size in kbit: a number (kbit, the unit OVS takes) or text with a unit,
    ``"10mbit"``, ``"1250KB/s"`` -- the grammar of :mod:`appliance.core.units`, which refuses the
    ambiguous ``kbps`` (``in_file``: a policy or probe file's value, stricter: see there)."""
    if what == "burst":
        return units.parse_size(value, what, in_file=in_file)
    return units.parse_rate(value, what, in_file=in_file)


def parse_selector(value: Any, default_kind: str = "port") -> tuple[str, str]:
    """``"vm:VM1"`` / ``"port:vif1.0"`` / bare name (``default_kind``) -> (kind, pattern)."""
    if isinstance(value, dict):
        kinds = [k for k in Selector.KINDS if k in value]
        if len(kinds) != 1 or len(value) != 1:
            raise ValueError(f"a selector names exactly one of {', '.join(Selector.KINDS)}")
        kind, pattern = kinds[0], value[kinds[0]]
    elif isinstance(value, str):
        kind, sep, rest = value.partition(":")
        if sep and kind in Selector.KINDS:
            pattern = rest
        elif sep and kind.replace("-", "_") in Selector.KINDS:
            kind, pattern = kind.replace("-", "_"), rest
        else:
            kind, pattern = default_kind, value
    else:
        raise ValueError(f"a selector is a string like 'vm:VM1' or 'vif1.0', not {value!r}")
    if not isinstance(pattern, str) or not pattern:
        raise ValueError(f"{kind} selector needs a non-empty string")
    if any(c in pattern for c in validate.TEXT_ALLOWS):  # the rest of what names may not hold: yamldoc's
        validate.no_control(pattern)
    if kind == "mac":
        pattern = pattern.lower()
        if not any(c in pattern for c in "*?["):
            pattern = validate.mac(pattern)
    if kind == "port" and not any(c in pattern for c in "*?["):
        validate.ifname(pattern)
    return kind, pattern


def ingress_from_fields(rate: Any, burst: Any, mechanism: Any, in_file: bool = False) -> Ingress:
    try:
        rate_v = kbit(rate, "rate", in_file)
    except ValueError as exc:
        raise FieldError("rate", str(exc)) from None
    if rate_v == 0:
        raise FieldError("rate", "rate 0 would mean 'no limit'; write 'ingress: remove' to remove policing")
    if burst is None:
        burst_v = default_burst_kbit(rate_v)
    else:
        try:
            burst_v = kbit(burst, "burst", in_file)
        except ValueError as exc:
            raise FieldError("burst", str(exc)) from None
        if burst_v == 0:
            raise FieldError(
                "burst",
                f"burst 0 is not allowed with a rate; omit it for the default, 80% of the rate "
                f"(here {default_burst_kbit(rate_v)} kbit)",
            )
    if mechanism not in MECHANISMS:
        raise FieldError("mechanism", f"invalid {mechanism!r}; allowed: {', '.join(MECHANISMS)}")
    return Ingress(rate_v, burst_v, mechanism)


def egress_from_fields(rate: Any, burst: Any, in_file: bool = False) -> Egress:
    try:
        rate_v = kbit(rate, "rate", in_file)
    except ValueError as exc:
        raise FieldError("rate", str(exc)) from None
    if rate_v == 0:
        raise FieldError("rate", "rate 0 would mean 'no limit'; write 'egress: remove' to remove shaping")
    burst_v = None
    if burst is not None:
        try:
            burst_v = kbit(burst, "burst", in_file)
        except ValueError as exc:
            raise FieldError("burst", str(exc)) from None
        if burst_v == 0:
            raise FieldError("burst", "burst 0 is not allowed; omit it to let the shaper choose")
    return Egress(rate_v, burst_v)


def burst_warnings(rule: VifRule) -> list[str]:
    """Bursts below one MTU-sized frame make policing drop nearly everything."""
    out = []
    if isinstance(rule.ingress, Ingress) and rule.ingress.burst_kbit < MIN_BURST_KBIT:
        out.append(
            f"{rule.selector}: ingress burst {rule.ingress.burst_kbit} kbit is below one 1500-byte frame "
            f"({MIN_BURST_KBIT} kbit); most full-size packets will be dropped"
        )
    return out


def mirror_output(value: Any) -> MirrorOutput:
    """``{port: P}`` | ``{vlan: N}`` | ``{gre: IP[, key: K]}`` | ``{erspan: IP[, idx: I]}``."""
    if not isinstance(value, dict):
        raise FieldError("output", "must be a mapping with exactly one of port, vlan, gre, erspan")
    kinds = [k for k in ("port", "vlan", "gre", "erspan") if k in value]
    if len(kinds) != 1:
        raise FieldError("output", f"give exactly one of port, vlan, gre, erspan (found {', '.join(kinds) or 'none'})")
    for k in value:
        if k not in _OUTPUT_KEYS:
            raise FieldError(f"output.{k}", "unknown key; allowed: port, vlan, gre, erspan, key, idx")
    kind = kinds[0]
    for k in ("key", "idx"):
        if k in value and kind not in ("gre", "erspan"):
            raise FieldError(f"output.{k}", f"{k} is a tunnel setting (gre/erspan outputs only)")
    if kind == "port":
        try:
            sk, pattern = parse_selector(value["port"])
        except ValueError as exc:
            raise FieldError("output.port", str(exc)) from None
        if any(c in pattern for c in "*?["):
            raise FieldError("output.port", "the output port must be one port, not a glob")
        return MirrorOutput("port", port=Selector(sk, pattern))
    if kind == "vlan":
        try:
            return MirrorOutput("vlan", vlan=vlan_id(value["vlan"]))
        except ValueError as exc:
            raise FieldError("output.vlan", str(exc)) from None
    return _tunnel_output(kind, value)


def _tunnel_output(kind: str, value: dict[str, Any]) -> MirrorOutput:
    """A GRE or ERSPAN output: the collector's address, the tunnel key, ERSPAN's session index."""
    try:
        ip = str(ipaddress.ip_address(str(value[kind])))
    except ValueError:
        raise FieldError(f"output.{kind}", f"{value[kind]!r} is not an IP address") from None
    key = value.get("key")
    if key is not None and (isinstance(key, bool) or not isinstance(key, int) or not 0 <= key < 2**32):
        raise FieldError("output.key", "tunnel key must be an integer 0..4294967295")
    idx = value.get("idx", 1)
    if kind == "gre" and "idx" in value:
        raise FieldError("output.idx", "idx is an ERSPAN setting")
    if isinstance(idx, bool) or not isinstance(idx, int) or not 0 <= idx < 2**20:
        raise FieldError("output.idx", "ERSPAN index must be an integer 0..1048575")
    return MirrorOutput(kind, remote_ip=ip, erspan_idx=idx, key=key)
