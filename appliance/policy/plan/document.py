"""Reading policy files: YAML in, :class:`~.model.Policy` out, or every problem at once.

Only what can be checked without the switch is checked here (types, ranges,
units, unknown keys, mirror output shape): the document's shape here, each
field's grammar in :mod:`.fields`.  Whether a selector matches a VIF,
a bridge exists or a mirror fits is the planner's business, against the
switch's state -- with the same ``file:line: field`` in its messages.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from appliance.core import validate, yamldoc
from appliance.core.documents import POLICY as POLICY_DOCUMENT
from appliance.core.errors import ConfigError, Problem
from appliance.core.validate import FieldError
from appliance.core.vlan import Vlan, vlan_from_fields, vlan_list
from appliance.policy.plan.fields import egress_from_fields, ingress_from_fields, mirror_output, parse_selector
from appliance.policy.plan.model import (
    MAX_MIRRORS_PER_BRIDGE,
    MECHANISMS,
    REMOVE,
    Egress,
    Ingress,
    MirrorRule,
    Policy,
    SamplingRule,
    Selector,
    VifRule,
)
from appliance.switch import sampling
from appliance.switch.host import DEFAULT_POLICY_FILE
from appliance.switch.sampling import KINDS as SAMPLING_KINDS

DEFAULT_POLICY = DEFAULT_POLICY_FILE

_TOP_KEYS = {"schema", "version", "policing", "vifs", "bridges"}  # schema: as hvnet export --json writes it
_VIF_KEYS = {*Selector.KINDS, "optional", "vlan", "ingress", "egress"}
_VLAN_KEYS = {"mode", "tag", "trunks"}
_INGRESS_KEYS = {"rate", "burst", "mechanism"}
_EGRESS_KEYS = {"rate", "burst"}
_BRIDGE_KEYS = {"mirrors", "taps", *SAMPLING_KINDS}
_MIRROR_KEYS = {"select", "output", "snaplen", "filter", "allow_isolation_exception"}
_SELECT_KEYS = {"all", "src", "dst", "vlans"}
_REMOVE_WORDS = ("remove", "absent")


def load(path: str | Path, *, trusted: str | None = None) -> Policy:
    """Read and validate the policy file at ``path``; ``trusted``: what it is, when only a file no other
    user could have written may be read (the policy the agent enforces as root, see :mod:`appliance.core.trusted`)."""
    return from_document(yamldoc.load(path, strict=False, trusted=trusted))


def parse(text: str, file: str) -> Policy:
    return from_document(yamldoc.parse(text, file, strict=False))


class _Problems:
    """Every problem found in one document, in the order found, each at its ``file:line: field``."""

    def __init__(self, doc: yamldoc.Document) -> None:
        self.doc = doc
        self.items: list[Problem] = list(doc.problems)  # duplicate keys, found while parsing

    def bad(self, path: yamldoc.PathKey, message: str) -> None:
        self.items.append(self.doc.problem(path, message))

    def unknown_keys(self, mapping: dict[str, Any], path: yamldoc.PathKey, allowed: set[str]) -> None:
        self.items += self.doc.unknown_keys(mapping, path, allowed)


def from_document(doc: yamldoc.Document) -> Policy:
    """The policy a parsed document asks for, or ConfigError listing every problem in it."""
    problems = _Problems(doc)
    policy = Policy(source=doc.file, lines=dict(doc.lines))
    data = doc.data
    if data is None:
        if problems.items:
            raise ConfigError(problems.items)
        return policy  # an empty policy asks for nothing
    if not isinstance(data, dict):
        allowed = ", ".join(sorted(_TOP_KEYS))
        raise ConfigError([*problems.items, doc.problem((), f"a policy is a mapping with keys: {allowed}")])
    problems.unknown_keys(data, (), _TOP_KEYS)
    _header(data, policy, problems.bad)
    _vifs(doc, data.get("vifs") or [], policy, problems.bad)
    _bridges(data.get("bridges") or {}, policy, problems)
    if problems.items:
        raise ConfigError(problems.items)
    return policy


def _header(data: dict[str, Any], policy: Policy, bad: Any) -> None:
    """``version`` and ``policing``: read before the VIF rules, whose mechanism defaults to the policing."""
    if "schema" in data and data["schema"] != POLICY_DOCUMENT.name:
        bad(("schema",), f"{data['schema']!r} is not a policy; allowed: {POLICY_DOCUMENT.name}")
    if "version" in data and data["version"] != POLICY_DOCUMENT.version:
        bad(("version",), f"unsupported version {data['version']!r}; allowed: {POLICY_DOCUMENT.version}")
    if "policing" in data:
        if data["policing"] in MECHANISMS:
            policy.policing = data["policing"]
        else:
            bad(("policing",), f"invalid {data['policing']!r}; allowed: {', '.join(MECHANISMS)}")


def _vifs(doc: yamldoc.Document, vifs: Any, policy: Policy, bad: Any) -> None:
    """The VIF rules in file order; a rule with a problem is reported and left out, the others still read."""
    if not isinstance(vifs, list):
        bad(("vifs",), "must be a list of VIF rules (each with one of vm, vm_uuid, mac, port)")
        return
    for i, entry in enumerate(vifs):
        rule = _vif_rule(doc, entry, ("vifs", i), policy.policing, bad)
        if rule is not None:
            policy.vifs.append(rule)


def _bridges(bridges: Any, policy: Policy, problems: _Problems) -> None:
    """Each bridge named (even with no settings, so the planner checks it exists) and its mirrors."""
    if not isinstance(bridges, dict):
        problems.bad(("bridges",), "must be a mapping of bridge name to its settings (mirrors)")
        return
    for br, settings in bridges.items():
        path: yamldoc.PathKey = ("bridges", br)
        try:
            validate.ifname(br)
        except ValueError as exc:
            problems.bad(path, str(exc))
            continue
        policy.bridges[br] = path
        if settings is None:
            continue
        if not isinstance(settings, dict):
            problems.bad(path, "must be a mapping with keys: ipfix, mirrors, sflow, taps")
            continue
        problems.unknown_keys(settings, path, _BRIDGE_KEYS)
        _mirrors(problems.doc, br, settings.get("mirrors") or {}, path, policy, problems.bad)
        _taps(br, settings.get("taps") or {}, path, policy, problems.bad)
        for kind in SAMPLING_KINDS:
            if kind in settings:
                rule = _sampling(br, kind, settings[kind], (*path, kind), problems.bad)
                if rule is not None:
                    policy.sampling.append(rule)


def _mirrors(doc: yamldoc.Document, br: str, mirrors: Any, path: yamldoc.PathKey, policy: Policy, bad: Any) -> None:
    """One bridge's mirrors; only those kept (not removed) count towards OVS's limit per bridge."""
    if not isinstance(mirrors, dict):
        bad((*path, "mirrors"), "must be a mapping of mirror name to its definition (or 'remove')")
        return
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


def _taps(br: str, taps: Any, path: yamldoc.PathKey, policy: Policy, bad: Any) -> None:
    """One bridge's TAPs (:mod:`.taps`): each a mapping, or 'remove'."""
    from appliance.policy.plan.taps import MAX_TAPS_PER_BRIDGE, TapRule, max_taps_message, rule_from_fields

    if not isinstance(taps, dict):
        bad((*path, "taps"), "must be a mapping of TAP name to its definition (or 'remove')")
        return
    active = 0
    for name, spec in taps.items():
        tpath = (*path, "taps", name)
        if (
            not isinstance(name, str)
            or not name
            or len(name) > 64
            or not name.replace("-", "").replace("_", "").isalnum()
        ):
            bad(tpath, "TAP names are 1..64 letters, digits, '-' or '_'")
            continue
        if _is_remove(spec):
            policy.taps.append(TapRule(br, name, remove=True, path=tpath))
            continue
        if not isinstance(spec, dict):
            bad(tpath, "a TAP is a mapping (match, vifs, direction, output, method) or 'remove'")
            continue
        rule, problems = rule_from_fields(br, name, spec, tpath)
        for field, message in problems:
            bad((*tpath, *field.split(".")), message)
        if not problems:
            policy.taps.append(rule)
            active += 1
    if active > MAX_TAPS_PER_BRIDGE:
        bad((*path, "taps"), max_taps_message(br, active))


def _sampling(br: str, kind: str, spec: Any, path: yamldoc.PathKey, bad: Any) -> SamplingRule | None:
    """A bridge's sFlow or IPFIX: a mapping of settings, or ``remove`` -- never both."""
    keys = sampling.SFLOW_KEYS if kind == "sflow" else sampling.IPFIX_KEYS
    allowed = ", ".join(keys)
    if _is_remove(spec):
        return SamplingRule(br, kind, REMOVE, path)
    if not isinstance(spec, dict):
        bad(path, f"must be a mapping ({allowed}) or 'remove'")
        return None
    ok = True
    for k in spec:
        if k == "remove" or k in _REMOVE_WORDS:
            bad((*path, k), f"'remove' takes {sampling.TITLES[kind]} away: give either it alone or settings, not both")
            ok = False
        elif k not in keys:
            bad((*path, k), f"unknown key; allowed: {allowed}")
            ok = False
    try:
        value = sampling.from_fields(kind, spec)
    except sampling.SamplingFieldError as exc:
        for field, message in exc.problems:
            bad((*path, field), message)
        return None
    return SamplingRule(br, kind, value, path) if ok else None


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
        return ingress_from_fields(value["rate"], value.get("burst"), value.get("mechanism", policing), in_file=True)
    except FieldError as exc:
        bad((*path, exc.field), str(exc))
        return None


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
        return egress_from_fields(value["rate"], value.get("burst"), in_file=True)
    except FieldError as exc:
        bad((*path, exc.field), str(exc))
        return None


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
    _mirror_select(spec.get("select"), rule, (*path, "select"), bad)
    if "output" not in spec:
        bad((*path, "output"), "required: one of port, vlan (RSPAN), gre or erspan (remote collector)")
    else:
        try:
            rule.output = mirror_output(spec["output"])
        except FieldError as exc:
            bad((*path, *exc.field.split(".")), str(exc))
    _mirror_options(spec, rule, path, bad)
    return rule


def _mirror_select(sel: Any, rule: MirrorRule, path: yamldoc.PathKey, bad: Any) -> None:
    """What the mirror copies: ``all``, or ports (src/dst selectors) and/or VLANs -- never nothing."""
    if sel == "all" or sel == {"all": True}:
        rule.select_all = True
        return
    if not isinstance(sel, dict):
        bad(path, "required: 'all', or a mapping with src, dst (VIF selectors) and/or vlans")
        return
    for k in sel:
        if k not in _SELECT_KEYS:
            bad((*path, k), "unknown key; allowed: all, dst, src, vlans")
    if sel.get("all") not in (None, False, True):
        bad((*path, "all"), "must be true or false")
    rule.select_all = sel.get("all") is True
    rule.src = _selectors(sel.get("src"), (*path, "src"), bad)
    rule.dst = _selectors(sel.get("dst"), (*path, "dst"), bad)
    if sel.get("vlans") is not None:
        try:
            rule.vlans = tuple(vlan_list(sel["vlans"]))
        except ValueError as exc:
            bad((*path, "vlans"), str(exc))
    if rule.select_all and (rule.src or rule.dst):
        bad(path, "'all' already selects every port; drop src/dst or 'all'")
    if not (rule.select_all or rule.src or rule.dst or rule.vlans):
        bad(path, "selects nothing; give src, dst, vlans or all: true")


def _mirror_options(spec: dict[str, Any], rule: MirrorRule, path: yamldoc.PathKey, bad: Any) -> None:
    """What each copy keeps (snaplen, filter) and whether the mirror may break VIF isolation."""
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
