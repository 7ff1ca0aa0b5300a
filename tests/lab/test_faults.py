"""Faults at the worst moment of an apply, on the real lab; ovs-vsctl/ovs-ofctl and the audit log as witnesses.

Each cell stops a real ``hvnet apply`` at one step (``$HVNET_STOP_AT``: the
process stops itself there), breaks something -- SIGKILL hvnet, SIGKILL
ovsdb-server, SIGSTOP ovs-vswitchd -- lets it go on where it still can, and
then checks, with independent tools:

* the switch is either exactly as before or exactly as the policy says
  (OVSDB and OpenFlow), never in between, once the next hvnet has run;
* the audit log says what happened to the change (applied, not applied,
  outcome unknown), and no intent is left behind;
* ``hvnet rollback`` then puts back exactly the state before.

Each cell's row is printed (``-s``): step, fault, hvnet's exit, what the
witness saw, what the next run and the rollback did.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from appliance.lab import Lab
from tests.conftest import HVNET, ROOT, run_hvnet
from tests.lab.policy_helpers import config, reset, write
from tests.lab.remote_helpers import apply_stopped_at, process_state

TAGS = {"vif1.0": 1, "vif2.0": 1, "vif3.0": 2}
POLICY = """\
version: 1
vifs:
  - vm: VM1
    vlan: {tag: 7}
    ingress: {rate: 10240, burst: 1024}
  - vm: VM3
    vlan: {mode: native-untagged, tag: 2, trunks: "20-22"}
"""
STEPS = ("before-commit", "committed", "recorded", "meters", "verified")


@pytest.fixture
def journal_env(tmp_path: Path) -> dict[str, str]:
    """A journal of the cell's own: records and audit lines from other tests do not mix in."""
    return {"HVNET_STATE_DIR": str(tmp_path / "state"), "HVNET_AUDIT_LOG": str(tmp_path / "audit.jsonl")}


@pytest.fixture
def states(lab: Lab, tmp_path: Path, journal_env: dict[str, str]) -> tuple[dict, dict, str]:
    """The switch before, and after a clean apply of POLICY (measured here, then undone with ovs-vsctl)."""
    reset(lab, TAGS)
    before = config(lab)
    f = write(tmp_path / "p.yaml", POLICY)
    env = {"HVNET_STATE_DIR": str(tmp_path / "reference-state"), "HVNET_AUDIT_LOG": str(tmp_path / "reference.jsonl")}
    res = run_hvnet("apply", f, env=env)
    assert res.returncode == 0, res.stderr
    after = config(lab)
    reset(lab, TAGS)
    assert config(lab) == before
    yield before, after, f
    lab.switch.start()  # whatever a cell killed
    _cont(lab.switch.pid("ovs-vswitchd"))
    reset(lab, TAGS)


def _cont(pid: int | None) -> None:
    if pid:
        try:
            os.kill(pid, signal.SIGCONT)
        except ProcessLookupError:
            pass


def _apply_stopped_at(f: str, step: str, env: dict[str, str]) -> subprocess.Popen:
    return apply_stopped_at(["apply", f], step, env)


def _audit(env: dict[str, str]) -> list[dict]:
    path = Path(env["HVNET_AUDIT_LOG"])
    return [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []


def _ovsdb_part(cfg: dict) -> dict:
    return {k: v for k, v in cfg.items() if k != "OpenFlow"}


def _settle_and_roll_back(lab: Lab, f: str, env: dict, before: dict, after: dict) -> tuple[str, str]:
    """The next hvnet run settles the interrupted apply and applies; rollback restores before, exactly."""
    res = run_hvnet("apply", f, env=env)
    assert res.returncode == 0, res.stderr
    assert config(lab) == after, "the next apply did not leave the policy fully in place"
    assert not list(Path(env["HVNET_STATE_DIR"]).glob("applying.*.json")), "an intent was left behind"
    settled = [e["result"] for e in _audit(env) if "interrupted" in e["result"] or "unknown" in e["result"]]
    res = run_hvnet("rollback", env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert config(lab) == before, "rollback did not put back the state before the apply"
    return (settled[-1] if settled else "-"), "restored"


def _row(step: str, fault: str, code: int | None, witness: str, settled: str, rollback: str) -> None:
    print(f"\n| {step:13} | {fault:30} | exit {code} | {witness:10} | {settled[:70]} | {rollback} |")


@pytest.mark.parametrize("step", STEPS)
def test_hvnet_killed_at_each_step(lab: Lab, states, journal_env, step: str) -> None:
    before, after, f = states
    proc = _apply_stopped_at(f, step, journal_env)
    proc.kill()
    proc.wait(timeout=10)
    now = config(lab)
    if step == "before-commit":
        assert now == before  # nothing was sent
        witness = "before"
    else:
        assert _ovsdb_part(now) == _ovsdb_part(after)  # committed: OVSDB all there, meters maybe not yet
        witness = "after" if now == after else "OVSDB after"
    settled, rolled = _settle_and_roll_back(lab, f, journal_env, before, after)
    expected = "not applied" if step == "before-commit" else "applied ("
    assert settled.startswith(expected), settled
    _row(step, "SIGKILL hvnet", proc.returncode, witness, settled, rolled)


def test_ovsdb_killed_before_the_commit_is_unknown_then_settled(lab: Lab, states, journal_env) -> None:
    before, after, f = states
    proc = _apply_stopped_at(f, "before-commit", journal_env)
    lab.switch.kill_ovsdb()
    _cont(proc.pid)
    _out, err = proc.communicate(timeout=60)
    assert "Traceback" not in err, err
    assert proc.returncode == 6, (proc.returncode, err)  # never "prevented": it cannot be known here
    assert "unknown" in _audit(journal_env)[-1]["result"]
    lab.switch.start()  # same database file, a new server
    assert config(lab) == before
    settled, rolled = _settle_and_roll_back(lab, f, journal_env, before, after)
    assert settled.startswith("not applied"), settled
    _row("before-commit", "SIGKILL ovsdb-server", proc.returncode, "before", settled, rolled)


@pytest.mark.parametrize("step", STEPS[1:])
def test_ovsdb_killed_after_the_commit(lab: Lab, states, journal_env, step: str) -> None:
    before, after, f = states
    proc = _apply_stopped_at(f, step, journal_env)
    lab.switch.kill_ovsdb()
    _cont(proc.pid)
    _out, err = proc.communicate(timeout=120)
    assert "Traceback" not in err, err
    # Committed; then ovs-vswitchd, its database gone, does not answer OpenFlow: the meters
    # fail and the restore cannot reach the database.  Never "prevented": unknown, and said.
    assert proc.returncode in (0, 6), (proc.returncode, err)
    lab.switch.start()
    assert _ovsdb_part(config(lab)) == _ovsdb_part(after)
    said = [e["result"] for e in _audit(journal_env)]
    assert said and (said[-1].startswith("applied") or "unknown" in said[-1]), said
    settled, rolled = _settle_and_roll_back(lab, f, journal_env, before, after)
    _row(step, "SIGKILL ovsdb-server", proc.returncode, "OVSDB after", f"{said[-1][:30]} / {settled}", rolled)


@pytest.mark.parametrize("step", STEPS)
def test_vswitchd_stalled(lab: Lab, states, journal_env, step: str) -> None:
    """ovs-vswitchd stopped at a step for a few seconds: the apply waits for it and completes."""
    before, after, f = states
    proc = _apply_stopped_at(f, step, journal_env)
    vswitchd = lab.switch.pid("ovs-vswitchd")
    os.kill(vswitchd, signal.SIGSTOP)
    try:
        _cont(proc.pid)
        time.sleep(3)
    finally:
        _cont(vswitchd)
    _out, err = proc.communicate(timeout=90)
    assert proc.returncode == 0, err
    assert config(lab) == after
    assert _audit(journal_env)[-1]["result"] == "applied"
    res = run_hvnet("rollback", env=journal_env)
    assert res.returncode == 0 and config(lab) == before, res.stderr
    _row(step, "SIGSTOP ovs-vswitchd for 3 s", proc.returncode, "after", "applied", "restored")


def test_state_directory_full_changes_nothing(lab: Lab, states, journal_env, tmp_path: Path) -> None:
    before, _after, f = states
    full = tmp_path / "full"
    full.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(full)], check=True)
    try:
        with open(full / "filler", "wb") as fh:
            try:
                fh.write(b"\0" * (1 << 20))
            except OSError:
                pass  # ENOSPC: the file system is full now
        env = {**journal_env, "HVNET_STATE_DIR": str(full / "state")}
        res = run_hvnet("apply", f, env=env)
    finally:
        subprocess.run(["umount", str(full)], check=True)
    assert res.returncode == 1 and "No space left" in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert config(lab) == before
    _row("before-commit", "state directory full", res.returncode, "before", "-", "nothing to undo")


def test_unwritable_audit_log_changes_nothing(lab: Lab, states, journal_env) -> None:
    before, _after, f = states
    env = {**journal_env, "HVNET_AUDIT_LOG": "/proc/hvnet-audit/audit.jsonl"}
    res = run_hvnet("apply", f, env=env)
    assert res.returncode == 1 and "audit log" in res.stderr and "nothing was applied" in res.stderr, res.stderr
    assert config(lab) == before
    _row("before-commit", "audit log not writable", res.returncode, "before", "-", "nothing to undo")


def test_two_mirror_adds_of_one_name_at_once(lab: Lab, states, journal_env) -> None:
    argv = [*HVNET, "mirror", "add", "twin", "--bridge", "xenbr0", "--vlan", "40", "--output-vlan", "999"]
    procs = [
        subprocess.Popen(argv, cwd=ROOT, env={**os.environ, **journal_env}, stdout=subprocess.PIPE,
                         stderr=subprocess.PIPE, text=True)
        for _ in range(3)
    ]  # fmt: skip
    codes = sorted(p.wait(timeout=60) for p in procs)
    names = lab.switch.vsctl("--columns=name", "--bare", "list", "Mirror").split()
    assert names.count("twin") == 1, names
    assert codes == [0, 2, 2], [p.stderr.read() for p in procs]
    _row("-", "3 concurrent mirror add, 1 name", None, "1 mirror", f"exits {codes}", "-")


def test_two_unconfirmed_applies_at_once_leave_one_pending(lab: Lab, states, journal_env, tmp_path) -> None:
    before, _after, f = states
    other = write(tmp_path / "q.yaml", "version: 1\nvifs:\n  - vm: VM2\n    vlan: {tag: 9}\n")
    procs = [
        subprocess.Popen([*HVNET, "apply", path, "--no-commit", "--timeout", "60"], cwd=ROOT, env={**os.environ, **journal_env},
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for path in (f, other)
    ]  # fmt: skip
    codes = sorted(p.wait(timeout=60) for p in procs)
    assert codes == [0, 2], [p.stderr.read() for p in procs]
    res = run_hvnet("rollback", env=journal_env)
    assert res.returncode == 0, res.stderr
    assert config(lab) == before
    _row("-", "2 concurrent --no-commit applies", None, "1 pending", f"exits {codes}", "restored")


def test_watcher_killed_the_next_run_keeps_the_promise(lab: Lab, states, journal_env) -> None:
    before, _after, f = states
    res = run_hvnet("apply", f, "--no-commit", "--timeout", "5", env=journal_env)
    assert res.returncode == 0, res.stderr
    pending = json.loads((Path(journal_env["HVNET_STATE_DIR"]) / "pending.json").read_text())
    os.kill(int(pending["watcher_pid"]), signal.SIGKILL)
    time.sleep(8)  # past the deadline and the grace: nobody rolled it back
    res = run_hvnet("commit", env=journal_env)
    assert res.returncode == 1 and "rolled back now" in res.stderr, res.stdout + res.stderr
    assert config(lab) == before
    _row("watcher", "SIGKILL watcher", res.returncode, "before", "rolled back late", "-")


def test_partial_rollback_says_so_and_exits_1(lab: Lab, states, journal_env) -> None:
    """A row changed since the apply is left as is, and the rollback is not called a success."""
    _before, _after, f = states
    assert run_hvnet("apply", f, env=journal_env).returncode == 0
    lab.switch.vsctl("set", "Port", "vif3.0", "tag=44")  # someone else's change after ours
    res = run_hvnet("rollback", env=journal_env)
    assert res.returncode == 1 and "partial" in res.stdout + res.stderr, res.stdout + res.stderr
    assert lab.switch.vsctl("get", "Port", "vif3.0", "tag").strip() == "44"  # theirs is kept
    assert lab.switch.vsctl("get", "Port", "vif1.0", "tag").strip() == "1"  # ours is put back
    res = run_hvnet("rollback", env=journal_env)  # once rolled back, there is nothing left to undo
    assert res.returncode == 1 and "nothing to roll back" in res.stderr, res.stdout + res.stderr
    _row("-", "row changed before rollback", 1, "partial", "left as is, reported", "partial (exit 1)")


def test_agent_killed_during_a_repair(lab: Lab, states, journal_env, tmp_path: Path) -> None:
    """The agent SIGKILLed between its commit and its audit line: the next hvnet settles it (meters
    included), audits it as the agent's, and does not make it what ``hvnet rollback`` undoes."""
    _before, after, f = states
    env = {**os.environ, **journal_env, "HVNET_STOP_AT": "committed"}
    agent = subprocess.Popen([*HVNET, "agent", "--policy", f, "--tick", "0.5"], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 30
        while process_state(agent.pid) != "T":
            assert agent.poll() is None and time.monotonic() < deadline, agent.communicate(timeout=5)
            time.sleep(0.02)
    finally:
        agent.kill()
        agent.wait(timeout=10)
    assert _ovsdb_part(config(lab)) == _ovsdb_part(after)  # committed, meters not yet
    res = run_hvnet("rollback", env=journal_env)  # settles first; the agent's repair is not its to undo
    assert res.returncode == 1 and "nothing to roll back" in res.stderr, res.stdout + res.stderr
    assert config(lab) == after  # settled: meters in line with what was committed
    said = [e for e in _audit(journal_env) if "interrupted" in e["result"]]
    assert said and said[-1]["command"] == "hvnet agent" and said[-1]["result"].startswith("applied ("), said
    assert not list(Path(journal_env["HVNET_STATE_DIR"]).glob("applying.*.json"))
    _row("committed", "SIGKILL agent", agent.returncode, "OVSDB after", said[-1]["result"][:40], "not the agent's")


def test_two_applies_and_the_agent_at_once(lab: Lab, states, journal_env, tmp_path: Path) -> None:
    """Two operators set one VIF's VLAN at once while the agent enforces another VIF: every commit is
    planned against what the one before left (the audit lines chain), none is lost, the agent holds."""
    _before, _after, _f = states
    agent_policy = write(tmp_path / "agent.yaml", "version: 1\nvifs:\n  - vm: VM1\n    vlan: {tag: 7}\n")
    env = {**os.environ, **journal_env}
    agent = subprocess.Popen([*HVNET, "agent", "--policy", agent_policy, "--tick", "0.5"], cwd=ROOT, env=env,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 20
        while lab.switch.vsctl("get", "Port", "vif1.0", "tag").strip() != "7":
            assert time.monotonic() < deadline, "the agent never applied its policy"
            time.sleep(0.05)
        files = [write(tmp_path / f"op{t}.yaml", f"version: 1\nvifs:\n  - vm: VM2\n    vlan: {{tag: {t}}}\n")
                 for t in (9, 10)]  # fmt: skip
        procs = [subprocess.Popen([*HVNET, "apply", p], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                                  stderr=subprocess.PIPE, text=True) for p in files]  # fmt: skip
        lab.switch.vsctl("set", "Port", "vif1.0", "tag=1")  # drift for the agent, at the same moment
        codes = [p.wait(timeout=60) for p in procs]
        assert codes == [0, 0], [p.stderr.read() for p in procs]
        deadline = time.monotonic() + 10
        while lab.switch.vsctl("get", "Port", "vif1.0", "tag").strip() != "7":
            assert time.monotonic() < deadline, "the agent did not repair its VIF"
            time.sleep(0.05)
    finally:
        agent.terminate()
        agent.wait(timeout=10)
    vm2 = [e for e in _audit(journal_env) if e["command"].startswith("hvnet apply") and e["after"]]
    assert len(vm2) == 2 and all(e["result"] == "applied" for e in vm2), vm2
    # Audit lines are written after verification, so their order need not be the commits' order:
    # the chain is found by values -- one planned on the original, the other on its result.
    first = next(e for e in vm2 if e["before"][0]["value"] == "access tag 1")
    second = next(e for e in vm2 if e is not first)
    assert second["before"][0]["value"] == first["after"][0]["value"]  # planned on the first's result
    assert lab.switch.vsctl("get", "Port", "vif2.0", "tag").strip() == second["after"][0]["value"].split()[-1]
    _row("-", "2 applies + agent at once", None, "chained", "all audited", "-")
