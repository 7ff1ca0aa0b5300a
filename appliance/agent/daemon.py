"""``hvnet agent``: keep the policy in force while hypervisors re-plug VIFs.

libvirt and the XenServer hotplug scripts ``del-port`` + ``add-port`` a VM's
VIF on every start, reboot and migration, which wipes any tag or QoS written
straight into OVS.  The agent holds one OVSDB connection, is woken by the
server's monitor updates (no polling of the database), and re-applies the
policy within about a second of a VIF (re)appearing.

It also checks the OpenFlow meters every couple of seconds (ovs-vswitchd
forgets them when it restarts, without any OVSDB change to say so), reloads
the policy on SIGHUP, and deletes hvnet-owned QoS/Queue/Mirror rows and
tunnel ports left behind by VIFs that are gone -- only after seeing them
orphaned in two consecutive observations at least a second apart.

It writes only while it holds the OVSDB lock :data:`AGENT_LOCK` on its
switch: a second agent started on the same switch (on the hypervisor, or on
another console host) says that the lock is held and waits, and takes over
when the first one goes.  Against a remote hypervisor (``hvnet --host NAME
agent``) it also keeps the SSH connection up (:mod:`.link`).

A bridge's sFlow and IPFIX rows need no such collection: ``sFlow`` and
``IPFIX`` are not root tables, so ovsdb-server deletes a row as soon as no
bridge references it (the lab test clears a bridge's ``sflow`` and finds
the table empty).  A row deleted behind the agent's back is an ordinary
difference from the policy, put back on the next pass.
"""

from __future__ import annotations

import logging
import signal
import threading
import time
from pathlib import Path

from appliance.agent.link import LinkKeeper
from appliance.core.errors import HvnetError
from appliance.core.ovsdb import Connection
from appliance.core.systemd import Notifier
from appliance.services import policy as svc
from appliance.services.engine import AGENT_LOCK, OrphanCollector, open_engine, vswitchd_pid
from appliance.services.policy import Policy
from appliance.switch.host import Host

log = logging.getLogger("hvnet.agent")

DEBOUNCE_S = 0.02  # let a del-port/add-port pair in separate transactions land together
TICK_S = 2.0  # meter check and orphan observation period
# The OVSDB lock an agent holds on the switch it keeps in line: two agents never fight over one
# switch, and anyone may ask the server whether an agent is there (``hvnet hosts``).
# What the policy file is in a refusal: the agent applies it as root, so only a file no other user
# could have written is read (see :mod:`appliance.core.trusted`).
ENFORCED = "the policy the agent enforces"


class Agent:
    """Reconciles the switch with a policy file, event-driven."""

    def __init__(
        self, conn: Connection, host: Host, policy_path: str | Path, *, tick: float = TICK_S,
        notifier: Notifier | None = None, policing: str | None = None,
    ) -> None:  # fmt: skip
        self.conn = conn
        self.policy_path = str(policy_path)
        self.tick = tick
        self.engine = open_engine(host, "hvnet agent", conn=conn, policing=policing, enforcing=True)
        # invalid or untrusted at start: refuse to run
        self.policy: Policy = svc.load_policy(self.policy_path, trusted=ENFORCED)
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._reload = threading.Event()
        self._orphans = OrphanCollector(conn, "hvnet agent: remove orphaned hvnet rows")
        self._reconnects = conn.reconnects
        self._vswitchd_pid: int | None = None
        self._last_error = ""
        self.applied = 0  # reconciles that changed something (for tests and status)
        self.where = host.label or conn.target.describe()
        self.keeper = LinkKeeper(host.link, self.where) if host.link is not None else None
        self._lock_said = ""  # what was last said about the lock: "", "held", "contended"
        # systemd (Type=notify): ready once the policy is in force, the watchdog petted from the loop
        self.notifier = notifier or Notifier()

    # -- control ----------------------------------------------------------------

    def wake(self) -> None:
        self._wake.set()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()

    def request_reload(self) -> None:
        self._reload.set()
        self._wake.set()

    def install_signal_handlers(self) -> None:
        signal.signal(signal.SIGHUP, lambda *_: self.request_reload())
        signal.signal(signal.SIGTERM, lambda *_: self.stop())
        signal.signal(signal.SIGINT, lambda *_: self.stop())

    # -- main loop ------------------------------------------------------------------

    def run(self) -> None:
        self.conn.add_listener(self.wake)
        self.conn.set_lock(AGENT_LOCK)
        self.conn.start()
        log.info("agent started: policy %s, database %s", self.policy_path, self.conn.target.describe())
        self.notifier.set_status(f"connecting to {self.where}")
        next_tick = 0.0
        try:
            while not self._stop.is_set():
                self.notifier.pet()
                timeout = min(max(0.0, next_tick - time.monotonic()), self.notifier.due())
                if self.keeper is not None and not self.conn.is_connected:
                    timeout = min(timeout, self.keeper.due())
                woken = self._wake.wait(timeout)
                if self._stop.is_set():
                    break
                if woken:
                    time.sleep(DEBOUNCE_S)
                    self._wake.clear()
                if self.keeper is not None:
                    self.keeper.check(self.conn.is_connected)
                if self._reload.is_set():
                    self._reload.clear()
                    self._do_reload()
                ticking = time.monotonic() >= next_tick
                if ticking:
                    next_tick = time.monotonic() + self.tick
                self.reconcile(tick=ticking)
        finally:
            self.notifier.stopping("stopping")
            self.conn.stop()
            log.info("agent stopped")

    def _do_reload(self) -> None:
        try:
            self.policy = svc.load_policy(self.policy_path, trusted=ENFORCED)
            log.info("policy reloaded from %s", self.policy_path)
            self.notifier.set_status(f"policy reloaded from {self.policy_path}")
        except HvnetError as exc:  # invalid, or another user could have written it
            log.error("policy reload refused, keeping the previous one: %s", exc)

    def reconcile(self, *, tick: bool = False) -> None:
        """One pass: apply what differs; on a tick also meters and orphans."""
        if not self.conn.is_connected:
            self.notifier.set_status(f"waiting for the database of {self.where}")
            return
        if self.conn.reconnects != self._reconnects:
            self._reconnects = self.conn.reconnects
            log.warning("reconnected to the database (%d reconnects); re-applying the policy", self._reconnects)
        if not self._holds_lock():
            return
        try:
            if tick:
                self._check_vswitchd()
            # Audited, but not what ``hvnet rollback`` undoes: that stays the operator's last apply.
            result = svc.apply(self.engine, self.policy, verify=False, record=False)
            if result.plan.changes:
                self.applied += 1
                for c in result.plan.changes:
                    log.info("re-applied %s %s: %s -> %s", c.target, c.kind, c.describe(c.before), c.describe(c.after))
            for port, why in result.plan.dead.items():
                log.warning("%s: %s", port, why)
            if result.openflow and any(v.get("added") or v.get("removed_ofports") for v in result.openflow.values()):
                log.info("meters brought in line: %s", result.openflow)
            for p in result.problems:
                log.error("%s", p)
            if self._vswitchd_pid is None:
                # The first apply is what opens the OpenFlow side: learn ovs-vswitchd's pid now, not
                # on the next tick, or a restart right after start-up would go unnoticed.
                self._check_vswitchd()
            if tick:
                self._collect_orphans()
            self._last_error = ""
            self.notifier.set_ready(f"enforcing {self.policy_path} on {self.where} ({self.applied} re-applies)")
        except HvnetError as exc:
            self._failed(str(exc))
        except Exception as exc:  # one bad pass must not end the enforcement of every other port
            self._failed(f"{type(exc).__name__}: {exc}", exc)

    def _failed(self, text: str, unexpected: BaseException | None = None) -> None:
        """Say once what stopped this pass (with its traceback when it is not one of hvnet's errors); the
        next wake-up or tick tries again."""
        if text != self._last_error:  # say it once, not on every wake-up
            log.error("could not apply the policy: %s", text, exc_info=unexpected)
            self._last_error = text
        self.notifier.set_status(f"could not apply the policy: {text}"[:400])

    def _holds_lock(self) -> bool:
        """Whether this agent may write: it holds :data:`AGENT_LOCK`.  Each change of that is said once."""
        if self.conn.has_lock:
            if self._lock_said != "held":
                log.info("holding the OVSDB lock %s on %s: enforcing the policy", AGENT_LOCK, self.where)
                self._lock_said = "held"
            return True
        if self.conn.lock_contended:
            if self._lock_said != "contended":
                log.warning("another agent holds the OVSDB lock %s on %s: not writing until it lets go",
                            AGENT_LOCK, self.where)  # fmt: skip
                self._lock_said = "contended"
            # Standing by is this agent doing its job (it takes over when the other goes): a unit
            # waiting for the lock is started, not failing its start-up.
            self.notifier.set_ready(f"standing by: another agent holds the OVSDB lock on {self.where}")
        elif self._lock_said == "held":
            self._lock_said = ""  # lost with the connection: asked for again on reconnect
        return False

    def _check_vswitchd(self) -> None:
        pid = vswitchd_pid(self.engine)
        if pid is None:
            return
        if self._vswitchd_pid is not None and pid != self._vswitchd_pid:
            log.warning("ovs-vswitchd restarted (pid %d -> %d): re-installing meters", self._vswitchd_pid, pid)
        self._vswitchd_pid = pid

    # -- garbage ------------------------------------------------------------------

    def _collect_orphans(self) -> None:
        gone = self._orphans.collect(self.policy)
        if gone:
            log.info("removed rows orphaned by VIFs that are gone: %s", ", ".join(gone))
