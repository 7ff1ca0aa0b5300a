"""The journal's hard cases: corrupt records, who the user is, one pending slot, interrupted intents."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from appliance.policy.apply import journal
from appliance.policy.apply.journal import Journal, JournalError

REMOTE = "unix:/run/x/db.sock"


def _journal(tmp_path: Path) -> Journal:
    return Journal(REMOTE, tmp_path / "state", tmp_path / "audit.jsonl")


@pytest.mark.parametrize("text", ["{not json", "[1, 2]", '{"changes": 5}', "\xff\xfe"])
def test_a_corrupt_record_is_an_error_not_nothing_to_roll_back(tmp_path: Path, text: str) -> None:
    j = _journal(tmp_path)
    (tmp_path / "state").mkdir()
    (tmp_path / "state" / "last-apply.json").write_bytes(text.encode("utf-8", "surrogateescape"))
    with pytest.raises(JournalError) as exc:
        j.load_last()
    assert "last-apply.json" in str(exc.value)


def test_a_missing_record_is_none(tmp_path: Path) -> None:
    assert _journal(tmp_path).load_last() is None and _journal(tmp_path).load_pending() is None


def test_sudo_user_is_not_trusted_without_a_login_uid(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(journal, "_login_uid", lambda: None)
    monkeypatch.setenv("SUDO_USER", "alice")
    me = journal._name_of(os.geteuid())
    assert journal.user() == f"{me} (SUDO_USER=alice, unverified)"


def test_the_login_uid_names_the_person_whatever_sudo_user_says(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUDO_USER", "mallory")
    monkeypatch.setattr(journal, "_login_uid", lambda: os.geteuid())
    assert journal.user() == journal._name_of(os.geteuid())  # the same user: no claim recorded
    monkeypatch.setattr(journal, "_login_uid", lambda: 65534)
    assert journal.user() == f"{journal._name_of(65534)} (as {journal._name_of(os.geteuid())})"


def test_one_pending_slot_taken_atomically(tmp_path: Path) -> None:
    j = _journal(tmp_path)
    j.reserve_pending("first")
    with pytest.raises(Exception, match="still pending"):
        j.reserve_pending("second")
    assert j.load_pending() is None  # a reservation is not a pending change
    j.release_pending("first")
    j.reserve_pending("second")


def test_a_reservation_left_by_a_killed_apply_is_taken_over(tmp_path: Path) -> None:
    j = _journal(tmp_path)
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    (tmp_path / "state").mkdir()
    path = tmp_path / "state" / "pending.json"
    path.write_text(f'{{"id": "old", "target": "{REMOTE}", "changes": [], "reserved": true, "pid": {gone.stdout}}}')
    j.reserve_pending("new")
    assert '"new"' in path.read_text()


def test_intents_of_dead_processes_are_interrupted_live_ones_not(tmp_path: Path) -> None:
    j = _journal(tmp_path)
    mine = j.new_record("hvnet apply", [])
    j.write_intent(mine, keep=True)
    assert j.interrupted() == []  # this process is alive
    dead = j.new_record("hvnet apply", [])
    j.write_intent(dead, keep=True)
    p = tmp_path / "state" / f"applying.{dead['id']}.json"
    p.write_text(p.read_text().replace(f'"pid": {os.getpid()}', '"pid": 999999999'))
    assert [r["id"] for r in j.interrupted()] == [dead["id"]]
    j.clear_intent(dead["id"])
    assert j.interrupted() == []


def test_an_intent_marked_committed_says_so_to_the_settle_and_keeps_its_changes(tmp_path: Path) -> None:
    j = _journal(tmp_path)
    rec = j.new_record("hvnet apply", [])
    j.write_intent(rec, keep=True)
    p = tmp_path / "state" / f"applying.{rec['id']}.json"
    p.write_text(p.read_text().replace(f'"pid": {os.getpid()}', '"pid": 999999999'))
    (before,) = j.interrupted()
    assert "committed" not in before
    j.mark_committed(rec["id"])
    (after,) = j.interrupted()
    assert after == {**before, "committed": True}
    j.clear_intent(rec["id"])
    j.mark_committed(rec["id"])  # gone already: nothing is written back
    assert j.interrupted() == []


def test_unwritable_audit_log_is_refused_before_anything(tmp_path: Path) -> None:
    j = Journal(REMOTE, tmp_path / "state", Path("/proc/hvnet-test/audit.jsonl"))
    with pytest.raises(JournalError, match="nothing was applied"):
        j.check_writable()


def test_rollback_record_replaced_and_put_back(tmp_path: Path) -> None:
    j = _journal(tmp_path)
    a, b = j.new_record("hvnet apply a", []), j.new_record("hvnet apply b", [])
    j.save_last(a)
    j.save_last(b)
    assert j.load_last()["id"] == b["id"]
    j.unsave_last(b["id"])  # b was undone before it finished: a is the last apply again
    assert j.load_last()["id"] == a["id"]
    j.mark_rolled_back(a)
    assert j.load_last() is None and j.load_rolled_back()["id"] == a["id"]


def test_a_host_over_ssh_keeps_its_records_apart(tmp_path: Path) -> None:
    from appliance.core.target import DbTarget
    from appliance.switch.host import DataPaths, Host

    paths = DataPaths(state_dir=tmp_path, audit_log=tmp_path / "audit.jsonl")
    local = Journal.for_host(Host(DbTarget("unix:/x/db.sock", "--db"), paths=paths))
    fa1 = Journal.for_host(Host(DbTarget("unix:/tmp/s1/db.sock", "--host"), paths=paths, label="fa1"))
    fa2 = Journal.for_host(Host(DbTarget("unix:/tmp/s2/db.sock", "--host"), paths=paths, label="fa2"))
    assert local.state_dir == tmp_path
    assert (fa1.state_dir, fa2.state_dir) == (tmp_path / "hosts" / "fa1", tmp_path / "hosts" / "fa2")
    assert fa1.audit_path == fa2.audit_path == local.audit_path  # one audit log, each line naming its target
