"""A monitored case at run time: the lab's collectors, the case's sFlow/IPFIX, phases within a repetition.

For a case with ``monitor:`` or ``phases:`` the runner opens a
:class:`CaseMonitoring`: a pmacct collector of each kind the case uses is
started on this machine's loopback (ovs-vswitchd sends its datagrams there,
not through the bridge it measures), the case's setting is applied through
the policy engine (one transaction, waited for until ovs-vswitchd has
taken it: the switch's own acknowledgement), and :meth:`close` undoes every
change and stops the collectors by PID even when the run fails.

During each repetition a :class:`Ticker` thread reads what the collectors
have written about once a second (a time series), and for a phased case
applies each phase at its time, recording when the switch acknowledged it
and the bridge's port counters at the boundary, so each phase gets its own
received ÷ expected (:mod:`appliance.netperf.figures.collector`).
"""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path
from typing import Any, Callable, Optional

from appliance.core.errors import HvnetError
from appliance.endpoints.guests import CollectorSource, FlowCollector
from appliance.netperf.define import monitoring as mon
from appliance.netperf.define.cases import Case
from appliance.policy import Change, PolicyEngine

TICK_S = 0.5


def socket_drops(port: int, table: str = "/proc/net/udp") -> Optional[int]:
    """Datagrams the kernel dropped at the UDP socket bound to ``port`` (its receive buffer was full)."""
    try:
        lines = Path(table).read_text().splitlines()[1:]
    except OSError:
        return None
    for line in lines:
        parts = line.split()
        if len(parts) >= 13 and int(parts[1].rpartition(":")[2], 16) == port:
            return int(parts[-1])
    return None


class _Tally:
    """A collector's JSON lines read as they grow: samples (sFlow) or sampled packets (IPFIX) and bytes."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.packets = 0
        self.bytes = 0

    def read(self) -> tuple[int, int]:
        try:
            with open(self.path, "rb") as fh:
                fh.seek(self.offset)
                data = fh.read()
        except FileNotFoundError:
            return self.packets, self.bytes
        end = data.rfind(b"\n") + 1  # a line being written is read next time
        for line in data[:end].splitlines():
            try:
                rec = json.loads(line)
            except ValueError:
                continue
            self.packets += int(rec.get("packets", 0))
            self.bytes += int(rec.get("bytes", 0))
        self.offset += end
        return self.packets, self.bytes


class CaseMonitoring:
    """The collectors and the sFlow/IPFIX of one case (see the module's docstring)."""

    def __init__(
        self,
        case: Case,
        bridge: str,
        engine: PolicyEngine,
        run_dir: Path,
        source: CollectorSource,
    ) -> None:
        self.case = case
        self.bridge = bridge
        self.engine = engine
        self.run_dir = run_dir
        self.source = source
        self.collectors: dict[str, FlowCollector] = {}
        self.tallies: dict[str, _Tally] = {}
        self.applied: list[list[Change]] = []
        self.current: Optional[mon.Monitor] = None
        self.known = False  # whether the bridge is known to sample as ``current`` (not before the first set)
        self.lock = threading.Lock()

    def start(self) -> None:
        """Start the collectors the case needs, then its setting (or its first phase's)."""
        for kind in sorted({m.kind for m in self.case.monitors()}):
            c = self.source.start_collector(kind, self.run_dir / "collectors" / self.case.name)
            self.collectors[kind] = c
            self.tallies[kind] = _Tally(c.out)
        first = self.case.phases[0].monitor if self.case.phases else self.case.monitor
        self.set(first)

    def target(self, kind: str) -> str:
        return self.collectors[kind].target

    def targets(self) -> list[str]:
        return [f"{kind} {c.target}" for kind, c in sorted(self.collectors.items())]

    def targets_by_kind(self) -> dict[str, str]:
        return {kind: c.target for kind, c in self.collectors.items()}

    def describe(self) -> dict[str, Any]:
        """The case's monitoring as a step records it."""
        m = self.case.monitor
        return {
            "bridge": self.bridge,
            "collectors": {kind: c.target for kind, c in sorted(self.collectors.items())},
            **(m.to_json() if m is not None else {"kind": None, "phased": True}),
        }

    def set(self, monitor: Optional[mon.Monitor]) -> dict[str, Any]:
        """Make the bridge sample as ``monitor`` says (None: neither); returns the switch's acknowledgement."""
        with self.lock:
            t0 = time.monotonic()
            ack: dict[str, Any] = {"status": "unchanged", "changes": 0}
            for kind in sorted(self.collectors):
                want = monitor if monitor is not None and monitor.kind == kind else None
                have = self.current if self.current is not None and self.current.kind == kind else None
                if want == have and self.known:
                    continue
                policy = mon.policy((kind, self.bridge), want, self.target(kind) if want else None)
                result = self.engine.apply(policy, record=False)
                changes = list(result.plan.changes) if result.status in ("applied", "unchanged") else []
                if changes:
                    self.applied.append(changes)
                if not result.ok:
                    raise HvnetError(f"case {self.case.name}: {kind} not set: {'; '.join(result.problems)}")
                ack = {"status": result.status, "changes": ack["changes"] + len(changes)}
            self.current, self.known = monitor, True
            ack["took_s"] = round(time.monotonic() - t0, 3)
            return ack

    def counts(self) -> dict[str, tuple[int, int]]:
        """What each collector has written so far: (samples or sampled packets, their bytes)."""
        return {kind: t.read() for kind, t in self.tallies.items()}

    def drops(self) -> dict[str, Optional[int]]:
        return {kind: socket_drops(c.port) for kind, c in self.collectors.items()}

    def settle_s(self) -> float:
        """How long after traffic stops the last samples reach the collector's file (see monitor.settle_seconds)."""
        return mon.settle_seconds([self.current] if self.current is not None else [])

    def close(self) -> list[str]:
        """Undo every change (newest first) and stop every collector; returns what could not be undone."""
        problems = []
        try:
            while self.applied:
                changes = self.applied.pop()
                result = self.engine.undo(changes, label=f"hvnet suite run: restore monitoring of {self.case.name}")
                if not result.ok:
                    why = "; ".join(result.problems)
                    problems.append(f"monitoring of case {self.case.name}: {result.status}: {why}")
        finally:
            for c in self.collectors.values():
                c.stop()
        return problems


class Ticker:
    """One repetition's clock: collector counts every tick, phases applied at their times."""

    def __init__(
        self,
        cm: CaseMonitoring,
        phases: tuple[mon.Phase, ...],
        port_counters: Callable[[], dict[str, Any]],
        seconds: float,
    ) -> None:
        self.cm = cm
        self.phases = phases
        self.port_counters = port_counters
        self.seconds = seconds
        self.series: list[tuple[float, dict[str, tuple[int, int]]]] = []
        self.boundaries: list[dict[str, Any]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="hvnet-monitor-ticker", daemon=True)
        self.error: Optional[str] = None

    def start(self, t0: float) -> None:
        self.t0 = t0
        self.series.append((0.0, self.cm.counts()))
        self._thread.start()

    @property
    def running(self) -> bool:
        return self._thread.is_alive()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _loop(self) -> None:
        pending = list(self.phases[1:])  # the first phase is in force when the repetition starts
        while not self._stop.is_set():
            now = time.monotonic() - self.t0
            while pending and now >= pending[0].at and self.error is None:
                phase = pending.pop(0)
                counters = self.port_counters()
                try:
                    ack = self.cm.set(phase.monitor)
                except HvnetError as exc:  # the run goes on: this phase is recorded as not applied
                    self.error = str(exc)
                    ack = {"status": "failed", "error": str(exc)}
                applied = round(time.monotonic() - self.t0, 3)
                self.boundaries.append({"at": phase.at, "applied_s": applied, "ack": ack, "counters": counters})
                now = time.monotonic() - self.t0
            self.series.append((round(now, 3), self.cm.counts()))
            if now > self.seconds + 5:
                return
            self._stop.wait(TICK_S)
