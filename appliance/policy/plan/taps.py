"""TAP policies: a flow match copied from selected VIFs to a monitor, by OpenFlow flows or a group.

A mirror copies whole ports or VLANs; a TAP copies only what its match
selects (MACs, IPs or prefixes, VLAN, protocol, L4 ports) -- the vTAP
thesis's "source, destination and monitor" -- with the same outputs and the
same refusals as mirrors.  OVS has no table for TAPs, so, as with meters,
hvnet records each TAP on its Bridge (``external_ids:hvnet-tap-NAME``, the
selection resolved to port names) inside the policy transaction, and the
OpenFlow pipeline (:mod:`.pipeline`) is derived from that record.  Rollback,
verify and export therefore treat a TAP like any other stored setting.

Sampling is refused: OVS's ``sample`` action feeds sFlow/IPFIX collectors
with counters and headers, it does not forward 1-in-N copies to a port;
sample at the capture instead (``hvnet capture start --count``/BPF).
"""

from __future__ import annotations

import ipaddress
import json
import zlib
from dataclasses import dataclass
from typing import Any

from appliance.core.validate import FieldError
from appliance.policy.plan.fields import mirror_output, parse_selector
from appliance.policy.plan.model import (
    MAX_TAPS_PER_BRIDGE,
    TAP_DIRECTIONS,
    TAP_MATCH_KEYS,
    TAP_METHODS,
    Selector,
    TapMatch,
    TapRule,
    TunnelCols,
)
from appliance.policy.plan.records import TAP_KEY_PREFIX

PROTOCOLS = {"tcp": 6, "udp": 17, "icmp": 1, "icmp6": 58}
_L4 = (6, 17)
TAP_KEYS = {"match", "vifs", "direction", "output", "method", "sampling", "allow_isolation_exception"}
SAMPLING_REFUSED = (
    "OVS cannot sample a TAP's copies (its sample action feeds sFlow/IPFIX collectors, it does not forward "
    "1-in-N copies to a port); remove sampling and sample at the capture (hvnet capture start with a count "
    "limit or BPF filter), or use the bridge's sflow setting for statistical samples"
)


@dataclass(frozen=True)
class TapCols:
    """A TAP as recorded on its bridge: the match, the selected VIFs by port name, where copies go."""

    match: TapMatch
    vifs: tuple[str, ...]
    direction: str
    output_port: str
    method: str = "flows"
    tunnel: TunnelCols | None = None

    def to_text(self) -> str:
        """The stored record: compact JSON, keys sorted, so that equal TAPs are equal strings."""
        data: dict[str, Any] = {
            "match": dict(self.match.items()),
            "vifs": list(self.vifs),
            "direction": self.direction,
            "output_port": self.output_port,
            "method": self.method,
        }
        if self.tunnel is not None:
            data["tunnel"] = {"name": self.tunnel.name, "type": self.tunnel.type, "options": dict(self.tunnel.options)}
        return json.dumps(data, sort_keys=True, separators=(",", ":"))

    @staticmethod
    def from_text(text: str) -> TapCols | None:
        """A record read back; None when it is not one hvnet wrote (then the TAP is ignored, not guessed)."""
        try:
            data = json.loads(text)
            m = data["match"]
            match = TapMatch(**{k: m[k] for k in TAP_MATCH_KEYS if k in m})
            t = data.get("tunnel")
            tunnel = TunnelCols(t["name"], t["type"], tuple(sorted(t["options"].items()))) if t else None
            return TapCols(match, tuple(data["vifs"]), data["direction"], data["output_port"], data["method"], tunnel)
        except (ValueError, KeyError, TypeError, AttributeError):
            return None

    def to_json(self) -> dict[str, Any]:
        return json.loads(self.to_text())

    def describe(self) -> str:
        out = (
            f"{self.tunnel.type.upper()} to {dict(self.tunnel.options).get('remote_ip')} via {self.tunnel.name}"
            if self.tunnel
            else f"port {self.output_port}"
        )
        return f"{self.match.describe()} {self.direction} of {','.join(self.vifs)} -> {out} ({self.method})"


def read_bridge(external_ids: dict[str, str]) -> dict[str, TapCols]:
    """A bridge's TAP records by name (unreadable records are left out)."""
    out = {}
    for key, value in external_ids.items():
        if key.startswith(TAP_KEY_PREFIX):
            cols = TapCols.from_text(value)
            if cols is not None:
                out[key[len(TAP_KEY_PREFIX) :]] = cols
    return out


def owner(name: str) -> str:
    """What a TAP's tunnel port records as its owner (the mirrors' key, told apart by the prefix)."""
    return f"tap:{name}"


def tunnel_port_name(bridge: str, tap: str) -> str:
    """A TAP's GRE/ERSPAN port: ``tap`` + 8 hex of the bridge and name (kernel-legal, stable)."""
    return f"tap{zlib.crc32(f'{bridge}/{tap}'.encode()):08x}"


# -- the grammar of one TAP (policy file, CLI flags alike) ------------------------------------


def match_from_fields(m: Any) -> TapMatch:
    """A TAP's ``match`` mapping, or FieldError naming the field (``match.dst_port``)."""
    if m is None:
        return TapMatch()
    if not isinstance(m, dict):
        raise FieldError("match", "must be a mapping of " + ", ".join(TAP_MATCH_KEYS))
    for k in m:
        if k not in TAP_MATCH_KEYS:
            raise FieldError(f"match.{k}", "unknown key; allowed: " + ", ".join(TAP_MATCH_KEYS))
    vals: dict[str, Any] = {}
    for k in ("src_mac", "dst_mac"):
        if m.get(k) is not None:
            vals[k] = _mac(m[k], f"match.{k}")
    for k in ("src_ip", "dst_ip"):
        if m.get(k) is not None:
            vals[k] = _prefix(m[k], f"match.{k}")
    if m.get("vlan") is not None:
        v = m["vlan"]
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 4094:
            raise FieldError("match.vlan", "vlan must be an integer 0..4094")
        vals["vlan"] = v
    if m.get("protocol") is not None:
        vals["protocol"] = _protocol(m["protocol"])
    for k in ("src_port", "dst_port"):
        if m.get(k) is not None:
            p = m[k]
            if isinstance(p, bool) or not isinstance(p, int) or not 0 <= p <= 65535:
                raise FieldError(f"match.{k}", f"{k} must be an integer 0..65535")
            vals[k] = p
    match = TapMatch(**vals)
    _check_consistent(match)
    return match


def _mac(value: Any, field: str) -> str:
    from appliance.core import validate

    try:
        return validate.mac(str(value)).lower()
    except ValueError as exc:
        raise FieldError(field, str(exc)) from None


def _prefix(value: Any, field: str) -> str:
    """An address (a host) or a network prefix whose host bits are zero; 10.0.0.1/24 is refused."""
    try:
        net = ipaddress.ip_network(str(value), strict=True)
    except ValueError as exc:
        raise FieldError(field, f"{value!r} is not an IP address or network prefix ({exc})") from None
    if net.prefixlen == net.max_prefixlen:
        return str(net.network_address)
    return str(net)


def _protocol(value: Any) -> str:
    if isinstance(value, str) and value.lower() in PROTOCOLS:
        return value.lower()
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= 255:
        return str(value)
    if isinstance(value, str) and value.isdigit() and int(value) <= 255:
        return str(int(value))
    raise FieldError("match.protocol", f"{value!r}: allowed: tcp, udp, icmp, icmp6 or an IP protocol number 0..255")


def protocol_number(match: TapMatch) -> int | None:
    if match.protocol is None:
        return None
    return PROTOCOLS.get(match.protocol) if not match.protocol.isdigit() else int(match.protocol)


def ip_version(match: TapMatch) -> int | None:
    """4 or 6 from the addresses or the protocol; None when the match says nothing of IP."""
    versions = {ipaddress.ip_network(a).version for a in (match.src_ip, match.dst_ip) if a is not None}
    if match.protocol == "icmp6":
        versions.add(6)
    elif match.protocol == "icmp":
        versions.add(4)
    if len(versions) > 1:
        raise FieldError("match", "mixes IPv4 and IPv6 (addresses and protocol must be of one family)")
    if versions:
        return versions.pop()
    return 4 if match.protocol is not None else None


def _check_consistent(match: TapMatch) -> None:
    """What OVS cannot express: L4 ports without TCP/UDP, IPv4 and IPv6 in one match."""
    ip_version(match)
    for k in ("src_port", "dst_port"):
        if getattr(match, k) is not None and protocol_number(match) not in _L4:
            raise FieldError(f"match.{k}", f"{k} needs protocol tcp or udp (L4 ports mean nothing otherwise)")


def rule_from_fields(bridge: str, name: Any, spec: dict[str, Any], path: tuple[Any, ...]) -> tuple[TapRule, list]:
    """A TAP rule from its mapping; (rule, [(field, message)...]) -- every problem found, not just the first."""
    problems: list[tuple[str, str]] = []
    rule = TapRule(bridge, str(name), path=path)
    for k in spec:
        if k not in TAP_KEYS:
            problems.append((k, "unknown key; allowed: " + ", ".join(sorted(TAP_KEYS))))
    try:
        rule.match = match_from_fields(spec.get("match"))
    except FieldError as exc:
        problems.append((exc.field, str(exc)))
    rule.vifs = _vifs(spec.get("vifs"), problems, path)
    direction = spec.get("direction", "both")
    if direction not in TAP_DIRECTIONS:
        problems.append(("direction", f"invalid {direction!r}; allowed: {', '.join(TAP_DIRECTIONS)}"))
    else:
        rule.direction = direction
    method = spec.get("method", "flows")
    if method not in TAP_METHODS:
        problems.append(("method", f"invalid {method!r}; allowed: {', '.join(TAP_METHODS)}"))
    else:
        rule.method = method
    if spec.get("sampling") is not None:
        problems.append(("sampling", SAMPLING_REFUSED))
    if "output" not in spec:
        problems.append(("output", "required: one of port, gre or erspan"))
    else:
        try:
            rule.output = mirror_output(spec["output"])
            if rule.output.kind == "vlan":
                raise FieldError(
                    "output.vlan",
                    "a TAP's copies go to a port, gre or erspan; an RSPAN VLAN output is a mirror's (hvnet mirror add)",
                )
        except FieldError as exc:
            problems.append((exc.field, str(exc)))
    allow = spec.get("allow_isolation_exception", False)
    if not isinstance(allow, bool):
        problems.append(("allow_isolation_exception", "must be true or false"))
    rule.allow_isolation_exception = allow is True
    return rule, problems


def _vifs(value: Any, problems: list[tuple[str, str]], path: tuple[Any, ...]) -> tuple[Selector, ...]:
    if value is None or value == []:
        problems.append(("vifs", "required: the VIFs whose traffic is matched (selectors like 'vm:VM1', 'vif1.0')"))
        return ()
    items = value if isinstance(value, list) else [value]
    out = []
    for i, item in enumerate(items):
        try:
            kind, pattern = parse_selector(item)
        except ValueError as exc:
            problems.append((f"vifs.{i}" if isinstance(value, list) else "vifs", str(exc)))
            continue
        out.append(Selector(kind, pattern, False, (*path, "vifs", i) if isinstance(value, list) else (*path, "vifs")))
    return tuple(out)


def max_taps_message(bridge: str, n: int) -> str:
    return f"{n} TAPs on bridge {bridge}; hvnet's pipeline has room for {MAX_TAPS_PER_BRIDGE} (one table each)"
