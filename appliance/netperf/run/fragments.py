"""A suite's policy fragments at run time: applied, described as its steps record them, restored.

The suite's ``setup`` and each case's ``policy`` are applied with the policy
engine -- one transaction, verified, meters where tc cannot police -- and
undone afterwards even when the run fails: :meth:`Fragments.apply` undoes
its own changes if anything after the commit fails, and the runner restores
the rest in its ``finally``.  What a step records of its fragment (the
client VIF's policing, the mirrors and TAPs copying its traffic, the
engine's enforcement report) is kept in a :class:`CaseState`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from appliance.core.errors import HvnetError
from appliance.netperf.run import arrival
from appliance.netperf.run import collectors as monitoring
from appliance.netperf.store.records import MirrorInfo, Policing
from appliance.policy import Change, Policy, PolicyEngine


@dataclass
class CaseState:
    """What a fragment left in force for a case (or the suite's setup), and what the case runs beside it."""

    changes: list[Change] = field(default_factory=list)
    enforcement: list[dict[str, Any]] = field(default_factory=list)
    policing: Optional[Policing] = None
    mirrors: list[MirrorInfo] = field(default_factory=list)
    monitoring: Optional[monitoring.CaseMonitoring] = None  # the case's sFlow/IPFIX and collectors
    capture_vifs: dict[str, str] = field(default_factory=dict)  # the case's listeners: guest -> VIF captured
    collector: Optional[arrival.CollectorCounters] = None  # a GRE/ERSPAN output's collector guest
    cpus: Optional[dict[str, Any]] = None  # the case's CPU placement: asked and read back (see .pinning)


class Fragments:
    """Applies and restores the fragments; reports through ``warn``/``info`` and records what it could not
    undo through ``problem`` (the run's restore problems)."""

    def __init__(
        self,
        engine: PolicyEngine,
        client_vif: Optional[str],
        *,
        warn: Callable[[str], None],
        info: Callable[[str], None],
        problem: Callable[[str], None],
    ) -> None:
        self.engine = engine
        self.client_vif = client_vif
        self.warn, self.info, self.problem = warn, info, problem

    def apply(self, policy: Policy, label: str) -> CaseState:
        """Apply a fragment; if anything after the commit fails, undo it before raising (never left behind)."""
        result = self.engine.apply(policy)
        changes = list(result.plan.changes) if result.status in ("applied", "unchanged") else []
        try:
            if not result.ok:
                raise HvnetError(f"suite {label}: the policy could not be applied: {'; '.join(result.problems)}")
            return self._describe(policy, label, result, changes)
        except BaseException:
            if changes:
                self.restore(changes, label)
            raise

    def restore(self, changes: list[Change], label: str) -> None:
        """Undo a fragment's changes; what could not be undone is a restore problem, not an exception."""
        result = self.engine.undo(changes, label=f"hvnet suite run: restore {label}")
        for w in result.plan.warnings:
            self.warn(f"restore {label}: {w}")
        if not result.ok:
            self.problem(f"restore {label}: {result.status}: {'; '.join(result.problems) or 'see the audit log'}")
            return
        self.info(f"{label}: restored")

    def _describe(self, policy: Policy, label: str, result: Any, changes: list[Change]) -> CaseState:
        cs = CaseState(changes=changes, enforcement=[e.to_json() for e in result.enforcement])
        for w in result.plan.warnings:
            self.warn(f"{label}: {w}")
        snap = self.engine.snapshot()
        cs.policing = self._policing(snap, cs.enforcement, label)
        cs.mirrors = copies(policy, snap)
        self.info(f"{label}: policy applied ({len(cs.changes)} change(s))")
        return cs

    def _policing(self, snap: Any, enforcement: list[dict[str, Any]], label: str) -> Optional[Policing]:
        """The client VIF's ingress policing as the switch has it, and whether the engine saw it enforced."""
        port = snap.ports.get(self.client_vif or "")
        ingress = port.police.effective() if port is not None else None
        if ingress is None:
            return None
        verified = next((e["verified"] for e in enforcement if e["port"] == port.name and e["kind"] == "ingress"), None)
        if verified is False:
            self.warn(f"{label}: policing on {port.name} is configured but NOT enforced by this host")
        return Policing(port.name, ingress.rate_kbps * 1000, ingress.burst_kbit * 1000, ingress.mechanism, verified)


def copies(policy: Policy, snap: Any) -> list[MirrorInfo]:
    """The fragment's mirrors and TAPs as the switch has them: what each copies, and to where."""
    out = []
    for rule in policy.mirrors:
        m = snap.mirrors.get((rule.bridge, rule.name))
        if m is not None:
            out.append(
                MirrorInfo(rule.name, rule.bridge, m.cols.output_port, list(m.cols.src), list(m.cols.dst),
                           tunnel=_tunnel(m.cols.tunnel))
            )  # fmt: skip
    for tap in policy.taps:
        br = snap.bridges.get(tap.bridge)
        cols = br.taps.get(tap.name) if br is not None else None
        if cols is not None and not tap.remove:
            src = list(cols.vifs) if cols.direction in ("in", "both") else []
            dst = list(cols.vifs) if cols.direction in ("out", "both") else []
            out.append(MirrorInfo(tap.name, tap.bridge, cols.output_port, src, dst, f"tap-{cols.method}",
                                  _tunnel(cols.tunnel)))  # fmt: skip
    return out


def _tunnel(cols: Any) -> Optional[dict[str, Any]]:
    """A GRE/ERSPAN output's tunnel port as a run records it (None: a port or VLAN output)."""
    return None if cols is None else {"type": cols.type, "options": dict(cols.options)}
