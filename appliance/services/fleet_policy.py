"""One policy given to several hosts at once (``--hosts``): every VIF rule must match on some host.

A VM runs on one host of a pool and moves between them, so one policy serves
the pool: on each host a VIF rule that matches nothing there is not an error
(:attr:`~appliance.policy.plan.planner.PlanOptions.pool`).  Across the hosts it is:
a rule that no host matches is a typo or a VM that is gone, refused with its
``file:line`` as a selector matching nothing on one host is.  The hosts'
plans meet at a :class:`PlanGate` before anything is changed, so a policy
refused there is applied nowhere.  When a host drops out before planning (it
cannot be reached), a rule that matched nowhere else may be that host's: it
is then a warning, and the reachable hosts go ahead.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterable

from appliance.core.errors import ConfigError, HvnetError, Problem
from appliance.core.yamldoc import dotted
from appliance.policy.plan.model import Policy


def unmatched(policy: Policy, matched: Iterable[dict[str, list[str]]]) -> list[Problem]:
    """The VIF rules (not marked optional) that matched no VIF in any of ``matched`` (one Plan.matched per host)."""
    maps = list(matched)
    out = []
    for rule in policy.vifs:
        key = dotted(rule.selector.path)
        if not rule.selector.optional and not any(m.get(key) for m in maps):
            out.append(Problem(policy.source, policy.line(rule.selector.path), key,
                               "matches no VIF on any of the hosts; mark the rule 'optional: true' if that is "
                               "expected"))  # fmt: skip
    return out


class PlanGate:
    """Where the hosts' plans meet: :meth:`arrive` returns once every host has planned or dropped out."""

    def __init__(self, policy: Policy, timeout: float) -> None:
        self.policy = policy
        self.timeout = timeout
        self._cond = threading.Condition()
        self._waiting: set[str] = set()
        self._left: list[str] = []
        self._matched: dict[str, dict[str, list[str]]] = {}
        self._verdict: tuple[list[Problem], list[str]] | None = None

    def expect(self, names: Iterable[str]) -> None:
        """The hosts that will plan (before any of them starts)."""
        with self._cond:
            self._waiting = set(names)

    def leave(self, name: str) -> None:
        """``name`` will not plan (unreachable, failed before planning); harmless after :meth:`arrive`."""
        with self._cond:
            if name in self._waiting:
                self._waiting.discard(name)
                self._left.append(name)
                self._cond.notify_all()

    def arrive(self, name: str, matched: dict[str, list[str]]) -> list[str]:
        """Wait for the other hosts; the warnings to show, or :class:`ConfigError` when a rule matched nowhere."""
        deadline = time.monotonic() + self.timeout
        with self._cond:
            self._matched[name] = matched
            self._waiting.discard(name)
            self._cond.notify_all()
            while self._waiting:
                left = deadline - time.monotonic()
                if left <= 0:
                    late = ", ".join(sorted(self._waiting))
                    raise HvnetError(f"{late} did not finish planning within {self.timeout:g} s; nothing changed here")
                self._cond.wait(left)
            if self._verdict is None:
                self._verdict = self._decide()
            problems, warnings = self._verdict
        if problems:
            raise ConfigError(problems)
        return warnings

    def _decide(self) -> tuple[list[Problem], list[str]]:
        problems = unmatched(self.policy, self._matched.values())
        if problems and self._left:  # the rule may be the missing host's: the others go ahead
            gone = ", ".join(sorted(self._left))
            return [], [f"{p.field} matches no VIF on the hosts reached (not checked on {gone})" for p in problems]
        return problems, []
