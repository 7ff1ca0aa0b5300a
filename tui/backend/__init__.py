"""The UI's seam onto the engine: one object the screens ask, from worker threads.

Screens never touch the IDL, the lab's files or subprocesses: they call the
methods here (or the engine's public API on the objects held here) inside
``@work(thread=True)`` workers and post the result back as a message.  What
lives here is shared state -- the one OVSDB connection, the policy engine on
it, the rate meter behind the VIF table, hvnet's own log messages -- so each
screen does not open its own.

The Edit VIF dialog's calls are the Backend's own (:meth:`Backend.plan_vif`,
:meth:`Backend.edit_vif`; the form's translation, :func:`vif_form_rule`, is
named here): editing one VIF is the switch's policy on this connection.
Submodules hold the calls of one capability each (:mod:`.host`, :mod:`.vifs`,
:mod:`.mirrors`, :mod:`.taps`, :mod:`.captures`, :mod:`.suites`,
:mod:`.isolation`, :mod:`.fleet`) and name the services' types their screens
show and build: this package is the console's one door to the services, and
its screens, dialogs and widgets import none of them directly.
"""

from __future__ import annotations

import gc
import logging
import threading
import time
from collections import deque
from dataclasses import dataclass
from typing import Any, Callable

from appliance.core.errors import HvnetError
from appliance.core.ovsdb import Connection
from appliance.frontdoor.hosts import build_host
from appliance.services import confirm
from appliance.services import policy as svc
from appliance.services.engine import open_engine
from appliance.services.inventory import Inventory, LiveInventory
from appliance.services.policy import (
    ApplyResult,
    Enforcement,
    Plan,
    PolicyEngine,
    State,
    VifForm,
    VifRule,
    vif_form_rule,
)
from appliance.switch.host import Host

log = logging.getLogger("hvnet.tui")

# What the Edit VIF dialog shows and builds, named here so that it depends on the console's backend.
__all__ = ["Backend", "LogLine", "State", "VifForm", "VifRule", "vif_form_rule"]

MESSAGES_KEPT = 500
CONFIRM_WITHIN_S = 60.0  # the dialogs' "roll back unless confirmed" window


@dataclass(frozen=True)
class LogLine:
    """One of hvnet's own log messages, as the Log screen shows it."""

    when: float
    level: str
    name: str
    text: str


class _Collector(logging.Handler):
    """Keeps hvnet's log records for the Log screen (instead of writing over the UI)."""

    def __init__(self, backend: Backend) -> None:
        super().__init__(logging.INFO)
        self.backend = backend

    def emit(self, record: logging.LogRecord) -> None:
        try:
            line = LogLine(record.created, record.levelname, record.name, record.getMessage())
        except Exception:  # a bad format string must not break the UI
            return
        self.backend._add_message(line)


class _Prefetch(threading.Thread):
    result: Inventory | None = None


class Backend:
    """Everything the screens need from the engine, on one connection."""

    def __init__(
        self,
        conn: Connection,
        host: Host | None = None,
        *,
        timeout: float = 5.0,
        messages: deque[LogLine] | None = None,
    ) -> None:
        self._conn = conn
        # The console is a front door: given no Host, it builds the one its connection's target names.
        self.host = host or build_host(conn.target.remote)
        self.timeout = timeout
        self._live = LiveInventory(conn, self.host)
        self._first: _Prefetch | None = None  # the first table's read, begun at start-up (see prefetch)
        self._gc_paused = False  # the cyclic collector waits for the first table (see prefetch)
        self._engine = open_engine(self.host, "hvnet tui", conn=conn)
        self.confirm_within_s = CONFIRM_WITHIN_S
        # the Log screen's lines: kept when the console switches to another host (one console, one log)
        self.messages: deque[LogLine] = deque(maxlen=MESSAGES_KEPT) if messages is None else messages
        self._message_listeners: list[Callable[[LogLine], None]] = []
        self._lock = threading.Lock()
        self._handler = _Collector(self)
        self._logger = logging.getLogger("hvnet")
        self._saved_logging: tuple[bool, int] | None = None  # (propagate, level) while this backend has logging
        # last -> (the audit file's path, mtime and size when read, its entries)
        self._audit_cache: dict[int, tuple[tuple[Any, ...] | None, list[dict[str, Any]]]] = {}

    # -- lifetime ------------------------------------------------------------

    def start(self, on_change: Callable[[], None]) -> None:
        """Take over logging; ``on_change`` will be called (from the IDL's thread) on every replica change.

        The replica itself starts with :meth:`start_replica`: the console
        paints its first table from one select (see :meth:`inventory`) and
        builds the replica after, so the two do not share the CPU.
        """
        if self._saved_logging is None:
            self._saved_logging = (self._logger.propagate, self._logger.level)
        self._logger.addHandler(self._handler)
        self._logger.propagate = False  # nothing may write over the screen
        if self._logger.level in (logging.NOTSET, logging.WARNING):
            self._logger.setLevel(logging.INFO)
        self._conn.add_listener(on_change)

    def start_replica(self) -> None:
        """Run the IDL loop (idempotent): from now on changes are pushed and readers use the replica."""
        self._resume_gc()
        self._conn.start()

    def _replica(self) -> None:
        """Make sure the replica holds the database before a reader looks at it (worker threads only)."""
        self.start_replica()
        self._conn.wait_synced(self.timeout)

    @property
    def replica_ready(self) -> bool:
        """Whether changes are pushed now (the replica is running and holds the database)."""
        return self._conn.started and self._conn.synced

    @property
    def conn(self) -> Connection:
        """The connection, its replica synced (blocks until then: worker threads only)."""
        self._replica()
        return self._conn

    @property
    def engine(self) -> PolicyEngine:
        """The policy engine on the synced replica (blocks until then: worker threads only)."""
        self._replica()
        return self._engine

    def close(self) -> None:
        self._resume_gc()
        self.release_logging()
        self._conn.close()

    def release_logging(self) -> None:
        """Give logging back (idempotent): the next backend takes it when the console switches hosts."""
        self._logger.removeHandler(self._handler)
        if self._saved_logging is not None:
            self._logger.propagate, level = self._saved_logging
            self._logger.setLevel(level)
            self._saved_logging = None

    def close_connection(self) -> None:
        """Close the OVSDB connection only (a worker's job: the IDL thread is joined)."""
        self._conn.close()

    @property
    def connected(self) -> bool:
        # Before the replica starts, the one-shot read that painted the table has just reached the server.
        return not self._conn.started or self._conn.is_connected

    @property
    def remote(self) -> str:
        return self._conn.target.remote

    def describe(self) -> str:
        return self._conn.target.describe()

    # -- messages (Log screen) -----------------------------------------------

    def _add_message(self, line: LogLine) -> None:
        with self._lock:
            self.messages.append(line)
            listeners = list(self._message_listeners)
        for callback in listeners:
            callback(line)

    def on_message(self, callback: Callable[[LogLine], None]) -> None:
        """Call ``callback(line)`` (from any thread) for every new log message."""
        with self._lock:
            self._message_listeners.append(callback)

    def note(self, text: str, level: int = logging.INFO) -> None:
        """Record something the UI did (it shows on the Log screen)."""
        log.log(level, text)

    # -- inventory -----------------------------------------------------------

    def inventory(self) -> Inventory:
        """A fresh inventory with rates since the previous call (about once a second).

        Until the replica is started, from one select: that is the first
        table's read, and the caller starts the replica once it is painted.
        """
        first = self._first
        if first is not None:
            self._first = None
            first.join()
            if isinstance(first.result, Inventory):
                return first.result
            self._resume_gc()  # the read failed: no first table to wait for
        if not self._conn.started:
            return self._live.refresh(once=True, timeout=self.timeout)
        self._replica()
        return self._live.refresh()

    def prefetch(self) -> None:
        """Start the first table's read now, while the console is still starting.

        The read waits on the server for part of its time; begun at start-up
        rather than when the VIF screen asks, that wait overlaps Textual's own.
        A failure is not kept: :meth:`inventory` then reads again and reports it.
        """
        if self._first is not None or self._conn.started:
            return
        # Start-up allocates a few hundred thousand objects (Textual's widgets, the read's 1000 rows)
        # and keeps nearly all: the cyclic collector would walk them again and again for nothing,
        # a third of the read on a 1000-VIF host.  What is there now (modules, classes) is frozen
        # for good; collection resumes once the first table is shown (start_replica) or the read failed.
        gc.freeze()
        gc.disable()
        self._gc_paused = True

        def read() -> None:
            try:
                thread.result = self._live.refresh(once=True, timeout=self.timeout)
            except Exception:  # said by the VIF screen's own read, which follows
                thread.result = None

        thread = _Prefetch(target=read, name="hvnet-first-read", daemon=True)
        self._first = thread
        thread.start()

    def _resume_gc(self) -> None:
        if self._gc_paused:
            self._gc_paused = False
            gc.enable()

    def inventory_snapshot(self) -> Inventory:
        """The inventory without touching the VIF table's rate meter (Host screen, dialogs)."""
        self._replica()
        return self._live.snapshot(kernel_counters=False)

    # -- policy ----------------------------------------------------------------

    def snapshot(self) -> State:
        return self.engine.snapshot()

    def plan_vif(self, rule: VifRule) -> Plan:
        """What applying one VIF's rule (the Edit VIF form's) would change, before -> after; touches nothing."""
        return svc.plan_vif(self.engine, rule)

    def edit_vif(self, port: str, rule: VifRule, confirm_within: float | None = None) -> ApplyResult:
        """Apply one VIF's rule: one transaction, verified, audited, noted in the log.

        ``confirm_within``: rolled back unless confirmed in time (see :func:`appliance.services.policy.apply`).
        """
        return self.run_apply(f"edit {port}", lambda: svc.edit_vif(self.engine, rule, confirm_within=confirm_within))

    def run_apply(self, what: str, verb: Callable[[], ApplyResult]) -> ApplyResult:
        """Run one service verb that applies, refused while disconnected, its outcome noted in the log."""
        if not self.connected:
            raise HvnetError(f"not connected to {self.remote}; nothing was applied", hint="wait for the reconnect")
        started = time.monotonic()
        result = verb()
        level = logging.INFO if result.ok else logging.WARNING
        self.note(f"{what}: {result.status} in {time.monotonic() - started:.1f} s", level)
        return result

    def pending(self) -> confirm.Pending | None:
        """The change waiting to be confirmed on this switch (made here or by ``hvnet apply --no-commit``)."""
        try:
            return confirm.pending(self.engine)
        except HvnetError as exc:  # an unreadable journal: said on the Log screen, the console goes on
            self.note(f"cannot read the pending change: {exc}", logging.WARNING)
            return None

    def outcome(self, waiting: confirm.Pending) -> str | None:
        """None while ``waiting`` is undecided; then ``"rolled back"`` or ``"kept"``."""
        try:
            return confirm.outcome(self._engine, waiting)  # two small local files: no replica needed
        except HvnetError as exc:
            self.note(f"cannot read what became of {waiting.id}: {exc}", logging.WARNING)
            return None

    def commit(self) -> confirm.Pending | None:
        """Keep the pending change (its automatic rollback is cancelled); None when nothing was pending."""
        done = confirm.commit(self.engine)
        if done is not None:
            self.note(f"committed {done.id} ({done.changes} change(s)); automatic rollback cancelled")
        return done

    def enforcement(self, ports: set[str] | None = None) -> list[Enforcement]:
        """How the limits on ``ports`` (None: every port) are enforced now; seconds on a large host."""
        return self.engine.enforcement(ports)

    def audit(self, last: int = 50) -> list[dict[str, Any]]:
        """The newest audit entries for this switch, newest last.

        The Host and Log screens ask every few seconds; the file is read again
        only when it has changed since (it only ever grows by appended lines).
        """
        path = self._engine.journal.audit_path
        try:
            st = path.stat()
            stamp: tuple[Any, ...] | None = (path, st.st_mtime_ns, st.st_size)
        except OSError:
            stamp = None
        with self._lock:
            cached = self._audit_cache.get(last)
        if stamp is not None and cached is not None and cached[0] == stamp:
            entries = cached[1]
        else:
            entries = self._engine.journal.read_audit(last=last)
            with self._lock:
                self._audit_cache[last] = (stamp, entries)
        return list(entries)
