"""services.confirm without a switch: the watcher's target options, what became of a pending change."""

from __future__ import annotations

import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from appliance.core.target import DbTarget, SslOptions
from appliance.policy.apply.journal import Journal
from appliance.services import confirm as svc
from appliance.switch.host import Host


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
