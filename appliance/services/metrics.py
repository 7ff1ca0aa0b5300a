"""What ``hvnet exporter`` exports, gathered at scrape time from the same readers ``status`` uses.

One scrape is one consistent OVSDB read (:func:`appliance.snapshot.take`, bounded
by a timeout) turned into the inventory ``hvnet status`` shows, plus a few cheap
local reads (kernel counters, ``/proc`` for ovs-vswitchd's threads, the tail of
the audit log).  The checks that run programs -- whether each limit is enforced
(``tc``, ``ovs-ofctl``) and how far the switch has drifted from the policy
file -- take seconds on a large host and can hang on a stopped ovs-vswitchd,
so they run in a background thread every ``check_interval`` seconds and a
scrape exports their latest result with its time, never waiting for them.

This module knows nothing of Prometheus: it returns :class:`Family` values
(name, type, help, samples) that :mod:`.exporter` renders, so the figures are
tested without an HTTP server.  Every family the exporter can emit is listed
in :data:`FAMILIES`; a figure that is not known is left out, never exported as 0.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Optional

from .. import inventory, snapshot
from ..errors import HvnetError
from ..host import Host, daemon_pid
from ..inventory import Inventory, Vif
from ..names import resolve_vms
from ..ovsdb import fetch_schema, lock_held, without_lone_surrogates

log = logging.getLogger("hvnet.exporter")

VIF_LABELS = ("host", "bridge", "vif", "vm", "vlan")
LIMIT_LABELS = (*VIF_LABELS, "direction", "mechanism")
MIRROR_LABELS = ("host", "bridge", "mirror", "output")
BRIDGE_LABELS = ("host", "bridge")
THREAD_LABELS = ("host", "thread", "mode")

# name -> (type, help, label names).  Counters carry their "_total" here, as they are exposed.
FAMILIES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "hvnet_up": ("gauge", "1 when this scrape read the switch's OVSDB within the timeout, else 0", ("host",)),
    "hvnet_info": (
        "gauge",
        "the switch: OVS and database versions, datapath types (always 1)",
        ("host", "ovs_version", "db_version", "datapath_types"),
    ),
    "hvnet_vifs": ("gauge", "VM interfaces on the switch", ("host",)),
    **{
        f"hvnet_vif_{d}_{what}_total": (
            "counter",
            f"{what} {'received by the switch from the VM' if d == 'rx' else 'sent by the switch to the VM'}",
            VIF_LABELS,
        )
        for d in ("rx", "tx")
        for what in ("bytes", "packets", "dropped", "errors")
    },
    "hvnet_vif_link_up": ("gauge", "1 when the VIF's link state is up, 0 when down", VIF_LABELS),
    "hvnet_vif_ingress_policing_rate_bits_per_second": (
        "gauge",
        "configured ingress policing rate (tc or meter), for VIFs that have one",
        VIF_LABELS,
    ),
    "hvnet_vif_ingress_policing_burst_bits": (
        "gauge",
        "configured ingress policing burst, for VIFs with a rate",
        VIF_LABELS,
    ),
    "hvnet_vif_egress_max_rate_bits_per_second": (
        "gauge",
        "configured egress shaping (linux-htb max-rate), for VIFs that have one",
        VIF_LABELS,
    ),
    "hvnet_limit_enforced": (
        "gauge",
        "1 when the limit was observed in force by its mechanism, 0 when configured but not enforced "
        "(absent: not checked or could not be checked)",
        LIMIT_LABELS,
    ),
    "hvnet_limit_check_timestamp_seconds": (
        "gauge",
        "when the enforcement of limits was last checked (Unix time)",
        ("host",),
    ),
    "hvnet_mirror_tx_packets_total": ("counter", "packets the mirror sent to its output", MIRROR_LABELS),
    "hvnet_mirror_tx_bytes_total": ("counter", "bytes the mirror sent to its output", MIRROR_LABELS),
    "hvnet_sflow_sampling_rate": (
        "gauge",
        "sFlow samples 1 in N packets (OVS's default 400 when unset)",
        BRIDGE_LABELS,
    ),
    "hvnet_sflow_polling_interval_seconds": ("gauge", "sFlow counter polling interval (default 30)", BRIDGE_LABELS),
    "hvnet_sflow_header_bytes": ("gauge", "bytes of each sampled packet sent (default 128)", BRIDGE_LABELS),
    "hvnet_sflow_targets": ("gauge", "sFlow collectors configured", BRIDGE_LABELS),
    "hvnet_ipfix_sampling_rate": ("gauge", "IPFIX samples 1 in N packets (default 400 when unset)", BRIDGE_LABELS),
    "hvnet_ipfix_targets": ("gauge", "IPFIX collectors configured", BRIDGE_LABELS),
    "hvnet_ipfix_cache_active_timeout_seconds": ("gauge", "IPFIX flow cache active timeout, when set", BRIDGE_LABELS),
    "hvnet_ipfix_cache_max_flows": ("gauge", "IPFIX flow cache size, when set", BRIDGE_LABELS),
    "hvnet_agent_running": (
        "gauge",
        "1 when a client holds the agent's OVSDB lock hvnet_agent, 0 when none does",
        ("host",),
    ),
    "hvnet_agent_last_change_timestamp_seconds": (
        "gauge",
        "when the agent last changed the switch, per the audit log (Unix time)",
        ("host",),
    ),
    "hvnet_agent_last_failure_timestamp_seconds": (
        "gauge",
        "when an agent apply last failed or ended unknown, per the audit log (Unix time)",
        ("host",),
    ),
    "hvnet_last_apply_timestamp_seconds": (
        "gauge",
        "when an operator's hvnet last applied a change, per the audit log (Unix time)",
        ("host",),
    ),
    "hvnet_policy_drift": ("gauge", "settings that differ from the policy file (hvnet verify)", ("host", "policy")),
    "hvnet_policy_check_timestamp_seconds": (
        "gauge",
        "when the drift was last checked (Unix time)",
        ("host", "policy"),
    ),
    "hvnet_ovs_vswitchd_cpu_seconds_total": (
        "counter",
        "ovs-vswitchd CPU time per thread name and mode",
        THREAD_LABELS,
    ),
    "hvnet_exporter_scrape_duration_seconds": (
        "gauge",
        "how long the collection this scrape shows took (or this scrape waited, when it timed out)",
        ("host",),
    ),
    "hvnet_exporter_scrape_timed_out": (
        "gauge",
        "1 when no collection finished within the scrape deadline: hvnet_up is 0 and nothing else about the "
        "switch is exported",
        ("host",),
    ),
    "hvnet_exporter_scrapes_total": ("counter", "scrapes served", ("host",)),
    "hvnet_exporter_scrape_errors_total": ("counter", "collection steps that failed, by step", ("host", "stage")),
}


@dataclass
class Family:
    """One metric family: its samples as (label values in :data:`FAMILIES`' order, value)."""

    name: str
    samples: list[tuple[tuple[str, ...], float]] = field(default_factory=list)

    @property
    def type(self) -> str:
        return FAMILIES[self.name][0]

    @property
    def help(self) -> str:
        return FAMILIES[self.name][1]

    @property
    def labels(self) -> tuple[str, ...]:
        return FAMILIES[self.name][2]


class Families:
    """The families of one scrape, filled as the figures are found."""

    def __init__(self) -> None:
        self.by_name: dict[str, Family] = {}

    def add(self, name: str, labels: Iterable[str], value: Optional[float]) -> None:
        """A sample; ``None`` (not known) adds nothing."""
        if value is None:
            return
        fam = self.by_name.setdefault(name, Family(name))
        labels = tuple(labels)
        if not all(map(str.isascii, labels)):  # the common case checked without a call per label
            labels = tuple(map(label_text, labels))
        assert len(labels) == len(fam.labels), (name, labels)
        fam.samples.append((labels, float(value)))

    def __iter__(self) -> Any:
        return iter(self.by_name.values())

    def get(self, name: str) -> Optional[Family]:
        return self.by_name.get(name)


def label_text(text: str) -> str:
    """A label value as exported: itself, except that a lone surrogate (which no UTF-8 text can hold, and
    which would end the whole scrape with an encoding error) becomes U+FFFD.  Control characters stay:
    the exposition format escapes newline, backslash and quote, and carries the others as they are."""
    if text.isascii():
        return text
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return str(without_lone_surrogates(text))
    return text


# -- the switch: VIFs, limits, mirrors, sampling ---------------------------------------------------


def vlan_label(v: Vif) -> str:
    """``1`` for an access port on VLAN 1; the VLAN summary (``trunk 10,20``, ``trunk ALL``) otherwise."""
    return str(v.tag) if v.vlan_mode == "access" and v.tag is not None else v.vlan_summary()


def vif_labels(host: str, v: Vif) -> tuple[str, ...]:
    return (host, v.bridge, v.port, v.vm_name or v.vm_uuid or "", vlan_label(v))


def add_inventory(out: Families, host: str, inv: Inventory) -> None:
    """Everything the inventory holds: VIF counters and limits, mirrors, sFlow and IPFIX."""
    h = inv.host
    out.add("hvnet_info", (host, h.ovs_version or "", h.db_version or "", ",".join(h.bridge_datapath_types)), 1)
    vifs = [v for v in inv.vifs if v.is_vif]
    out.add("hvnet_vifs", (host,), len(vifs))
    for v in vifs:
        labels = vif_labels(host, v)
        for d in ("rx", "tx"):
            for what in ("bytes", "packets", "dropped", "errors"):
                out.add(f"hvnet_vif_{d}_{what}_total", labels, getattr(v.counters, f"{d}_{what}"))
        if v.link_state in ("up", "down"):
            out.add("hvnet_vif_link_up", labels, 1 if v.link_state == "up" else 0)
        if v.ingress_policing_rate_kbps:
            out.add("hvnet_vif_ingress_policing_rate_bits_per_second", labels, v.ingress_policing_rate_kbps * 1000)
            burst = v.ingress_policing_burst_kbit or (8000 if v.ingress_mechanism == "tc" else 0)
            out.add("hvnet_vif_ingress_policing_burst_bits", labels, burst * 1000 if burst else None)
        if v.egress_max_rate_kbps:
            out.add("hvnet_vif_egress_max_rate_bits_per_second", labels, v.egress_max_rate_kbps * 1000)
    for m in inv.mirrors:
        output = m.output_port or (f"vlan {m.output_vlan}" if m.output_vlan is not None else "")
        out.add("hvnet_mirror_tx_packets_total", (host, m.bridge, m.name, output), m.tx_packets)
        out.add("hvnet_mirror_tx_bytes_total", (host, m.bridge, m.name, output), m.tx_bytes)
    for b in inv.bridges:
        labels = (host, b.name)
        if b.sflow is not None:
            out.add("hvnet_sflow_sampling_rate", labels, b.sflow.get("sampling", 400))
            out.add("hvnet_sflow_polling_interval_seconds", labels, b.sflow.get("polling", 30))
            out.add("hvnet_sflow_header_bytes", labels, b.sflow.get("header", 128))
            out.add("hvnet_sflow_targets", labels, len(b.sflow.get("targets", [])))
        if b.ipfix is not None:
            out.add("hvnet_ipfix_sampling_rate", labels, b.ipfix.get("sampling", 400))
            out.add("hvnet_ipfix_targets", labels, len(b.ipfix.get("targets", [])))
            out.add("hvnet_ipfix_cache_active_timeout_seconds", labels, b.ipfix.get("cache_active_timeout"))
            out.add("hvnet_ipfix_cache_max_flows", labels, b.ipfix.get("cache_max_flows"))


# -- ovs-vswitchd's threads ---------------------------------------------------------------------------


def parse_task_stat(text: str, clock_ticks: int) -> Optional[tuple[str, float, float]]:
    """One ``/proc/PID/task/TID/stat`` line -> (thread name, user s, system s); None when unreadable.

    The name (``comm``) may hold spaces and parentheses: it ends at the last ``)``.
    """
    start, end = text.find("("), text.rfind(")")
    if start < 0 or end < start:
        return None
    rest = text[end + 2 :].split()
    if len(rest) < 13 or not (rest[11].isdigit() and rest[12].isdigit()):
        return None
    return text[start + 1 : end], int(rest[11]) / clock_ticks, int(rest[12]) / clock_ticks


def thread_cpu(stats: Iterable[str], clock_ticks: int) -> dict[str, tuple[float, float]]:
    """CPU seconds (user, system) per thread name, threads of the same name summed."""
    out: dict[str, tuple[float, float]] = {}
    for text in stats:
        got = parse_task_stat(text, clock_ticks)
        if got is None:
            continue
        name, user, system = got
        u, s = out.get(name, (0.0, 0.0))
        out[name] = (u + user, s + system)
    return out


# Runs on the host with the pid as its argument (data, never code): every thread's stat line.
_TASK_STATS = 'for t in /proc/"$1"/task/*/stat; do cat "$t" 2>/dev/null; echo; done'


def vswitchd_threads(host: Host, timeout: float = 10.0) -> Optional[dict[str, tuple[float, float]]]:
    """ovs-vswitchd's CPU per thread name on the switch's host; None when its pid is not known there."""
    if host.ovs_rundir is None:
        return None
    pid = daemon_pid(host.ovs_rundir, "ovs-vswitchd", host.runner)
    if pid is None:
        return None
    ticks = os.sysconf("SC_CLK_TCK")
    if host.runner.local:
        base = f"/proc/{pid}/task"
        texts = []
        try:
            tids = os.listdir(base)
        except OSError:
            return None
        for tid in tids:
            try:
                with open(f"{base}/{tid}/stat", "rb") as fh:
                    texts.append(fh.read().decode(errors="replace"))
            except OSError:
                continue  # the thread ended meanwhile
        return thread_cpu(texts, ticks) or None
    res = host.runner.run(["sh", "-c", _TASK_STATS, "sh", str(pid)], check=False, timeout=timeout)
    return thread_cpu(res.stdout.splitlines(), ticks) or None


# -- the audit log ------------------------------------------------------------------------------------

AUDIT_TAIL_BYTES = 256 * 1024


def audit_tail(path: Path, limit: int = AUDIT_TAIL_BYTES) -> list[dict[str, Any]]:
    """The audit log's last entries (its last ``limit`` bytes: a scrape never reads a year of log)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(0, os.SEEK_END)
            size = fh.tell()
            fh.seek(max(0, size - limit))
            data = fh.read()
    except OSError:
        return []
    lines = data.decode("utf-8", errors="replace").splitlines()
    if size > limit:
        lines = lines[1:]  # the first line is cut
    out = []
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue
        if isinstance(entry, dict):
            out.append(entry)
    return out


def _epoch(text: Any) -> Optional[float]:
    try:
        return datetime.fromisoformat(str(text)).timestamp()
    except ValueError:
        return None


def audit_times(entries: list[dict[str, Any]], target: str) -> dict[str, float]:
    """The last agent change, agent failure and operator apply on ``target``, from audit entries."""
    out: dict[str, float] = {}
    for e in entries:
        if e.get("target") != target:
            continue
        t = _epoch(e.get("time"))
        result = str(e.get("result", ""))
        if t is None or result == "unchanged":
            continue
        agent = e.get("command") == "hvnet agent"
        if agent and result.startswith("applied"):
            out["agent_change"] = max(t, out.get("agent_change", t))
        elif agent and result.startswith(("failed", "outcome unknown", "rolled back")):
            out["agent_failure"] = max(t, out.get("agent_failure", t))
        elif not agent and result.startswith("applied"):
            out["apply"] = max(t, out.get("apply", t))
    return out


# -- the slow checks: enforcement and drift, in the background -------------------------------------


@dataclass
class CheckResult:
    """The latest enforcement and drift findings, and when they were made."""

    enforcement: list[tuple[str, str, str, Optional[bool]]] = field(default_factory=list)  # port, kind, mech, ok
    enforcement_at: Optional[float] = None
    drift: Optional[int] = None
    drift_at: Optional[float] = None
    errors: dict[str, int] = field(default_factory=dict)


class SlowChecks:
    """Enforcement of limits and drift from the policy, re-checked every ``interval`` seconds in a thread.

    Each pass takes its own consistent OVSDB read (the policy engine reads a
    snapshot exactly as it reads a live replica) and writes nothing.
    """

    def __init__(self, host: Host, policy: Optional[str], interval: float, timeout: float) -> None:
        self.host, self.policy, self.interval, self.timeout = host, policy, interval, timeout
        self.result = CheckResult()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._loop, name="hvnet-exporter-checks", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()

    def latest(self) -> CheckResult:
        with self._lock:
            return self.result

    def _loop(self) -> None:
        while not self._stop.is_set():
            self.run_once()
            self._stop.wait(self.interval)

    def run_once(self) -> None:
        """One pass of both checks; a failure is counted by its stage and keeps the previous finding."""
        from ..policy import PolicyEngine, load
        from . import policy as svc

        errors = dict(self.result.errors)
        new = replace(self.result, errors=errors)
        try:
            snap = snapshot.take(self.host.target, inventory.COLUMNS, self.timeout)
            engine = PolicyEngine(snap, self.host, command="hvnet exporter")  # type: ignore[arg-type]
        except HvnetError as exc:
            log.warning("limits and drift not checked: %s", exc.message)
            errors["checks"] = errors.get("checks", 0) + 1
            self._publish(new)
            return
        try:
            new.enforcement = [(e.port, e.kind, e.mechanism, e.verified) for e in engine.enforcement()]
            new.enforcement_at = time.time()
        except (HvnetError, OSError) as exc:
            log.warning("enforcement not checked: %s", exc)
            errors["enforcement"] = errors.get("enforcement", 0) + 1
        if self.policy is not None:
            try:
                new.drift = len(svc.verify(engine, load(self.policy)).drift)
                new.drift_at = time.time()
            except (HvnetError, OSError) as exc:
                log.warning("drift from %s not checked: %s", self.policy, exc)
                new.drift = None
                errors["drift"] = errors.get("drift", 0) + 1
        self._publish(new)

    def _publish(self, new: CheckResult) -> None:
        with self._lock:
            self.result = new


def add_checks(out: Families, host: str, inv: Optional[Inventory], checks: CheckResult, policy: Optional[str]) -> None:
    """The slow checks' findings, labelled like the VIFs they are about (only VIFs present now)."""
    vifs = {v.port: v for v in inv.vifs} if inv is not None else {}
    for port, kind, mechanism, ok in checks.enforcement:
        v = vifs.get(port)
        if v is None or ok is None:
            continue  # gone since the check, or could not be checked: not known
        out.add("hvnet_limit_enforced", (*vif_labels(host, v), kind, mechanism), 1 if ok else 0)
    out.add("hvnet_limit_check_timestamp_seconds", (host,), checks.enforcement_at)
    if policy is not None:
        out.add("hvnet_policy_drift", (host, policy), checks.drift)
        out.add("hvnet_policy_check_timestamp_seconds", (host, policy), checks.drift_at)


# -- one scrape ---------------------------------------------------------------------------------------

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
    is labelled with its VM's uuid.
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
        self.name = host.label or socket.gethostname()
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
        if flight.done.wait(max(0.0, flight.until - time.monotonic())) and flight.families is not None:
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
            snap = snapshot.take(self.host.target, inventory.COLUMNS, self._left(), schema_json=self._schema)
        except HvnetError:
            self._schema = None
            raise
        inv = inventory.read(snap, runner=self.host.runner)  # type: ignore[arg-type]
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
            self._error("names", HvnetError(f"no VM names within {wait:.1f} s; VIFs labelled with VM uuids"))
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
        from ..policy.agent import AGENT_LOCK

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
