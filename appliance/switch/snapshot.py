"""A one-shot read of OVSDB: the columns a verb reads, in one select transaction, no replica.

``hvnet status`` reads the switch once and exits.  Building the IDL's replica
for that (a monitor, every row's every column turned into Datums, change
tracking) was most of its run time on a 1000-VIF host; a ``select`` per table
in one transaction, turned straight into Python values, costs a fraction.
The rows read the way the IDL's do (``row.name``, optional columns as lists,
references as rows, maps as dicts), so the same walk -- :func:`appliance.switch.
reader.read` -- reads the switch from either.  Anything that writes or
watches uses :class:`~appliance.core.ovsdb.Connection`.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable
from types import SimpleNamespace
from typing import Any

from appliance.core.errors import OvsdbError
from appliance.core.ovsdb import DB_NAME, Columns, fetch_schema, request
from appliance.core.target import DbTarget

Convert = Callable[[Any, dict[uuid.UUID, "Row"]], Any]


class Row:
    """One row of a snapshot: columns as attributes, ``uuid`` as the IDL's rows have it."""

    __slots__ = ("_values", "uuid")
    _data = None  # appliance.core.ovsdb.column() reads snapshot rows through getattr

    def __init__(self, row_uuid: uuid.UUID, values: dict[str, Any]) -> None:
        self.uuid = row_uuid
        self._values = values

    def __getattr__(self, name: str) -> Any:
        try:
            return self._values[name]
        except KeyError:
            raise AttributeError(name) from None


def _atom(kind: Any) -> Callable[[Any, dict[uuid.UUID, Row]], Any] | None:
    """The conversion of one atom, or None where the JSON value is the Python value (strings, numbers)."""
    refs = False
    if isinstance(kind, dict):
        refs = "refTable" in kind
        kind = kind["type"]
    if kind == "uuid":
        if refs:
            return lambda j, rows: rows.get(uuid.UUID(j[1]))
        return lambda j, _rows: uuid.UUID(j[1])
    return None


def converter(column_type: Any) -> Convert:
    """JSON (RFC 7047 notation) -> the Python value python-ovs's ``Row`` would give for this type.

    A snapshot converts every column of every row it reads (tens of thousands
    of values on a 1000-VIF host), so the common shapes -- strings and
    numbers, optional values, string maps -- take the shortest path.
    """
    if not isinstance(column_type, dict):  # a bare atomic type: one required scalar
        return _atom(column_type) or (lambda j, _rows: j)
    key = _atom(column_type["key"])
    n_min = column_type.get("min", 1)
    n_max = column_type.get("max", 1)
    if "value" in column_type:
        return _map(key, _atom(column_type["value"]))
    elements = _elements(key)
    if n_min == 1 and n_max == 1:

        def scalar(j: Any, rows: dict[uuid.UUID, Row]) -> Any:
            out = elements(j, rows)
            return out[0] if out else None

        return scalar

    def ordered(j: Any, rows: dict[uuid.UUID, Row]) -> list[Any]:
        out = elements(j, rows)
        return sorted(out, key=_order) if len(out) > 1 else out

    return ordered


def _elements(key: Callable[[Any, dict[uuid.UUID, Row]], Any] | None) -> Convert:
    """A set's (or a bare atom's) elements as a list, dangling references dropped."""

    def elements(j: Any, rows: dict[uuid.UUID, Row]) -> list[Any]:
        items = j[1] if isinstance(j, list) and j and j[0] == "set" else [j]
        if key is None:
            return list(items)
        return [x for x in (key(a, rows) for a in items) if x is not None]

    return elements


def _map(key: Callable[..., Any] | None, value: Callable[..., Any] | None) -> Convert:
    if key is None and value is None:  # string -> string, the usual map
        return lambda j, _rows: dict(j[1])

    def to_map(j: Any, rows: dict[uuid.UUID, Row]) -> dict[Any, Any]:
        out = {}
        for k, v in j[1]:
            k = k if key is None else key(k, rows)
            v = v if value is None else value(v, rows)
            if k is not None and v is not None:
                out[k] = v
        return out

    return to_map


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


def take(
    target: DbTarget,
    columns: Columns,
    timeout: float = 5.0,
    *,
    schema_json: dict[str, Any] | None = None,
    db: str = DB_NAME,
) -> Snapshot:
    """Read ``columns`` of every row of their tables in one transaction (a consistent view).

    ``schema_json``: the server's schema when the caller has it (else it is fetched first).
    ``db``: the database (an OVN pool's are OVN_Northbound and OVN_Southbound).
    """
    schema = (schema_json or fetch_schema(target, timeout, db))["tables"]
    present = {t: [c for c in cols if c in schema[t]["columns"]] for t, cols in columns.items() if t in schema}
    ops = [{"op": "select", "table": t, "where": [], "columns": ["_uuid", *cols]} for t, cols in present.items()]
    (result,) = request(target, [("transact", [db, *ops])], timeout, db=db)
    return build(target, schema, present, {t: r["rows"] for t, r in zip(present, result)})


def build(target: DbTarget, schema: dict[str, Any], present: Columns, raw: dict[str, list[Any]]) -> Snapshot:
    """The snapshot of ``raw`` select results (table -> rows as the server sent them): every reference
    resolved, every column converted by its type in ``schema`` (the schema's ``tables``)."""
    rows: dict[uuid.UUID, Row] = {}
    tables: dict[str, dict[uuid.UUID, Row]] = {}
    pending: list[tuple[str, list[tuple[Row, dict[str, Any]]]]] = []
    for t, table_rows in raw.items():  # every row first: references may point anywhere
        tables[t] = {}
        made = []
        for r in table_rows:
            row = Row(uuid.UUID(r["_uuid"][1]), {})
            rows[row.uuid] = tables[t][row.uuid] = row
            made.append((row, r))
        pending.append((t, made))
    for t, made in pending:
        convert = [(c, converter(schema[t]["columns"][c]["type"])) for c in present[t]]
        for row, r in made:
            row._values = {c: f(r[c], rows) for c, f in convert}
    return Snapshot(target, tables, present)
