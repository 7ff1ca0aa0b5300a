"""Many hosts at once: one callable run per inventory host, in parallel, each host on its own.

``hvnet status|plan|apply|verify --hosts ...`` and ``hvnet hosts`` (and the
console's fleet screen) hand :func:`run` the hosts and what to do on one
:class:`~appliance.switch.host.Host`; it returns one :class:`HostOutcome` per host,
in the order given.  Each host gets its own Host (one SSH master), built and
closed in its own thread; a host that fails, cannot be reached or hangs does
not stop the others.  A host still busy at its deadline is left behind and
reported as such (an apply then has an unknown outcome: the journal's intent
lets the next hvnet run on that host settle it, as after a killed hvnet).

The worst result decides the exit code, in the order of :data:`appliance.core.errors.SEVERITY`
(the same order for every multi-host verb, documented in ``hvnet --help`` and hvnet(8)).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from appliance.core.errors import EXIT_FAILED, EXIT_UNREACHABLE, HvnetError, worst_exit
from appliance.core.hostlist import InventoryHost
from appliance.switch.host import Host

if TYPE_CHECKING:
    from appliance.switch.inventory import Inventory

log = logging.getLogger("hvnet.fleet")
T = TypeVar("T")

MAX_PARALLEL = 16
DEFAULT_HOST_DEADLINE_S = 300.0
LOCAL = "local"  # the console's own machine: its switch or its lab, always reachable by name
Opener = Callable[[str, float], Host]  # (inventory name, timeout) -> an open Host


@dataclass
class HostOutcome(Generic[T]):
    """One host's result: the callable's value and its exit code, or the error that stopped it."""

    name: str
    exit: int
    value: T | None = None
    error: str | None = None
    hint: str | None = None
    seconds: float = 0.0


def worst(codes: Sequence[int]) -> int:
    """The exit code of a fan-out: the most severe of the hosts' codes (0 for none).

    In :data:`appliance.core.errors.SEVERITY` order, which ``--help`` and hvnet(8) state.
    """
    return worst_exit(codes)


def run(
    hosts: Sequence[InventoryHost],
    work: Callable[[Host, InventoryHost], tuple[T, int]],
    connect: Callable[[InventoryHost], Host],
    *,
    deadline_s: float = DEFAULT_HOST_DEADLINE_S,
    overdue_exit: int = EXIT_UNREACHABLE,
) -> list[HostOutcome[T]]:
    """``work(host, entry) -> (value, exit code)`` on every host in parallel; one outcome per host, in order.

    ``connect(entry)`` builds the entry's Host (the front door's ``build_host``:
    this layer does not read options).  An :class:`HvnetError` from either is
    that host's result.  ``overdue_exit``: the code of a host still running after
    ``deadline_s`` (:data:`~appliance.core.errors.EXIT_UNKNOWN` for verbs that change the host).
    A bug in one host's work is logged with its traceback and reported as
    that host's failure, so the other hosts' results are still shown.
    Worker threads are daemons so that a hung host never keeps hvnet alive.
    """
    fan = _FanOut(hosts, work, connect)
    for _ in range(max(1, min(MAX_PARALLEL, len(hosts)))):
        threading.Thread(target=fan.worker, daemon=True, name="hvnet-fleet").start()
    return fan.wait(deadline_s, overdue_exit)


class _FanOut(Generic[T]):
    """The state of one :func:`run`: a queue of hosts, their start times and outcomes, one lock."""

    def __init__(
        self,
        hosts: Sequence[InventoryHost],
        work: Callable[[Host, InventoryHost], tuple[T, int]],
        connect: Callable[[InventoryHost], Host],
    ) -> None:
        self.hosts, self.work, self.connect = hosts, work, connect
        self.outcomes: list[HostOutcome[T] | None] = [None] * len(hosts)
        self.started: list[float | None] = [None] * len(hosts)
        self.queue = list(range(len(hosts)))
        self.done = threading.Condition()

    def worker(self) -> None:
        while True:
            with self.done:
                if not self.queue:
                    return
                i = self.queue.pop(0)
                self.started[i] = time.monotonic()
            try:
                result = self.one(self.hosts[i])
            except Exception as exc:  # a bug: its traceback logged, the other hosts' results still shown
                log.exception("%s: internal error", self.hosts[i].name)
                result = HostOutcome(self.hosts[i].name, EXIT_FAILED, error=f"internal error: {exc!r}")
            with self.done:
                if self.outcomes[i] is None:  # not given up on meanwhile
                    self.outcomes[i] = result
                self.done.notify_all()

    def one(self, entry: InventoryHost) -> HostOutcome[T]:
        """One host, start to finish: built, worked on, always closed."""
        host: Host | None = None
        t0 = time.monotonic()
        try:
            host = self.connect(entry)
            value, code = self.work(host, entry)
            return HostOutcome(entry.name, code, value, seconds=time.monotonic() - t0)
        except HvnetError as exc:
            return HostOutcome(entry.name, exc.exit_code, error=exc.message, hint=exc.hint,
                               seconds=time.monotonic() - t0)  # fmt: skip
        finally:
            if host is not None:
                try:
                    host.close()
                except HvnetError:
                    pass  # the master is gone already; close() removed its directory regardless

    def wait(self, deadline_s: float, overdue_exit: int) -> list[HostOutcome[T]]:
        """Every host's outcome, a host busy for longer than ``deadline_s`` given up on."""
        with self.done:
            while any(o is None for o in self.outcomes):
                now = time.monotonic()
                for i, (o, t) in enumerate(zip(self.outcomes, self.started)):
                    if o is None and t is not None and now - t > deadline_s:
                        why = f"no result within {deadline_s:g} s; left running"
                        self.outcomes[i] = HostOutcome(self.hosts[i].name, overdue_exit, error=why, seconds=now - t)
                busy = [t for o, t in zip(self.outcomes, self.started) if o is None and t is not None]
                next_due = min((t + deadline_s - now for t in busy), default=1.0)
                self.done.wait(timeout=max(0.05, min(next_due, 1.0)))
        return [o for o in self.outcomes if o is not None]


# -- hvnet hosts: one read-only look at a host ---------------------------------------------------


def probe(host: Host, entry: InventoryHost | None, *, timeout: float) -> dict[str, Any]:
    """What ``hvnet hosts`` shows of a reachable host, all read-only: OVS, datapaths, VIFs, agent, drift."""
    from appliance.switch import api

    inv = api.read_inventory_once(host, timeout=timeout)
    return summary(inv, agent_state(host, timeout=timeout),
                   policy_drift(host, entry.policy if entry is not None else None, timeout=timeout))  # fmt: skip


def summary(inv: Inventory, agent: str, drift: dict[str, Any]) -> dict[str, Any]:
    """A reachable host's figures in ``hvnet hosts`` (pure: the switch's inventory, its agent and its drift)."""
    return {
        "ovs_version": inv.host.ovs_version,
        "datapaths": sorted({b.datapath_type for b in inv.bridges}),
        "vifs": sum(1 for v in inv.vifs if v.is_vif),
        "agent": agent,
        **drift,
    }


def agent_state(host: Host, *, timeout: float) -> str:
    """``running`` when some client holds the agent's OVSDB lock on the host, ``none`` when nobody does.

    ``unknown`` when the server gave neither answer.  Asked on a connection of
    its own that takes a free lock only between two requests (see
    :func:`appliance.core.ovsdb.lock_held`), so an agent starting meanwhile merely
    waits that long.
    """
    from appliance.core.ovsdb import lock_held
    from appliance.policy.apply.engine import AGENT_LOCK

    return {True: "running", False: "none", None: "unknown"}[lock_held(host.target, AGENT_LOCK, timeout)]


def policy_drift(host: Host, path: str | None, *, timeout: float) -> dict[str, Any]:
    """``{"policy": path, "drift": N}``: how many settings differ from the host's policy file (``verify``).

    ``drift`` is None when the inventory names no policy; a policy that cannot
    be read or checked gives ``drift_error`` instead, for this host only.
    """
    if path is None:
        return {"policy": None, "drift": None}
    from appliance.policy import COLUMNS, PolicyEngine, load
    from appliance.services import policy as svc

    try:
        rules = load(path)
        conn = host.connect(COLUMNS, timeout=timeout)
        with PolicyEngine(conn, host, command="hvnet hosts") as engine:
            found = svc.verify(engine, rules)
    except HvnetError as exc:
        return {"policy": path, "drift": None, "drift_error": exc.message}
    return {"policy": path, "drift": len(found.drift)}


def drift_text(row: dict[str, Any]) -> str:
    """The DRIFT cell: ``in sync``, ``N differ``, ``-`` (no policy named) or ``error``."""
    if row.get("drift_error"):
        return "error"
    if row.get("drift") is None:
        return "-"
    return "in sync" if row["drift"] == 0 else f"{row['drift']} differ"


# -- the console's fleet screen: rows as they come --------------------------------------------------


def probe_entry(entry: InventoryHost, timeout: float, opener: Opener) -> dict[str, Any]:
    """One inventory host's row (``hvnet hosts``' keys); never raises for the host's own faults: an
    unreachable host is a row with ``reachable`` false and the error, so one host cannot hide the others."""
    row: dict[str, Any] = {"name": entry.name, "group": entry.group, "kind": entry.kind, "address": entry.address}
    return survey(row, lambda: opener(entry.name, timeout), timeout, entry)


def survey(
    row: dict[str, Any], open_host: Callable[[], Host], timeout: float, entry: InventoryHost | None = None
) -> dict[str, Any]:
    """Fill ``row`` from the Host ``open_host`` gives (closed again after): :func:`probe`'s figures."""
    started = time.monotonic()
    host = None
    try:
        host = open_host()
        row.update(reachable=True, **probe(host, entry, timeout=timeout))
    except HvnetError as exc:
        row.update(reachable=False, error=exc.message, policy=entry.policy if entry is not None else None)
    finally:
        if host is not None:
            try:
                host.close()
            except HvnetError:
                pass
    row["seconds"] = round(time.monotonic() - started, 3)
    return row
