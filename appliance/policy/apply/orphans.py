"""hvnet-owned rows nothing uses any more, and their removal (what the agent collects on its ticks).

libvirt and the XenServer hotplug scripts delete a VM's port and leave the
QoS and Queue rows hvnet made for it; a mirror whose ports went has nothing
to select or nowhere to send; a tunnel port outlives its mirror or TAP.  A
row is removed only after it was seen orphaned in two consecutive
observations at least :data:`RIPE_S` apart (a del-port/add-port pair in
separate transactions must not lose its QoS in between), and the
transaction that removes it finds it again: a row used again meanwhile
stays.
"""

from __future__ import annotations

import time
from typing import Any

from appliance.core.ovsdb import Connection, TxnContext
from appliance.core.ovsdb import column as col
from appliance.policy.plan.model import TUNNEL_MIRROR_KEY, Policy, is_owned
from appliance.policy.plan.records import TAP_KEY_PREFIX

RIPE_S = 1.0  # seen orphaned this long before (in an earlier observation): removed


def find(conn: Connection, policy: Policy) -> dict[tuple[str, str], Any]:
    """hvnet-owned rows nothing uses any more, by (table, uuid) (caller holds the lock or is in a transaction)."""
    out: dict[tuple[str, str], Any] = {}
    tables = conn.idl.tables
    policy_mirrors = {(m.bridge, m.name) for m in policy.mirrors if not m.remove}

    def owned(row: Any) -> bool:
        return is_owned(col(row, "external_ids"))

    used_qos = {q.uuid for p in tables["Port"].rows.values() for q in col(p, "qos")}
    for u, qos in tables["QoS"].rows.items():
        if owned(qos) and u not in used_qos:
            out[("QoS", str(u))] = qos
    used_queues = {
        q.uuid
        for u, qos in tables["QoS"].rows.items()
        if ("QoS", str(u)) not in out
        for q in col(qos, "queues").values()
    }
    for u, q in tables["Queue"].rows.items():
        if owned(q) and u not in used_queues:
            out[("Queue", str(u))] = q
    mirror_names = set()
    for br in tables["Bridge"].rows.values():
        for m in col(br, "mirrors"):
            mirror_names.add(col(m, "name"))
            if not owned(m) or (col(br, "name"), col(m, "name")) in policy_mirrors:
                continue
            selects = col(m, "select_all") or col(m, "select_src_port") or col(m, "select_dst_port")
            outputs = col(m, "output_port") or col(m, "output_vlan")
            if not (selects or col(m, "select_vlan")) or not outputs:
                out[("Mirror", str(m.uuid))] = (br, m)
    for br in tables["Bridge"].rows.values():
        # a TAP's tunnel port is owned "tap:NAME" and used while the bridge records that TAP
        taps = {f"tap:{k[len(TAP_KEY_PREFIX) :]}" for k in col(br, "external_ids") if k.startswith(TAP_KEY_PREFIX)}
        for p in col(br, "ports"):
            ids = dict(col(p, "external_ids"))
            if is_owned(ids) and ids.get(TUNNEL_MIRROR_KEY) not in mirror_names | taps:
                out[("Port", str(p.uuid))] = (br, p)
    return out


class Collector:
    """Removes the rows :func:`find` returns once they are ripe; one per connection, called on every tick."""

    def __init__(self, conn: Connection, comment: str) -> None:
        self.conn = conn
        self.comment = comment  # the transactions' comment (who removed the rows)
        self._seen: dict[tuple[str, str], float] = {}  # (table, uuid) -> when first seen orphaned

    def collect(self, policy: Policy) -> list[str]:
        """Observe once; remove what was orphaned in an earlier observation too.  What went (``QoS 1a2b3c4d``)."""
        now = time.monotonic()
        with self.conn.lock:
            current = find(self.conn, policy)
        seen_before = {k for k, t in self._seen.items() if now - t >= RIPE_S}
        ripe = [k for k in current if k in seen_before]
        self._seen = {k: self._seen.get(k, now) for k in current}
        if not ripe:
            return []

        def build(ctx: TxnContext) -> list[str]:
            fresh = find(self.conn, policy)
            gone = []
            for key in ripe:
                if key not in fresh:
                    continue  # used again since: keep it
                table, _ = key
                obj = fresh[key]
                if table in ("QoS", "Queue"):
                    obj.delete()
                elif table == "Mirror":
                    br, m = obj
                    br.delvalue("mirrors", m)
                    m.delete()
                else:
                    br, p = obj
                    br.delvalue("ports", p)
                    p.delete()
                gone.append(f"{table} {key[1][:8]}")
            return gone

        result = self.conn.transact(build, comment=self.comment, timeout=10.0)
        if result.value:
            for key in ripe:
                self._seen.pop(key, None)
        return list(result.value or [])
