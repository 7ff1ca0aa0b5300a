"""The agent on the console host keeping a remote hypervisor's policy (``hvnet --host NAME agent``).

A real lab host (namespace, OVS, sshd without Python): a wiped tag is put
back over SSH; sshd killed (every connection with it) and restarted while the
tag is wiped again -- the agent reconnects with back-off, one log line per
attempt, and repairs it; a second agent on the same switch finds the OVSDB
lock held, writes nothing, and takes over when the first one goes.
``ovs-vsctl`` on the host's own socket is the witness.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from appliance.lab.sshhost import SshHost
from appliance.policy.apply.engine import AGENT_LOCK
from tests.conftest import HVNET, ROOT
from tests.lab.policy_helpers import write
from tests.lab.remote_helpers import xen_ssh_host

pytestmark = pytest.mark.skipif(not os.path.exists("/usr/sbin/sshd"), reason="openssh-server (make setup installs it)")


@pytest.fixture(scope="module")
def fx2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshHost]:
    with xen_ssh_host("fx2", tmp_path_factory.mktemp("hosts"), 61, vifs=1) as host:
        yield host


class RemoteAgent:
    """``hvnet --host fx2 agent`` in a subprocess, its log in a file."""

    def __init__(self, host: SshHost, policy: str, log: Path, env: dict[str, str]) -> None:
        self.log = log
        self._f = open(log, "w")  # noqa: SIM115 - closed in stop()
        self.proc = subprocess.Popen([*HVNET, "--host", host.name, "agent", "--policy", policy, "--tick", "0.5"],
                                     cwd=ROOT, stdout=self._f, stderr=self._f, env={**os.environ, **env})  # fmt: skip

    def text(self) -> str:
        return self.log.read_text()

    def wait_for(self, pattern: str, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        while not re.search(pattern, self.text()):
            assert self.proc.poll() is None, f"the agent exited ({self.proc.returncode}):\n{self.text()}"
            assert time.monotonic() < deadline, f"no {pattern!r} in the agent's log:\n{self.text()}"
            time.sleep(0.05)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        self._f.close()


@pytest.fixture
def agents(fx2: SshHost, tmp_path: Path) -> Iterator[Callable[[str, str], RemoteAgent]]:
    started: list[RemoteAgent] = []
    env = {**fx2.client_env, "HVNET_STATE_DIR": str(tmp_path / "state"), "HVNET_AUDIT_LOG": str(tmp_path / "a.jsonl")}

    def start(policy_text: str, name: str) -> RemoteAgent:
        agent = RemoteAgent(fx2, write(tmp_path / f"{name}.yaml", policy_text), tmp_path / f"{name}.log", env)
        started.append(agent)
        return agent

    yield start
    for agent in started:
        agent.stop()
    if fx2.sshd_pid() is None:
        fx2.start_sshd()
    fx2.switch.vsctl("clear", "port", "vif1.0", "tag")


def _tag(host: SshHost) -> str:
    return host.switch.vsctl("get", "port", "vif1.0", "tag").strip()


def _wipe(host: SshHost) -> None:
    host.switch.vsctl("clear", "port", "vif1.0", "tag")


def _until(host: SshHost, tag: str, timeout: float) -> float:
    started = time.monotonic()
    while _tag(host) != tag:
        assert time.monotonic() - started < timeout, f"vif1.0's tag is {_tag(host)}, not {tag}"
        time.sleep(0.05)
    return time.monotonic() - started


def _policy(tag: int) -> str:
    return f"version: 1\nvifs:\n  - port: vif1.0\n    vlan: {{tag: {tag}}}\n"


def test_agent_over_ssh_repairs_and_reconnects_after_sshd_restarts(fx2: SshHost, agents) -> None:
    agent = agents(_policy(20), "a")
    _until(fx2, "20", 15)
    agent.wait_for(f"holding the OVSDB lock {AGENT_LOCK} on fx2", 5)
    _wipe(fx2)
    repaired = _until(fx2, "20", 5)

    fx2.kill_sshd()  # a crash: the listener and every connection, the agent's master's included
    agent.wait_for("fx2: the SSH connection is gone; reconnecting", 10)
    _wipe(fx2)  # while the agent is away
    agent.wait_for("reconnect attempt 2 failed", 10)
    assert _tag(fx2) == "[]"
    fx2.start_sshd()
    back = _until(fx2, "20", 20)
    agent.wait_for("re-applying the policy", 5)

    log = agent.text()
    assert log.count("the SSH connection is gone") == 1, log
    attempts = [int(n) for n in re.findall(r"reconnect attempt (\d+) failed", log)]
    assert attempts == list(range(1, len(attempts) + 1)) and 2 <= len(attempts) <= 5, log  # one line each
    delays = [float(d) for d in re.findall(r"failed: .*; next in ([\d.]+) s", log)]
    assert delays == [min(30.0, 2.0**i) for i in range(len(delays))], delays  # doubling, capped
    assert "fx2: cannot connect over SSH" in log and log.count("SSH connection re-established") == 1, log
    assert "Traceback" not in log, log
    print(f"\nrepaired in {repaired:.2f} s; back {back:.1f} s after sshd restarted, {len(attempts)} failed attempts")


def test_second_agent_on_the_same_switch_waits_for_the_lock(fx2: SshHost, agents) -> None:
    first = agents(_policy(20), "first")
    first.wait_for(f"holding the OVSDB lock {AGENT_LOCK}", 15)
    _until(fx2, "20", 5)
    second = agents(_policy(30), "second")
    second.wait_for(f"another agent holds the OVSDB lock {AGENT_LOCK} on fx2: not writing", 15)
    _wipe(fx2)
    _until(fx2, "20", 5)  # the first agent repairs
    time.sleep(1.5)  # several of the second's ticks
    assert _tag(fx2) == "20" and "re-applied" not in second.text(), second.text()
    first.stop()  # it lets go of the lock: the second takes over
    second.wait_for(f"holding the OVSDB lock {AGENT_LOCK} on fx2", 10)
    _until(fx2, "30", 5)


def test_an_agent_started_while_its_host_is_down_waits_for_it(fx2: SshHost, agents) -> None:
    fx2.kill_sshd()  # the hypervisor is not up yet when the console host starts its agent
    agent = agents(_policy(30), "early")
    agent.wait_for(r"start: attempt 2: fx2: cannot connect over SSH.*; next in 2 s", 15)
    assert _tag(fx2) == "[]"
    fx2.start_sshd()
    _until(fx2, "30", 20)
    agent.wait_for(f"holding the OVSDB lock {AGENT_LOCK} on fx2", 5)
    assert "Traceback" not in agent.text(), agent.text()
