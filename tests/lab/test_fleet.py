"""Many hosts at once (``--hosts``, ``hvnet hosts``): three lab hypervisors over SSH and one that never answers."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import ovs.jsonrpc
import ovs.stream
import pytest

from appliance.core import documents
from appliance.lab.sshhost import SshHost
from appliance.policy.apply.engine import AGENT_LOCK
from tests import jsonschemas
from tests.conftest import run_hvnet

pytestmark = pytest.mark.skipif(not os.path.exists("/usr/sbin/sshd"), reason="openssh-server (make setup installs it)")

NAMES = ("fa1", "fa2", "fa3")
GHOST = "169.254.250.2"  # nothing answers there


@pytest.fixture(scope="module")
def fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[list[SshHost]]:
    base = tmp_path_factory.mktemp("fleet")
    hosts = [SshHost(name, base, index=41 + i) for i, name in enumerate(NAMES)]
    try:
        for host in hosts:
            host.start()
            cmds = ["--", "add-br", "xenbr0", "--", "set", "bridge", "xenbr0", "datapath_type=netdev"]
            for i in (1, 2):
                cmds += ["--", "add-port", "xenbr0", f"vif{i}.0", "--", "set", "interface", f"vif{i}.0",
                         "type=internal", f"external_ids:attached-mac=02:00:00:00:4{i}:0{i}"]  # fmt: skip
            subprocess.run(["ovs-vsctl", f"--db={host.switch.remote}", *cmds], check=True, timeout=30,
                           env={**os.environ, **host.switch.env})  # fmt: skip
        yield hosts
    finally:
        for host in hosts:
            host.stop()
    assert not any(Path(f"/run/netns/{h.netns}").exists() for h in hosts)


@pytest.fixture
def env(fleet: list[SshHost], tmp_path: Path) -> dict[str, str]:
    """An inventory of the three hosts (group ``trio``) plus a ghost (group ``lab`` holds all four)."""
    config = tmp_path / "ssh_config"
    config.write_text("".join(h.ssh_config.read_text() for h in fleet))
    policy = tmp_path / "policy.yaml"
    policy.write_text("version: 1\nvifs:\n  - port: vif1.0\n    vlan: 41\n  - port: vif2.0\n    vlan: 42\n")
    lines = ["hosts:"]
    for h in fleet:
        lines += [f"  - name: {h.name}", "    group: trio", f"    ovs_rundir: {h.switch.run_dir}"]
        if h.name != "fa3":
            lines.append("    policy: policy.yaml")  # relative to the inventory file
    lines += ["  - name: ghost", f"    address: {GHOST}", "    group: lab"]
    (tmp_path / "hosts.yaml").write_text("\n".join(lines) + "\n")
    return {"HVNET_INVENTORY": str(tmp_path / "hosts.yaml"), "HVNET_SSH_CONFIG": str(config),
            "HVNET_STATE_DIR": str(tmp_path / "state"), "HVNET_AUDIT_LOG": str(tmp_path / "audit.jsonl"),
            "POLICY": str(policy)}  # fmt: skip


def _tag(host: SshHost, port: str) -> str:
    return subprocess.run(["ovs-vsctl", f"--db={host.switch.remote}", "get", "Port", port, "tag"],
                          capture_output=True, text=True, check=True, timeout=30).stdout.strip()  # fmt: skip


def _set_tags(fleet: list[SshHost], tag: str) -> None:
    for h in fleet:
        subprocess.run(["ovs-vsctl", f"--db={h.switch.remote}", "--no-wait", "set", "Port", "vif1.0", f"tag={tag}",
                        "--", "set", "Port", "vif2.0", f"tag={tag}"], check=True, timeout=30)  # fmt: skip


def test_status_over_a_group(fleet: list[SshHost], env: dict[str, str]) -> None:
    res = run_hvnet("--timeout", "3", "status", "--hosts", "trio", "--json", env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    jsonschemas.check(documents.FLEET, doc)
    assert sorted(doc["hosts"]) == list(NAMES) and doc["exit"] == 0
    for name in NAMES:
        assert doc["hosts"][name]["exit"] == 0
        assert {"vif1.0", "vif2.0"} <= {v["port"] for v in doc["hosts"][name]["result"]["vifs"]}
    res = run_hvnet("--timeout", "2", "status", "--hosts", "fa1,ghost,fa3", env=env)
    assert res.returncode == 3, res.stdout + res.stderr
    table = [line.split()[:2] for line in res.stdout.splitlines()[:4]]
    assert table == [["HOST", "RESULT"], ["fa1", "ok"], ["ghost", "unreachable"], ["fa3", "ok"]], res.stdout
    assert GHOST in res.stdout.splitlines()[2] and "== fa1 ==" in res.stdout and "== fa3 ==" in res.stdout
    assert "fa2" not in res.stdout


def test_apply_with_one_host_unreachable_applies_the_others(fleet: list[SshHost], env: dict[str, str]) -> None:
    _set_tags(fleet, "7")
    started = time.monotonic()
    res = run_hvnet("--timeout", "2", "apply", env["POLICY"], "--hosts", "lab,trio", "--json", env=env)
    assert res.returncode == 3 and "Traceback" not in res.stderr, res.stdout + res.stderr
    assert time.monotonic() - started < 40
    doc = json.loads(res.stdout)
    jsonschemas.check(documents.FLEET, doc)
    assert doc["exit"] == 3 and doc["hosts"]["ghost"]["exit"] == 3 and GHOST in doc["hosts"]["ghost"]["error"]
    for h in fleet:
        assert doc["hosts"][h.name]["exit"] == 0 and doc["hosts"][h.name]["result"]["status"] == "applied"
        assert (_tag(h, "vif1.0"), _tag(h, "vif2.0")) == ("41", "42")
    # each host atomic and journaled on its own: rolling one back leaves the others as applied
    res = run_hvnet("--host", "fa2", "rollback", env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert [_tag(h, "vif1.0") for h in fleet] == ["41", "7", "41"]

    res = run_hvnet("--timeout", "3", "verify", env["POLICY"], "--hosts", "trio", env=env)
    assert res.returncode == 1, res.stdout + res.stderr
    rows = {line.split()[0]: line.split()[1] for line in res.stdout.splitlines()[1:4]}
    assert rows == {"fa1": "in", "fa2": "drift", "fa3": "in"}, res.stdout  # "in sync" is two words
    assert "== fa2 ==" in res.stdout and "== fa1 ==" not in res.stdout


def test_unknown_group_changes_nothing(fleet: list[SshHost], env: dict[str, str]) -> None:
    _set_tags(fleet, "9")
    res = run_hvnet("apply", env["POLICY"], "--hosts", "trio,nosuch", env=env)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert "'nosuch'" in res.stderr and "fa1" in res.stderr and "trio" in res.stderr
    assert all(_tag(h, "vif1.0") == "9" for h in fleet)
    res = run_hvnet("--host", "fa1", "apply", env["POLICY"], "--hosts", "trio", env=env)
    assert res.returncode == 2 and "--host" in res.stderr, res.stderr
    assert all(_tag(h, "vif1.0") == "9" for h in fleet)


def test_hosts_shows_agent_and_drift(fleet: list[SshHost], env: dict[str, str]) -> None:
    _set_tags(fleet, "41")
    subprocess.run(["ovs-vsctl", f"--db={fleet[0].switch.remote}", "--no-wait", "set", "Port", "vif2.0", "tag=42"],
                   check=True, timeout=30)  # fmt: skip
    # a second client holding the agent's lock on fa2 stands for a running agent
    err, stream = ovs.stream.Stream.open_block(ovs.stream.Stream.open(fleet[1].switch.remote), 5000)
    assert not err
    holder = ovs.jsonrpc.Connection(stream)
    try:
        err, reply = holder.transact_block(ovs.jsonrpc.Message.create_request("lock", [AGENT_LOCK]))
        assert not err and reply.result == {"locked": True}
        res = run_hvnet("--timeout", "3", "hosts", "--hosts", "trio", "--json", env=env)
        assert res.returncode == 0, res.stdout + res.stderr
        jsonschemas.check(documents.HOSTS, json.loads(res.stdout))
        rows = {r["name"]: r for r in json.loads(res.stdout)["hosts"]}
        assert [rows[n]["agent"] for n in NAMES] == ["none", "running", "none"]
        assert [rows[n]["drift"] for n in NAMES] == [0, 1, None]  # fa2's vif2.0 is not on 42; fa3 names no policy
        res = run_hvnet("--timeout", "3", "hosts", env=env)
    finally:
        holder.close()
    assert res.returncode == 3, res.stdout + res.stderr  # the ghost is down: unreachable, as for every verb
    lines = {line.split()[0]: line for line in res.stdout.splitlines()[1:]}
    assert "in sync" in lines["fa1"] and "1 differ" in lines["fa2"] and " running " in lines["fa2"]
    assert " NO " in lines["ghost"] and GHOST in lines["ghost"]
    # with the holder gone nobody holds the lock (the probe itself never keeps it)
    res = run_hvnet("--timeout", "3", "hosts", "--hosts", "fa2", "--json", env=env)
    assert json.loads(res.stdout)["hosts"][0]["agent"] == "none", res.stdout


def test_unconfirmed_apply_on_many_hosts_is_committed_or_rolled_back_per_host(
    fleet: list[SshHost], env: dict[str, str]
) -> None:
    _set_tags(fleet, "8")
    res = run_hvnet("apply", env["POLICY"], "--hosts", "fa1,fa2", "--no-commit", "--timeout", "5", env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert [_tag(h, "vif1.0") for h in fleet] == ["41", "41", "8"]
    res = run_hvnet("--host", "fa1", "commit", env=env)  # the inventory name reaches fa1's own journal
    assert res.returncode == 0 and "committed" in res.stdout, res.stdout + res.stderr
    deadline = time.monotonic() + 25
    while _tag(fleet[1], "vif1.0") != "8" and time.monotonic() < deadline:
        time.sleep(0.3)
    assert [_tag(h, "vif1.0") for h in fleet] == ["41", "8", "8"]  # fa2's watcher rolled fa2 back, and only fa2
