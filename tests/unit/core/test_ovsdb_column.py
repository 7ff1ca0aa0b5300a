"""column(): a replica row's value as ``Row.__getattr__`` gives it, by the short path -- for the columns the
server left at their defaults too, which python-ovs's rows do not hold until asked (``ColumnDefaultDict``).
The rows are python-ovs's own, typed by the schema of the columns hvnet reads."""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import ovs.db.data
import ovs.db.schema
import pytest
from ovs.db.idl import ColumnDefaultDict, Row

from appliance.core.ovsdb import column, opt

ZERO = {"string": "", "integer": 0, "real": 0.0, "boolean": False}
SCHEMA = json.loads((Path(__file__).parents[1] / "data" / "vswitch-schema-read.json").read_text())["tables"]


def _row(table_name: str, values: dict[str, Any], registered: list[str] | None = None) -> Row:
    """A committed replica row holding ``values`` and, as the server sends them, its scalars; every other
    registered column (a set, a map, an optional value) left out, at its default."""
    spec = SCHEMA[table_name]
    if registered is not None:
        spec = {"columns": {c: spec["columns"][c] for c in registered}}
    table = ovs.db.schema.TableSchema.from_json(spec, table_name)
    scalars = {n: ZERO[c.type.key.type.to_string()] for n, c in table.columns.items() if c.type.is_scalar()}
    data = ColumnDefaultDict(table)
    for name, value in {**scalars, **values}.items():
        data[name] = ovs.db.data.Datum.from_python(table.columns[name].type, value, lambda r: r)
    return Row(None, table, uuid.uuid4(), data)


def test_every_column_reads_as_the_row_gives_it_defaults_included() -> None:
    port = _row("Port", {"name": "vif1.0", "tag": 10, "external_ids": {"hvnet-owner": "hvnet"}})
    iface = _row("Interface", {"name": "vif1.0", "ofport": 3, "statistics": {"rx_bytes": 7}})
    for row in (port, iface):
        for name, col in row._table.columns.items():
            if col.type.key.ref_table_name is None:  # a reference needs the replica's other tables
                assert column(row, name) == getattr(row, name), name
    held = set(dict.keys(port._data)) | set(dict.keys(iface._data))  # what the rows hold, not what they would make
    assert "trunks" not in held and "options" not in held and "statistics" in held
    assert (column(port, "tag"), column(port, "trunks"), column(port, "vlan_mode")) == ([10], [], [])
    assert opt(column(port, "qos")) is None and column(port, "external_ids") == {"hvnet-owner": "hvnet"}
    assert (column(iface, "type"), column(iface, "ingress_policing_rate"), column(iface, "options")) == ("", 0, {})


def test_a_column_the_replica_does_not_have_is_an_attribute_error() -> None:
    iface = _row("Interface", {"name": "vif1.0"}, registered=["name", "external_ids"])
    assert column(iface, "external_ids") == {}
    with pytest.raises(AttributeError):
        column(iface, "statistics")


def test_a_row_being_changed_reads_its_change() -> None:
    port = _row("Port", {"name": "vif1.0", "tag": 10})
    port._changes["tag"] = ovs.db.data.Datum.from_python(port._table.columns["tag"].type, 20, lambda r: r)
    assert column(port, "tag") == [20]
