"""Reading a pool's central databases: one consistent snapshot of each, no replica.

The NB and SB are read the way ``hvnet status`` reads a switch
(:mod:`appliance.switch.snapshot`): one ``select`` transaction per database, the
schema fetched first, so whatever OVN version runs the pool is read with
its own schema and a column it lacks is simply absent.
"""

from __future__ import annotations

from typing import Any

from appliance.core.ovsdb import fetch_schema
from appliance.core.target import DbTarget
from appliance.ovn.view import NB_COLUMNS, NB_DB, SB_COLUMNS, SB_DB, PoolView, build
from appliance.switch import snapshot


def read_pool(name: str, nb: DbTarget, sb: DbTarget, timeout: float = 5.0) -> PoolView:
    """The pool's logical network and chassis, as its NB and SB say now."""
    nb_schema = fetch_schema(nb, timeout, NB_DB)
    nb_snap = snapshot.take(nb, NB_COLUMNS, timeout, schema_json=nb_schema, db=NB_DB)
    sb_snap = snapshot.take(sb, SB_COLUMNS, timeout, db=SB_DB)
    view = build(name, nb_snap, sb_snap, nb.where or nb.remote, sb.where or sb.remote, nb_schema.get("version", ""))
    view.mirror_types = mirror_types(nb_schema)
    return view


def mirror_types(nb_schema: dict[str, Any]) -> list[str]:
    """The ``Mirror.type`` values the pool's NB takes (none when its OVN has no Mirror table)."""
    table = nb_schema.get("tables", {}).get("Mirror")
    if table is None:
        return []
    enum = table["columns"]["type"]["type"]["key"].get("enum", ["set", []])
    return sorted(enum[1]) if isinstance(enum, list) and enum[0] == "set" else [str(enum)]
