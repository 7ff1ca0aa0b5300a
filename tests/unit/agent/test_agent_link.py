"""The agent's SSH reconnection schedule: pure logic on a clock the test turns (the real sshd is in
tests/lab/test_remote_agent.py)."""

from __future__ import annotations

import logging

import pytest

from appliance.agent.link import Backoff, LinkKeeper
from appliance.core.errors import HvnetError


def test_backoff_doubles_to_its_cap_and_a_success_resets_it() -> None:
    b = Backoff(first=1.0, cap=30.0)
    assert [b.failed() for _ in range(8)] == [1, 2, 4, 8, 16, 30, 30, 30]
    b.reset()
    assert b.failed() == 1


class Link:
    """A link that is down until ``fixed_at`` (on the test's clock); counts what it was asked."""

    def __init__(self, clock: list[float], fixed_at: float) -> None:
        self.clock = clock
        self.fixed_at = fixed_at
        self.up = False
        self.checks = 0
        self.reconnects = 0

    def alive(self) -> bool:
        self.checks += 1
        return self.up

    def reconnect(self) -> None:
        self.reconnects += 1
        if self.clock[0] < self.fixed_at:
            raise HvnetError("hv9: cannot connect over SSH: Connection refused")
        self.up = True


def test_one_line_per_attempt_not_per_poll(caplog: pytest.LogCaptureFixture) -> None:
    now = [0.0]
    link = Link(now, fixed_at=10.0)
    keeper = LinkKeeper(link, "hv9", clock=lambda: now[0])
    caplog.set_level(logging.INFO, logger="hvnet.agent")
    while now[0] < 20:  # the agent's loop, polling every 0.1 s while the database is away
        keeper.check(db_connected=link.up)
        now[0] = round(now[0] + 0.1, 1)
    lines = [r.getMessage() for r in caplog.records]
    assert lines[0].startswith("hv9: the SSH connection is gone")
    failed = [line for line in lines if "failed" in line]
    # attempts at 0, 1, 3, 7 (1 + 2 + 4 s apart) fail; the one at 15 (8 s later) succeeds
    assert [line.split("next in ")[1] for line in failed] == ["1 s", "2 s", "4 s", "8 s"]
    assert lines[-1].startswith("hv9: SSH connection re-established (attempt 5, 15.0 s after it was lost)")
    assert len(lines) == 6 and link.reconnects == 5 and link.checks == 1


def test_a_live_master_is_left_to_the_database_connection() -> None:
    """ovsdb-server away, the master up: nothing is reopened, and the master is asked only every few seconds."""
    now = [0.0]
    link = Link(now, fixed_at=0.0)
    link.up = True
    keeper = LinkKeeper(link, "hv9", clock=lambda: now[0])
    for _ in range(50):
        keeper.check(db_connected=False)
        now[0] += 0.1
    assert link.reconnects == 0 and link.checks == 3
    keeper.check(db_connected=True)
    assert link.checks == 3
