"""The host's own undo of an unconfirmed apply, on a real ovsdb-server: the transaction planned from the
engine's record, run by ``ovsdb-client transact``, and the detached timer that runs it (its shell scripts
run here through a local Host's runner, as they run on a hypervisor through the SSH runner)."""

from __future__ import annotations

import json
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.core import ovsdb
from appliance.core.target import DbTarget
from appliance.lab.switch import Switch
from appliance.policy import COLUMNS, PolicyEngine
from appliance.policy.apply import journal
from appliance.policy.plan import document, hostundo
from appliance.services import deadman
from appliance.switch.host import DataPaths, Host

POLICY = """\
version: 1
policing: tc
vifs:
  - port: p1
    vlan: {mode: access, tag: 9}
    ingress: {rate: 2000, burst: 200}
  - port: p2
    vlan: {mode: trunk, trunks: [5, 6]}
"""


@pytest.fixture()
def engine(switch: Switch, tmp_path: Path) -> Iterator[PolicyEngine]:
    switch.vsctl("add-br", "br0", "--", "add-port", "br0", "p1", "tag=1", "--", "add-port", "br0", "p2")
    host = Host(DbTarget(switch.remote, "test"), paths=DataPaths.for_lab(tmp_path / "state"))
    conn = ovsdb.Connection.open(host.target, COLUMNS, timeout=10)
    with PolicyEngine(conn, host, command="test") as eng:
        eng.force_policing = "tc"  # no ovs-vswitchd here: nothing to probe
        yield eng


def _port(switch: Switch, name: str) -> tuple[str, str, str]:
    cols = [switch.vsctl("get", "Port", name, c).strip() for c in ("vlan_mode", "tag", "trunks")]
    return cols[0], cols[1], cols[2]


def _rate(switch: Switch, name: str) -> str:
    return switch.vsctl("get", "Interface", name, "ingress_policing_rate").strip()


def _transact(switch: Switch, text: str) -> list[object]:
    res = subprocess.run(["ovsdb-client", "transact", switch.remote, text], capture_output=True, text=True,
                         check=True)  # fmt: skip
    return json.loads(res.stdout)  # one answer per operation; null for those after a failed one


def _errors(answer: list[object]) -> list[object]:
    return [op.get("error") for op in answer if isinstance(op, dict) and "error" in op]


def _applied(engine: PolicyEngine) -> list[journal.Change]:
    res = engine.apply(document.parse(POLICY, "p.yaml"), wait=False, verify=False)
    assert res.status == "applied", res.problems
    record = engine.journal.load_last()
    assert record is not None
    return journal.record_changes(record)


def test_the_transaction_puts_back_what_the_engine_recorded(switch: Switch, engine: PolicyEngine) -> None:
    before = (_port(switch, "p1"), _port(switch, "p2"), _rate(switch, "p1"))
    assert before == (("[]", "1", "[]"), ("[]", "[]", "[]"), "0")
    changes = _applied(engine)
    assert sorted(c.kind for c in changes) == ["ingress", "vlan", "vlan"]
    assert (_port(switch, "p1"), _port(switch, "p2")) == (("access", "9", "[]"), ("trunk", "[]", "[5, 6]"))
    undo = hostundo.plan(changes, "test undo")
    assert len(undo.transactions) == 1 and not undo.skipped
    answer = _transact(switch, undo.texts()[0])
    assert not _errors(answer), answer
    assert (_port(switch, "p1"), _port(switch, "p2"), _rate(switch, "p1")) == before
    # run again: the rows are no longer as the apply left them, so the guards stop it (nothing written)
    answer = _transact(switch, undo.texts()[0])
    assert _errors(answer) == ["timed out"]


def test_a_row_changed_since_stops_the_whole_undo(switch: Switch, engine: PolicyEngine) -> None:
    changes = _applied(engine)
    switch.vsctl("set", "Port", "p2", "trunks=7")  # someone else's change after the apply
    answer = _transact(switch, hostundo.plan(changes, "test undo").texts()[0])
    assert _errors(answer) == ["timed out"]
    # all or nothing: p1's settings, whose guard held, were not put back either
    assert (_port(switch, "p1"), _port(switch, "p2"), _rate(switch, "p1")) == (
        ("access", "9", "[]"), ("trunk", "[]", "[7]"), "2000")  # fmt: skip


def _wait_for(probe: deadman.Probe | None, get: object, verdict: str, limit: float = 15.0) -> deadman.Probe:
    assert callable(get)
    end = time.monotonic() + limit
    found = get()
    while found.verdict != verdict and time.monotonic() < end:
        time.sleep(0.2)
        found = get()
    return found


def test_the_timer_fires_alone_and_restores(switch: Switch, engine: PolicyEngine) -> None:
    changes = _applied_after_arming(engine)
    timer, changes = changes
    assert _port(switch, "p1") == ("access", "9", "[]")
    found = _wait_for(None, lambda: deadman.probe(engine.host, timer), "rolled back")
    assert found.verdict == "rolled back", found
    assert (_port(switch, "p1"), _port(switch, "p2"), _rate(switch, "p1")) == (
        ("[]", "1", "[]"), ("[]", "[]", "[]"), "0")  # fmt: skip
    assert deadman.claim(engine.host, timer, "committed") == "fired"  # too late to commit
    deadman.remove(engine.host, timer)
    assert not Path(timer.dir).exists()


def test_a_claimed_token_disarms_the_timer(switch: Switch, engine: PolicyEngine) -> None:
    timer, _ = _applied_after_arming(engine)
    assert oct(Path(timer.dir).stat().st_mode & 0o777) == "0o700"
    assert deadman.claim(engine.host, timer, "committed") == "claimed"
    time.sleep(timer.seconds + 1.5)
    found = deadman.probe(engine.host, timer)
    assert found.verdict == "committed" and found.status is None, found
    assert _port(switch, "p1") == ("access", "9", "[]")  # kept


def test_a_timer_whose_rows_changed_since_changes_nothing(switch: Switch, engine: PolicyEngine) -> None:
    timer, _ = _applied_after_arming(engine)
    switch.vsctl("set", "Port", "p1", "tag=33")
    found = _wait_for(None, lambda: deadman.probe(engine.host, timer), "guard failed")
    assert found.verdict == "guard failed", found
    assert "where" in found.detail()
    assert (_port(switch, "p1"), _port(switch, "p2")) == (("access", "33", "[]"), ("trunk", "[]", "[5, 6]"))
    deadman.remove(engine.host, timer)


def _applied_after_arming(engine: PolicyEngine) -> tuple[deadman.Timer, list[journal.Change]]:
    """Arm as a --no-commit apply on a host over SSH does: inside the transaction, before its commit."""
    armed: list[deadman.Timer] = []

    def arm(record: dict[str, object]) -> None:
        armed.append(deadman.arm(engine.host, journal.record_changes(record), 2, "test"))

    engine.before_commit = arm
    try:
        changes = _applied(engine)
    finally:
        engine.before_commit = None
    assert len(armed) == 1 and armed[0].covered == 3
    return armed[0], changes


def test_a_host_without_setsid_refuses_the_apply_before_anything_changes(
    switch: Switch, engine: PolicyEngine, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A hypervisor whose PATH lacks what the timer needs: the apply is refused, not made without its undo."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool in ("sh", "mkdir", "cat", "mv", "rm", "sleep", "ovsdb-client"):
        (bin_dir / tool).symlink_to(shutil.which(tool) or f"/usr/bin/{tool}")
    monkeypatch.setenv("PATH", str(bin_dir))
    with pytest.raises(deadman.HostTimerError, match="setsid is not installed there; nothing was applied"):
        _applied_after_arming(engine)
    monkeypatch.undo()
    assert (_port(switch, "p1"), _rate(switch, "p1")) == (("[]", "1", "[]"), "0")
    assert not (tmp_path / "state" / "no-commit").exists() or not list((tmp_path / "state" / "no-commit").iterdir())


def test_a_timer_directory_that_is_a_symlink_is_refused(switch: Switch, engine: PolicyEngine, tmp_path: Path) -> None:
    """hvnet's directory on the host swapped for a link elsewhere: nothing is written there, nothing applied."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "state").mkdir(exist_ok=True)
    (tmp_path / "state" / "no-commit").symlink_to(elsewhere)
    with pytest.raises(deadman.HostTimerError, match="is not this user's own directory; nothing was applied"):
        _applied_after_arming(engine)
    assert not list(elsewhere.iterdir())
    assert _port(switch, "p1") == ("[]", "1", "[]")
