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
from appliance.core.ovsdb import DB_NAME, Columns, Exchange, fetch_schema, results_of
from appliance.core.target import DbTarget

# A column's conversion, given its JSON value and every row read by its uuid as the server writes it.
Convert = Callable[[Any, dict[str, "Row"]], Any]


class Row:
    """One row of a snapshot: columns as attributes, ``uuid`` as the IDL's rows have it.

    The columns are the instance's own attributes, so that reading one is a plain attribute
    lookup, not a call: the inventory reads some 20,000 of them on a 1000-VIF host.
    """

    _data = None  # appliance.core.ovsdb.column() reads snapshot rows through getattr

    def __init__(self, row_uuid: uuid.UUID, values: dict[str, Any]) -> None:
        self.__dict__.update(values)
        self.uuid = row_uuid


def _atom(kind: Any) -> Callable[[Any, dict[str, Row]], Any] | None:
    """The conversion of one atom, or None where the JSON value is the Python value (strings, numbers)."""
    refs = False
    if isinstance(kind, dict):
        refs = "refTable" in kind
        kind = kind["type"]
    if kind == "uuid":
        if refs:
            return lambda j, rows: rows.get(j[1])
        return lambda j, _rows: uuid.UUID(j[1])
    return None


def converter(column_type: Any) -> Convert:
    """JSON (RFC 7047 notation) -> the Python value python-ovs's ``Row`` would give for this type.

    A snapshot converts every column of every row it reads (tens of thousands
    of values on a 1000-VIF host), so each shape -- a required scalar, an
    optional value or a set of strings and numbers, references, maps -- has
    a conversion of its own, a single call.
    """
    if not isinstance(column_type, dict):  # a bare atomic type: one required scalar, as it is written
        return _atom(column_type) or _same
    key = _atom(column_type["key"])
    if "value" in column_type:
        return _map(key, _atom(column_type["value"]))
    if column_type.get("min", 1) == 1 and column_type.get("max", 1) == 1:
        return _scalar(key)
    return _ordered(key)


def _same(j: Any, _rows: dict[str, Row]) -> Any:
    return j


def _scalar(key: Callable[[Any, dict[str, Row]], Any] | None) -> Convert:
    """A required scalar: its value (None for a dangling reference, or an empty set a server should not send)."""
    if key is None:
        return lambda j, _rows: (j[1][0] if j[1] else None) if j.__class__ is list and j and j[0] == "set" else j

    def scalar(j: Any, rows: dict[str, Row]) -> Any:
        if j[0] != "set":
            return key(j, rows)
        out = [x for x in (key(a, rows) for a in j[1]) if x is not None]
        return out[0] if out else None

    return scalar


def _ordered(key: Callable[[Any, dict[str, Row]], Any] | None) -> Convert:
    """An optional value or a set: a list, in python-ovs's order, dangling references dropped."""
    if key is None:

        def plain(j: Any, _rows: dict[str, Row]) -> list[Any]:
            if j.__class__ is not list or not j or j[0] != "set":  # one string or number
                return [j]
            items = j[1]
            return sorted(items) if len(items) > 1 else list(items)

        return plain

    def ordered(j: Any, rows: dict[str, Row]) -> list[Any]:
        items = j[1] if j[0] == "set" else [j]
        out = [x for x in (key(a, rows) for a in items) if x is not None]
        return sorted(out, key=_order) if len(out) > 1 else out

    return ordered


def _map(key: Callable[..., Any] | None, value: Callable[..., Any] | None) -> Convert:
    if key is None and value is None:  # string -> string, the usual map
        return lambda j, _rows: dict(j[1])

    def to_map(j: Any, rows: dict[str, Row]) -> dict[Any, Any]:
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
    return start(target, columns, timeout, schema_json=schema_json, db=db).result()


class Pending:
    """A snapshot asked for and not read yet: see :func:`start`."""

    def __init__(self, target: DbTarget, schema: dict[str, Any], present: Columns, db: str, sent: Exchange) -> None:
        self._target, self._schema, self._present, self._db, self._sent = target, schema, present, db, sent

    def result(self) -> Snapshot:
        """The snapshot, once the server's reply is read (within the timeout given to :func:`start`)."""
        (result,) = results_of(self._target, self._sent.replies(), db=self._db)
        return build(self._target, self._schema, self._present, {t: r["rows"] for t, r in zip(self._present, result)})

    def close(self) -> None:
        """Give up on it (the connection is closed)."""
        self._sent.close()


def start(
    target: DbTarget,
    columns: Columns,
    timeout: float = 5.0,
    *,
    schema_json: dict[str, Any] | None = None,
    db: str = DB_NAME,
) -> Pending:
    """:func:`take`'s select sent (after the schema, when it is to be fetched), its reply read later by
    :meth:`Pending.result`: a one-shot verb loads the code that reads the snapshot in between, while the
    server answers."""
    schema = (schema_json or fetch_schema(target, timeout, db))["tables"]
    present = {t: [c for c in cols if c in schema[t]["columns"]] for t, cols in columns.items() if t in schema}
    ops = [{"op": "select", "table": t, "where": [], "columns": ["_uuid", *cols]} for t, cols in present.items()]
    return Pending(target, schema, present, db, Exchange(target, [("transact", [db, *ops])], timeout))


def build(target: DbTarget, schema: dict[str, Any], present: Columns, raw: dict[str, list[Any]]) -> Snapshot:
    """The snapshot of ``raw`` select results (table -> rows as the server sent them): every reference
    resolved, every column converted by its type in ``schema`` (the schema's ``tables``)."""
    rows: dict[str, Row] = {}  # by uuid as the server writes it: a reference resolves without parsing one
    tables: dict[str, dict[uuid.UUID, Row]] = {}
    pending: list[tuple[str, list[tuple[Row, dict[str, Any]]]]] = []
    for t, table_rows in raw.items():  # every row first: references may point anywhere
        tables[t] = {}
        made = []
        for r in table_rows:
            row = Row(uuid.UUID(r["_uuid"][1]), {})
            rows[r["_uuid"][1]] = tables[t][row.uuid] = row
            made.append((row, r))
        pending.append((t, made))
    for t, made in pending:
        convert = [(c, converter(schema[t]["columns"][c]["type"])) for c in present[t]]
        for row, r in made:
            row.__dict__.update({c: f(r[c], rows) for c, f in convert})
    return Snapshot(target, tables, present)
