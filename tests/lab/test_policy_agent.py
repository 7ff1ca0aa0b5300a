"""The agent keeps the policy in force: re-plugged VIFs, orphans, daemon restarts, SIGHUP."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from appliance.lab import Lab
from appliance.lab.switch import stop_pid
from tests.conftest import HVNET, ROOT
from tests.lab.policy_helpers import ofctl, vsctl

POLICY = """\
vifs:
  - vm: VM1
    vlan: {tag: 5}
    ingress: {rate: 10240, burst: 1024}
  - vm: VM2
    egress: {rate: 20000}
"""


def wait_until(pred: Callable[[], bool], timeout: float) -> float | None:
    """Seconds until ``pred()`` held, or None if it never did within ``timeout``."""
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        try:
            if pred():
                return time.monotonic() - start
        except subprocess.CalledProcessError:
            pass
        time.sleep(0.02)
    return None


class AgentProc:
    def __init__(self, policy: Path, log: Path) -> None:
        self.log = log
        self._f = open(log, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen(
            [*HVNET, "agent", "--policy", str(policy), "--tick", "0.5"], cwd=ROOT, stdout=self._f, stderr=self._f
        )

    def text(self) -> str:
        return self.log.read_text()

    def stop(self) -> int:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        self._f.close()
        return self.proc.returncode


@pytest.fixture()
def agent(lab: Lab, tmp_path: Path) -> Iterator[AgentProc]:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    a = AgentProc(policy, tmp_path / "agent.log")
    try:
        assert wait_until(lambda: "agent started" in a.text(), 10) is not None, a.text()
        assert wait_until(lambda: vsctl(lab, "get", "port", "vif1.0", "tag") == "5", 10) is not None, a.text()
        yield a
    finally:
        assert a.stop() == 0, a.text()
        assert "Traceback" not in a.text(), a.text()


def meter_flow(lab: Lab, port: str) -> bool:
    ofport = vsctl(lab, "get", "interface", port, "ofport")
    return f"in_port={ofport} actions=meter:" in ofctl(lab, "dump-flows", opts=("--no-stats",))


def replug(lab: Lab, port: str) -> None:
    """What libvirt / the XenServer hotplug scripts do: del-port + add-port in one transaction."""
    ids = vsctl(lab, "get", "interface", port, "external_ids")
    keep = [kv for kv in ids.strip("{}").split(", ") if kv and not kv.startswith("hvnet-")]
    sets = [f"external_ids:{kv}" for kv in keep]
    vsctl(lab, "--", "--if-exists", "del-port", port, "--", "add-port", "xenbr0", port,
          "--", "set", "interface", port, *sets)  # fmt: skip


def test_replugged_vif_gets_tag_and_qos_back(lab: Lab, agent: AgentProc) -> None:
    assert wait_until(lambda: meter_flow(lab, "vif1.0"), 5) is not None
    assert wait_until(lambda: vsctl(lab, "get", "port", "vif2.0", "qos") != "[]", 5) is not None
    for port in ("vif1.0", "vif2.0"):
        replug(lab, port)
    t_tag = wait_until(lambda: vsctl(lab, "get", "port", "vif1.0", "tag") == "5", 3)
    t_meter = wait_until(lambda: meter_flow(lab, "vif1.0"), 3)
    t_qos = wait_until(lambda: vsctl(lab, "get", "port", "vif2.0", "qos") != "[]", 3)
    assert t_tag is not None and t_meter is not None and t_qos is not None, agent.text()
    assert max(t_tag, t_meter, t_qos) < 2.0, (t_tag, t_meter, t_qos)
    assert "re-applied vif1.0 (VM1) vlan" in agent.text()
    # The QoS the re-plug orphaned is collected after two observations; only one QoS remains.
    assert wait_until(lambda: len(vsctl(lab, "--columns=_uuid", "list", "qos").split()) == 3, 5), vsctl(
        lab, "list", "qos"
    )
    # The agent logs the removal once its transaction has committed: the line can follow the count by a moment.
    assert wait_until(lambda: "removed rows orphaned" in agent.text(), 3) is not None, agent.text()
    # Manual drift is corrected too.
    vsctl(lab, "set", "port", "vif1.0", "tag=7")
    assert wait_until(lambda: vsctl(lab, "get", "port", "vif1.0", "tag") == "5", 3) is not None


def test_sighup_reloads_the_policy(lab: Lab, agent: AgentProc, tmp_path: Path) -> None:
    (tmp_path / "policy.yaml").write_text(POLICY.replace("tag: 5", "tag: 6"))
    agent.proc.send_signal(signal.SIGHUP)
    assert wait_until(lambda: vsctl(lab, "get", "port", "vif1.0", "tag") == "6", 3) is not None, agent.text()
    (tmp_path / "policy.yaml").write_text("vifs: [oops\n")
    agent.proc.send_signal(signal.SIGHUP)
    assert wait_until(lambda: "reload refused" in agent.text(), 3) is not None
    vsctl(lab, "set", "port", "vif1.0", "tag=7")  # the previous policy stays in force
    assert wait_until(lambda: vsctl(lab, "get", "port", "vif1.0", "tag") == "6", 3) is not None
    (tmp_path / "policy.yaml").write_text(POLICY)
    agent.proc.send_signal(signal.SIGHUP)
    assert wait_until(lambda: vsctl(lab, "get", "port", "vif1.0", "tag") == "5", 3) is not None


def test_agent_survives_ovsdb_and_vswitchd_restarts(lab: Lab, agent: AgentProc) -> None:
    assert wait_until(lambda: meter_flow(lab, "vif1.0"), 5) is not None
    lab.switch.kill_ovsdb()
    time.sleep(0.5)
    lab.switch.start()  # ovsdb-server again, same database
    assert wait_until(lambda: "reconnected to the database" in agent.text(), 10) is not None, agent.text()
    vsctl(lab, "set", "port", "vif1.0", "tag=8")
    assert wait_until(lambda: vsctl(lab, "get", "port", "vif1.0", "tag") == "5", 5) is not None, agent.text()

    pid = lab.switch.pid("ovs-vswitchd")
    assert pid is not None
    stop_pid(pid)
    lab.switch.start()  # ovs-vswitchd again: OpenFlow meters and flows are gone
    assert lab.switch.pid("ovs-vswitchd") not in (None, pid)
    assert wait_until(lambda: meter_flow(lab, "vif1.0"), 10) is not None, agent.text()
    assert wait_until(lambda: "ovs-vswitchd restarted" in agent.text(), 5) is not None, agent.text()
    assert os.path.exists(f"/proc/{agent.proc.pid}")


def test_agent_repairs_leave_the_operators_rollback_and_idle_passes_unaudited(
    lab: Lab, agent: AgentProc, tmp_path: Path
) -> None:
    """``hvnet rollback`` undoes the operator's apply, not the agent's latest repair; an idle agent writes no lines."""
    record = Path(lab.switch.run_dir) / "last-apply.json"
    audit = Path(lab.switch.run_dir) / "audit.jsonl"
    mine = tmp_path / "mine.yaml"
    mine.write_text("vifs:\n  - vm: VM3\n    vlan: {tag: 33}\n")
    res = subprocess.run([*HVNET, "apply", str(mine)], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0, res.stderr
    operator_id = json.loads(record.read_text())["id"]
    try:
        vsctl(lab, "set", "port", "vif1.0", "tag=7")  # drift the agent repairs
        assert wait_until(lambda: vsctl(lab, "get", "port", "vif1.0", "tag") == "5", 5) is not None, agent.text()
        time.sleep(2)  # a few idle passes (tick 0.5 s)
        assert json.loads(record.read_text())["id"] == operator_id
        agent_lines = [json.loads(x) for x in audit.read_text().splitlines() if '"hvnet agent"' in x]
        assert any(e["result"].startswith("applied") for e in agent_lines)  # the repair is audited
        assert not [e for e in agent_lines if e["result"] == "unchanged"]
        res = subprocess.run([*HVNET, "rollback"], cwd=ROOT, capture_output=True, text=True, timeout=60)
        assert res.returncode == 0, res.stdout + res.stderr
        assert vsctl(lab, "get", "port", "vif3.0", "tag") == "2"  # the operator's change is what was undone
    finally:
        vsctl(lab, "set", "port", "vif3.0", "tag=2")


def test_a_pass_that_fails_outside_hvnets_errors_is_logged_and_the_agent_keeps_going(lab: Lab, tmp_path: Path) -> None:
    """ovs-ofctl printing bytes that are not UTF-8 (a real program on PATH, in front of the real one while
    a flag file exists): the pass fails with a clear message, the agent lives on and, once ovs-ofctl
    answers again, enforces the policy."""
    import shutil

    real = shutil.which("ovs-ofctl") or "/usr/bin/ovs-ofctl"
    flag = tmp_path / "garble"
    flag.touch()
    shim = tmp_path / "bin" / "ovs-ofctl"
    shim.parent.mkdir()
    shim.write_text(f"#!/bin/sh\nif [ -e '{flag}' ]; then printf 'NXST_FLOW reply \\377\\n'; exit 0; fi\n"
                    f"exec '{real}' \"$@\"\n")  # fmt: skip
    shim.chmod(0o755)
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    log = tmp_path / "agent.log"
    env = {**os.environ, "PATH": f"{shim.parent}:{os.environ.get('PATH', '/usr/bin:/bin')}"}
    with open(log, "w") as out:
        proc = subprocess.Popen([*HVNET, "agent", "--policy", str(policy), "--tick", "0.5"], cwd=ROOT, env=env,
                                stdout=out, stderr=out)  # fmt: skip
    try:
        said = wait_until(lambda: "not UTF-8" in log.read_text(), 15)
        assert said is not None and proc.poll() is None, log.read_text()
        assert "dump-flows" in log.read_text() and "will retry" in log.read_text()
        flag.unlink()
        assert wait_until(lambda: meter_flow(lab, "vif1.0"), 10) is not None, log.read_text()
        vsctl(lab, "set", "port", "vif1.0", "tag=7")
        assert wait_until(lambda: vsctl(lab, "get", "port", "vif1.0", "tag") == "5", 5) is not None, log.read_text()
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
        proc.wait(10)
    assert proc.returncode == 0 and "Traceback" not in log.read_text(), log.read_text()
