"""The policy vocabulary on an OVN pool: the NB changes that make the pool match (:class:`PoolPlan`).

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

A QoS rule belongs to the logical switch of its port: when a port moves to
another logical switch (a VLAN intent, :mod:`.intent`) its rules move with
it in the same transaction.  Rows hvnet makes (QoS, Mirror) carry
``external_ids`` ``hvnet-owner=hvnet``; no other row is ever changed, and a
logical port's own row is only moved between switches, never rewritten.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from appliance.core.errors import HvnetError
from appliance.ovn.intent import burst, desired
from appliance.ovn.model import MIRROR_NAME_KEY, Desired, Limit, Move, OvnMirror
from appliance.ovn.view import MirrorView, PoolView, QosView
from appliance.policy.plan.model import OWNER, OWNER_KEY, Policy

__all__ = ["PRIORITY", "Limit", "Move", "OvnMirror", "PoolPlan", "burst", "diff", "plan", "undo"]

PRIORITY = 2000  # above what OpenStack and OVN-Kubernetes use for their own QoS rules (<= 1000 here)


@dataclass
class MirrorChange:
    """A Mirror row to add (``uuid`` empty), change or delete (``wanted`` None), and its ports' attachments."""

    uuid: str
    before: MirrorView | None
    wanted: OvnMirror | None
    attach: tuple[str, ...] = ()  # logical ports whose mirror_rules gain the row
    detach: tuple[str, ...] = ()  # ... and lose it

    @property
    def name(self) -> str:
        return self.wanted.row if self.wanted else (self.before.name if self.before else "?")


@dataclass
class PoolPlan:
    """What one NB transaction must do: QoS rules to add, change and delete, ports to move, mirror rows."""

    add: list[Limit] = field(default_factory=list)
    modify: list[tuple[str, Limit]] = field(default_factory=list)
    delete: list[tuple[str, str, QosView]] = field(default_factory=list)  # (row uuid, switch, rule)
    unchanged: list[Limit] = field(default_factory=list)
    moves: list[Move] = field(default_factory=list)
    mirrors: list[MirrorChange] = field(default_factory=list)
    mirrors_unchanged: list[OvnMirror] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return bool(self.add or self.modify or self.delete or self.moves or self.mirrors)

    def wanted(self) -> list[Limit]:
        """Every limit the policy asks for, as it will be once the plan is applied."""
        return [*self.unchanged, *self.add, *(lim for _, lim in self.modify)]

    def wanted_mirrors(self) -> list[OvnMirror]:
        return [*self.mirrors_unchanged, *(c.wanted for c in self.mirrors if c.wanted is not None)]

    def lines(self) -> list[str]:
        out = [f"~ {m.describe()}" for m in self.moves]
        out += [f"+ {lim.switch}: {lim.describe()}" for lim in self.add]
        out += [f"~ {lim.switch}: {lim.describe()}" for _, lim in self.modify]
        out += [f"- {sw}: {q.direction} rule {q.external_ids.get('hvnet-port', '?')}" for _, sw, q in self.delete]
        for c in self.mirrors:
            mark = "+" if c.before is None else ("-" if c.wanted is None else "~")
            out.append(f"{mark} {c.wanted.describe() if c.wanted else f'mirror {c.name}'}")
        return out


def owned(ids: dict[str, str]) -> bool:
    return ids.get(OWNER_KEY) == OWNER


def plan(view: PoolView, policy: Policy) -> PoolPlan:
    """The NB changes that make ``view`` match ``policy``; ConfigError for what a pool cannot take."""
    return diff(view, desired(view, policy))


def diff(view: PoolView, want: Desired) -> PoolPlan:
    """The NB changes that make ``view`` what ``want`` says (and nothing else)."""
    out = PoolPlan()
    where = {p.name: sw for sw, p in view.ports()}
    vms = {p.name: p.vm for _, p in view.ports()}
    vlans = {s.name: s.vlan for s in view.switches}
    gone = sorted({dst for dst in want.switches.values() if dst not in vlans})
    if gone:  # a rollback to a logical switch deleted since: OVN would need a new one, hvnet makes none
        raise HvnetError(f"logical switch {', '.join(gone)} is no longer in pool {view.name}: nothing changed",
                         hint="create it in OVN again, or move the ports by hand")  # fmt: skip
    for port, dst in sorted(want.switches.items()):
        if port in where and where[port] != dst:
            out.moves.append(Move(port, vms.get(port), where[port], dst, vlans.get(dst)))
    final = {**where, **{m.port: m.dst for m in out.moves}}
    _diff_limits(view, want, final, vms, out)
    _diff_mirrors(view, want, out)
    return out


def _diff_limits(view: PoolView, want: Desired, final: dict[str, str], vms: dict[str, str | None],
                 out: PoolPlan) -> None:  # fmt: skip
    existing: dict[tuple[str, str], tuple[str, str, QosView]] = {}
    for s in view.switches:
        for q in s.qos:
            if owned(q.external_ids):
                existing[(q.external_ids.get("hvnet-port", ""), q.direction)] = (q.uuid, s.name, q)
    wanted: dict[tuple[str, str], Limit | None] = {}
    for (port, direction), value in want.limits.items():
        if value is not None and port in final:
            wanted[(port, direction)] = Limit(final[port], port, vms.get(port), direction, *value)
        elif value is None:
            wanted[(port, direction)] = None
    for key, (_, switch, q) in existing.items():  # a moved port's rules move with it, even unasked
        if key not in wanted and key[0] in final and final[key[0]] != switch and q.rate_kbps:
            wanted[key] = Limit(final[key[0]], key[0], vms.get(key[0]), key[1], q.rate_kbps, q.burst_kbit or 0)
    for key, lim in sorted(wanted.items(), key=lambda kv: kv[0]):
        have = existing.get(key)
        if lim is None:
            if have is not None:
                out.delete.append(have)
        elif have is None:
            out.add.append(lim)
        elif have[1] != lim.switch:
            out.delete.append(have)
            out.add.append(lim)
        elif (have[2].rate_kbps, have[2].burst_kbit, have[2].match) != (lim.rate_kbps, lim.burst_kbit, lim.match):
            out.modify.append((have[0], lim))  # a rule whose match is not its port's own is rewritten too
        else:
            out.unchanged.append(lim)


def _diff_mirrors(view: PoolView, want: Desired, out: PoolPlan) -> None:
    rows = {m.name: m for m in view.mirrors}
    attached: dict[str, set[str]] = {}
    for _, p in view.ports():
        for name in p.mirrors:
            attached.setdefault(name, set()).add(p.name)
    ports = {p.name for _, p in view.ports()}
    for name, m in sorted(want.mirrors.items()):
        have = rows.get(name)
        now = attached.get(name, set())
        if m is None:
            if have is not None and owned(have.external_ids):
                out.mirrors.append(MirrorChange(have.uuid, have, None, detach=tuple(sorted(now))))
            continue
        target = {p for p in m.ports if p in ports}
        if have is None:
            out.mirrors.append(MirrorChange("", None, m, attach=tuple(sorted(target))))
            continue
        current = OvnMirror(name, have.external_ids.get(MIRROR_NAME_KEY, ""), have.type, have.filter, have.sink,
                            have.index, tuple(sorted(now)))  # fmt: skip
        if current.same_row(m) and now == target:
            out.mirrors_unchanged.append(m)
        else:
            out.mirrors.append(MirrorChange(have.uuid, have, m, tuple(sorted(target - now)),
                                            tuple(sorted(now - target))))  # fmt: skip


def undo(view: PoolView, p: PoolPlan) -> Desired:
    """What ``p`` replaced, as a :class:`Desired` (a rollback record): applying it puts the values back."""
    out = Desired()
    for m in p.moves:
        out.switches[m.port] = m.src
    for lim in p.add:
        out.limits.setdefault((lim.port, lim.direction), None)
    for _, _, q in p.delete:
        key = (q.external_ids.get("hvnet-port", ""), q.direction)
        out.limits[key] = (q.rate_kbps or 0, q.burst_kbit or 0)
    before = {(q.uuid): q for s in view.switches for q in s.qos}
    for uuid, lim in p.modify:
        q = before[uuid]
        out.limits[(lim.port, lim.direction)] = (q.rate_kbps or 0, q.burst_kbit or 0)
    attached: dict[str, list[str]] = {}
    for _, port in view.ports():
        for name in port.mirrors:
            attached.setdefault(name, []).append(port.name)
    for c in p.mirrors:
        b = c.before
        out.mirrors[c.name] = None if b is None else OvnMirror(
            b.name, b.external_ids.get(MIRROR_NAME_KEY, ""), b.type, b.filter, b.sink, b.index,
            tuple(sorted(attached.get(b.name, []))))  # fmt: skip
    return out
