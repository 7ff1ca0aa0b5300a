"""Faults over SSH, on a real lab host (its own namespace, OVS and sshd): each says which host, with its exit code.

Unreachable (nothing answers; an sshd that accepts and never speaks), refused
authentication, a changed host key, a program the host lacks, the host's OVSDB
socket absent, a remote program that itself exits 255, hvnet SIGKILLed (its
SSH master goes with it), and sshd killed in the middle of an apply: the apply
says whether it committed (or exit 6), the next command settles it and
``rollback`` works.  ``ovs-vsctl``/``ovs-ofctl`` on the host's own sockets are
the witnesses.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.core.errors import CommandFailed
from appliance.core.ssh import HostUnreachable, SshOptions, SshRunner, SshSession, SshTarget
from appliance.lab.sshhost import SshHost
from tests.conftest import run_hvnet
from tests.lab.policy_helpers import config, write
from tests.lab.remote_helpers import apply_stopped_at, xen_ssh_host

pytestmark = pytest.mark.skipif(not os.path.exists("/usr/sbin/sshd"), reason="openssh-server (make setup installs it)")

TAG_POLICY = "version: 1\nvifs:\n  - port: vif1.0\n    vlan: {tag: 20}\n"
METER_POLICY = "version: 1\nvifs:\n  - port: vif1.0\n    vlan: {tag: 21}\n    ingress: {rate: 10240, burst: 1024}\n"


@pytest.fixture(scope="module")
def fx1(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshHost]:
    with xen_ssh_host("fx1", tmp_path_factory.mktemp("hosts"), 60, vifs=2) as host:
        yield host


@pytest.fixture
def env(fx1: SshHost, tmp_path: Path) -> Iterator[dict[str, str]]:
    """The client's environment, a journal of the test's own, and a short private TMPDIR that shows
    whether an SSH master or its directory outlived hvnet."""
    tmp = Path(tempfile.mkdtemp(prefix="fx1-", dir="/tmp"))  # short: the control socket's path has a limit
    yield {**fx1.client_env, "HVNET_STATE_DIR": str(tmp_path / "state"), "HVNET_AUDIT_LOG": str(tmp_path / "a.jsonl"),
           "TMPDIR": str(tmp)}  # fmt: skip
    if fx1.sshd_pid() is None:
        fx1.start_sshd()  # whatever a test killed
    fx1.switch.vsctl("--", "clear", "port", "vif1.0", "tag")
    leftovers = _processes_mentioning(tmp)
    for pid in leftovers:
        os.kill(pid, signal.SIGKILL)
    subprocess.run(["rm", "-rf", "--", str(tmp)], check=True)
    assert not leftovers, "an SSH master outlived hvnet"


def _processes_mentioning(text: Path) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and str(text).encode() in (entry / "cmdline").read_bytes():
                found.append(int(entry.name))
        except OSError:
            continue
    return found


def _config_with(fx1: SshHost, tmp_path: Path, old: str, new: str) -> str:
    config_file = tmp_path / "ssh_config"
    config_file.write_text(fx1.ssh_config.read_text().replace(old, new))
    return str(config_file)


def _fails_fast(env: dict[str, str]) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    res = run_hvnet("--timeout", "2", "--host", "fx1", "status", env=env, timeout=30)
    return res, time.monotonic() - started


def test_status_names_the_host_and_its_socket_not_the_forwarded_one(fx1: SshHost, env: dict[str, str]) -> None:
    """What the fault messages below build on: the host as the operator named it."""
    res = run_hvnet("--host", "fx1", "status", "--json", env=env)
    assert res.returncode == 0, res.stderr
    host = json.loads(res.stdout)["host"]
    assert host["hostname"] == "fx1" and host["db_target"] == f"{fx1.switch.run_dir}/db.sock on fx1", host


def test_host_nothing_answers_on_times_out_with_exit_3(fx1: SshHost, env: dict[str, str]) -> None:
    inside = ["ip", "-n", fx1.netns, "link", "set", fx1.veth[1]]
    subprocess.run([*inside, "down"], check=True)  # the host is gone from the network: nothing answers
    try:
        res, took = _fails_fast(env)
    finally:
        subprocess.run([*inside, "up"], check=True)
    assert res.returncode == 3 and "Traceback" not in res.stderr, res.stderr
    assert "fx1" in res.stderr and ("timed out" in res.stderr or "No route" in res.stderr), res.stderr
    assert took < 8, f"bounded by --timeout 2, took {took:.1f} s"
    print(f"\nunreachable: exit 3 in {took:.1f} s: {res.stderr.strip().splitlines()[0]}")


def test_sshd_that_never_answers_times_out_with_exit_3(fx1: SshHost, env: dict[str, str]) -> None:
    pid = fx1.sshd_pid()
    assert pid is not None
    os.kill(pid, signal.SIGSTOP)  # accepts connections (the kernel does), never says a word
    try:
        res, took = _fails_fast(env)
    finally:
        os.kill(pid, signal.SIGCONT)
    assert res.returncode == 3 and "fx1" in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert took < 8, f"bounded by --timeout 2, took {took:.1f} s"


def test_refused_authentication_is_exit_3(fx1: SshHost, env: dict[str, str], tmp_path: Path) -> None:
    other = tmp_path / "other_key"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    cfg = _config_with(fx1, tmp_path, str(fx1.dir / "client_key"), str(other))
    res = run_hvnet("--host", "fx1", "status", env={**env, "HVNET_SSH_CONFIG": cfg})
    assert res.returncode == 3 and "Traceback" not in res.stderr, res.stderr
    assert "fx1: authentication refused" in res.stderr and "Permission denied" in res.stderr, res.stderr


def test_changed_host_key_is_refused_and_never_replaced(fx1: SshHost, env: dict[str, str], tmp_path: Path) -> None:
    impostor = tmp_path / "impostor"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(impostor)], check=True)
    known = tmp_path / "known_hosts"
    kind, key = impostor.with_suffix(".pub").read_text().split()[:2]
    known.write_text(f"[{fx1.address}]:{fx1.port} {kind} {key}\n")  # the line for this host, another key
    before = known.read_bytes()
    res = run_hvnet("--host", "fx1", "status", env={**env, "HVNET_SSH_CONFIG": _config_with(fx1, tmp_path,
                    str(fx1.known_hosts), str(known))})  # fmt: skip
    assert res.returncode == 3 and "Traceback" not in res.stderr, res.stderr
    real = subprocess.run(["ssh-keygen", "-lf", str(fx1.dir / "host_key.pub")], capture_output=True, text=True,
                          check=True).stdout.split()[1]  # fmt: skip
    assert "fx1: host key has CHANGED" in res.stderr and real in res.stderr, res.stderr  # the key it offers now
    assert f"ssh-keygen -R '[{fx1.address}]:{fx1.port}' -f {known}" in res.stderr, res.stderr
    real_line = " ".join((fx1.dir / "host_key.pub").read_text().split()[:2])  # the key whose fingerprint was shown
    assert f"[{fx1.address}]:{fx1.port} {real_line}" in res.stderr and "ssh-keyscan" not in res.stderr, res.stderr
    assert known.read_bytes() == before  # hvnet never adds or replaces a key


def test_a_tool_the_host_lacks_is_exit_4_before_anything_changes(fx1: SshHost, env: dict[str, str],
                                                                tmp_path: Path) -> None:  # fmt: skip
    before = config(fx1)
    tool = fx1.dir / "bin" / "ovs-ofctl"
    hidden = fx1.dir / "ovs-ofctl.hidden"
    tool.rename(hidden)  # the host's PATH has no ovs-ofctl; the policy needs it (an OpenFlow meter)
    try:
        res = run_hvnet("--host", "fx1", "apply", write(tmp_path / "p.yaml", METER_POLICY), env=env)
    finally:
        hidden.rename(tool)
    assert res.returncode == 4 and "Traceback" not in res.stderr, res.stdout + res.stderr
    assert "ovs-ofctl is not installed on fx1" in res.stderr, res.stderr
    assert config(fx1) == before  # refused before the commit: not even the VLAN was written


def test_remote_ovsdb_socket_absent_is_exit_3(fx1: SshHost, env: dict[str, str], tmp_path: Path) -> None:
    empty = tmp_path / "no-ovs"
    empty.mkdir()
    res = run_hvnet("--host", "fx1", "status", env={**env, "HVNET_REMOTE_OVS_RUNDIR": str(empty)})
    assert res.returncode == 3 and "Traceback" not in res.stderr, res.stderr
    assert f"{empty}/db.sock on fx1" in res.stderr and "HVNET_REMOTE_OVS_RUNDIR" in res.stderr, res.stderr


def test_a_remote_program_exiting_255_is_its_own_result(fx1: SshHost) -> None:
    """255 is also ssh's own failure status: the master, still up, says it was the program's."""
    session = SshSession(SshTarget.parse("fx1"), SshOptions(config=fx1.ssh_config))
    try:
        runner = SshRunner(session)
        argv = ["sh", "-c", "echo 'Connection to the ledger closed.' >&2; exit 255"]
        assert runner.run(argv, check=False).returncode == 255
        with pytest.raises(CommandFailed, match=r"fx1: sh -c .* failed \(exit 255\)"):
            runner.run(argv)
        fx1.kill_sshd()  # now it is ssh's failure: the master went with the connection
        with pytest.raises(HostUnreachable, match="fx1: cannot connect over SSH"):
            runner.run(["true"])
    finally:
        session.close()
        if fx1.sshd_pid() is None:
            fx1.start_sshd()


def _apply_stopped_at(policy: str, step: str, env: dict[str, str]) -> subprocess.Popen:
    return apply_stopped_at(["--host", "fx1", "apply", policy], step, env)


def _audit(env: dict[str, str]) -> list[str]:
    path = Path(env["HVNET_AUDIT_LOG"])
    return [json.loads(line)["result"] for line in path.read_text().splitlines()] if path.exists() else []


def test_hvnet_killed_leaves_no_ssh_master_behind(fx1: SshHost, env: dict[str, str], tmp_path: Path) -> None:
    before = config(fx1)
    proc = _apply_stopped_at(write(tmp_path / "p.yaml", TAG_POLICY), "before-commit", env)
    assert _processes_mentioning(Path(env["TMPDIR"])), "no SSH master while hvnet runs?"
    proc.kill()
    proc.wait(timeout=10)
    deadline = time.monotonic() + 5
    while _processes_mentioning(Path(env["TMPDIR"])) or list(Path(env["TMPDIR"]).iterdir()):
        assert time.monotonic() < deadline, "the SSH master or its directory outlived a SIGKILLed hvnet"
        time.sleep(0.05)
    res = run_hvnet("--host", "fx1", "rollback", env=env)  # settles the intent it left: not applied
    assert res.returncode == 1 and "not applied" in res.stderr and "nothing to roll back" in res.stderr, res.stderr
    assert config(fx1) == before


def test_sshd_killed_after_the_commit_then_settled_and_rolled_back(fx1: SshHost, env: dict[str, str],
                                                                   tmp_path: Path) -> None:  # fmt: skip
    before = config(fx1)
    proc = _apply_stopped_at(write(tmp_path / "p.yaml", TAG_POLICY), "committed", env)
    fx1.kill_sshd()
    os.kill(proc.pid, signal.SIGCONT)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 6 and "Traceback" not in err, err
    assert "the change was committed, then: fx1:" in err, err
    assert fx1.switch.vsctl("get", "port", "vif1.0", "tag").strip() == "20"  # it is in the database
    fx1.start_sshd()
    res = run_hvnet("--host", "fx1", "rollback", env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "settled an interrupted apply" in res.stderr and ": applied (" in res.stderr, res.stderr  # says which
    assert config(fx1) == before
    said = _audit(env)
    assert said[0].startswith("outcome unknown: committed, then fx1:") and said[1].startswith("applied ("), said
    assert said[-1] == "applied", said  # the rollback


def test_sshd_killed_before_the_commit_is_unknown_then_settled(fx1: SshHost, env: dict[str, str],
                                                               tmp_path: Path) -> None:  # fmt: skip
    before = config(fx1)
    proc = _apply_stopped_at(write(tmp_path / "p.yaml", TAG_POLICY), "before-commit", env)
    fx1.kill_sshd()
    os.kill(proc.pid, signal.SIGCONT)
    _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 6 and "Traceback" not in err, err  # sent or not: it cannot be known from here
    assert "on fx1" in err and "unknown" in err, err
    assert "unknown" in _audit(env)[-1]
    fx1.start_sshd()
    assert config(fx1) == before
    res = run_hvnet("--host", "fx1", "rollback", env=env)
    assert "settled an interrupted apply" in res.stderr and ": not applied (" in res.stderr, res.stderr
    assert res.returncode == 1 and "nothing to roll back" in res.stderr, res.stderr
    assert config(fx1) == before
