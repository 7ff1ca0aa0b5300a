"""A hypervisor over SSH, agentless: a lab host (namespace, its own OVS, its own sshd with no Python)."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.core.errors import CommandFailed, CommandTimedOut, MissingTool
from appliance.core.ssh import HostKeyRefused, SshOptions, SshRunner, SshSession, SshTarget
from appliance.lab.sshhost import SshHost
from tests.conftest import run_hvnet
from tests.lab.remote_helpers import xen_ssh_host

pytestmark = pytest.mark.skipif(not os.path.exists("/usr/sbin/sshd"), reason="openssh-server (make setup installs it)")


@pytest.fixture(scope="module")
def hv2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshHost]:
    with xen_ssh_host("hv2", tmp_path_factory.mktemp("hosts"), 7, vifs=2) as host:
        yield host


@pytest.fixture
def env(hv2: SshHost, tmp_path: Path) -> dict[str, str]:
    return {**hv2.client_env, "HVNET_STATE_DIR": str(tmp_path / "state"), "HVNET_AUDIT_LOG": str(tmp_path / "a.jsonl")}


def _vsctl(hv2: SshHost, *args: str) -> str:
    return subprocess.run(["ovs-vsctl", f"--db={hv2.switch.remote}", *args], capture_output=True, text=True,
                          check=True, timeout=30).stdout.strip()  # fmt: skip


def test_status_over_ssh_with_the_remote_kernels_counters(hv2: SshHost, env: dict[str, str]) -> None:
    started = time.monotonic()
    res = run_hvnet("--host", "hv2", "status", "--json", env=env)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    vifs = {v["port"]: v for v in doc["vifs"]}
    assert {"vif1.0", "vif2.0"} <= set(vifs), res.stdout[:2000]
    # counters read from the remote namespace's /sys over SSH: these ports exist only there
    assert all(vifs[p]["counters_source"] == "kernel" for p in ("vif1.0", "vif2.0")), vifs
    print(f"\nhvnet --host hv2 status --json: {time.monotonic() - started:.2f} s")


def test_vif_set_and_rollback_over_ssh(hv2: SshHost, env: dict[str, str]) -> None:
    res = run_hvnet("--host", "hv2", "vif", "set", "vif1.0", "--tag", "12", env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert _vsctl(hv2, "get", "Port", "vif1.0", "tag") == "12"
    res = run_hvnet("--host", "hv2", "rollback", env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert _vsctl(hv2, "get", "Port", "vif1.0", "tag") == "[]"
    audit = [json.loads(x) for x in Path(env["HVNET_AUDIT_LOG"]).read_text().splitlines()]
    assert [e["result"] for e in audit][-2:] == ["applied", "applied"]


def test_arguments_reach_the_remote_as_data(hv2: SshHost) -> None:
    session = SshSession(SshTarget.parse("hv2"), SshOptions(config=hv2.ssh_config))
    try:
        runner = SshRunner(session)
        hostile = ["a b", "c;d", "$(id)", "'q'", '"dq"', "`x`", "\\n", "*", "-e"]
        res = runner.run(["printf", "%s|", *hostile])
        assert res.stdout == "".join(f"{h}|" for h in hostile)
        with pytest.raises(MissingTool, match="python3 is not installed on hv2"):
            runner.which("python3")  # agentless: the remote has no Python on its PATH
    finally:
        session.close()
    assert not session.work_dir.exists()


def test_remote_failures_outside_the_exit_status_are_command_failures(hv2: SshHost) -> None:
    """Bytes that are not UTF-8 from the remote program, and a remote program that outlives its timeout:
    CommandFailed naming the host, the second told apart as CommandTimedOut."""
    session = SshSession(SshTarget.parse("hv2"), SshOptions(config=hv2.ssh_config))
    try:
        runner = SshRunner(session)
        with pytest.raises(CommandFailed) as err:
            runner.run(["printf", "\\377"])
        assert not isinstance(err.value, CommandTimedOut)
        assert str(err.value).startswith("hv2: printf") and "not UTF-8" in str(err.value)
        with pytest.raises(CommandTimedOut, match=r"no result within 0\.5 s"):
            runner.run(["sleep", "5"], timeout=0.5)
        assert runner.run(["printf", "still here"]).stdout == "still here"
    finally:
        session.close()


def test_unknown_host_key_is_refused_with_its_fingerprint(hv2: SshHost, env: dict[str, str], tmp_path: Path) -> None:
    empty = tmp_path / "known_hosts"
    empty.write_text("")
    config = tmp_path / "ssh_config"
    config.write_text(hv2.ssh_config.read_text().replace(str(hv2.known_hosts), str(empty)))
    res = run_hvnet("--host", "hv2", "status", env={**env, "HVNET_SSH_CONFIG": str(config)})
    assert res.returncode == 3 and "Traceback" not in res.stderr, res.stderr
    assert "host key is not known" in res.stderr and "SHA256:" in res.stderr
    # the hint adds the very key just fingerprinted (the line the lab wrote from the host's key), no second scan
    hint = res.stderr.split("hint:", 1)[1]
    assert hv2.known_hosts.read_text().strip() in hint and "ssh-keyscan" not in hint, res.stderr
    assert empty.read_text() == ""  # never added by hvnet
    with pytest.raises(HostKeyRefused):
        SshSession(SshTarget.parse("hv2"), SshOptions(config=config)).open()


def test_unreachable_host_fails_fast_with_exit_3(env: dict[str, str]) -> None:
    started = time.monotonic()
    res = run_hvnet("--timeout", "2", "--host", "root@169.254.250.2", "status", env={k: v for k, v in env.items()
                    if k != "HVNET_SSH_CONFIG"})  # fmt: skip
    assert res.returncode == 3 and "169.254.250.2" in res.stderr and "Traceback" not in res.stderr, res.stderr
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("bad", ["-oProxyCommand=x", "a b", "host:99999", "u;x@h", ""])
def test_bad_host_arguments_are_refused_before_anything(bad: str) -> None:
    res = run_hvnet("--host", bad, "status")
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr


def _inventory(hv2: SshHost, tmp_path: Path) -> dict[str, str]:
    f = tmp_path / "hosts.yaml"
    f.write_text(
        f"hosts:\n  - name: hv2\n    address: {hv2.address}\n    port: {hv2.port}\n    user: root\n"
        f"    group: lab\n    ovs_rundir: {hv2.switch.run_dir}\n"
        "  - name: ghost\n    address: 169.254.250.2\n    group: lab\n"
    )
    return {"HVNET_INVENTORY": str(f), "HVNET_SSH_IDENTITY": str(hv2.dir / "client_key"),
            "HVNET_SSH_KNOWN_HOSTS": str(hv2.known_hosts), "HVNET_STATE_DIR": str(tmp_path / "state")}  # fmt: skip


def test_hosts_lists_the_inventory_checked_in_parallel(hv2: SshHost, tmp_path: Path) -> None:
    env = _inventory(hv2, tmp_path)
    started = time.monotonic()
    res = run_hvnet("--timeout", "2", "hosts", "--json", env=env)
    assert res.returncode == 3 and "Traceback" not in res.stderr, res.stderr  # one host is down: unreachable, 3
    rows = {r["name"]: r for r in json.loads(res.stdout)["hosts"]}
    assert rows["hv2"]["reachable"] and rows["hv2"]["vifs"] == 2 and rows["hv2"]["datapaths"] == ["netdev"]
    assert not rows["ghost"]["reachable"] and "169.254.250.2" in rows["ghost"]["error"]
    assert time.monotonic() - started < 10  # in parallel, each bounded by --timeout
    res = run_hvnet("--timeout", "2", "hosts", "--hosts", "hv2", env=env)
    assert res.returncode == 0 and "hv2" in res.stdout and "ghost" not in res.stdout, res.stdout + res.stderr
    res = run_hvnet("hosts", "--hosts", "nosuch", env=env)
    assert res.returncode == 2 and "no host or group 'nosuch'" in res.stderr, res.stderr


def test_host_named_by_the_inventory(hv2: SshHost, tmp_path: Path) -> None:
    res = run_hvnet("--host", "hv2", "status", "--json", env=_inventory(hv2, tmp_path))  # no ssh_config: the inventory
    assert res.returncode == 0, res.stderr
    assert {"vif1.0", "vif2.0"} <= {v["port"] for v in json.loads(res.stdout)["vifs"]}
