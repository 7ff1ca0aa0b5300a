"""A one-shot read of OVSDB: the columns a verb reads, in one select transaction, no replica.

``hvnet status`` reads the switch once and exits.  Building the IDL's replica
for that (a monitor, every row's every column turned into Datums, change
tracking) was most of its run time on a 1000-VIF host; a ``select`` per table
in one transaction, turned straight into Python values, costs a fraction.
The rows read the way the IDL's do (``row.name``, optional columns as lists,
references as rows, maps as dicts), so the same reader -- :func:`appliance.
inventory.read` -- builds the inventory from either.  Anything that writes or
watches uses :class:`~appliance.ovsdb.Connection`.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from .errors import OvsdbError
from .ovsdb import DB_NAME, Columns, fetch_schema, request
from .target import DbTarget

Convert = Callable[[Any, dict[uuid.UUID, "Row"]], Any]


class Row:
    """One row of a snapshot: columns as attributes, ``uuid`` as the IDL's rows have it."""

    __slots__ = ("_values", "uuid")
    _data = None  # appliance.ovsdb.column() reads snapshot rows through getattr

    def __init__(self, row_uuid: uuid.UUID, values: dict[str, Any]) -> None:
        self.uuid = row_uuid
        self._values = values

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(name) from None


def _atom(kind: Any, refs: bool) -> Callable[[Any, dict[uuid.UUID, Row]], Any]:
    if isinstance(kind, dict):
        refs = "refTable" in kind
        kind = kind["type"]
    if kind == "uuid":
        if refs:
            return lambda j, rows: rows.get(uuid.UUID(j[1]))
        return lambda j, _rows: uuid.UUID(j[1])
    return lambda j, _rows: j


def converter(column_type: Any) -> Convert:
    """JSON (RFC 7047 notation) -> the Python value python-ovs's ``Row`` would give for this type."""
    if not isinstance(column_type, dict):  # a bare atomic type: one required scalar
        atom = _atom(column_type, False)
        return atom
    key = _atom(column_type["key"], False)
    n_min = column_type.get("min", 1)
    n_max = column_type.get("max", 1)
    if "value" in column_type:
        value = _atom(column_type["value"], False)

        def to_map(j: Any, rows: dict[uuid.UUID, Row]) -> dict[Any, Any]:
            pairs = ((key(k, rows), value(v, rows)) for k, v in j[1])
            return {k: v for k, v in pairs if k is not None and v is not None}

        return to_map

    def elements(j: Any, rows: dict[uuid.UUID, Row]) -> list[Any]:
        items = j[1] if isinstance(j, list) and j and j[0] == "set" else [j]
        out = [key(a, rows) for a in items]
        return [x for x in out if x is not None]

    if n_min == 1 and n_max == 1:
        return lambda j, rows: elements(j, rows)[0] if elements(j, rows) else None
    return lambda j, rows: sorted(elements(j, rows), key=_order)


def _order(x: Any) -> Any:
    return (0, str(x.uuid)) if isinstance(x, Row) else (1, x)


class Snapshot:
    """The tables a verb reads, as one consistent read (read-only; no lock needed, one is offered)."""

    def __init__(self, target: DbTarget, tables: dict[str, dict[uuid.UUID, Row]], registered: Columns) -> None:
        self.target = target
        self.lock = threading.RLock()  # readers written for the live replica take it
        self.idl = SimpleNamespace(tables={name: SimpleNamespace(rows=rows) for name, rows in tables.items()})
        self.registered = {t: set(cols) for t, cols in registered.items()}

    def has_column(self, table: str, column: str) -> bool:
        return column in self.registered.get(table, ())

    def root(self) -> Row:
        rows = list(self.idl.tables["Open_vSwitch"].rows.values())
        if not rows:
            hint = "initialise the database: ovs-vsctl --no-wait init"
            raise OvsdbError("the Open_vSwitch table is empty", hint=hint)
        return rows[0]


def take(target: DbTarget, columns: Columns, timeout: float = 5.0) -> Snapshot:
    """Read ``columns`` of every row of their tables in one transaction (a consistent view)."""
    schema = fetch_schema(target, timeout)["tables"]
    present = {t: [c for c in cols if c in schema[t]["columns"]] for t, cols in columns.items() if t in schema}
    ops = [{"op": "select", "table": t, "where": [], "columns": ["_uuid", *cols]} for t, cols in present.items()]
    (result,) = request(target, [("transact", [DB_NAME, *ops])], timeout)
    raw = {t: r["rows"] for t, r in zip(present, result)}
    rows: dict[uuid.UUID, Row] = {}
    tables: dict[str, dict[uuid.UUID, Row]] = {}
    for t, table_rows in raw.items():  # every row first: references may point anywhere
        tables[t] = {}
        for r in table_rows:
            row = Row(uuid.UUID(r["_uuid"][1]), {})
            rows[row.uuid] = tables[t][row.uuid] = row
    for t, table_rows in raw.items():
        convert = {c: converter(schema[t]["columns"][c]["type"]) for c in present[t]}
        for r in table_rows:
            values = tables[t][uuid.UUID(r["_uuid"][1])]._values
            for c, f in convert.items():
                values[c] = f(r[c], rows)
    return Snapshot(target, tables, present)
