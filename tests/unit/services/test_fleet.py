"""Many hosts at once: the fan-out (parallel, each host on its own, always closed), the worst exit code,
and the agent-lock reply."""

from __future__ import annotations

import threading
import time

import pytest

from appliance.core.errors import ConflictError, MissingTool, OutcomeUnknown, OvsdbUnreachable, UsageError
from appliance.core.hostlist import InventoryHost
from appliance.core.ovsdb import lock_reply_held
from appliance.services import fleet


class _Host:
    """What the fan-out needs of a Host: something to close."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.closed = False

    def close(self) -> None:
        self.closed = True


def _entries(*names: str) -> list[InventoryHost]:
    return [InventoryHost(n, n) for n in names]


@pytest.mark.parametrize(
    ("codes", "expected"),
    [([], 0), ([0, 0], 0), ([0, 2, 1], 1), ([1, 4], 4), ([4, 3, 1], 3), ([3, 5], 5), ([5, 6, 0], 6), ([2, 0], 2)],
)
def test_the_worst_exit_code_wins(codes: list[int], expected: int) -> None:
    assert fleet.worst(codes) == expected


def test_every_host_runs_in_parallel_and_one_failure_stops_no_other() -> None:
    built: dict[str, _Host] = {}
    errors = {"b": OvsdbUnreachable("b: down"), "c": ConflictError("c: busy", hint="retry")}
    barrier = threading.Barrier(4, timeout=5)  # all four at once, or this fails

    def connect(entry: InventoryHost) -> _Host:
        if entry.name == "d":
            barrier.wait()  # d fails before its work: it still takes part in the rendezvous
            raise MissingTool("ovs-vsctl is not installed on d")
        built[entry.name] = _Host(entry.name)
        return built[entry.name]

    def work(host: _Host, entry: InventoryHost) -> tuple[str, int]:
        barrier.wait()
        if entry.name in errors:
            raise errors[entry.name]
        return f"done {host.name}", 0

    out = fleet.run(_entries("a", "b", "c", "d"), work, connect)  # type: ignore[arg-type]
    assert [o.name for o in out] == ["a", "b", "c", "d"]
    assert [o.exit for o in out] == [0, 3, 5, 4]
    assert out[0].value == "done a" and out[1].error == "b: down" and out[2].hint == "retry"
    assert "ovs-vsctl" in (out[3].error or "")
    assert all(h.closed for h in built.values()) and set(built) == {"a", "b", "c"}
    assert fleet.worst([o.exit for o in out]) == 5


def test_a_host_past_its_deadline_is_given_up_on_without_waiting() -> None:
    release = threading.Event()

    def work(host: _Host, entry: InventoryHost) -> tuple[str, int]:
        if entry.name == "slow":
            release.wait(10)
        return "ok", 0

    started = time.monotonic()
    out = fleet.run(_entries("fast", "slow"), work, lambda e: _Host(e.name), deadline_s=0.3,  # type: ignore[arg-type]
                    overdue_exit=OutcomeUnknown.exit_code)  # fmt: skip
    release.set()
    assert time.monotonic() - started < 3
    assert [o.exit for o in out] == [0, 6] and "0.3 s" in (out[1].error or "")


def test_a_bug_on_one_host_is_that_hosts_failure() -> None:
    def work(host: _Host, entry: InventoryHost) -> tuple[str, int]:
        if entry.name == "x":
            raise KeyError("oops")
        return "ok", 0

    out = fleet.run(_entries("x", "y"), work, lambda e: _Host(e.name))  # type: ignore[arg-type]
    assert [o.exit for o in out] == [1, 0] and "internal error" in (out[0].error or "")


def test_a_usage_error_on_one_host_is_its_own() -> None:
    def work(host: _Host, entry: InventoryHost) -> tuple[str, int]:
        raise UsageError("an earlier --no-commit apply is still pending")

    out = fleet.run(_entries("p"), work, lambda e: _Host(e.name))  # type: ignore[arg-type]
    assert out[0].exit == 2


@pytest.mark.parametrize(
    ("reply", "held"),
    [
        ({"id": 1, "result": {"locked": True}, "error": None}, False),  # free: we got it (and let it go)
        ({"id": 1, "result": {"locked": False}, "error": None}, True),  # someone else has it
        ({"id": 1, "result": None, "error": {"error": "syntax error"}}, None),
        ({"id": 1, "result": {"locked": "yes"}}, None),
        ({"id": 1, "result": {}}, None),
        ({"id": 1, "result": [True]}, None),
        ("locked", None),
        (None, None),
    ],
)
def test_the_lock_reply_says_whether_another_client_holds_it(reply: object, held: bool | None) -> None:
    assert lock_reply_held(reply) is held


def test_drift_cell() -> None:
    assert fleet.drift_text({"drift": None}) == "-"
    assert fleet.drift_text({"drift": 0}) == "in sync"
    assert fleet.drift_text({"drift": 3}) == "3 differ"
    assert fleet.drift_text({"drift": None, "drift_error": "x.yaml: no such file"}) == "error"


@pytest.mark.parametrize("verb", [["status"], ["plan", "P"], ["apply", "P"], ["verify", "P"]])
def test_hosts_is_refused_before_anything_with_host_db_or_an_unknown_name(
    verb: list[str], tmp_path, monkeypatch, capsys
) -> None:
    from appliance.cli.main import main

    policy = tmp_path / "p.yaml"
    policy.write_text("version: 1\nvifs: []\n")
    argv = [str(policy) if a == "P" else a for a in verb]
    monkeypatch.setenv("HVNET_INVENTORY", str(tmp_path / "none.yaml"))
    assert main([*argv, "--hosts", "all"]) == 2
    assert "no host inventory at" in capsys.readouterr().err
    (tmp_path / "none.yaml").write_text("hosts:\n  - name: a\n    group: g\n  - name: b\n")
    assert main(["--db", "unix:/nonexistent.sock", *argv, "--hosts", "g"]) == 2
    assert "--db one switch: give one" in capsys.readouterr().err
    assert main(["--host", "a", *argv, "--hosts", "g"]) == 2
    assert "--host one switch" in capsys.readouterr().err
    assert main([*argv, "--hosts", "a,nosuch"]) == 2
    err = capsys.readouterr().err
    assert "no host or group 'nosuch'" in err and "known: a, b, g" in err
