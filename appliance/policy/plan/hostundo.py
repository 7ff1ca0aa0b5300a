"""The undo of an unconfirmed apply as a host can run it alone: OVSDB ``transact`` operations.

An apply made with ``--no-commit`` on a hypervisor reached over SSH can cut
the very connection that would undo it (a tag on the management port or an
uplink).  So the undo is armed *on the host*, before the apply, as the
argument of ``ovsdb-client transact`` -- no Python there, nothing of hvnet
installed (see :mod:`appliance.services.deadman` for the timer).

This module is pure: recorded changes in, JSON-RPC operations out.  Rows
are found by what the host can still name when the timer fires -- a port's
and an interface's ``name``, a bridge's ``name`` -- never by UUID (a row an
apply inserts has none until it is committed).  Every change's rows are
guarded first by ``wait`` operations on their *post-change* values
(``timeout: 0``): an apply that never landed, or rows someone changed since,
make the whole transaction fail and nothing is touched.

Covered: VLAN settings (``vlan_mode``, ``tag``, ``trunks``), ingress
policing (the tc columns and hvnet's meter record in ``external_ids``) and a
bridge's OpenFlow ``protocols``.  Not covered, said per change: egress QoS,
mirrors, sFlow/IPFIX and TAP records (rows inserted or deleted through
references the host cannot name without their UUIDs), and everything
OpenFlow (meters, TAP flows): those are undone by hvnet at its next contact
with the host, or by the agent.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from appliance.core.vlan import VlanCols
from appliance.policy.plan.model import POLICE_BURST_KEY, POLICE_RATE_KEY
from appliance.policy.plan.planner import Change
from appliance.policy.plan.state import PoliceCols

DATABASE = "Open_vSwitch"
COVERED = ("vlan", "ingress", "protocols")
MAX_CHUNK_BYTES = 96 * 1024  # one argument of ovsdb-client: below Linux's 128 kB per argument (MAX_ARG_STRLEN)

Op = dict[str, Any]


@dataclass
class HostUndo:
    """The on-host undo of some changes: transactions (each a ``transact`` argument) and what it leaves out."""

    transactions: list[list[Any]] = field(default_factory=list)  # each ["Open_vSwitch", op, ...]
    covered: list[Change] = field(default_factory=list)
    skipped: list[tuple[Change, str]] = field(default_factory=list)  # change, why the host cannot undo it

    def texts(self) -> list[str]:
        """Each transaction as the one-line JSON ``ovsdb-client transact`` takes."""
        return [json.dumps(t, separators=(",", ":")) for t in self.transactions]


def plan(changes: list[Change], label: str) -> HostUndo:
    """The host's undo of ``changes`` (as recorded, oldest first): newest first, guarded, in chunks.

    A set of changes too large for one argument is split into several
    transactions, each guarded on its own rows: each is all or nothing, the
    set is not (said in :mod:`appliance.services.deadman`).
    """
    out = HostUndo()
    groups: list[tuple[list[Op], list[Op]]] = []
    for c in reversed(changes):
        why = _not_covered(c)
        if why:
            out.skipped.append((c, why))
            continue
        out.covered.append(c)
        groups.append((guards(c), restores(c)))
    chunk: tuple[list[Op], list[Op]] = ([], [])
    for waits, writes in groups:
        if chunk[0] and _size(label, chunk[0] + waits, chunk[1] + writes) > MAX_CHUNK_BYTES:
            out.transactions.append(_transaction(label, *chunk))
            chunk = ([], [])
        chunk[0].extend(waits)
        chunk[1].extend(writes)
    if chunk[0]:
        out.transactions.append(_transaction(label, *chunk))
    return out


def _not_covered(c: Change) -> str | None:
    if c.kind not in COVERED:
        return f"{c.kind} is not in the host's own undo (its rows are named by UUID)"
    if c.kind in ("vlan", "ingress") and (c.before is None or c.after is None):
        return f"{c.kind} of a port that did not exist before"
    return None


def _transaction(label: str, waits: list[Op], writes: list[Op]) -> list[Any]:
    return [DATABASE, {"op": "comment", "comment": label}, *waits, *writes]


def _size(label: str, waits: list[Op], writes: list[Op]) -> int:
    return len(json.dumps(_transaction(label, waits, writes), separators=(",", ":")))


# -- guards: the rows as the apply left them --------------------------------------------


def _wait(table: str, name: str, conditions: list[list[Any]]) -> Op:
    """Succeeds only when the one row called ``name`` meets ``conditions`` now (no waiting: ``timeout`` 0)."""
    return {"op": "wait", "table": table, "where": [["name", "==", name], *conditions], "columns": ["name"],
            "until": "==", "rows": [{"name": name}], "timeout": 0}  # fmt: skip


def guards(c: Change) -> list[Op]:
    """``wait`` operations that hold only while ``c``'s rows still have its post-change values."""
    if c.kind == "vlan":
        return [_wait("Port", c.name, [[k, "==", v] for k, v in _vlan_row(c.after).items()])]
    if c.kind == "ingress":
        after: PoliceCols = c.after
        cond: list[list[Any]] = [["ingress_policing_rate", "==", after.rate_kbps],
                                 ["ingress_policing_burst", "==", after.burst_kbit]]  # fmt: skip
        ids = _meter_ids(after)
        if ids:
            cond.append(["external_ids", "includes", _map(ids)])
        return [_wait("Interface", c.name, cond)]
    if c.kind == "protocols":
        return [_wait("Bridge", c.name, [["protocols", "==", _set(c.after)]])]
    raise ValueError(f"not covered on the host: {c.kind}")


# -- restores: the rows as they were before -----------------------------------------------


def restores(c: Change) -> list[Op]:
    """The operations that put back ``c.before`` (only the columns ``c`` changed)."""
    where = [["name", "==", c.name]]
    if c.kind == "vlan":
        before, after = _vlan_row(c.before), _vlan_row(c.after)
        row = {k: v for k, v in before.items() if after[k] != v}
        return [{"op": "update", "table": "Port", "where": where, "row": row}] if row else []
    if c.kind == "ingress":
        b: PoliceCols = c.before
        row = {"ingress_policing_rate": b.rate_kbps, "ingress_policing_burst": b.burst_kbit}
        ops: list[Op] = [{"op": "update", "table": "Interface", "where": where, "row": row}]
        mutations: list[list[Any]] = [["external_ids", "delete", _set([POLICE_RATE_KEY, POLICE_BURST_KEY])]]
        ids = _meter_ids(b)
        if ids:
            mutations.append(["external_ids", "insert", _map(ids)])
        ops.append({"op": "mutate", "table": "Interface", "where": where, "mutations": mutations})
        return ops
    if c.kind == "protocols":
        return [{"op": "update", "table": "Bridge", "where": where, "row": {"protocols": _set(c.before)}}]
    raise ValueError(f"not covered on the host: {c.kind}")


# -- values in OVSDB's JSON ------------------------------------------------------------------


def _set(items: Any) -> list[Any]:
    return ["set", list(items)]


def _map(pairs: dict[str, str]) -> list[Any]:
    return ["map", [[k, v] for k, v in sorted(pairs.items())]]


def _optional(value: Any) -> Any:
    return ["set", []] if value is None else value


def _vlan_row(v: VlanCols) -> dict[str, Any]:
    return {"vlan_mode": _optional(v.vlan_mode), "tag": _optional(v.tag), "trunks": _set(sorted(v.trunks))}


def _meter_ids(p: PoliceCols) -> dict[str, str]:
    """hvnet's meter record as the writer stores it in the interface's ``external_ids`` (none without a meter)."""
    if not p.meter_rate_kbps:
        return {}
    return {POLICE_RATE_KEY: str(p.meter_rate_kbps), POLICE_BURST_KEY: str(p.meter_burst_kbit or 0)}
