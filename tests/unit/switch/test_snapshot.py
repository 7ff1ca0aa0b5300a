"""JSON (RFC 7047 notation) to the values python-ovs's rows give, type by type."""

from __future__ import annotations

import uuid

from appliance.switch.snapshot import Row, converter

U1, U2 = "7d2fbc6e-54a4-4a5e-a31b-7d0a2a1a0c01", "0f1e3a5b-54a4-4a5e-a31b-7d0a2a1a0c02"


def test_scalars_optionals_sets_and_maps() -> None:
    assert converter("string")("vif1.0", {}) == "vif1.0"
    optional = converter({"key": {"type": "integer", "minInteger": 0, "maxInteger": 4095}, "min": 0, "max": 1})
    assert optional(["set", []], {}) == [] and optional(7, {}) == [7]
    trunks = converter({"key": "integer", "min": 0, "max": 4096})
    assert trunks(["set", [30, 10, 20]], {}) == [10, 20, 30]
    ids = converter({"key": "string", "value": "string", "min": 0, "max": "unlimited"})
    assert ids(["map", [["attached-mac", "02:00:00:00:00:01"], ["xs-vm-uuid", "u"]]], {}) == {
        "attached-mac": "02:00:00:00:00:01", "xs-vm-uuid": "u"}  # fmt: skip


def test_references_become_rows_and_dangling_ones_vanish() -> None:
    row = Row(uuid.UUID(U1), {"name": "vif1.0"})
    rows = {U1: row}  # by uuid as the server writes it
    ports = converter({"key": {"type": "uuid", "refTable": "Port"}, "min": 0, "max": "unlimited"})
    assert ports(["set", [["uuid", U1], ["uuid", U2]]], rows) == [row]
    one = converter({"key": {"type": "uuid", "refTable": "Port"}, "min": 0, "max": 1})
    assert one(["uuid", U1], rows) == [row] and one(["set", []], rows) == []
    plain = converter({"key": "uuid", "min": 1, "max": 1})
    assert plain(["uuid", U2], rows) == uuid.UUID(U2)
    assert row.name == "vif1.0" and row._data is None


def test_every_shape_reads_as_before_whatever_the_server_writes() -> None:
    """A set of one where an atom is expected, an empty one, a dangling reference: as python-ovs reads them."""
    assert converter({"key": "string"})(["set", ["vif1.0"]], {}) == "vif1.0"
    assert converter({"key": "integer", "min": 1, "max": 1})(["set", []], {}) is None
    required = converter({"key": {"type": "uuid", "refTable": "Port"}})
    assert required(["uuid", U2], {}) is None and required(["set", [["uuid", U2]]], {}) is None
    names = converter({"key": "string", "min": 0, "max": "unlimited"})
    raw = ["set", ["b", "c", "a"]]
    assert names(raw, {}) == ["a", "b", "c"] and names("a", {}) == ["a"] and raw == ["set", ["b", "c", "a"]]
    one = ["set", ["a"]]
    assert names(one, {}) == ["a"] and names(one, {}) is not one[1]  # a list of its own, not the reply's


def test_a_row_reads_its_columns_as_attributes() -> None:
    row = Row(uuid.UUID(U1), {"name": "vif1.0", "ofport": [1]})
    assert (row.uuid, row.name, row.ofport) == (uuid.UUID(U1), "vif1.0", [1])
    assert getattr(row, "mtu", None) is None  # a column not read is not there, as on the IDL's rows
