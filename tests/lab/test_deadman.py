"""A --no-commit apply that cuts the console's SSH to the host is still rolled back on time, by the host itself
(vlan-tests/topologies/managed-host.yaml: the host's management link is a port of its OVS bridge)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.core import documents
from appliance.lab import Lab
from tests import jsonschemas
from tests.conftest import HVNET, ROOT, run_hvnet
from tests.lab.conftest import lab_up

pytestmark = pytest.mark.skipif(not os.path.exists("/usr/sbin/sshd"), reason="openssh-server (make setup installs it)")

TOPOLOGY = ROOT / "vlan-tests" / "topologies" / "managed-host.yaml"
WINDOW_S = 8


@pytest.fixture(scope="module")
def managed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with lab_up(TOPOLOGY, tmp_path_factory.mktemp("managed-host") / "run") as lab:
        yield lab


@pytest.fixture()
def env(managed: Lab, tmp_path: Path) -> dict[str, str]:
    return {"HVNET_LAB_DIR": str(managed.run_dir), "HVNET_STATE_DIR": str(tmp_path / "state"),
            "HVNET_AUDIT_LOG": str(tmp_path / "audit.jsonl")}  # fmt: skip


def _reachable(lab: Lab) -> bool:
    h = lab._hosts()["hm1"]
    argv = ["ssh", "-F", str(h.ssh_config), "-o", "BatchMode=yes", "-o", "ConnectTimeout=2", "hm1", "true"]
    return subprocess.run(argv, capture_output=True, timeout=20, check=False).returncode == 0


def _tag(lab: Lab, port: str) -> str:
    return lab._hosts()["hm1"].switch.vsctl("get", "Port", port, "tag").strip()


def _until(what: object, limit: float) -> float:
    """Seconds until ``what()`` held (or the limit)."""
    assert callable(what)
    start = time.monotonic()
    while not what() and time.monotonic() - start < limit:
        time.sleep(0.2)
    return time.monotonic() - start


def test_a_change_that_cuts_ssh_is_rolled_back_by_the_host_alone(managed: Lab, env: dict[str, str],
                                                                  tmp_path: Path) -> None:  # fmt: skip
    mgmt = managed._hosts()["hm1"].veth[1]
    assert _tag(managed, mgmt) == "[]" and _reachable(managed)
    policy = tmp_path / "cut.yaml"
    policy.write_text(f"version: 1\nvifs:\n  - port: {mgmt}\n    vlan: {{mode: access, tag: 99}}\n")
    started = time.monotonic()
    apply = subprocess.Popen([*HVNET, "--host", "hm1", "apply", str(policy), "--no-commit", "--timeout",
                              str(WINDOW_S)], cwd=ROOT, env={**os.environ, **env}, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        assert _until(lambda: _tag(managed, mgmt) == "99", 20) < 20
        assert not _reachable(managed)  # the console cannot reach the host: only the host can undo it
        _until(lambda: _tag(managed, mgmt) != "99", WINDOW_S + 20)
        restored_after = time.monotonic() - started
        assert _tag(managed, mgmt) == "[]"
        assert restored_after < WINDOW_S + 8, restored_after  # on time: armed before the apply, fired at the deadline
        assert _until(lambda: _reachable(managed), 30) < 30
        out, _ = apply.communicate(timeout=120)
    finally:
        if apply.poll() is None:
            apply.kill()
            apply.wait()
    # The apply's own connection came back after the host's undo: it says so rather than promise a rollback.
    # (Had its SSH given up first, it would say the outcome is unknown and that the host undoes it by itself.)
    assert (apply.returncode == 1 and "the host rolled it back by itself, before this apply ended" in out) or (
        apply.returncode == 6 and "the host undoes it by itself at" in out), out  # fmt: skip
    res = run_hvnet("--host", "hm1", "commit", env=env, timeout=120)
    assert res.returncode == 1 and "too late" in res.stderr and "rolled it back by itself" in res.stderr, (
        out + res.stdout + res.stderr)  # fmt: skip
    _rolled_back_by_the_host(tmp_path)


def _rolled_back_by_the_host(tmp_path: Path) -> None:
    """The journal says the host rolled it back, the audit log too, and nothing is left on the host."""
    journal_dir = tmp_path / "state" / "hosts" / "hm1"
    done = json.loads((journal_dir / "last-apply.rolled-back.json").read_text())
    assert (done["rolled_back_by"], done["host_verdict"]) == ("host", "rolled back")
    audit = [json.loads(line) for line in (tmp_path / "audit.jsonl").read_text().splitlines()]
    assert any(f"the host's rollback of {done['id']}" in a["command"] and "rolled it back by itself" in a["result"]
               for a in audit)  # fmt: skip
    assert not list((tmp_path / "state" / "no-commit").iterdir())  # the host's timer directory is gone
    assert not (journal_dir / "pending.json").exists()


def test_the_next_command_learns_that_the_host_rolled_back(managed: Lab, env: dict[str, str], tmp_path: Path) -> None:
    """This machine's watcher gone (the console rebooted): the host's timer alone undoes the change, and the
    next command on the host finds out and records it."""
    policy = tmp_path / "p.yaml"
    policy.write_text("version: 1\nvifs:\n  - vm: VM1\n    vlan: {tag: 7}\n")
    res = run_hvnet("--host", "hm1", "apply", str(policy), "--no-commit", "--timeout", "5", env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    pending = json.loads((tmp_path / "state" / "hosts" / "hm1" / "pending.json").read_text())
    pid = int(pending["watcher_pid"])
    assert pending["id"].encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    os.kill(pid, signal.SIGKILL)
    assert _until(lambda: _tag(managed, "vif1.0") == "1", 20) < 20
    res = run_hvnet("--host", "hm1", "commit", env=env, timeout=120)
    assert res.returncode == 1 and "too late" in res.stderr and "rolled it back by itself" in res.stderr, (
        res.stdout + res.stderr)  # fmt: skip
    _rolled_back_by_the_host(tmp_path)


def test_a_commit_in_time_disarms_the_hosts_timer(managed: Lab, env: dict[str, str], tmp_path: Path) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text("version: 1\nvifs:\n  - vm: VM1\n    vlan: {tag: 5}\n")
    res = run_hvnet("--host", "hm1", "apply", str(policy), "--no-commit", "--timeout", "5", env=env)
    assert res.returncode == 0 and "the host itself undoes 1 change(s)" in res.stdout, res.stdout + res.stderr
    (timer,) = (tmp_path / "state" / "no-commit").iterdir()
    assert (timer / "armed").exists() and oct(timer.stat().st_mode & 0o777) == "0o700"
    res = run_hvnet("--host", "hm1", "commit", "--json", env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    committed = json.loads(res.stdout)
    jsonschemas.check(documents.POLICY_COMMIT, committed)
    assert committed["committed"] is True and committed["changes"] == 1, committed
    assert not timer.exists()
    time.sleep(5 + 3)
    assert _tag(managed, "vif1.0") == "5"  # the timer did nothing
    res = run_hvnet("--host", "hm1", "vif", "set", "vif1.0", "--tag", "1", env=env)
    assert res.returncode == 0, res.stdout + res.stderr
