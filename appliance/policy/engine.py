"""Applying intents: plan, one transaction, meters, verification, rollback, audit.

:class:`PolicyEngine` is what the CLI, the TUI and the agent hold.  Every
intent -- a policy file, ``vif set``, ``mirror add``, a rollback -- goes
through :meth:`PolicyEngine.apply_changes` or :meth:`PolicyEngine.apply`:

1. plan against a snapshot of the replica (inside the transaction's build
   function, so a TRY_AGAIN re-plans against fresh state);
2. commit everything in one OVSDB transaction, waiting for ovs-vswitchd;
3. bring the OpenFlow meters in line with what was committed -- if that
   fails, the OVSDB part is restored with the inverse changes;
4. re-read and verify (ports have an ofport, no Interface error, policing
   installed by the mechanism that was chosen), a few times ~1 s apart;
5. write the rollback record and one audit line.
"""

from __future__ import annotations

import gc
import logging
from dataclasses import dataclass, field, replace
from typing import Any, Callable

from ..errors import ConfigError, HvnetError, Problem
from ..host import Host
from ..inventory import vm_uuid_of
from ..names import resolve_names
from ..ovsdb import Connection, TxnContext
from ..ovsdb import column as col
from . import journal, openflow, planner, writer
from .journal import Journal
from .model import DEAD, Ingress, Policy
from .planner import Change, Plan, PlanOptions
from .state import State, VlanCols
from .state import read as read_state

log = logging.getLogger("hvnet.policy")

VERIFY_ATTEMPTS = 4
VERIFY_INTERVAL_S = 1.0


@dataclass
class Enforcement:
    """What a VIF's limits are enforced by, and whether that was observed."""

    port: str
    kind: str  # "ingress" | "egress"
    mechanism: str  # "meter" | "tc" | "htb"
    verified: bool | None  # None: could not be checked
    detail: str

    @property
    def verdict(self) -> str:
        return {True: "enforced", False: "NOT ENFORCED", None: "not verified"}[self.verified]

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()


@dataclass
class ApplyResult:
    plan: Plan
    status: str  # "applied" | "unchanged" | "dry-run" | "rolled back" | "failed"
    attempts: int = 0
    enforcement: list[Enforcement] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)  # verification findings
    isolated: dict[str, str] = field(default_factory=dict)  # port -> reason (fail-closed)
    record_id: str | None = None
    openflow: dict[str, Any] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return self.status in ("applied", "unchanged", "dry-run") and not self.problems

    def to_json(self) -> dict[str, Any]:
        return {
            "status": self.status,
            "ok": self.ok,
            "attempts": self.attempts,
            "changes": [change_json(c) for c in self.plan.changes],
            "warnings": self.plan.warnings,
            "problems": self.problems,
            "isolated": self.isolated,
            "enforcement": [e.to_json() for e in self.enforcement],
            "record_id": self.record_id,
        }


def change_json(c: Change) -> dict[str, Any]:
    """A change for ``--json`` output: stored values plus their human descriptions."""
    return {**journal.change_to_json(c), "before_text": c.describe(c.before), "after_text": c.describe(c.after)}


class PolicyEngine:
    """Plans and applies policies on one open OVSDB connection."""

    def __init__(self, conn: Connection, host: Host, *, command: str = "hvnet", audit: bool = True) -> None:
        self.conn = conn
        self.host = host
        self.command = command
        self.audit = audit
        self.remote = conn.target.remote
        self.journal = Journal.for_host(host)
        self.of = openflow.OpenFlow.for_host(host)
        self._names_sources = host.name_sources()
        self._names: dict[str, str] = {}
        self._tc_police: bool | None = None
        self.force_policing: str | None = None
        self.lenient = False  # the agent's planning mode (see PlanOptions.lenient)

    def __enter__(self) -> PolicyEngine:
        return self

    def __exit__(self, *exc: object) -> None:
        self.conn.close()

    # -- reading ---------------------------------------------------------------

    def _refresh_names(self) -> None:
        """Look up the names of VMs not seen before (libvirt/XAPI calls: outside any transaction)."""
        if not self._names_sources:
            return
        with self.conn.lock:
            found = (vm_uuid_of(col(i, "external_ids")) for i in self.conn.idl.tables["Interface"].rows.values())
            uuids = {u for u in found if u}
        missing = uuids - set(self._names)
        if missing:
            for u, (name, _src) in resolve_names(self._names_sources, missing).items():
                self._names[u] = name

    def _read(self, conn: Connection) -> State:
        """The planner's snapshot, VM names attached (caller holds the lock or is in a transaction)."""
        return read_state(conn, self._names)

    def snapshot(self) -> State:
        self._refresh_names()
        with self.conn.lock:
            return self._read(self.conn)

    def options(self) -> PlanOptions:
        if self._tc_police is None and self.force_policing in (None, "auto"):
            self._tc_police = openflow.tc_police_works(self.host.runner, self.host.paths.cache_dir)
        return PlanOptions(tc_police=bool(self._tc_police), openflow=self.of is not None, lenient=self.lenient)

    def plan(self, policy: Policy) -> Plan:
        return planner.plan(self._forced(policy), self.snapshot(), self.options())

    def _forced(self, policy: Policy) -> Policy:
        if self.force_policing is None:
            return policy
        rules = [
            replace(r, ingress=replace(r.ingress, mechanism=self.force_policing))
            if isinstance(r.ingress, Ingress)
            else r
            for r in policy.vifs
        ]
        return replace(policy, vifs=rules, policing=self.force_policing)

    # -- applying --------------------------------------------------------------

    def apply(self, policy: Policy, *, dry_run: bool = False, verify: bool = True, wait: bool = True) -> ApplyResult:
        """Make the switch match ``policy``; all or nothing."""
        policy = self._forced(policy)
        options = self.options()
        self._refresh_names()
        return self._run(lambda state: planner.plan(policy, state, options), dry_run=dry_run, verify=verify, wait=wait)

    def apply_changes(
        self, changes: list[Change], *, label: str, wait: bool = True, record: bool = True
    ) -> ApplyResult:
        """Apply given changes (a rollback, a test's set-up): each only if the row is still as it expects.

        ``record=False`` keeps the last-apply record as it is: a test's set-up and
        its undo must not become what ``hvnet rollback`` undoes.
        """

        def make_plan(state: State) -> Plan:
            result = Plan()
            for c in changes:
                current = current_value(state, c)
                if current != c.before:
                    result.warnings.append(
                        f"{c.target} {c.kind}: left as is, changed since "
                        f"(now {c.describe(current)}, expected {c.describe(c.before)})"
                    )
                    continue
                result.changes.append(c)
            return result

        return self._run(make_plan, dry_run=False, verify=True, wait=wait, label=label, record=record)

    def undo(self, changes: list[Change], *, label: str, wait: bool = True, record: bool = True) -> ApplyResult:
        """Put back what ``changes`` replaced, newest first; a row changed since is left alone and reported.

        The one rollback every caller uses (``hvnet rollback``, the automatic
        rollback of an unconfirmed apply, a suite restoring its cases, an
        isolation check undoing its set-up with ``record=False``).
        """
        return self.apply_changes(inverse(changes), label=label, wait=wait, record=record)

    def _run(
        self,
        make_plan: Callable[[State], Plan],
        *,
        dry_run: bool,
        verify: bool,
        wait: bool,
        label: str | None = None,
        record: bool = True,
    ) -> ApplyResult:
        keep_record = record
        if dry_run:
            with self.conn.lock:
                state = self._read(self.conn)
            return ApplyResult(make_plan(state), "dry-run")

        def build(ctx: TxnContext) -> Plan:
            plan = make_plan(self._read(ctx.conn))
            writer.write(ctx, plan.changes)
            return plan

        # A full garbage collection walks the whole replica (~80 ms at 1000 VIFs) and
        # nothing here makes reference cycles worth collecting mid-transaction.
        gc_was_enabled = gc.isenabled()
        gc.disable()
        try:
            txn = self.conn.transact(build, comment=label or self.command, wait_for_vswitchd=wait, timeout=15.0)
        finally:
            if gc_was_enabled:
                gc.enable()
        plan: Plan = txn.value
        result = ApplyResult(plan, "applied" if plan.changes else "unchanged", attempts=txn.attempts)
        try:
            # Meters live outside OVSDB: with nothing to commit they may still have drifted
            # (ovs-vswitchd restarted); sync compares first and changes only what differs.
            if not plan.changes or any(_touches_meters(c) for c in plan.changes):
                result.openflow = self.sync_openflow(plan.bridges() or None)
        except HvnetError as exc:
            if self.lenient:
                # The agent keeps what it committed (a VLAN must not be undone because
                # ovs-vswitchd is restarting) and brings the meters in line next time.
                result.problems.append(f"meters not installed yet ({exc.message}); will retry")
                self._audit(plan.changes, f"applied; meters pending: {exc.message}")
                return result
            log.error("OpenFlow meters failed after the OVSDB commit: %s; restoring", exc)
            self._restore(plan.changes, wait)
            self._audit(plan.changes, f"rolled back: meters failed: {exc.message}")
            result.status = "rolled back"
            result.problems.append(f"meter installation failed ({exc.message}); the OVSDB changes were undone")
            return result
        if not plan.changes and not any(v["added"] or v["modified"] or v["removed_ofports"]
                                        for v in result.openflow.values()):  # fmt: skip
            self._audit(plan.changes, "unchanged")
            return result
        if self.of is not None and wait and any(c.kind in ("vlan", "mirror") for c in plan.changes):
            self.of.purge_datapath()
        if verify and wait:
            self._verify(plan, result)
        if plan.changes:
            record = self.journal.new_record(label or self.command, plan.changes)
            result.record_id = record["id"]
            if self.audit and keep_record:
                self.journal.save_last(record)
        outcome = "applied" if not result.problems else "applied with problems: " + "; ".join(result.problems)
        self._audit(plan.changes, outcome, isolated=result.isolated or None)
        return result

    def _audit(self, changes: list[Change], result: str, **extra: Any) -> None:
        if self.audit:
            self.journal.audit(self.command, changes, result, **{k: v for k, v in extra.items() if v})

    def _restore(self, changes: list[Change], wait: bool) -> None:
        undo = inverse(changes)

        def build(ctx: TxnContext) -> None:
            state = read_state(ctx.conn)
            writer.write(ctx, [c for c in undo if current_value(state, c) == c.before])

        self.conn.transact(build, comment="hvnet: restore after failure", wait_for_vswitchd=wait, timeout=15.0)
        try:
            self.sync_openflow({c.bridge for c in changes})
        except HvnetError as exc:
            log.error("could not bring meters back in line after restoring: %s", exc)

    # -- OpenFlow ----------------------------------------------------------------

    def openflow_drift(self) -> bool:
        """Whether hvnet's meters/flows differ from the OVSDB record (``hvnet verify``)."""
        if self.of is None:
            return False
        with self.conn.lock:
            state = read_state(self.conn)
        for br in state.bridges:
            want = openflow.wanted(state, br)
            if not self.of.available(br):
                if want:
                    return True
                continue
            if openflow.diff(self.of.read(br), want).changed:
                return True
        return False

    def sync_openflow(self, bridges: set[str] | None = None) -> dict[str, Any]:
        """Make meters/flows match the OVSDB record on ``bridges`` (all when None)."""
        if self.of is None:
            return {}
        with self.conn.lock:
            state = read_state(self.conn)
        out: dict[str, Any] = {}
        for br in sorted(bridges or state.bridges):
            if br not in state.bridges:
                continue
            want = openflow.wanted(state, br)
            if not self.of.available(br):
                if want:
                    raise HvnetError(
                        f"cannot install meters on {br}: no OpenFlow management socket in {self.of.rundir}",
                        hint="is ovs-vswitchd running on this host?",
                    )
                continue
            res = self.of.sync(br, want)
            out[br] = {"added": res.added, "modified": res.modified, "removed_ofports": res.removed}
        return out

    # -- verification --------------------------------------------------------------

    def _verify(self, plan: Plan, result: ApplyResult) -> None:
        ports = sorted({c.name for c in plan.changes if c.kind in ("vlan", "ingress", "egress")})
        tunnels = sorted(
            {c.after.tunnel.name for c in plan.changes if c.kind == "mirror" and c.after and c.after.tunnel}
        )
        bad: dict[str, str] = {}
        for attempt in range(VERIFY_ATTEMPTS):
            with self.conn.lock:
                self.conn.idl.run()
                state = self._read(self.conn)
            bad = {}
            for name in ports + tunnels:
                p = state.ports.get(name)
                if p is None:
                    bad[name] = "port disappeared"
                elif p.error:
                    bad[name] = f"interface error: {p.error}"
                elif p.ofport is None or p.ofport < 0:
                    bad[name] = "ovs-vswitchd could not add the port (ofport -1)"
            if not bad:
                break
            if attempt + 1 < VERIFY_ATTEMPTS:
                self.conn.wait_for(lambda: False, VERIFY_INTERVAL_S)
        for name, why in sorted(bad.items()):
            result.problems.append(f"{name}: {why}")
        self._check_enforcement(plan, state, result)
        # Fail closed: a VIF whose VLAN was being set but that the switch did not take goes dead.
        dead = [n for n in bad if n in state.ports and any(c.kind == "vlan" and c.name == n for c in plan.changes)]
        if dead:
            self._isolate(dead, state, result, {n: bad[n] for n in dead})

    def _isolate(self, names: list[str], state: State, result: ApplyResult, why: dict[str, str]) -> None:
        dead_cols = VlanCols.of(DEAD)

        def build(ctx: TxnContext) -> None:
            fresh = read_state(ctx.conn)
            changes = [
                Change("vlan", fresh.ports[n].bridge, n, fresh.ports[n].vlan, dead_cols)
                for n in names
                if n in fresh.ports and fresh.ports[n].vlan != dead_cols
            ]
            writer.write(ctx, changes)

        self.conn.transact(build, comment="hvnet: isolate VIFs whose policy failed", timeout=10.0)
        for n in names:
            result.isolated[n] = f"{why[n]}; moved to dead VLAN 4095 (isolated) instead of leaving it half-configured"

    def _check_enforcement(self, plan: Plan, state: State, result: ApplyResult) -> None:
        touched = {(c.name, c.kind) for c in plan.changes if c.kind in ("ingress", "egress")}
        for e in self._enforcement(state, touched):
            result.enforcement.append(e)
            if e.verified is False:
                result.problems.append(_PROBLEM[(e.kind, e.mechanism)].format(name=e.port, detail=e.detail))

    def enforcement(self, ports: set[str] | None = None) -> list[Enforcement]:
        """How the limits on ``ports`` (default: every port that has one) are enforced, as observed now.

        Reads the switch's meters and flows (one ``ovs-ofctl`` per bridge) and
        the interfaces' tc state: seconds for a large host, so callers do it
        on demand or every few seconds, not with every replica change.
        """
        state = self.snapshot()
        names = set(state.ports) if ports is None else ports & set(state.ports)
        return self._enforcement(state, {(n, k) for n in names for k in ("ingress", "egress")})

    def _enforcement(self, state: State, touched: set[tuple[str, str]]) -> list[Enforcement]:
        out: list[Enforcement] = []
        by_bridge: dict[str, openflow.Installed] = {}
        by_interface: dict[str, tuple[bool | None, bool | None]] = {}

        def tc_state(interface: str) -> tuple[bool | None, bool | None]:
            """Both directions' tc state from one pair of ``tc`` runs per interface."""
            if interface not in by_interface:
                by_interface[interface] = openflow.tc_enforcement(self.host.runner, interface)
            return by_interface[interface]

        for name, kind in sorted(touched):
            p = state.ports.get(name)
            if p is None:
                continue
            if kind == "ingress":
                eff = p.police.effective()
                if eff is None:
                    continue
                if eff.mechanism == "meter":
                    if self.of is None or not self.of.available(p.bridge):
                        out.append(Enforcement(name, kind, "meter", None, "no OpenFlow access"))
                        continue
                    inst = by_bridge.get(p.bridge) or self.of.read(p.bridge, stats=True)
                    by_bridge[p.bridge] = inst
                    meter = inst.flows.get(p.ofport or -1)
                    ok = meter is not None and inst.meters.get(meter) == (eff.rate_kbps, eff.burst_kbit)
                    detail = (
                        f"meter {meter}: {eff.rate_kbps} kbit/s burst {eff.burst_kbit} kbit installed, "
                        f"flow in_port={p.ofport}; band has dropped {inst.band_drops.get(meter, 0)} packets"
                        if ok
                        else "meter or its flow is missing from the switch"
                    )
                    out.append(Enforcement(name, kind, "meter", ok, detail))
                else:
                    police, _ = tc_state(p.interface)
                    if police is None:
                        detail = "tc cannot inspect this interface here; enforcement not verified"
                    elif police:
                        detail = "tc police filter installed on the interface's ingress"
                    else:
                        detail = (
                            "NOT enforced: OVS could not install the tc police action (this kernel lacks it); "
                            "use mechanism meter"
                        )
                    out.append(Enforcement(name, kind, "tc", police, detail))
            else:
                eff = p.qos.effective() if p.qos else None
                if eff is None:
                    continue
                _, htb = tc_state(p.interface)
                detail = (
                    "htb qdisc installed on the interface"
                    if htb
                    else ("tc cannot inspect this interface here" if htb is None else "NOT enforced: no htb qdisc")
                )
                out.append(Enforcement(name, kind, "htb", htb, detail))
        return out


_PROBLEM = {
    ("ingress", "meter"): "{name}: ingress policing not installed ({detail})",
    ("ingress", "tc"): "{name}: ingress policing configured but not enforced by tc",
    ("egress", "htb"): "{name}: egress shaping configured but no htb qdisc on the interface",
}


def inverse(changes: list[Change]) -> list[Change]:
    """The changes that undo ``changes``: each inverted, in reverse order (later changes may build on earlier)."""
    return [c.inverse() for c in reversed(changes)]


def _touches_meters(c: Change) -> bool:
    if c.kind == "protocols":
        return True
    if c.kind != "ingress":
        return False
    return any(v is not None and v.meter_rate_kbps for v in (c.before, c.after))


def current_value(state: State, c: Change) -> Any:
    """The stored value ``c`` is about, read from ``state`` (for guards and drift)."""
    if c.kind in ("vlan", "ingress", "egress"):
        p = state.ports.get(c.name)
        if p is None:
            return _GONE
        return {"vlan": p.vlan, "ingress": p.police, "egress": p.qos}[c.kind]
    if c.kind == "mirror":
        m = state.mirrors.get((c.bridge, c.name))
        return m.cols if m is not None else None
    if c.kind == "protocols":
        b = state.bridges.get(c.name)
        return b.protocols if b is not None else _GONE
    raise ValueError(c.kind)


class _Gone:
    def __repr__(self) -> str:
        return "(gone)"


_GONE = _Gone()


def require_one(state: State, text: str, what: str) -> str:
    """Resolve a CLI VIF argument (``vif1.0``, ``vm:VM3``, ``mac:...``) to exactly one port."""
    from .fields import parse_selector
    from .model import Selector

    try:
        kind, pattern = parse_selector(text)
    except ValueError as exc:
        raise ConfigError([Problem("command line", None, what, str(exc))]) from None
    ports = planner.select(state, Selector(kind, pattern), vifs_only=True)
    if len(ports) != 1:
        listing = ", ".join(p.name for p in ports[:6])
        raise ConfigError(
            [
                Problem(
                    "command line",
                    None,
                    what,
                    f"{kind} {pattern} matches {len(ports)} VIFs{': ' + listing if listing else ''}; "
                    "this command needs exactly one",
                )
            ]
        )
    return ports[0].name
