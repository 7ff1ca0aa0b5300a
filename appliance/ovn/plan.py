"""The policy vocabulary on an OVN pool: VIF selectors resolve to logical switch ports, limits to QoS rules.

Why QoS rules, not a port's ``options:qos_max_rate``: OVN turns a QoS rule's
``bandwidth`` into an OpenFlow meter on the chassis that binds the port, so
it is enforced on every datapath (userspace and DPDK too) and can be seen
on that chassis (``ovs-ofctl dump-meters br-int``); ``qos_max_rate`` is a
tc/HTB queue that OVN applies only on some port types and that the
userspace datapath ignores.  So:

* ``ingress`` (what the VM may send) is a ``from-lport`` rule matching
  ``inport == "PORT"``, rate and burst as given;
* ``egress`` (what the VM may receive) is a ``to-lport`` rule matching
  ``outport == "PORT"``: OVN *polices* it with a meter -- there is no shaper
  for a logical port -- and the plan says so rather than pretend to shape.

Rules hvnet makes carry ``external_ids`` ``hvnet-owner=hvnet``,
``hvnet-port`` and ``hvnet-direction``; no other rule is ever changed.
What the pool cannot express is refused with ``file:line: field``: VLAN
settings (a logical port's network is its logical switch, not a tag),
mirrors and sFlow/IPFIX (not applied to pools by hvnet yet), a policing
mechanism other than OVN's meters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .. import yamldoc
from ..errors import ConfigError, Problem
from ..policy.model import OWNER, OWNER_KEY, REMOVE, Policy
from .view import PoolView, PortView, QosView

PRIORITY = 2000  # above what OpenStack and OVN-Kubernetes use for their own QoS rules (<= 1000 here)
DIRECTIONS = {"ingress": ("from-lport", "inport"), "egress": ("to-lport", "outport")}


@dataclass(frozen=True)
class Limit:
    """One rule hvnet wants on one port: the direction (``from-lport``/``to-lport``), rate and burst."""

    switch: str
    port: str
    vm: str | None
    direction: str
    rate_kbps: int
    burst_kbit: int

    @property
    def match(self) -> str:
        field_name = "inport" if self.direction == "from-lport" else "outport"
        return f'{field_name} == "{self.port}"'

    def describe(self) -> str:
        who = self.vm or self.port
        what = "ingress policing" if self.direction == "from-lport" else "egress (policed by a meter, not shaped)"
        return f"{who}: {what} {self.rate_kbps} kbit/s burst {self.burst_kbit} kbit"


@dataclass
class PoolPlan:
    """What one NB transaction must do: rules to add, to change (row uuid, wanted) and to delete."""

    add: list[Limit] = field(default_factory=list)
    modify: list[tuple[str, Limit]] = field(default_factory=list)
    delete: list[tuple[str, str, QosView]] = field(default_factory=list)  # (row uuid, switch, rule)
    unchanged: list[Limit] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.add or self.modify or self.delete)

    def wanted(self) -> list[Limit]:
        """Every limit the policy asks for, as it will be once the plan is applied."""
        return [*self.unchanged, *self.add, *(lim for _, lim in self.modify)]

    def lines(self) -> list[str]:
        out = [f"+ {lim.switch}: {lim.describe()}" for lim in self.add]
        out += [f"~ {lim.switch}: {lim.describe()}" for _, lim in self.modify]
        out += [f"- {sw}: {q.direction} rule {q.external_ids.get('hvnet-port', '?')}" for _, sw, q in self.delete]
        return out


def owned(q: QosView) -> bool:
    return q.external_ids.get(OWNER_KEY) == OWNER


def plan(view: PoolView, policy: Policy) -> PoolPlan:
    """The NB changes that make ``view`` match ``policy``; ConfigError for what a pool cannot take."""
    problems = _refusals(policy)
    wanted: dict[tuple[str, str], Limit | None] = {}  # (port, direction) -> Limit, or None to remove
    ports = view.ports()
    for rule in policy.vifs:
        hits = [(sw, p) for sw, p in ports if _selects(rule.selector, p)]
        if not hits and not rule.selector.optional:
            problems.append(_problem(policy, rule.path, f"{rule.selector} selects no port of pool {view.name}"))
        for attr, (direction, _) in DIRECTIONS.items():
            setting = getattr(rule, attr)
            if setting is None:
                continue
            for sw, p in hits:
                wanted[(p.name, direction)] = None if setting is REMOVE else Limit(
                    sw, p.name, p.vm, direction, setting.rate_kbps, _burst(setting))  # fmt: skip
    if problems:
        raise ConfigError(problems)
    return _diff(view, wanted)


def _burst(setting: object) -> int:
    burst = getattr(setting, "burst_kbit", None)
    rate = int(getattr(setting, "rate_kbps", 0))
    return int(burst) if burst else max(12, int(rate * 0.8))


def _diff(view: PoolView, wanted: dict[tuple[str, str], Limit | None]) -> PoolPlan:
    out = PoolPlan()
    existing: dict[tuple[str, str], tuple[str, str, QosView]] = {}
    for s in view.switches:
        for q in s.qos:
            if owned(q):
                key = (q.external_ids.get("hvnet-port", ""), q.direction)
                existing[key] = (q.uuid, s.name, q)
    for key, lim in sorted(wanted.items(), key=lambda kv: kv[0]):
        have = existing.get(key)
        if lim is None:
            if have is not None:
                out.delete.append(have)
            continue
        if have is None:
            out.add.append(lim)
        elif have[1] != lim.switch:  # the port moved to another logical switch: its rule moves with it
            out.delete.append(have)
            out.add.append(lim)
        elif (have[2].rate_kbps, have[2].burst_kbit) != (lim.rate_kbps, lim.burst_kbit):
            out.modify.append((have[0], lim))
        else:
            out.unchanged.append(lim)
    return out


def _selects(selector: object, p: PortView) -> bool:
    kind = getattr(selector, "kind", "")
    matches = selector.matches
    if kind == "vm":
        return bool(matches(p.vm))
    if kind == "port":
        return bool(matches(p.name))
    if kind == "mac":
        return any(matches(a.split()[0]) for a in p.addresses if a and a[0] in "0123456789abcdefABCDEF")
    return False  # vm_uuid: the chassis knows it, the pool's databases do not


def _refusals(policy: Policy) -> list[Problem]:
    out = []
    for rule in policy.vifs:
        if rule.vlan is not None:
            out.append(_problem(policy, (*rule.path, "vlan"), "on an OVN pool a port's network is its logical "
                                "switch, not a VLAN tag: move the port between logical switches in OVN"))  # fmt: skip
        ingress = rule.ingress
        if ingress is not None and ingress is not REMOVE and getattr(ingress, "mechanism", "auto") != "auto":
            why = "an OVN pool polices with OVN's meters (QoS rules): leave 'mechanism' out"
            out.append(_problem(policy, (*rule.path, "ingress", "mechanism"), why))
        if rule.selector.kind == "vm_uuid":
            out.append(_problem(policy, rule.path, "vm_uuid selects nothing on an OVN pool: use vm, mac or port"))
    for m in policy.mirrors:
        out.append(_problem(policy, m.path, "mirrors are not applied to OVN pools by hvnet yet (OVN's own "
                            "Mirror table: ovn-nbctl mirror-add)"))  # fmt: skip
    for s in policy.sampling:
        out.append(_problem(policy, s.path, f"{s.kind} is configured per chassis bridge, not on an OVN pool: "
                            "use --host on each chassis"))  # fmt: skip
    return out


def _problem(policy: Policy, path: tuple[Any, ...], message: str) -> Problem:
    return Problem(policy.source, policy.line(tuple(path)), yamldoc.dotted(path), message)
