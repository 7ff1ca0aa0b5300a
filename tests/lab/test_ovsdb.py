"""The engine's OVSDB connection against a real ovsdb-server."""

from __future__ import annotations

import time

import pytest

from appliance.core import ovsdb
from appliance.core.errors import OvsdbError, OvsdbUnreachable
from appliance.core.target import DbTarget
from appliance.switch.reader import COLUMNS
from tests.conftest import run_hvnet


def add_bridge(name: str):
    def build(ctx: ovsdb.TxnContext) -> None:
        br = ctx.insert("Bridge")
        br.name = name
        root = ctx.root()
        root.verify("bridges")
        root.bridges = [*root.bridges, br]

    return build


def bridges(switch) -> set[str]:
    return set(switch.vsctl("list-br").split())


def test_transaction_and_independent_witness(switch) -> None:
    with ovsdb.Connection.open(DbTarget(switch.remote, "test"), COLUMNS) as conn:
        res = conn.transact(add_bridge("br-a"), comment="test")
        assert res.status == "success" and res.attempts == 1
    assert bridges(switch) == {"br-a"}


def test_reconnect_after_ovsdb_server_restart(switch) -> None:
    conn = ovsdb.Connection.open(DbTarget(switch.remote, "test"), COLUMNS)
    try:
        conn.transact(add_bridge("br-before"))
        switch.kill_ovsdb()
        assert conn.wait_for(lambda: not conn.is_connected, 5.0)
        switch.start(vswitchd=False)  # same database file, new process
        started = time.monotonic()
        res = conn.transact(add_bridge("br-after"), timeout=15)
        assert res.status == "success"
        assert conn.reconnects >= 1
        assert time.monotonic() - started < 5.0
        # the replica was resynchronised: it holds both bridges
        names = {b.name for b in conn.idl.tables["Bridge"].rows.values()}
        assert names == {"br-before", "br-after"}
    finally:
        conn.close()
    assert bridges(switch) == {"br-before", "br-after"}


def test_verify_conflict_replans_against_fresh_state(switch) -> None:
    """A concurrent writer changes what the build read: TRY_AGAIN, then re-plan."""
    switch.vsctl("set", "Open_vSwitch", ".", "external_ids:counter=1")
    calls: list[str] = []

    def bump(ctx: ovsdb.TxnContext) -> str:
        root = ctx.root()
        root.verify("external_ids")
        seen = root.external_ids.get("counter", "0")
        calls.append(seen)
        if len(calls) == 1:  # another operator commits between our read and our commit
            switch.vsctl("set", "Open_vSwitch", ".", "external_ids:counter=5")
        root.setkey("external_ids", "counter", str(int(seen) + 1))
        return seen

    with ovsdb.Connection.open(DbTarget(switch.remote, "test"), COLUMNS) as conn:
        res = conn.transact(bump)
    assert calls == ["1", "5"] and res.attempts == 2
    assert switch.vsctl("get", "Open_vSwitch", ".", "external_ids:counter").strip().strip('"') == "6"


def test_constraint_violation_is_an_error_and_changes_nothing(switch) -> None:
    with ovsdb.Connection.open(DbTarget(switch.remote, "test"), COLUMNS) as conn:
        conn.transact(add_bridge("dup"))

        def two(ctx):
            add_bridge("other")(ctx)
            add_bridge("dup")(ctx)  # Bridge.name is unique

        with pytest.raises(OvsdbError, match="rejected"):
            conn.transact(two)
    assert bridges(switch) == {"dup"}


def test_build_exception_aborts(switch) -> None:
    with ovsdb.Connection.open(DbTarget(switch.remote, "test"), COLUMNS) as conn:

        def boom(ctx):
            add_bridge("never")(ctx)
            raise ValueError("planner refused")

        with pytest.raises(ValueError):
            conn.transact(boom)
        assert conn.transact(add_bridge("fine")).status == "success"
    assert bridges(switch) == {"fine"}


def test_unregistered_schema_columns_are_skipped(switch) -> None:
    cols = {"Bridge": ["name", "no_such_column"], "NoSuchTable": ["x"], "Open_vSwitch": ["bridges"]}
    with ovsdb.Connection.open(DbTarget(switch.remote, "test"), cols) as conn:
        assert conn.has_column("Bridge", "name")
        assert not conn.has_column("Bridge", "no_such_column")
        assert not conn.has_column("NoSuchTable", "x")


def test_c_json_parser_reported() -> None:
    import ovs

    has_c_ext = any(p.name.startswith("_json") for p in __import__("pathlib").Path(ovs.__file__).parent.iterdir())
    assert ovsdb.c_json_parser_in_use() == has_c_ext


def test_unreachable_target(tmp_path) -> None:
    started = time.monotonic()
    with pytest.raises(OvsdbUnreachable) as exc:
        ovsdb.Connection.open(DbTarget(f"unix:{tmp_path}/none.sock", "--db"), COLUMNS, timeout=2)
    assert time.monotonic() - started < 2.5
    assert f"unix:{tmp_path}/none.sock (from --db)" in str(exc.value)
    assert exc.value.hint and "ovsdb-server" in exc.value.hint


def test_cli_unreachable_exit_code_and_message(tmp_path) -> None:
    res = run_hvnet("--db", f"unix:{tmp_path}/none.sock", "status", env={"HVNET_LAB_DIR": str(tmp_path)})
    assert res.returncode == 3
    assert "cannot reach OVSDB at unix:" in res.stderr and "hint:" in res.stderr
    assert "Traceback" not in res.stderr


def test_cli_system_default_hint(tmp_path) -> None:
    res = run_hvnet("status", env={"HVNET_LAB_DIR": str(tmp_path / "none"), "HVNET_DB": ""})
    if res.returncode == 0:
        pytest.skip("a system OVS is running on this host")
    assert res.returncode == 3
    assert "(from system default)" in res.stderr and "hvnet lab up" in res.stderr
