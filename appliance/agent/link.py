"""Keeping a remote hypervisor's SSH connection up for the agent.

An agent on the console host reaches its hypervisor through one SSH master
that carries the forwarded OVSDB socket.  When sshd restarts or the network
goes, the master exits and the OVSDB connection with it; the IDL alone would
knock on a dead socket forever.  :class:`LinkKeeper` notices (the database is
disconnected *and* the master no longer answers), opens the master again
with exponential back-off, and says so in one log line per attempt -- not
one per poll.  Once the master is back the IDL reconnects by itself and the
agent re-applies the policy.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable

from appliance.core.errors import HvnetError
from appliance.switch.host import Link

log = logging.getLogger("hvnet.agent")

FIRST_DELAY_S = 1.0
MAX_DELAY_S = 30.0
CHECK_EVERY_S = 2.0  # how often a disconnected database makes us ask whether the master is alive


class Backoff:
    """Delays between attempts: ``first``, doubled after each failure, at most ``cap``; a success resets."""

    def __init__(self, first: float = FIRST_DELAY_S, cap: float = MAX_DELAY_S) -> None:
        self.first = first
        self.cap = cap
        self._next = first

    def failed(self) -> float:
        """The delay before the next attempt, after one more failure."""
        delay = self._next
        self._next = min(self.cap, self._next * 2)
        return delay

    def reset(self) -> None:
        self._next = self.first


class LinkKeeper:
    """Re-opens ``link`` (a remote host's SSH session) while the database connection is down."""

    def __init__(
        self, link: Link, name: str, *, backoff: Backoff | None = None, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.link = link
        self.name = name
        self.backoff = backoff or Backoff()
        self.clock = clock
        self.lost_at: float | None = None  # when the master was found gone (None: up, as far as we know)
        self.attempts = 0
        self._next_check = 0.0

    def due(self) -> float:
        """Seconds until :meth:`check` has something to do while disconnected."""
        return max(0.0, self._next_check - self.clock())

    def check(self, db_connected: bool) -> None:
        """One look, from the agent's loop: nothing while the database is connected or before the next attempt."""
        if db_connected:
            return
        now = self.clock()
        if now < self._next_check:
            return
        if self.lost_at is None:
            if self.link.alive():  # the master is up: ovsdb-server itself is away, the IDL retries
                self._next_check = now + CHECK_EVERY_S
                return
            self.lost_at = now
            self.attempts = 0
            log.warning("%s: the SSH connection is gone; reconnecting (back-off up to %g s)", self.name,
                        self.backoff.cap)  # fmt: skip
        self._attempt(now)

    def _attempt(self, now: float) -> None:
        self.attempts += 1
        try:
            self.link.reconnect()
        except HvnetError as exc:
            delay = self.backoff.failed()
            self._next_check = self.clock() + delay
            log.warning("%s: reconnect attempt %d failed: %s; next in %g s", self.name, self.attempts,
                        exc.message, delay)  # fmt: skip
            return
        away = self.clock() - (now if self.lost_at is None else self.lost_at)
        log.warning("%s: SSH connection re-established (attempt %d, %.1f s after it was lost); "
                    "the policy is re-applied once the database answers", self.name, self.attempts, away)  # fmt: skip
        self.backoff.reset()
        self.lost_at = None
        self._next_check = self.clock() + CHECK_EVERY_S
