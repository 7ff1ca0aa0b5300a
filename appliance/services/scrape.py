"""One scrape of one host, answered within its deadline: the collection of :mod:`.metrics`' figures in a
thread of its own, at most one at a time, shared by the scrapes that arrive while it runs.

Kept apart from :mod:`.metrics` (what the figures are and how each is read):
this module is about time -- deadlines, the collection thread, the bounded
lookup of VM names -- and the exporter's own figures about its scrapes.
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass, field
from typing import Any, Optional

from appliance.core.errors import HvnetError
from appliance.core.ovsdb import fetch_schema, lock_held
from appliance.services.metrics import (
    Families,
    Family,
    SlowChecks,
    add_checks,
    add_inventory,
    audit_tail,
    audit_times,
    log,
    vswitchd_threads,
)
from appliance.switch import inventory, reader, snapshot
from appliance.switch.host import Host
from appliance.switch.inventory import Inventory
from appliance.switch.names import resolve_vms

DEFAULT_DEADLINE = 5.0  # seconds a scrape may take: half of Prometheus' default scrape_timeout (10 s)


@dataclass
class _Flight:
    """One collection, in a thread of its own; every scrape that arrives while it runs shares it."""

    started: float
    done: threading.Event = field(default_factory=threading.Event)
    families: Optional[Families] = None  # None: it failed (counted in the collector's errors)
    took: float = 0.0
    deadline: float = DEFAULT_DEADLINE

    @property
    def until(self) -> float:
        return self.started + self.deadline


class Collector:
    """Collects one host's families per scrape, every scrape answered within ``deadline`` seconds.

    The collection runs in a thread of its own and the scrape waits for it
    until the deadline.  At most one runs at a time: scrapes that arrive while
    one runs share its result, and when one is still running past its
    deadline (a libvirt or a database that stopped answering) later scrapes
    say so at once -- ``hvnet_up 0`` and ``hvnet_exporter_scrape_timed_out
    1`` -- instead of starting another.  Nothing collected before is passed
    off as new.  Each call to OVSDB is bounded by ``timeout`` (and by what is
    left of the deadline); VM names are looked up in a thread of their own
    with half of what is left, and a VIF whose VM name is not known in time
    has an empty ``vm`` on its ``hvnet_vif_info`` (its ``vm_uuid`` says which
    VM); its other series are labelled by ``vif`` alone, so they go on
    unchanged when the name comes back.
    """

    def __init__(
        self,
        host: Host,
        *,
        timeout: float = DEFAULT_DEADLINE,
        deadline: Optional[float] = None,
        policy: Optional[str] = None,
        check_interval: float = 60.0,
    ) -> None:
        self.host = host
        self.timeout = timeout
        self.deadline = timeout if deadline is None else deadline
        self.policy = policy
        self.checks = SlowChecks(host, policy, check_interval, timeout)
        self.scrapes = 0
        self.errors: dict[str, int] = {}
        self._schema: Optional[dict[str, Any]] = None
        # the host label: the same whether or not OVSDB answers (an alert on hvnet_up 0 must match its series)
        self.name = host.label or _remote_host(host.target.remotes) or socket.gethostname()
        # shown only for another machine's switch: this machine's is Prometheus' own target (its instance);
        # a switch is another machine's over SSH (--host) and over a tcp:/ssl: remote (--db tcp:HOST:PORT)
        self.host_label = not host.runner.local or not all(r.startswith("unix:") for r in host.target.remotes)
        self._lock = threading.Lock()  # guards the flight, the counts and the names lookup's flag
        self._flight: Optional[_Flight] = None
        self._names_busy = False
        self._until = 0.0  # the running collection's deadline (only the collection thread reads it)

    def start(self) -> None:
        self.checks.start()

    def stop(self) -> None:
        self.checks.stop()

    def _error(self, stage: str, exc: BaseException) -> None:
        with self._lock:
            self.errors[stage] = self.errors.get(stage, 0) + 1
        log.warning("scrape: %s: %s", stage, getattr(exc, "message", None) or exc)

    def _left(self) -> float:
        """What a call may take: its own timeout, cut to what is left of the collection's deadline less a
        tenth of it (a call that gives up is then reported as what failed -- ``ovsdb`` -- not as a deadline
        missed)."""
        return max(0.05, min(self.timeout, self._until - time.monotonic() - self.deadline / 10))

    def collect(self) -> Families:
        """One scrape's families, within the deadline (see the class)."""
        started = time.monotonic()
        with self._lock:
            self.scrapes += 1
            flight = self._flight
            if flight is None or flight.done.is_set():
                flight = self._flight = _Flight(started, deadline=self.deadline)
                threading.Thread(target=self._fly, args=(flight,), name="hvnet-exporter-collect", daemon=True).start()
            elif started > flight.until:  # an earlier scrape's collection, still not back
                return self._late(started)
        flight.done.wait(max(0.0, flight.until - time.monotonic()))
        if flight.done.is_set() and flight.families is not None:  # done in time (or just now): its figures
            return self._answer(flight)
        with self._lock:
            return self._late(started, failed=flight.done.is_set())

    def _fly(self, flight: _Flight) -> None:
        self._until = flight.until
        try:
            flight.families = self.gather()
        except Exception as exc:  # a defect in one collection must not end the exporter's answers
            log.exception("scrape: the collection failed")
            self._error("collect", exc)
        finally:
            flight.took = time.monotonic() - flight.started
            flight.done.set()

    def _answer(self, flight: _Flight) -> Families:
        """The flight's families (copied: other scrapes share them) and this scrape's own figures."""
        assert flight.families is not None
        out = Families()
        for fam in flight.families:
            out.by_name[fam.name] = Family(fam.name, list(fam.samples))
        with self._lock:
            self._finish(out, self.name, flight.took, timed_out=False)
        return out

    def _late(self, started: float, failed: bool = False) -> Families:
        """A scrape with no collection to show (called under the lock): that said, and nothing else."""
        if not failed:
            self.errors["deadline"] = self.errors.get("deadline", 0) + 1
            log.warning("scrape: no figures within %g s; the collection is still running", self.deadline)
        out = Families()
        out.add("hvnet_up", (self.name,), 0)
        self._finish(out, self.name, time.monotonic() - started, timed_out=not failed)
        return out

    def read(self) -> Inventory:
        """The inventory from one consistent read (the schema fetched once, again after a failure)."""
        try:
            if self._schema is None:
                self._schema = fetch_schema(self.host.target, self._left())
            snap = snapshot.take(self.host.target, reader.COLUMNS, self._left(), schema_json=self._schema)
        except HvnetError:
            self._schema = None
            raise
        inv = inventory.read(snap, runner=self.host.runner)
        self._names(inv)
        return inv

    def _names(self, inv: Inventory) -> None:
        """VM names from libvirt/XAPI, in a thread of their own within half of what is left of the deadline;
        one lookup at a time (a stuck libvirt is not asked again until it answers)."""
        sources = self.host.name_sources()  # built once per Host; connections are made when asked
        wanted = inventory.wanted_vms(inv.vifs) if sources else {}
        if not wanted:
            return
        with self._lock:
            busy, self._names_busy = self._names_busy, True
        if busy:
            self._error("names", HvnetError("an earlier lookup of VM names has not returned"))
            return
        box: dict[str, Any] = {}
        done = threading.Event()

        def look_up() -> None:
            try:
                box["found"] = resolve_vms(sources, wanted)
            except Exception as exc:  # libvirt's and XenAPI's own errors: the names stay unknown
                box["error"] = exc
            finally:
                with self._lock:
                    self._names_busy = False
                done.set()

        threading.Thread(target=look_up, name="hvnet-exporter-names", daemon=True).start()
        wait = max(0.0, (self._until - time.monotonic()) / 2)
        if not done.wait(wait):
            self._error("names", HvnetError(f"no VM names within {wait:.1f} s; hvnet_vif_info without them"))
        elif "error" in box:
            self._error("names", box["error"])
        else:
            inventory.apply_vms(inv.vifs, box["found"])

    def gather(self) -> Families:
        """Everything one collection finds (without the exporter's own figures)."""
        out = Families()
        inv: Optional[Inventory] = None
        try:
            inv = self.read()
        except HvnetError as exc:
            self._error("ovsdb", exc)
        host = self.name
        out.add("hvnet_up", (host,), 1 if inv is not None else 0)
        if inv is not None:
            add_inventory(out, host, inv)
            add_checks(out, host, inv, self.checks.latest(), self.policy)
            self._agent(out, host)
        self._audit(out, host)
        if inv is not None or self.host.runner.local:  # a remote host whose read failed: its link likely did
            self._threads(out, host)
        return out

    def _threads(self, out: Families, host: str) -> None:
        try:
            for name, (user, system) in sorted((vswitchd_threads(self.host, self._left()) or {}).items()):
                out.add("hvnet_ovs_vswitchd_cpu_seconds_total", (host, name, "user"), user)
                out.add("hvnet_ovs_vswitchd_cpu_seconds_total", (host, name, "system"), system)
        except (HvnetError, OSError) as exc:
            self._error("vswitchd", exc)

    def _finish(self, out: Families, host: str, took: float, *, timed_out: bool) -> None:
        """The exporter's own figures (called under the lock)."""
        out.add("hvnet_exporter_scrapes_total", (host,), self.scrapes)
        out.add("hvnet_exporter_scrape_timed_out", (host,), int(timed_out))
        errors = {**self.errors, **{f"checks-{k}": n for k, n in self.checks.latest().errors.items()}}
        for stage, n in sorted(errors.items()):
            out.add("hvnet_exporter_scrape_errors_total", (host, stage), n)
        out.add("hvnet_exporter_scrape_duration_seconds", (host,), took)

    def _agent(self, out: Families, host: str) -> None:
        from appliance.policy.apply.engine import AGENT_LOCK

        try:
            held = lock_held(self.host.target, AGENT_LOCK, self._left())
        except HvnetError as exc:
            self._error("agent", exc)
            return
        out.add("hvnet_agent_running", (host,), None if held is None else int(held))

    def _audit(self, out: Families, host: str) -> None:
        times = audit_times(audit_tail(self.host.paths.audit_log), self.host.identity)
        out.add("hvnet_agent_last_change_timestamp_seconds", (host,), times.get("agent_change"))
        out.add("hvnet_agent_last_failure_timestamp_seconds", (host,), times.get("agent_failure"))
        out.add("hvnet_last_apply_timestamp_seconds", (host,), times.get("apply"))


def _remote_host(remotes: list[str]) -> Optional[str]:
    """The machine a ``tcp:HOST:PORT`` or ``ssl:HOST:PORT`` database is on (None: a unix socket, here)."""
    for r in remotes:
        kind, _, rest = r.partition(":")
        if kind in ("tcp", "ssl") and rest:
            host = rest if rest.endswith("]") or ":" not in rest else rest.rpartition(":")[0]  # [v6]:port
            return host.strip("[]") or None
    return None
