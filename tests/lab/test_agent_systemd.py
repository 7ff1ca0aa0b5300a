"""The agent as its systemd unit runs it: notify protocol, journal priorities, the unit's capabilities.

PID 1 here is not systemd, so the test plays its part: it binds the datagram
socket named by $NOTIFY_SOCKET, sets $WATCHDOG_USEC, and makes the agent's
stderr a file named by $JOURNAL_STREAM.  The agent runs with the capability
bounding set of rpm/hvnet-agent.service (setpriv), after the unit's
privileged ExecStartPre (``agent --prepare``), against the lab's real switch.
"""

from __future__ import annotations

import os
import re
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.lab import Lab
from tests.conftest import HVNET, ROOT
from tests.lab.policy_helpers import vsctl

UNIT = ROOT / "rpm" / "hvnet-agent.service"
WATCHDOG_S = 1.0


def unit_capabilities() -> list[str]:
    m = re.search(r"^CapabilityBoundingSet=(.+)$", UNIT.read_text(), re.M)
    assert m, "the unit sets CapabilityBoundingSet="
    return [c.lower().removeprefix("cap_") for c in m.group(1).split()]


class Manager:
    """The notify socket's receiving end: every datagram, with the time it arrived."""

    def __init__(self, path: Path) -> None:
        self.sock = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
        self.sock.bind(str(path))
        self.got: list[tuple[float, str]] = []

    def until(self, pred: str, timeout: float) -> str | None:
        """Receive until a datagram holding the line ``pred`` arrives; that datagram, or None."""
        end = time.monotonic() + timeout
        while (left := end - time.monotonic()) > 0:
            self.sock.settimeout(left)
            try:
                msg = self.sock.recv(4096).decode()
            except TimeoutError:
                return None
            self.got.append((time.monotonic(), msg))
            if pred in msg.splitlines():
                return msg
        return None

    def collect(self, seconds: float) -> list[tuple[float, str]]:
        start = len(self.got)
        self.until("\0never", seconds)
        return self.got[start:]


@pytest.fixture()
def manager(tmp_path: Path) -> Iterator[Manager]:
    m = Manager(tmp_path / "notify.sock")
    try:
        yield m
    finally:
        m.sock.close()


def test_agent_is_ready_after_its_first_apply_pets_the_watchdog_and_logs_priorities(
    lab: Lab, manager: Manager, tmp_path: Path
) -> None:
    res = subprocess.run([*HVNET, "agent", "--prepare"], cwd=ROOT, capture_output=True, text=True, timeout=60)
    assert res.returncode == 0 and "tc police" in res.stdout, res.stdout + res.stderr
    policy = tmp_path / "policy.yaml"
    policy.write_text("version: 1\nvifs:\n  - port: vif3.0\n    vlan: {mode: access, tag: 7}\n")
    assert vsctl(lab, "get", "Port", "vif3.0", "tag") == "2"
    journal = tmp_path / "journal"
    journal.write_text("")
    st = journal.stat()
    env = dict(os.environ, NOTIFY_SOCKET=str(tmp_path / "notify.sock"), WATCHDOG_USEC=str(int(WATCHDOG_S * 1e6)),
               JOURNAL_STREAM=f"{st.st_dev}:{st.st_ino}")  # fmt: skip
    caps = ",".join(f"+{c}" for c in unit_capabilities())
    argv = ["setpriv", f"--bounding-set=-all,{caps}", "--inh-caps=-all", *HVNET]
    argv += ["agent", "--policy", str(policy), "--tick", "0.5"]
    with open(journal, "a") as f:
        agent = subprocess.Popen(argv, cwd=ROOT, env=env, stdout=f, stderr=f)
    try:
        ready = manager.until("READY=1", 30)
        assert ready is not None, f"no READY=1: {manager.got}\n{journal.read_text()}"
        # readiness means the policy is in force: the switch already says so
        assert vsctl(lab, "get", "Port", "vif3.0", "tag") == "7", journal.read_text()
        assert re.search(r"^STATUS=enforcing .*policy\.yaml on ", ready, re.M), ready
        before = [m for _, m in manager.got[:-1]]
        assert "READY=1" not in "\n".join(before) and any(m.startswith("STATUS=connecting") for m in before), before

        pets = [t for t, m in manager.collect(2.6) if m == "WATCHDOG=1"]
        gaps = [b - a for a, b in zip(pets, pets[1:])]
        assert len(pets) >= 4 and max(gaps) < WATCHDOG_S, f"watchdog pets at intervals {gaps}"

        agent.send_signal(signal.SIGHUP)
        assert manager.until("STATUS=policy reloaded from " + str(policy), 10), manager.got[-5:]
        agent.send_signal(signal.SIGTERM)
        assert manager.until("STOPPING=1", 10), manager.got[-5:]
        assert agent.wait(timeout=15) == 0, journal.read_text()
    finally:
        if agent.poll() is None:
            agent.kill()
            agent.wait()
        vsctl(lab, "set", "Port", "vif3.0", "tag=2")
    lines = journal.read_text().splitlines()
    # journald adds the time: each line is "<priority>message", nothing else
    assert lines and all(re.match(r"<[0-7]>\S", line) for line in lines), lines
    assert "<6>agent started: policy " + str(policy) in "\n".join(lines), lines
    assert not [line for line in lines if re.match(r"<\d>\d{4}-\d\d-\d\d", line)], "a timestamp of its own"
