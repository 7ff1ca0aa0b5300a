"""Applying a pool plan: one northbound transaction, then the chassis' acknowledgements.

The transaction moves logical ports between logical switches (the port's
row is unlinked from one switch's ``ports`` and linked into the other's, so
it keeps its addresses, options and ``external_ids``; a ``wait`` makes sure
it is still where the plan found it), inserts, updates and unlinks hvnet's
QoS rows (an unreferenced QoS row is garbage-collected by the database),
inserts, updates and deletes hvnet's Mirror rows and links them into the
ports' ``mirror_rules``, and bumps
``NB_Global.nb_cfg`` in the same commit, which is what ``ovn-nbctl
--wait=hv`` does: ovn-northd copies it to the southbound database and each
ovn-controller reports the value once its flows include the change
(``Chassis_Private.nb_cfg``); ``NB_Global.hv_cfg`` is the smallest of
those.  So "committed" and "in every chassis's flows" are told apart, and
a chassis that has not caught up is named rather than assumed.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from appliance.core.errors import ConflictError, HvnetError
from appliance.core.ovsdb import request
from appliance.core.target import DbTarget
from appliance.ovn.model import MIRROR_NAME_KEY, OvnMirror
from appliance.ovn.plan import PRIORITY, Limit, MirrorChange, PoolPlan
from appliance.ovn.view import COMMIT_KEY, NB_DB, SB_DB, PoolView
from appliance.policy.plan.model import OWNER, OWNER_KEY


class PoolCommitFailed(HvnetError):
    """The NB refused the transaction: nothing was changed."""


@dataclass
class Acks:
    """How far the chassis got with configuration ``nb_cfg`` within the wait."""

    nb_cfg: int
    seconds: float
    behind: list[str] = field(default_factory=list)  # chassis that did not acknowledge it in time

    @property
    def complete(self) -> bool:
        return not self.behind


def _bandwidth(lim: Limit) -> list[Any]:
    return ["map", [["rate", lim.rate_kbps], ["burst", lim.burst_kbit]]]


def _switch(view: PoolView, name: str) -> list[Any]:
    uuid = next(s.uuid for s in view.switches if s.name == name)
    return [["_uuid", "==", ["uuid", uuid]]]


def _uuid(uuid: str) -> list[Any]:
    return [["_uuid", "==", ["uuid", uuid]]]


def _moves(view: PoolView, plan: PoolPlan) -> list[dict[str, Any]]:
    ports = {p.name: p.uuid for _, p in view.ports()}
    switches = {s.name: s.uuid for s in view.switches}
    ops: list[dict[str, Any]] = []
    for m in plan.moves:
        lsp = ["set", [["uuid", ports[m.port]]]]
        ops.append({"op": "wait", "timeout": 0, "table": "Logical_Switch", "until": "==", "columns": ["name"],
                    "where": [["_uuid", "==", ["uuid", switches[m.src]]], ["ports", "includes", lsp]],
                    "rows": [{"name": m.src}]})  # fmt: skip
        ops.append({"op": "mutate", "table": "Logical_Switch", "where": _uuid(switches[m.src]),
                    "mutations": [["ports", "delete", lsp]]})  # fmt: skip
        ops.append({"op": "mutate", "table": "Logical_Switch", "where": _uuid(switches[m.dst]),
                    "mutations": [["ports", "insert", lsp]]})  # fmt: skip
    return ops


def _mirror_row(m: OvnMirror) -> dict[str, Any]:
    ids = [[OWNER_KEY, OWNER], [MIRROR_NAME_KEY, m.policy_name]]
    return {"name": m.row, "type": m.type, "filter": m.filter, "sink": m.sink, "index": m.index,
            "external_ids": ["map", ids]}  # fmt: skip


def _mirrors(view: PoolView, changes: list[MirrorChange]) -> list[dict[str, Any]]:
    ports = {p.name: p.uuid for _, p in view.ports()}
    ops: list[dict[str, Any]] = []
    for i, c in enumerate(changes):
        ref: list[Any] = ["named-uuid", f"mirror{i}"] if not c.uuid else ["uuid", c.uuid]
        if c.wanted is not None and not c.uuid:
            ops.append({"op": "insert", "table": "Mirror", "uuid-name": f"mirror{i}", "row": _mirror_row(c.wanted)})
        elif c.wanted is not None:
            ops.append({"op": "update", "table": "Mirror", "where": _uuid(c.uuid), "row": _mirror_row(c.wanted)})
        for names, how in ((c.attach, "insert"), (c.detach, "delete")):
            for name in names:
                ops.append({"op": "mutate", "table": "Logical_Switch_Port", "where": _uuid(ports[name]),
                            "mutations": [["mirror_rules", how, ["set", [ref]]]]})  # fmt: skip
        if c.wanted is None:
            ops.append({"op": "delete", "table": "Mirror", "where": _uuid(c.uuid)})
    return ops


def operations(view: PoolView, plan: PoolPlan, comment: str, marker: str | None = None) -> list[dict[str, Any]]:
    """The transaction's operations (pure: tested without a database); ``marker`` (the apply's record id)
    goes into ``NB_Global.external_ids:hvnet-last-commit`` in the same commit, so an apply interrupted
    after it can be told from one interrupted before."""
    ops: list[dict[str, Any]] = _moves(view, plan)
    for i, lim in enumerate(plan.add):
        ids = [[OWNER_KEY, OWNER], ["hvnet-port", lim.port], ["hvnet-direction", lim.direction]]
        ops.append({"op": "insert", "table": "QoS", "uuid-name": f"rule{i}", "row": {
            "priority": PRIORITY, "direction": lim.direction, "match": lim.match, "bandwidth": _bandwidth(lim),
            "external_ids": ["map", ids]}})  # fmt: skip
        ops.append({"op": "mutate", "table": "Logical_Switch", "where": _switch(view, lim.switch),
                    "mutations": [["qos_rules", "insert", ["set", [["named-uuid", f"rule{i}"]]]]]})  # fmt: skip
    for uuid, lim in plan.modify:
        ops.append({"op": "update", "table": "QoS", "where": [["_uuid", "==", ["uuid", uuid]]],
                    "row": {"bandwidth": _bandwidth(lim), "match": lim.match}})  # fmt: skip
    for uuid, switch, _ in plan.delete:
        ops.append({"op": "mutate", "table": "Logical_Switch", "where": _switch(view, switch),
                    "mutations": [["qos_rules", "delete", ["set", [["uuid", uuid]]]]]})  # fmt: skip
    ops += _mirrors(view, plan.mirrors)
    bump: list[Any] = [["nb_cfg", "+=", 1]]
    if marker is not None:
        bump += [["external_ids", "delete", ["set", [COMMIT_KEY]]],
                 ["external_ids", "insert", ["map", [[COMMIT_KEY, marker]]]]]  # fmt: skip
    ops.append({"op": "mutate", "table": "NB_Global", "where": [], "mutations": bump})
    ops.append({"op": "select", "table": "NB_Global", "where": [], "columns": ["nb_cfg"]})
    ops.append({"op": "comment", "comment": comment})
    return ops


def commit(nb: DbTarget, view: PoolView, plan: PoolPlan, comment: str, timeout: float = 10.0,
           marker: str | None = None) -> int:  # fmt: skip
    """Run the plan as one NB transaction; the ``nb_cfg`` it asked the chassis to acknowledge."""
    ops = operations(view, plan, comment, marker)
    (result,) = request(nb, [("transact", [NB_DB, *ops])], timeout, db=NB_DB)
    errors = [r for r in result if isinstance(r, dict) and r.get("error")]
    if errors and errors[0].get("error") == "timed out":  # a wait: a port is no longer where the plan found it
        raise ConflictError("the pool's NB changed while hvnet planned (a logical port moved): nothing changed",
                            hint="run the command again; it plans against the NB as it is then")  # fmt: skip
    if errors or len(result) < len(ops) - 1:
        detail = errors[0] if errors else {"error": "fewer results than operations"}
        raise PoolCommitFailed(f"the pool's NB refused the transaction, nothing changed: {detail.get('error')}: "
                               f"{detail.get('details', '')}".rstrip(": "))  # fmt: skip
    return int(result[-2]["rows"][0]["nb_cfg"])


def wait_acks(nb: DbTarget, sb: DbTarget, nb_cfg: int, timeout: float) -> Acks:
    """Until every chassis has acknowledged ``nb_cfg`` (NB_Global.hv_cfg), or ``timeout``; who is behind."""
    start = time.monotonic()
    while True:
        (res,) = request(nb, [("transact", [NB_DB, {"op": "select", "table": "NB_Global", "where": [],
                                                    "columns": ["hv_cfg"]}])], 5.0, db=NB_DB)  # fmt: skip
        if int(res[0]["rows"][0]["hv_cfg"]) >= nb_cfg:
            return Acks(nb_cfg, time.monotonic() - start)
        if time.monotonic() - start > timeout:
            break
        time.sleep(0.005)  # the acknowledgement time is measured to this resolution
    (res,) = request(sb, [("transact", [SB_DB, {"op": "select", "table": "Chassis_Private", "where": [],
                                                "columns": ["name", "nb_cfg"]}])], 5.0, db=SB_DB)  # fmt: skip
    behind = sorted(r["name"] for r in res[0]["rows"] if int(r["nb_cfg"]) < nb_cfg)
    return Acks(nb_cfg, time.monotonic() - start, behind or ["(unknown: hv_cfg lags but every chassis reports it)"])
