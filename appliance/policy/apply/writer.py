"""Writing a plan into one OVSDB transaction.

Runs inside :meth:`Connection.transact`'s ``build``: every column the plan was
computed from is ``verify()``-ed before it is written, so a concurrent change
by another client turns the commit into TRY_AGAIN and the whole intent is
re-planned against fresh state -- never a silent overwrite, never half of one
operator's change mixed with half of another's.

Set-valued columns shared with other writers (a bridge's ``ports`` and
``mirrors``) are mutated (add/remove one element) instead of rewritten.
"""

from __future__ import annotations

from typing import Any

from appliance.core.errors import ConfigError, Problem
from appliance.core.ovsdb import TxnContext
from appliance.core.ovsdb import column as col
from appliance.core.vlan import VlanCols
from appliance.policy.plan.model import (
    OWNER,
    OWNER_KEY,
    POLICE_BURST_KEY,
    POLICE_RATE_KEY,
    TUNNEL_MIRROR_KEY,
    is_owned,
)
from appliance.policy.plan.planner import Change
from appliance.policy.plan.records import TAP_KEY_PREFIX
from appliance.policy.plan.state import MirrorCols, PoliceCols, QosCols, TunnelCols
from appliance.policy.plan.taps import TapCols
from appliance.policy.plan.taps import owner as tap_owner
from appliance.switch.sampling import IPFIX_KEYS, SFLOW_KEYS, TABLES, IpfixCols, SamplingCols

MAX_MIRRORS = 32  # per bridge: ofproto's MAX_MIRRORS (a mirror is a bit in a 32-bit mask)


class _Rows:
    """Name indexes over the replica, built once per transaction attempt."""

    def __init__(self, ctx: TxnContext) -> None:
        self.ctx = ctx
        self.ports = {col(p, "name"): p for p in ctx.rows("Port")}
        self.bridges = {col(b, "name"): b for b in ctx.rows("Bridge")}
        self.mirrors = {(col(b, "name"), col(m, "name")): m for b in ctx.rows("Bridge") for m in _stored(b, "mirrors")}
        self._qos_users: dict[Any, int] | None = None
        self.inserted_ports: dict[str, Any] = {}

    def port(self, name: str) -> Any:
        return self.inserted_ports.get(name) or self.ports.get(name)

    def qos_users(self) -> dict[Any, int]:
        if self._qos_users is None:
            users: dict[Any, int] = {}
            for p in self.ports.values():
                for q in col(p, "qos"):
                    users[q.uuid] = users.get(q.uuid, 0) + 1
            self._qos_users = users
        return self._qos_users


def _stored(row: Any, column: str) -> Any:
    """A list column's value, or [] for a row inserted in this transaction that has not set it."""
    try:
        return col(row, column)
    except AttributeError:
        return []


def write(ctx: TxnContext, changes: list[Change]) -> None:
    """Write ``changes`` (already planned against this replica) into ``ctx.txn``."""
    rows = _Rows(ctx)
    for change in changes:
        _WRITERS[change.kind](rows, change)


def _verify(row: Any, *columns: str) -> None:
    for c in columns:
        row.verify(c)


def _verify_selection(rows: _Rows, port: Any) -> None:
    """Verify what selected ``port`` (its interfaces' VM and MAC ids): a VIF that another client
    re-tagged to another VM between planning and commit makes the commit TRY_AGAIN, not land on it."""
    for iface in col(port, "interfaces"):
        iface.verify("external_ids")
        if rows.ctx.conn.has_column("Interface", "mac_in_use"):
            iface.verify("mac_in_use")


def _write_vlan(rows: _Rows, ch: Change) -> None:
    port = rows.ports[ch.name]
    _verify(port, "vlan_mode", "tag", "trunks")
    _verify_selection(rows, port)
    after: VlanCols = ch.after
    before: VlanCols | None = ch.before
    # Only what changes is written (python-ovs would send unchanged columns too).
    if before is None or before.vlan_mode != after.vlan_mode:
        port.vlan_mode = [after.vlan_mode] if after.vlan_mode else []
    if before is None or before.tag != after.tag:
        port.tag = [after.tag] if after.tag is not None else []
    if before is None or tuple(before.trunks) != tuple(after.trunks):
        port.trunks = list(after.trunks)


def _write_ingress(rows: _Rows, ch: Change) -> None:
    port = rows.ports[ch.name]
    iface = next(iter(col(port, "interfaces")))
    _verify(iface, "ingress_policing_rate", "ingress_policing_burst", "external_ids")
    after: PoliceCols = ch.after
    before: PoliceCols | None = ch.before
    if before is None or before.rate_kbps != after.rate_kbps:
        iface.ingress_policing_rate = after.rate_kbps
    if before is None or before.burst_kbit != after.burst_kbit:
        iface.ingress_policing_burst = after.burst_kbit
    current = dict(col(iface, "external_ids"))
    ids = {k: v for k, v in current.items() if k not in (POLICE_RATE_KEY, POLICE_BURST_KEY)}
    if after.meter_rate_kbps:
        ids[POLICE_RATE_KEY] = str(after.meter_rate_kbps)
        ids[POLICE_BURST_KEY] = str(after.meter_burst_kbit or 0)
    if ids != current:
        iface.external_ids = ids


def _insert_qos(rows: _Rows, cols: QosCols) -> Any:
    qos = rows.ctx.insert("QoS")
    _fill_qos(rows, qos, cols, existing_queues={})
    return qos


def _fill_qos(rows: _Rows, qos: Any, cols: QosCols, existing_queues: dict[int, Any]) -> None:
    qos.type = cols.type
    qos.other_config = dict(cols.other_config)
    qos.external_ids = dict(cols.external_ids)
    queues = {}
    for q in cols.queues:
        row = existing_queues.pop(q.number, None) or rows.ctx.insert("Queue")
        row.other_config = dict(q.other_config)
        row.external_ids = dict(q.external_ids)
        row.dscp = [q.dscp] if q.dscp is not None else []
        queues[q.number] = row
    qos.queues = queues
    for leftover in existing_queues.values():
        if is_owned(col(leftover, "external_ids")):
            leftover.delete()


def _delete_owned_qos(rows: _Rows, qos: Any) -> None:
    """Delete an hvnet-owned QoS (and owned queues) once no port uses it."""
    if not is_owned(col(qos, "external_ids")):
        return
    if rows.qos_users().get(qos.uuid, 0) > 0:
        return
    for q in col(qos, "queues").values():
        if is_owned(col(q, "external_ids")):
            q.delete()
    qos.delete()


def _write_egress(rows: _Rows, ch: Change) -> None:
    port = rows.ports[ch.name]
    _verify(port, "qos")
    _verify_selection(rows, port)
    old = list(col(port, "qos"))
    old_row = old[0] if old else None
    after: QosCols | None = ch.after
    users = rows.qos_users()
    if after is None:
        port.qos = []
        if old_row is not None:
            users[old_row.uuid] -= 1
            _delete_owned_qos(rows, old_row)
        return
    if after.uuid is not None:
        # Rollback of a QoS that was detached: re-attach the row if it still exists.
        table = rows.ctx.tables["QoS"].rows
        existing = next((r for u, r in table.items() if str(u) == after.uuid), None)
        if existing is not None:
            port.qos = [existing]
            users[existing.uuid] = users.get(existing.uuid, 0) + 1
            if old_row is not None and old_row.uuid != existing.uuid:
                users[old_row.uuid] -= 1
                _delete_owned_qos(rows, old_row)
            return
    if old_row is not None and is_owned(col(old_row, "external_ids")) and users.get(old_row.uuid, 0) == 1:
        _verify(old_row, "type", "other_config", "queues")
        _fill_qos(rows, old_row, after, dict(col(old_row, "queues")))
        return
    port.qos = [_insert_qos(rows, after)]
    if old_row is not None:
        users[old_row.uuid] -= 1
        _delete_owned_qos(rows, old_row)


def _insert_tunnel(rows: _Rows, bridge: Any, tunnel: TunnelCols, mirror: str) -> Any:
    iface = rows.ctx.insert("Interface")
    iface.name = tunnel.name
    iface.type = tunnel.type
    iface.options = dict(tunnel.options)
    iface.external_ids = {OWNER_KEY: OWNER, TUNNEL_MIRROR_KEY: mirror}
    port = rows.ctx.insert("Port")
    port.name = tunnel.name
    port.interfaces = [iface]
    port.external_ids = {OWNER_KEY: OWNER, TUNNEL_MIRROR_KEY: mirror}
    bridge.addvalue("ports", port)
    rows.inserted_ports[tunnel.name] = port
    return port


def _remove_tunnel(rows: _Rows, bridge: Any, tunnel: TunnelCols, mirror: str) -> None:
    port = rows.ports.get(tunnel.name)
    if port is None:
        return
    ids = dict(col(port, "external_ids"))
    if not is_owned(ids) or ids.get(TUNNEL_MIRROR_KEY) != mirror:
        return  # not ours: never delete it
    bridge.delvalue("ports", port)
    port.delete()
    # deleted in this transaction: its columns can no longer be read (a later change's QoS count reads ports)
    del rows.ports[tunnel.name]


def _write_mirror(rows: _Rows, ch: Change) -> None:
    bridge = rows.bridges[ch.bridge]
    current = rows.mirrors.get((ch.bridge, ch.name))
    before: MirrorCols | None = ch.before
    after: MirrorCols | None = ch.after
    if before is not None and before.tunnel is not None and (after is None or after.tunnel != before.tunnel):
        _remove_tunnel(rows, bridge, before.tunnel, ch.name)
    if after is None:
        if current is not None:
            bridge.delvalue("mirrors", current)
            current.delete()
        return
    if after.tunnel is not None and (before is None or before.tunnel != after.tunnel):
        existing = rows.ports.get(after.tunnel.name)
        if existing is None or (before is not None and before.tunnel is not None):
            _insert_tunnel(rows, bridge, after.tunnel, ch.name)
    if current is None:
        # The bridge's mirror list decides whether the name is free and the limit reached:
        # verified, so two clients adding at once cannot both succeed from the same view.
        bridge.verify("mirrors")
        count = len(_stored(bridge, "mirrors")) + 1  # the stored list includes this transaction's additions
        if count > MAX_MIRRORS:
            raise ConfigError([Problem(
                "policy", None, f"mirrors ({ch.bridge})",
                f"{ch.bridge} would have {count} mirrors; Open vSwitch supports at most {MAX_MIRRORS} per bridge",
            )])  # fmt: skip
        current = rows.ctx.insert("Mirror")
        current.name = ch.name
        bridge.addvalue("mirrors", current)
    else:
        _verify(current, "select_all", "select_src_port", "select_dst_port", "select_vlan", "output_port")
        _verify(current, "output_vlan")
    current.select_all = after.select_all
    current.select_src_port = [rows.port(n) for n in after.src if rows.port(n) is not None]
    current.select_dst_port = [rows.port(n) for n in after.dst if rows.port(n) is not None]
    current.select_vlan = list(after.vlans)
    out = rows.port(after.output_port) if after.output_port else None
    current.output_port = [out] if out is not None else []
    current.output_vlan = [after.output_vlan] if after.output_vlan is not None else []
    if rows.ctx.conn.has_column("Mirror", "snaplen"):
        current.snaplen = [after.snaplen] if after.snaplen else []
    if rows.ctx.conn.has_column("Mirror", "filter"):
        current.filter = [after.filter] if after.filter else []
    current.external_ids = dict(after.external_ids)


def _write_sampling(rows: _Rows, ch: Change) -> None:
    """A bridge's sFlow or IPFIX row: updated in place, inserted and referenced, or dereferenced.

    Both tables are not root tables: clearing the bridge's reference is what
    deletes the row (ovsdb-server collects it), so no row is ever left
    behind for anyone to clean up.
    """
    bridge = rows.bridges[ch.bridge]
    _verify(bridge, ch.kind)
    current = next(iter(_stored(bridge, ch.kind)), None)
    after: SamplingCols | None = ch.after
    if after is None:
        setattr(bridge, ch.kind, [])
        return
    if current is None:
        current = rows.ctx.insert(TABLES[ch.kind])
        setattr(bridge, ch.kind, [current])
    else:
        _verify(current, *after.fields(), "targets", "external_ids")
    keys = SFLOW_KEYS if ch.kind == "sflow" else IPFIX_KEYS
    current.targets = list(after.targets)
    for key in keys[1:]:
        value = getattr(after, key)
        setattr(current, key, [value] if value is not None else [])
    if isinstance(after, IpfixCols):
        current.other_config = dict(after.other_config)
    current.external_ids = dict(after.external_ids)


def _write_protocols(rows: _Rows, ch: Change) -> None:
    bridge = rows.bridges[ch.name]
    _verify(bridge, "protocols")
    bridge.protocols = list(ch.after)


def _write_tap(rows: _Rows, ch: Change) -> None:
    """The Bridge's ``hvnet-tap-NAME`` record set or removed; a tunnel output port made or removed."""
    bridge = rows.bridges[ch.bridge]
    bridge.verify("external_ids")
    before: TapCols | None = ch.before
    after: TapCols | None = ch.after
    if before is not None and before.tunnel is not None and (after is None or after.tunnel != before.tunnel):
        _remove_tunnel(rows, bridge, before.tunnel, tap_owner(ch.name))
    new_tunnel = after is not None and after.tunnel is not None and (before is None or before.tunnel != after.tunnel)
    if new_tunnel and (rows.ports.get(after.tunnel.name) is None or (before is not None and before.tunnel is not None)):
        _insert_tunnel(rows, bridge, after.tunnel, tap_owner(ch.name))
    ids = dict(col(bridge, "external_ids"))
    key = TAP_KEY_PREFIX + ch.name
    if after is None:
        ids.pop(key, None)
    else:
        ids[key] = after.to_text()
    bridge.external_ids = ids


_WRITERS = {
    "vlan": _write_vlan,
    "ingress": _write_ingress,
    "egress": _write_egress,
    "mirror": _write_mirror,
    "protocols": _write_protocols,
    "sflow": _write_sampling,
    "ipfix": _write_sampling,
    "tap": _write_tap,
}
