"""Reading policy files: YAML in, :class:`~.model.Policy` out, or every problem at once.

Only what can be checked without the switch is checked here (types, ranges,
units, unknown keys, mirror output shape).  Whether a selector matches a VIF,
a bridge exists or a mirror fits is the planner's business, against the
switch's state -- with the same ``file:line: field`` in its messages.
"""

from __future__ import annotations

import ipaddress
import re
from pathlib import Path
from typing import Any

from .. import validate, yamldoc
from ..errors import ConfigError, Problem
from .model import (
    MAX_MIRRORS_PER_BRIDGE,
    MECHANISMS,
    MIN_BURST_KBIT,
    REMOVE,
    Egress,
    Ingress,
    MirrorOutput,
    MirrorRule,
    Policy,
    Selector,
    VifRule,
    Vlan,
    default_burst_kbit,
)

DEFAULT_POLICY = "/etc/hvnet/policy.yaml"

_TOP_KEYS = {"version", "policing", "vifs", "bridges"}
_VIF_KEYS = {*Selector.KINDS, "optional", "vlan", "ingress", "egress"}
_VLAN_KEYS = {"mode", "tag", "trunks"}
_INGRESS_KEYS = {"rate", "burst", "mechanism"}
_EGRESS_KEYS = {"rate", "burst"}
_BRIDGE_KEYS = {"mirrors"}
_MIRROR_KEYS = {"select", "output", "snaplen", "filter", "allow_isolation_exception"}
_SELECT_KEYS = {"all", "src", "dst", "vlans"}
_OUTPUT_KEYS = {"port", "vlan", "gre", "erspan", "key", "idx"}
_REMOVE_WORDS = ("remove", "absent")

_RATE = re.compile(r"^\s*(-?\d+(?:\.\d+)?)\s*([kmg]?)(?:bit|bps|b)?(?:/s)?\s*$", re.IGNORECASE)
_FACTORS = {"": 1, "k": 1, "m": 1000, "g": 1000 * 1000}


def kbit(value: Any, what: str) -> int:
    """A rate in kbit/s or a size in kbit: an integer, or ``"10mbit"``, ``"10 Mbit/s"``.

    A bare number is kbit (the unit OVS takes); suffixes k/m/g scale by 1000.
    """
    if isinstance(value, bool):
        raise ValueError(f"{what} must be a number of kbit (e.g. 10240 or '10mbit'), not {value!r}")
    if isinstance(value, (int, float)):
        number = float(value)
    elif isinstance(value, str):
        m = _RATE.match(value)
        if not m:
            raise ValueError(
                f"{what} {value!r} is not a rate/size; write kbit as a number (10240) or with a unit "
                "('10240kbit', '10mbit', '1gbit')"
            )
        number = float(m.group(1)) * _FACTORS[m.group(2).lower()]
    else:
        raise ValueError(f"{what} must be a number of kbit, not {type(value).__name__}")
    if number < 0:
        raise ValueError(f"{what} must not be negative ({value!r})")
    if number != int(number):
        raise ValueError(f"{what} must be a whole number of kbit ({value!r})")
    if number > 2**31:
        raise ValueError(f"{what} {value!r} is larger than OVS accepts")
    return int(number)


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
    if kind == "mac":
        pattern = pattern.lower()
        if not any(c in pattern for c in "*?["):
            pattern = validate.mac(pattern)
    if kind == "port" and not any(c in pattern for c in "*?["):
        validate.ifname(pattern)
    return kind, pattern


def load(path: str | Path) -> Policy:
    """Read and validate the policy file at ``path``."""
    return from_document(yamldoc.load(path, strict=False))


def parse(text: str, file: str) -> Policy:
    return from_document(yamldoc.parse(text, file, strict=False))


def from_document(doc: yamldoc.Document) -> Policy:
    problems: list[Problem] = list(doc.problems)

    def bad(path: yamldoc.PathKey, message: str) -> None:
        problems.append(doc.problem(path, message))

    policy = Policy(source=doc.file, lines=dict(doc.lines))
    data = doc.data
    if data is None:
        if problems:
            raise ConfigError(problems)
        return policy  # an empty policy asks for nothing
    if not isinstance(data, dict):
        allowed = ", ".join(sorted(_TOP_KEYS))
        raise ConfigError([*problems, doc.problem((), f"a policy is a mapping with keys: {allowed}")])
    problems += doc.unknown_keys(data, (), _TOP_KEYS)
    if "version" in data and data["version"] != 1:
        bad(("version",), f"unsupported version {data['version']!r}; allowed: 1")
    if "policing" in data:
        if data["policing"] in MECHANISMS:
            policy.policing = data["policing"]
        else:
            bad(("policing",), f"invalid {data['policing']!r}; allowed: {', '.join(MECHANISMS)}")

    vifs = data.get("vifs") or []
    if not isinstance(vifs, list):
        bad(("vifs",), "must be a list of VIF rules (each with one of vm, vm_uuid, mac, port)")
        vifs = []
    for i, entry in enumerate(vifs):
        rule = _vif_rule(doc, entry, ("vifs", i), policy.policing, bad)
        if rule is not None:
            policy.vifs.append(rule)

    bridges = data.get("bridges") or {}
    if not isinstance(bridges, dict):
        bad(("bridges",), "must be a mapping of bridge name to its settings (mirrors)")
        bridges = {}
    for br, settings in bridges.items():
        path: yamldoc.PathKey = ("bridges", br)
        try:
            validate.ifname(br)
        except ValueError as exc:
            bad(path, str(exc))
            continue
        policy.bridges[br] = path
        if settings is None:
            continue
        if not isinstance(settings, dict):
            bad(path, "must be a mapping with key: mirrors")
            continue
        problems.extend(doc.unknown_keys(settings, path, _BRIDGE_KEYS))
        mirrors = settings.get("mirrors") or {}
        if not isinstance(mirrors, dict):
            bad((*path, "mirrors"), "must be a mapping of mirror name to its definition (or 'remove')")
            continue
        active = 0
        for name, spec in mirrors.items():
            rule = _mirror_rule(doc, br, name, spec, (*path, "mirrors", name), bad)
            if rule is not None:
                policy.mirrors.append(rule)
                active += 0 if rule.remove else 1
        if active > MAX_MIRRORS_PER_BRIDGE:
            bad(
                (*path, "mirrors"),
                f"{active} mirrors on bridge {br}; OVS allows at most {MAX_MIRRORS_PER_BRIDGE} per bridge",
            )
    if problems:
        raise ConfigError(problems)
    return policy


def _is_remove(value: Any) -> bool:
    return value is None or (isinstance(value, str) and value.lower() in _REMOVE_WORDS)


def _vif_rule(doc: yamldoc.Document, entry: Any, path: yamldoc.PathKey, policing: str, bad: Any) -> VifRule | None:
    if not isinstance(entry, dict):
        bad(path, "a VIF rule is a mapping: one of vm, vm_uuid, mac, port, plus vlan/ingress/egress")
        return None
    for p in doc.unknown_keys(entry, path, _VIF_KEYS):
        bad((*path, p.field.rsplit(".", 1)[-1]), p.message)
    kinds = [k for k in Selector.KINDS if k in entry]
    if len(kinds) != 1:
        bad(path, f"name exactly one selector of {', '.join(Selector.KINDS)} (found {len(kinds)})")
        return None
    kind = kinds[0]
    optional = entry.get("optional", False)
    if not isinstance(optional, bool):
        bad((*path, "optional"), "must be true or false")
        optional = False
    try:
        kind, pattern = parse_selector({kind: entry[kind]})
    except ValueError as exc:
        bad((*path, kind), str(exc))
        return None
    rule = VifRule(Selector(kind, pattern, optional, (*path, kind)), path=path)
    if "vlan" in entry:
        rule.vlan = _vlan(entry["vlan"], (*path, "vlan"), bad)
    if "ingress" in entry:
        rule.ingress = _ingress(entry["ingress"], (*path, "ingress"), policing, bad)
    if "egress" in entry:
        rule.egress = _egress(entry["egress"], (*path, "egress"), bad)
    return rule


def vlan_from_fields(mode: Any, tag: Any, trunks: Any) -> Vlan:
    """A whole VLAN setting from its three fields, or ``ValueError`` naming the field.

    Raises ``ValueError(field, message)``-style errors via :class:`FieldError`.
    """
    if mode is None:
        if tag is not None and trunks is None:
            mode = "access"
        elif trunks is not None and tag is None:
            mode = "trunk"
        elif tag is not None:
            raise FieldError("mode", "tag and trunks together need mode native-tagged or native-untagged")
        else:
            raise FieldError("(vlan)", "give tag (access), trunks (trunk) or mode; 'remove' isolates the VIF")
    try:
        mode = validate.vlan_mode(mode)
    except ValueError as exc:
        raise FieldError("mode", str(exc)) from None
    tag_v: int | None = None
    if tag is not None:
        if mode == "trunk":
            raise FieldError("tag", "a trunk port carries no tag; use native-tagged/native-untagged for a native VLAN")
        try:
            tag_v = validate.vlan_id(tag)
        except ValueError as exc:
            raise FieldError("tag", str(exc)) from None
    elif mode != "trunk":
        raise FieldError("tag", f"mode {mode} needs a tag (0..4094)")
    trunks_v: tuple[int, ...] = ()
    if trunks is not None:
        if mode == "access":
            raise FieldError("trunks", "an access port has no trunks; use mode trunk or native-*")
        if isinstance(trunks, str) and trunks.strip().lower() == "all":
            trunks_v = ()
        else:
            try:
                trunks_v = tuple(validate.vlan_list(trunks))
            except ValueError as exc:
                raise FieldError("trunks", str(exc)) from None
            if not trunks_v:
                raise FieldError("trunks", "an empty trunk list means every VLAN in OVS; write 'all' if you mean it")
    elif mode != "access":
        raise FieldError("trunks", f"mode {mode} needs trunks: a list like '10,20-30', or 'all' for every VLAN")
    return Vlan(mode, tag_v, trunks_v)


class FieldError(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.field = field


def _vlan(value: Any, path: yamldoc.PathKey, bad: Any) -> Vlan | object | None:
    if _is_remove(value):
        return REMOVE
    if isinstance(value, int) and not isinstance(value, bool):
        value = {"tag": value}
    if not isinstance(value, dict):
        bad(path, "must be a mapping (mode, tag, trunks), a tag number, or 'remove'")
        return None
    unknown = [k for k in value if k not in _VLAN_KEYS]
    for k in unknown:
        bad((*path, k), "unknown key; allowed: mode, tag, trunks")
    if unknown:
        return None
    try:
        return vlan_from_fields(value.get("mode"), value.get("tag"), value.get("trunks"))
    except FieldError as exc:
        bad(path if exc.field == "(vlan)" else (*path, exc.field), str(exc))
        return None


def ingress_from_fields(rate: Any, burst: Any, mechanism: Any) -> Ingress:
    try:
        rate_v = kbit(rate, "rate")
    except ValueError as exc:
        raise FieldError("rate", str(exc)) from None
    if rate_v == 0:
        raise FieldError("rate", "rate 0 would mean 'no limit'; write 'ingress: remove' to remove policing")
    if burst is None:
        burst_v = default_burst_kbit(rate_v)
    else:
        try:
            burst_v = kbit(burst, "burst")
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


def _ingress(value: Any, path: yamldoc.PathKey, policing: str, bad: Any) -> Ingress | object | None:
    if _is_remove(value):
        return REMOVE
    if isinstance(value, (int, str)) and not isinstance(value, bool):
        value = {"rate": value}
    if not isinstance(value, dict) or "rate" not in value:
        bad(path, "must be a mapping with rate (kbit/s), optional burst (kbit) and mechanism, or 'remove'")
        return None
    for k in value:
        if k not in _INGRESS_KEYS:
            bad((*path, k), "unknown key; allowed: burst, mechanism, rate")
    try:
        return ingress_from_fields(value["rate"], value.get("burst"), value.get("mechanism", policing))
    except FieldError as exc:
        bad((*path, exc.field), str(exc))
        return None


def egress_from_fields(rate: Any, burst: Any) -> Egress:
    try:
        rate_v = kbit(rate, "rate")
    except ValueError as exc:
        raise FieldError("rate", str(exc)) from None
    if rate_v == 0:
        raise FieldError("rate", "rate 0 would mean 'no limit'; write 'egress: remove' to remove shaping")
    burst_v = None
    if burst is not None:
        try:
            burst_v = kbit(burst, "burst")
        except ValueError as exc:
            raise FieldError("burst", str(exc)) from None
        if burst_v == 0:
            raise FieldError("burst", "burst 0 is not allowed; omit it to let the shaper choose")
    return Egress(rate_v, burst_v)


def _egress(value: Any, path: yamldoc.PathKey, bad: Any) -> Egress | object | None:
    if _is_remove(value):
        return REMOVE
    if isinstance(value, (int, str)) and not isinstance(value, bool):
        value = {"rate": value}
    if not isinstance(value, dict) or "rate" not in value:
        bad(path, "must be a mapping with rate (kbit/s) and optional burst (kbit), or 'remove'")
        return None
    for k in value:
        if k not in _EGRESS_KEYS:
            bad((*path, k), "unknown key; allowed: burst, rate")
    try:
        return egress_from_fields(value["rate"], value.get("burst"))
    except FieldError as exc:
        bad((*path, exc.field), str(exc))
        return None


def burst_warnings(rule: VifRule) -> list[str]:
    """Bursts below one MTU-sized frame make policing drop nearly everything."""
    out = []
    if isinstance(rule.ingress, Ingress) and rule.ingress.burst_kbit < MIN_BURST_KBIT:
        out.append(
            f"{rule.selector}: ingress burst {rule.ingress.burst_kbit} kbit is below one 1500-byte frame "
            f"({MIN_BURST_KBIT} kbit); most full-size packets will be dropped"
        )
    return out


def _selectors(value: Any, path: yamldoc.PathKey, bad: Any) -> tuple[Selector, ...]:
    if value is None:
        return ()
    items = value if isinstance(value, list) else [value]
    out = []
    for i, item in enumerate(items):
        p = (*path, i) if isinstance(value, list) else path
        try:
            kind, pattern = parse_selector(item)
        except ValueError as exc:
            bad(p, str(exc))
            continue
        out.append(Selector(kind, pattern, False, p))
    return tuple(out)


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
            return MirrorOutput("vlan", vlan=validate.vlan_id(value["vlan"]))
        except ValueError as exc:
            raise FieldError("output.vlan", str(exc)) from None
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


def _mirror_rule(
    doc: yamldoc.Document, bridge: str, name: Any, spec: Any, path: yamldoc.PathKey, bad: Any
) -> MirrorRule | None:
    if not isinstance(name, str) or not name or len(name) > 64:
        bad(path, "mirror names are non-empty strings of at most 64 characters")
        return None
    if _is_remove(spec):
        return MirrorRule(bridge, name, remove=True, path=path)
    if not isinstance(spec, dict):
        bad(path, "a mirror is a mapping (select, output, snaplen, filter) or 'remove'")
        return None
    for k in spec:
        if k not in _MIRROR_KEYS:
            bad((*path, k), "unknown key; allowed: " + ", ".join(sorted(_MIRROR_KEYS)))
    rule = MirrorRule(bridge, name, path=path)
    sel = spec.get("select")
    if sel == "all" or sel == {"all": True}:
        rule.select_all = True
    elif isinstance(sel, dict):
        for k in sel:
            if k not in _SELECT_KEYS:
                bad((*path, "select", k), "unknown key; allowed: all, dst, src, vlans")
        if sel.get("all") not in (None, False, True):
            bad((*path, "select", "all"), "must be true or false")
        rule.select_all = sel.get("all") is True
        rule.src = _selectors(sel.get("src"), (*path, "select", "src"), bad)
        rule.dst = _selectors(sel.get("dst"), (*path, "select", "dst"), bad)
        if sel.get("vlans") is not None:
            try:
                rule.vlans = tuple(validate.vlan_list(sel["vlans"]))
            except ValueError as exc:
                bad((*path, "select", "vlans"), str(exc))
        if rule.select_all and (rule.src or rule.dst):
            bad((*path, "select"), "'all' already selects every port; drop src/dst or 'all'")
        if not (rule.select_all or rule.src or rule.dst or rule.vlans):
            bad((*path, "select"), "selects nothing; give src, dst, vlans or all: true")
    else:
        bad((*path, "select"), "required: 'all', or a mapping with src, dst (VIF selectors) and/or vlans")
    if "output" not in spec:
        bad((*path, "output"), "required: one of port, vlan (RSPAN), gre or erspan (remote collector)")
    else:
        try:
            rule.output = mirror_output(spec["output"])
        except FieldError as exc:
            bad((*path, *exc.field.split(".")), str(exc))
    if "snaplen" in spec:
        sn = spec["snaplen"]
        if isinstance(sn, bool) or not isinstance(sn, int) or not 14 <= sn <= 65535:
            bad((*path, "snaplen"), "snaplen must be an integer 14..65535 (bytes kept of each copy)")
        else:
            rule.snaplen = sn
    if "filter" in spec:
        if not isinstance(spec["filter"], str) or not spec["filter"].strip():
            bad((*path, "filter"), "filter is an OpenFlow match string, e.g. 'tcp,tp_dst=80'")
        else:
            rule.filter = spec["filter"]
    allow = spec.get("allow_isolation_exception", False)
    if not isinstance(allow, bool):
        bad((*path, "allow_isolation_exception"), "must be true or false")
    rule.allow_isolation_exception = allow is True
    return rule
