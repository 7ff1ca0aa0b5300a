"""What ``hvnet exporter`` exports, gathered at scrape time from the same readers ``status`` uses.

One scrape is one consistent OVSDB read (:func:`appliance.switch.snapshot.take`, bounded
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
How one scrape is bounded in time (its deadline, the collection thread) is
:mod:`.scrape`'s.
"""

from __future__ import annotations

import json
import logging
import os
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any, Optional

from appliance.core.errors import HvnetError
from appliance.core.ovsdb import without_lone_surrogates
from appliance.switch import reader, snapshot
from appliance.switch.host import Host, daemon_pid
from appliance.switch.inventory import Inventory, Vif

log = logging.getLogger("hvnet.exporter")

# Every family's first label is ``host``: the exporter shows it only when the switch it reads is not this
# machine's (``--hosts``, ``--host``), where Prometheus' own ``instance`` label does not say which it is.
# VIF series carry only ``vif`` (a port name, unique on its switch): what can change under a running VIF
# -- its VM's name when XAPI answers again, its VLAN, its bridge -- is on ``hvnet_vif_info`` alone, to be
# joined (``* on(job, instance, host, vif) group_left(vm) hvnet_vif_info``), so it never splits a series.
VIF_LABELS = ("host", "vif")
VIF_INFO_LABELS = ("host", "vif", "bridge", "vm", "vm_uuid", "vlan", "mac")
LIMIT_LABELS = (*VIF_LABELS, "direction", "mechanism")
MIRROR_LABELS = ("host", "bridge", "mirror", "output")
BRIDGE_LABELS = ("host", "bridge")
THREAD_LABELS = ("host", "thread", "mode")

# rx: what the switch received from the VM (the VM sent it); tx: what the switch sent to the VM.
VIF_COUNTERS = {
    "rx_bytes": "bytes the switch received from the VM",
    "rx_packets": "packets the switch received from the VM",
    "rx_dropped": "packets from the VM the switch dropped",
    "rx_errors": "packets from the VM received with errors",
    "tx_bytes": "bytes the switch sent to the VM",
    "tx_packets": "packets the switch sent to the VM",
    "tx_dropped": "packets to the VM the switch dropped",
    "tx_errors": "packets to the VM that failed to be sent",
}

# name -> (type, help, label names).  Counters carry their "_total" here, as they are exposed.
FAMILIES: dict[str, tuple[str, str, tuple[str, ...]]] = {
    "hvnet_up": ("gauge", "1 when this scrape read the switch's OVSDB within the timeout, else 0", ("host",)),
    "hvnet_info": (
        "gauge",
        "the switch: OVS and database versions, datapath types (always 1)",
        ("host", "ovs_version", "db_version", "datapath_types"),
    ),
    "hvnet_vifs": ("gauge", "VM interfaces on the switch", ("host",)),
    "hvnet_vif_info": (
        "gauge",
        "a VIF's bridge, VM (name, empty while not known; uuid), VLAN and MAC, to join on vif (always 1)",
        VIF_INFO_LABELS,
    ),
    **{f"hvnet_vif_{key}_total": ("counter", text, VIF_LABELS) for key, text in VIF_COUNTERS.items()},
    "hvnet_vif_link_up": ("gauge", "1 when the VIF's link state is up, 0 when down", VIF_LABELS),
    "hvnet_vif_ingress_policing_rate_bytes_per_second": (
        "gauge",
        "configured ingress policing rate (tc or meter), for VIFs that have one",
        VIF_LABELS,
    ),
    "hvnet_vif_ingress_policing_burst_bytes": (
        "gauge",
        "configured ingress policing burst, for VIFs with a rate",
        VIF_LABELS,
    ),
    "hvnet_vif_egress_max_rate_bytes_per_second": (
        "gauge",
        "configured egress shaping (linux-htb max-rate), for VIFs that have one",
        VIF_LABELS,
    ),
    "hvnet_vif_limit_enforced": (
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


def vif_info(host: str, v: Vif) -> tuple[str, ...]:
    """``hvnet_vif_info``'s labels: the VM's name is empty while it is not known (never its uuid in its
    place: the name column would hold two kinds of value), its uuid is beside it."""
    return (host, v.port, v.bridge, v.vm_name or "", v.vm_uuid or "", vlan_label(v), v.mac or "")


# OVSDB holds the configured limits in kbit/s and kbit; exported in bytes/s and bytes (Prometheus' base unit).
KBIT_IN_BYTES = 1000 / 8


def add_inventory(out: Families, host: str, inv: Inventory) -> None:
    """Everything the inventory holds: VIF counters and limits, mirrors, sFlow and IPFIX."""
    h = inv.host
    out.add("hvnet_info", (host, h.ovs_version or "", h.db_version or "", ",".join(h.bridge_datapath_types)), 1)
    vifs = [v for v in inv.vifs if v.is_vif]
    out.add("hvnet_vifs", (host,), len(vifs))
    for v in vifs:
        labels = (host, v.port)
        out.add("hvnet_vif_info", vif_info(host, v), 1)
        for key in VIF_COUNTERS:
            out.add(f"hvnet_vif_{key}_total", labels, getattr(v.counters, key))
        if v.link_state in ("up", "down"):
            out.add("hvnet_vif_link_up", labels, 1 if v.link_state == "up" else 0)
        if v.ingress_policing_rate_kbps:
            rate = v.ingress_policing_rate_kbps * KBIT_IN_BYTES
            out.add("hvnet_vif_ingress_policing_rate_bytes_per_second", labels, rate)
            burst = v.ingress_policing_burst_kbit or (8000 if v.ingress_mechanism == "tc" else 0)
            out.add("hvnet_vif_ingress_policing_burst_bytes", labels, burst * KBIT_IN_BYTES if burst else None)
        if v.egress_max_rate_kbps:
            out.add("hvnet_vif_egress_max_rate_bytes_per_second", labels, v.egress_max_rate_kbps * KBIT_IN_BYTES)
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
        from appliance.policy import PolicyEngine, load
        from appliance.services import policy as svc

        errors = dict(self.result.errors)
        new = replace(self.result, errors=errors)
        try:
            snap = snapshot.take(self.host.target, reader.CONFIG_COLUMNS, self.timeout)
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
    present = {v.port for v in inv.vifs} if inv is not None else set()
    for port, kind, mechanism, ok in checks.enforcement:
        if port not in present or ok is None:
            continue  # gone since the check, or could not be checked: not known
        out.add("hvnet_vif_limit_enforced", (host, port, kind, mechanism), 1 if ok else 0)
    out.add("hvnet_limit_check_timestamp_seconds", (host,), checks.enforcement_at)
    if policy is not None:
        out.add("hvnet_policy_drift", (host, policy), checks.drift)
        out.add("hvnet_policy_check_timestamp_seconds", (host, policy), checks.drift_at)
