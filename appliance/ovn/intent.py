"""A policy file read for an OVN pool: what it asks of the NB (:class:`~.model.Desired`), or why it cannot.

* A VIF selector resolves to VM ports (``type ""``) of the pool's logical
  switches: by ``vm`` (the VM the binding chassis names), ``port`` (the
  logical port's name) or ``mac`` (its addresses).
* ``vlan: {tag: N}`` is logical switch membership: the port moves to the
  logical switch that stands for VLAN N (:attr:`~.view.SwitchView.vlan`: its
  localnet port's tag, else ``external_ids:hvnet-vlan``).  A trunk or a
  native VLAN has no meaning for a logical port (OVN delivers a VM's
  traffic untagged, from one logical switch), so they are refused, as is a
  rule whose selector spans ports of several logical switches (moving them
  together would join networks the operator kept apart).
* ``ingress``/``egress`` are QoS rules (see :mod:`.plan`).
* A mirror under ``bridges.br-int.mirrors`` with a GRE/ERSPAN output is NB
  ``Mirror`` rows: its ``src`` ports on a ``from-lport`` row ``NAME-from``,
  its ``dst`` ports on a ``to-lport`` row ``NAME-to`` (a row has one
  filter).  What OVN's Mirror cannot say is refused: port and VLAN outputs
  (no ``local`` mirror in OVN before 23.06), ``all``, ``vlans``,
  ``snaplen``, ``filter``.

Every refusal is a :class:`~appliance.core.errors.Problem` with ``file:line:
field``; all of them are collected before anything is planned.
"""

from __future__ import annotations

from typing import Any

from appliance.core import yamldoc
from appliance.core.errors import ConfigError, Problem
from appliance.endpoints.topology import OVN_BRIDGE
from appliance.ovn.model import MIRROR_NAME_KEY, Desired, OvnMirror, mirror_row_name
from appliance.ovn.view import PoolView, PortView
from appliance.policy.plan.model import OWNER, OWNER_KEY, REMOVE, MirrorRule, Policy, Selector

DIRECTIONS = {"ingress": "from-lport", "egress": "to-lport"}


def desired(view: PoolView, policy: Policy) -> Desired:
    """What ``policy`` asks of the pool's NB; ConfigError with every refusal."""
    problems = _refusals(policy)
    out = Desired()
    ports = [(sw, p) for sw, p in view.ports() if p.is_vif]
    vlans = _vlan_switches(view)
    asked: dict[str, tuple[str, tuple[Any, ...]]] = {}  # port -> (switch, rule path): one answer per port
    for rule in policy.vifs:
        hits = [(sw, p) for sw, p in ports if selects(rule.selector, p)]
        if not hits and not rule.selector.optional:
            problems.append(problem(policy, rule.path, f"{rule.selector} selects no port of pool {view.name}"))
        if rule.vlan is not None and hits:
            problems += _membership(policy, view, rule, hits, vlans, asked, out)
        for attr, direction in DIRECTIONS.items():
            setting = getattr(rule, attr)
            if setting is None:
                continue
            for _, p in hits:
                out.limits[(p.name, direction)] = None if setting is REMOVE else (
                    int(setting.rate_kbps), burst(setting))  # fmt: skip
    for m in policy.mirrors:
        problems += _mirror(policy, view, m, ports, out)
    if problems:
        raise ConfigError(problems)
    return out


def burst(setting: object) -> int:
    """The burst asked for, else 80% of the rate, never below one 1500-byte frame (as on a host)."""
    value = getattr(setting, "burst_kbit", None)
    rate = int(getattr(setting, "rate_kbps", 0))
    return int(value) if value else max(12, int(rate * 0.8))


def _vlan_switches(view: PoolView) -> dict[int, list[str]]:
    out: dict[int, list[str]] = {}
    for s in view.switches:
        if s.vlan is not None:
            out.setdefault(s.vlan, []).append(s.name)
    return out


def _membership(policy: Policy, view: PoolView, rule: Any, hits: list[tuple[str, PortView]],
                vlans: dict[int, list[str]], asked: dict[str, tuple[str, tuple[Any, ...]]],
                out: Desired) -> list[Problem]:  # fmt: skip
    """The logical switch each selected port must be on for ``rule.vlan``, or why not."""
    path = (*rule.path, "vlan")
    vlan = rule.vlan
    if vlan is REMOVE:
        return [problem(policy, path, "a logical port is always on some logical switch: give the VLAN to move "
                        "it to (vlan: {tag: N}), or delete the port in OVN")]  # fmt: skip
    if vlan.mode != "access":
        return [problem(policy, path, f"{vlan.mode} has no meaning on an OVN pool: a logical port carries one "
                        "logical switch's traffic, untagged; give vlan: {tag: N}")]  # fmt: skip
    targets = vlans.get(int(vlan.tag), [])
    if len(targets) != 1:
        have = ", ".join(f"{n} ({', '.join(sw)})" for n, sw in sorted(vlans.items())) or "none"
        why = "no logical switch" if not targets else f"several logical switches ({', '.join(targets)})"
        return [problem(policy, path, f"VLAN {vlan.tag}: {why} of pool {view.name} stands for it; the pool's "
                        f"VLANs: {have} (a localnet port's tag, or external_ids:hvnet-vlan)")]  # fmt: skip
    sources = sorted({sw for sw, _ in hits})
    if len(sources) > 1:
        where = "; ".join(f"{sw}: {', '.join(sorted(p.vm or p.name for s, p in hits if s == sw))}" for sw in sources)
        return [problem(policy, rule.path, f"{rule.selector} selects ports of several logical switches ({where}); "
                        "a VLAN move takes ports of one logical switch: write a rule for each")]  # fmt: skip
    out_problems = []
    for _, p in hits:
        before = asked.get(p.name)
        if before is not None and before[0] != targets[0]:
            out_problems.append(problem(policy, path, f"{p.vm or p.name} is asked onto {before[0]} by "
                                        f"{yamldoc.dotted(before[1])} and onto {targets[0]} here"))  # fmt: skip
            continue
        asked[p.name] = (targets[0], path)
        out.switches[p.name] = targets[0]
    return out_problems


def _mirror(policy: Policy, view: PoolView, m: MirrorRule, ports: list[tuple[str, PortView]],
            out: Desired) -> list[Problem]:  # fmt: skip
    """The NB Mirror rows of one policy mirror (or its removal), or why OVN cannot take it."""
    owned = [mv for mv in view.mirrors if mv.external_ids.get(MIRROR_NAME_KEY) == m.name and _owned(mv.external_ids)]
    if m.bridge != OVN_BRIDGE:
        return [problem(policy, m.path, f"an OVN pool's mirrors are ovn-controller's, on {OVN_BRIDGE}: write "
                        f"them under bridges.{OVN_BRIDGE}.mirrors")]  # fmt: skip
    if m.remove:
        for mv in owned:
            out.mirrors[mv.name] = None
        return []
    problems = _mirror_refusals(policy, view, m)
    if problems or m.output is None:
        return problems
    index = (m.output.key or 0) if m.output.kind == "gre" else m.output.erspan_idx
    wanted: dict[str, OvnMirror] = {}
    for filter_, selectors in (("from-lport", m.src), ("to-lport", m.dst)):
        if not selectors:
            continue
        names: set[str] = set()
        for sel in selectors:
            hits = [p.name for _, p in ports if selects(sel, p)]
            if not hits:
                problems.append(problem(policy, sel.path or m.path, f"{sel} selects no port of pool {view.name}"))
            names.update(hits)
        row = mirror_row_name(m.name, filter_)
        wanted[row] = OvnMirror(row, m.name, m.output.kind, filter_, str(m.output.remote_ip), index,
                                tuple(sorted(names)))  # fmt: skip
    foreign = [mv.name for mv in view.mirrors if mv.name in wanted and not _owned(mv.external_ids)]
    if foreign:
        problems.append(problem(policy, m.path, f"the pool's NB has a Mirror {foreign[0]!r} that hvnet did not "
                                "make: rename the policy's mirror, or remove that row in OVN"))  # fmt: skip
    for mv in owned:
        out.mirrors.setdefault(mv.name, None)
    out.mirrors.update(wanted)
    return problems


def _mirror_refusals(policy: Policy, view: PoolView, m: MirrorRule) -> list[Problem]:
    out = []
    o = m.output
    version = f"the pool's OVN (NB schema {view.nb_version or '?'})"
    if not view.mirror_types:
        return [problem(policy, m.path, f"{version} has no Mirror table: port mirroring came with OVN 22.12")]
    if o is not None and o.kind not in ("gre", "erspan"):
        if "local" in view.mirror_types:
            why = f"{o.describe()}: hvnet mirrors to GRE or ERSPAN collectors on a pool (not to OVN's local mirrors)"
        else:
            why = (
                f"{o.describe()}: {version} mirrors to {', '.join(view.mirror_types)} only; a port output needs "
                "OVN's 'local' mirrors (OVN 23.06 and later); send the copies to a GRE or ERSPAN collector"
            )
        out.append(problem(policy, (*m.path, "output"), why))
    elif o is not None and o.kind not in view.mirror_types:
        out.append(problem(policy, (*m.path, "output"), f"{version} has no {o.kind} mirrors (its Mirror types: "
                           f"{', '.join(view.mirror_types)})"))  # fmt: skip
    if o is not None and o.kind == "erspan" and o.key is not None and o.key != o.erspan_idx:
        out.append(problem(policy, (*m.path, "output", "key"), "OVN uses one number as the ERSPAN session index "
                           "and key: leave key out or make it equal to idx"))  # fmt: skip
    if m.select_all or m.vlans:
        out.append(problem(policy, (*m.path, "select"), "on an OVN pool a mirror copies logical ports: name them "
                           "in src/dst (OVN mirrors no whole switch or VLAN)"))  # fmt: skip
    for key in ("snaplen", "filter"):
        if getattr(m, key) is not None:
            out.append(problem(policy, (*m.path, key), f"OVN's Mirror has no {key}: leave it out on a pool"))
    return out


def _owned(ids: dict[str, str]) -> bool:
    return ids.get(OWNER_KEY) == OWNER


def selects(selector: Selector, p: PortView) -> bool:
    """Whether ``selector`` picks logical port ``p`` (``vm_uuid`` never does: the NB does not know it)."""
    kind = selector.kind
    if kind == "vm":
        return bool(selector.matches(p.vm))
    if kind == "port":
        return bool(selector.matches(p.name))
    if kind == "mac":
        return any(selector.matches(a.split()[0]) for a in p.addresses if a and a[0] in "0123456789abcdefABCDEF")
    return False


def _refusals(policy: Policy) -> list[Problem]:
    out = []
    for rule in policy.vifs:
        ingress = rule.ingress
        if ingress is not None and ingress is not REMOVE and getattr(ingress, "mechanism", "auto") != "auto":
            why = "an OVN pool polices with OVN's meters (QoS rules): leave 'mechanism' out"
            out.append(problem(policy, (*rule.path, "ingress", "mechanism"), why))
        if rule.selector.kind == "vm_uuid":
            out.append(problem(policy, rule.path, "vm_uuid selects nothing on an OVN pool: use vm, mac or port"))
    for s in policy.sampling:
        out.append(problem(policy, s.path, f"{s.kind} is configured per chassis bridge, not on an OVN pool: "
                           "use --host on each chassis"))  # fmt: skip
    for t in policy.taps:
        out.append(problem(policy, t.path, "flow TAPs are hvnet's OpenFlow on one bridge; ovn-controller owns a "
                           "pool's br-int flows: use a mirror"))  # fmt: skip
    return out


def problem(policy: Policy, path: tuple[Any, ...], message: str) -> Problem:
    return Problem(policy.source, policy.line(tuple(path)), yamldoc.dotted(path), message)
