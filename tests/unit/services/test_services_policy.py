"""services.policy without a switch: the mirror checks, the watcher's target options, what became of a pending change."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from appliance.core.errors import UsageError
from appliance.core.target import DbTarget, SslOptions
from appliance.policy.apply.journal import Journal
from appliance.services import policy as svc
from appliance.switch.host import Host


def test_mirror_taken_and_find_mirror_word_refusals_once() -> None:
    assert svc.mirror_taken({("br0", "m1")}, "br0", "m1") == "mirror m1 already exists on br0"
    assert svc.mirror_taken({("br0", "m1")}, "br1", "m1") is None
    state: Any = SimpleNamespace(mirrors={("br0", "m1"): None, ("br1", "m1"): None, ("br1", "m2"): None})
    assert svc.find_mirror(state, "m2") == "br1"
    assert svc.find_mirror(state, "m1", "br0") == "br0"
    with pytest.raises(UsageError, match="no mirror named m3 on br0"):
        svc.find_mirror(state, "m3", "br0")
    with pytest.raises(UsageError, match="mirror m1 exists on br0, br1"):
        svc.find_mirror(state, "m1")


def _engine(tmp_path: Path, remote: str = "unix:/run/x/db.sock", ssl: SslOptions | None = None) -> Any:
    host = Host(DbTarget(remote, "--db", ssl))
    return SimpleNamespace(remote=remote, host=host, journal=Journal(remote, tmp_path, tmp_path / "audit.jsonl"))


def test_watcher_reaches_the_database_with_the_same_ssl_files(tmp_path: Path) -> None:
    assert svc._target_options(_engine(tmp_path)) == ["--db", "unix:/run/x/db.sock"]
    ssl = SslOptions("k.pem", "c.pem", "ca.pem")
    opts = svc._target_options(_engine(tmp_path, "ssl:10.0.0.1:6640", ssl))
    assert opts == ["--db", "ssl:10.0.0.1:6640", "--ssl-key", "k.pem", "--ssl-cert", "c.pem", "--ssl-ca", "ca.pem"]


def test_outcome_follows_the_journal(tmp_path: Path) -> None:
    eng = _engine(tmp_path)
    record = eng.journal.new_record("hvnet apply", [])
    eng.journal.save_last(record)
    eng.journal.save_pending(record, time.time() + 30, None)
    waiting = svc.pending(eng)
    assert waiting is not None and waiting.id == record["id"] and 0 < waiting.seconds_left <= 30
    assert svc.outcome(eng, waiting) is None  # still waiting
    eng.journal.clear_pending(record["id"])
    assert svc.outcome(eng, waiting) == "kept"  # gone before its deadline: committed
    eng.journal.mark_rolled_back(record)
    assert svc.outcome(eng, waiting) == "rolled back"


def test_open_engine_on_a_front_ends_connection_takes_its_modes_as_options(tmp_path: Path) -> None:
    """The console and the agent keep their connection; --policing, --hosts and the agent's mode are options."""
    from appliance.switch.host import DataPaths, NameConfig

    host = Host(DbTarget("unix:/run/x/db.sock", "--db"), paths=DataPaths.for_lab(tmp_path),
                names=NameConfig(libvirt_uri="none"))  # fmt: skip
    conn: Any = SimpleNamespace(target=host.target)
    plain = svc.open_engine(host, "hvnet tui", conn=conn)
    assert plain.conn is conn and plain.command == "hvnet tui"
    assert (plain.force_policing, plain.pool, plain.lenient, plain.audit_unchanged) == (None, False, False, True)
    agent = svc.open_engine(host, "hvnet agent", conn=conn, policing="meter", pool=True, enforcing=True)
    assert (agent.force_policing, agent.pool, agent.lenient, agent.audit_unchanged) == ("meter", True, True, False)
