"""The suite runner: preflight -> setup -> steps -> restore, saving as it goes.

Public API (what ``hvnet suite run`` and the TUI use)::

    runner = Runner(suite, host=host, guests=lab, conn=conn, out_dir=path, on_event=callback)
    doc = runner.run()          # the results (records.SuiteResult), also saved in out_dir
    runner.stop()               # from another thread or a signal handler: stop cleanly

``on_event`` receives :class:`Event` objects (progress, per-repetition
aggregates, warnings) from the runner's thread; it must not block.

What a step does: spawn its instances (pre-spawned, released together, see
:mod:`.launch`), sample CPU while they run, reap them with their rusage,
read the switch's port counters before and after, parse each instance's
omni output, aggregate.  A lost instance is recorded with its reason and the
step goes on.  A policy fragment (the suite's ``setup``, then each case's)
is applied with the policy engine -- one transaction, verified, meters
where tc cannot police -- and undone afterwards even when the run fails.
A case that monitors (sFlow/IPFIX to the lab's collector, phases changed
during a repetition) is run through :mod:`.monitoring`.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
import threading
import time
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional

from appliance import __version__
from appliance.core.errors import HvnetError
from appliance.core.ovsdb import Connection
from appliance.core.safedirs import make_private
from appliance.endpoints.guests import GuestSource
from appliance.netperf.define.monitoring import combine, thread_summary
from appliance.netperf.define.suite import Case, Step, Suite
from appliance.netperf.figures import aggregate, pps, verdict
from appliance.netperf.parse import iperf, omni
from appliance.netperf.run import arrival, path, pktgen
from appliance.netperf.run import collectors as monitoring
from appliance.netperf.run.launch import Batch, Endpoint, Netserver, strip_start
from appliance.netperf.run.pktgen import Iperf3Servers, Listen, Listeners, listener_prefix
from appliance.netperf.run.preflight import Preflight, PreflightFailed, check, crr_ceiling
from appliance.netperf.run.sampler import CpuSampler, interval_for, thread_series
from appliance.netperf.store import results
from appliance.netperf.store.records import (
    Aggregate,
    ClientInfo,
    Meta,
    MirrorInfo,
    Policing,
    RepetitionResult,
    ServerInfo,
    StepResult,
    SuiteInfo,
    SuiteResult,
)
from appliance.policy import Change, Policy, PolicyEngine
from appliance.policy.apply.openflow import OpenFlow
from appliance.policy.plan import export
from appliance.switch.host import Host

log = logging.getLogger(__name__)

GRACE_S = 15.0  # beyond the test length before an instance counts as hung
CRR_EXHAUSTION_FRACTION = 0.9


@dataclass
class Event:
    """Progress the runner reports (to the terminal bar, the TUI, a log)."""

    kind: str  # "info" | "warning" | "step" | "repetition" | "done"
    message: str = ""
    step: Optional[Step] = None
    steps_total: int = 0
    repetition: Optional[int] = None
    aggregate: Optional[Aggregate] = None
    elapsed_s: float = 0.0
    eta_s: Optional[float] = None
    verdict: Optional[str] = None  # a repetition's step: its bottleneck so far (see .verdict)


@dataclass
class _CaseState:
    changes: list[Change] = field(default_factory=list)
    enforcement: list[dict[str, Any]] = field(default_factory=list)
    policing: Optional[Policing] = None
    mirrors: list[MirrorInfo] = field(default_factory=list)
    monitoring: Optional[monitoring.CaseMonitoring] = None  # the case's sFlow/IPFIX and collectors
    capture_vifs: dict[str, str] = field(default_factory=dict)  # the case's listeners: guest -> VIF captured
    collector: Optional[arrival.CollectorCounters] = None  # a GRE/ERSPAN output's collector guest


class Runner:
    def __init__(
        self,
        suite: Suite,
        *,
        host: Host,
        guests: GuestSource,
        conn: Connection,
        out_dir: Path,
        on_event: Optional[Callable[[Event], None]] = None,
        listen: Optional[Listen] = None,
    ) -> None:
        self.suite = suite
        self.listen = listen  # captures for cases with listeners (the service layer's capture service)
        self.iperf3 = ""  # the packet-rate generator (UDP_PPS tests), found at preflight
        self.generator: Optional[str] = None
        self.iperf3_servers: Optional[Iperf3Servers] = None
        self.host = host
        self.guests = guests
        self.conn = conn
        self.out_dir = Path(out_dir)
        self.on_event = on_event or (lambda e: None)
        self._stop = threading.Event()
        self._stop_reason = "stopped by the operator"
        self._t0 = 0.0
        self._done_s = 0.0  # planned seconds of the steps finished (for the ETA)
        self.engine = PolicyEngine(conn, host, command="hvnet suite run")
        self.of = OpenFlow.for_host(host)
        self.netserver: Optional[Netserver] = None
        self.doc = SuiteResult()
        self.kernel_here = True  # the host's kernel is this machine's (see _same_kernel)

    # -- control -----------------------------------------------------------------

    def stop(self, reason: str = "stopped by the operator") -> None:
        self._stop_reason = reason
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def _emit(self, kind: str, message: str = "", **kw: Any) -> None:
        elapsed = time.monotonic() - self._t0
        total = self.suite.estimated_seconds()
        eta = max(0.0, total - self._done_s) if total else None
        try:
            self.on_event(Event(kind, message, steps_total=len(self.steps), elapsed_s=elapsed, eta_s=eta, **kw))
        except Exception:  # a broken progress display must not break a measurement
            log.exception("progress callback failed")

    # -- endpoints -----------------------------------------------------------------

    def _endpoints(self) -> tuple[Endpoint, Optional[Endpoint], str]:
        wanted = [self.suite.client] + ([self.suite.server.guest] if self.suite.server.guest else [])
        found = self.guests.require(self.suite.topology, wanted)
        client = Endpoint.of(found[self.suite.client])
        if self.suite.server.guest:
            server = Endpoint.of(found[self.suite.server.guest])
            return client, server, server.address or ""
        return client, None, self.suite.server.address or ""

    # -- the run ---------------------------------------------------------------------

    def run(self) -> SuiteResult:
        self._t0 = time.monotonic()
        self.steps = self.suite.steps()
        client, server, address = self._endpoints()
        pf = check(client.runner_for(self.host), self.suite, client, managed_server=server is not None)
        pf.failures += self._plan_fragments() + self._pps_preflight()
        if any(e is not None and e.remote for e in (client, server)) and any(t.is_pps for t in self.suite.tests):
            pf.failures.append("UDP_PPS tests need iperf3 started on this machine: not yet on a remote host's guests")
        pf.raise_if_failed()
        self.client, self.server_ep, self.address = client, server, address
        self.netperf = client.tool("netperf", pf.netperf)
        self.netserver_path = server.tool("netserver", pf.netserver or "") if server else (pf.netserver or "")
        make_private(self.out_dir / "raw")  # wherever the runs directory is, no other user may own a part of it
        self.kernel_here = self._same_kernel()
        self.doc = self._new_doc(pf)
        for w in pf.warnings:
            self._warn(w)
        if not self.kernel_here:
            self._warn(f"{self.host.label} is another machine: its CPU and ovs-vswitchd's are not measured "
                       "(the CPU figures are this machine's netperf and netserver only)")  # fmt: skip
        setup = _CaseState()
        state = "failed"
        try:
            self._start_netserver()
            self._start_iperf3()
            if self.suite.setup is not None:
                setup = self._apply(self.suite.setup, "setup")
            self.doc.meta.setup = {
                "enforcement": setup.enforcement,
                "policing": setup.policing.to_json() if setup.policing else None,
            }
            self.doc.meta.policy_snapshot = export.to_yaml(self.engine.snapshot())
            self._save()
            for case in self.suite.cases:
                if self.stopping:
                    break
                self._run_case(case, setup)
            state = "partial" if self.stopping else "complete"
        except KeyboardInterrupt:
            self._stop_reason = "interrupted (Ctrl-C)"
            state = "partial"
        except Exception as exc:
            self.doc.error = str(exc) or type(exc).__name__
            raise
        finally:
            try:
                if setup.changes:
                    self._restore(setup.changes, "setup")
            finally:
                if self.netserver is not None:
                    self.netserver.stop()
                if self.iperf3_servers is not None:
                    self.iperf3_servers.stop()
                self.doc.state = state
                self.doc.partial = state != "complete"
                if state == "partial":
                    self.doc.partial_reason = self._stop_reason
                self.doc.meta.finished = _now()
                self._save()
        self._emit("done", f"{state}: {len(self.doc.steps)} of {len(self.steps)} steps")
        return self.doc

    def _plan_fragments(self) -> list[str]:
        """Plan every policy fragment against the switch now (changes nothing), so a selector that
        matches no VIF fails the run before the first case, not after the earlier cases ran."""
        fragments = [("setup", self.suite.setup)] + [(f"case {c.name}", c.policy) for c in self.suite.cases]
        failures = []
        if any(c.monitors() for c in self.suite.cases):
            if not hasattr(self.guests, "start_collector"):
                failures.append("cases that monitor (monitor:, phases:) need the lab's sFlow/IPFIX collectors")
            elif self.host.label is not None:
                failures.append(
                    f"cases that monitor run on the built-in lab's switch, not on {self.host.label}: the "
                    "collector listens on this machine's loopback, where only that ovs-vswitchd can send"
                )
        for label, policy in fragments:
            if policy is None:
                continue
            try:
                self.engine.plan(policy)
            except HvnetError as exc:
                failures.append(f"{label}: {exc}")
        return failures

    def _pps_preflight(self) -> list[str]:
        """iperf3 for packet-rate tests, the capture service for cases that listen."""
        failures = pktgen.listener_failures(self.suite, self.listen is not None, self.host.label)
        if any(t.is_pps for t in self.suite.tests):
            try:
                self.iperf3, self.generator = pktgen.find_iperf3(self.host.local_runner)
            except HvnetError as exc:
                failures.append(f"UDP_PPS tests are generated by iperf3: {exc}")
        return failures

    def _start_iperf3(self) -> None:
        """iperf3's servers in the server guest, one per concurrent sender of the busiest packet-rate step."""
        if self.server_ep is not None:
            self.iperf3_servers = pktgen.servers_for(self.suite, self.server_ep, self.iperf3, self.out_dir,
                                                     self.host.local_runner)  # fmt: skip
        if self.iperf3_servers is not None:
            self.iperf3_servers.start()
            self._emit("info", f"{self.iperf3_servers.count} iperf3 server(s) listen at {self.address}:"
                       f"{iperf.DEFAULT_PORT}")  # fmt: skip

    def _new_doc(self, pf: Preflight) -> SuiteResult:
        state = self.engine.snapshot()
        s = self.suite
        meta = Meta(
            hvnet_version=__version__,
            host=self.host.label or socket.gethostname(),
            kernel=self._kernel(),
            ovs_version=state.ovs_version,
            datapath_types=sorted({b.datapath_type or "system" for b in state.bridges.values()}),
            netperf_version=pf.netperf_version,
            suite=SuiteInfo(s.name, str(Path(s.file).resolve()), s.sha256, s.description),
            command=sys.argv,
            client=ClientInfo(self.client.name, self.client.address, self.client.vif, self._runs_in(self.client)),
            server=ServerInfo(
                s.server.guest,
                self.address,
                s.server.port,
                s.server.managed,
                None if self.server_ep is None else self._runs_in(self.server_ep),
            ),
            preflight={"warnings": pf.warnings, "facts": pf.facts},
            started=_now(),
        )
        if s.topology.ovn:  # between chassis: which ones, the tunnel and the MTUs in play
            server_chassis = s.topology.guest(s.server.guest).host if s.server.guest else None
            meta.path = path.pool_path(self.conn, self.host.runner, self.host.local_runner, self.client,
                                       self.server_ep, server_chassis)  # fmt: skip
        return SuiteResult(results.SCHEMA, results.SCHEMA_VERSION, "running", True, meta)

    def _runs_in(self, ep: Endpoint) -> str:
        """qemu, netns, or probe (a namespace hvnet added to the host's bridge for this run)."""
        if ep.in_vm:
            return "qemu"
        kinds = {g.name: g.kind for g in self.suite.topology.guests}
        return "probe" if kinds.get(ep.name) == "probe" else "netns"

    def _same_kernel(self) -> bool:
        """Whether the host's switch runs on this machine's kernel (this machine, or a lab host in a
        namespace of it): only then are its cores and its ovs-vswitchd's threads this machine's /proc."""
        if self.host.label is None:
            return True
        boot_id = "/proc/sys/kernel/random/boot_id"
        try:
            here = Path(boot_id).read_text().strip()
            there = self.host.runner.read_text(boot_id)
        except (OSError, HvnetError):
            return False
        return there is not None and here == there.strip()

    def _kernel(self) -> str:
        """The release of the kernel whose switch carries the run (a remote host's, over its runner)."""
        if self.host.label is None:
            return os.uname().release
        res = self.host.runner.run(["uname", "-r"], check=False, timeout=10)
        return res.stdout.strip() or "unknown"

    def _save(self) -> None:
        results.write(self.out_dir, self.doc)

    def _warn(self, message: str) -> None:
        self.doc.meta.warnings.append(message)
        self._emit("warning", message)

    # -- netserver -------------------------------------------------------------------

    def _start_netserver(self) -> None:
        if self.server_ep is not None:
            self.netserver = Netserver(
                self.server_ep,
                self.suite.server.port,
                self.out_dir / "netserver.log",
                self.netserver_path,
                self.server_ep.runner_for(self.host),
                host=self.host,
            )
            self.netserver.start()
            self.doc.meta.server.netserver_pid = self.netserver.pid
        deadline = time.monotonic() + 5.0
        last = ""
        while time.monotonic() < deadline:
            probe = omni.reachability_argv(self.netperf, self.address, self.suite.server.port)
            try:
                res = self.client.runner_for(self.host).run(self.client.wrap(probe), check=False, timeout=10.0)
                out = (res.returncode, res.stdout, res.stderr)
            except HvnetError as exc:  # no answer within the timeout
                out = (-1, "", str(exc))
            if out[0] == 0 and "THROUGHPUT=" in out[1]:
                if self.netserver is not None and not self.netserver.alive():
                    raise PreflightFailed(
                        [
                            f"the netserver hvnet started exited (port {self.suite.server.port} in use?), yet one "
                            "answers there: a netserver hvnet did not start; stop it or use another netserver_port"
                        ]
                    )
                self._emit("info", f"netserver answers at {self.address}:{self.suite.server.port}")
                return
            last = (out[1] + out[2]).strip().splitlines()[0] if (out[1] + out[2]).strip() else f"exit {out[0]}"
            if self.netserver is not None and not self.netserver.alive():
                break
            time.sleep(0.1)
        srv = self.suite.server
        where = f"{srv.guest} ({self.address}:{srv.port})" if srv.managed else srv.describe()
        raise PreflightFailed([f"netserver on {where} cannot be reached from {self.client.name}: {last}"])

    # -- policy fragments ----------------------------------------------------------

    def _apply(self, policy: Policy, label: str) -> _CaseState:
        """Apply a fragment; if anything after the commit fails, undo it before raising (never left behind)."""
        result = self.engine.apply(policy)
        changes = list(result.plan.changes) if result.status in ("applied", "unchanged") else []
        try:
            if not result.ok:
                raise HvnetError(f"suite {label}: the policy could not be applied: {'; '.join(result.problems)}")
            return self._describe_applied(policy, label, result, changes)
        except BaseException:
            if changes:
                self._restore(changes, label)
            raise

    def _describe_applied(self, policy: Policy, label: str, result: Any, changes: list[Change]) -> _CaseState:
        cs = _CaseState(changes=changes, enforcement=[e.to_json() for e in result.enforcement])
        for w in result.plan.warnings:
            self._warn(f"{label}: {w}")
        snap = self.engine.snapshot()
        port = snap.ports.get(self.client.vif or "")
        if port is not None:
            ingress = port.police.effective()
            if ingress is not None:
                verified = next(
                    (e["verified"] for e in cs.enforcement if e["port"] == port.name and e["kind"] == "ingress"), None
                )
                cs.policing = Policing(port.name, ingress.rate_kbps, ingress.burst_kbit, ingress.mechanism, verified)
                if verified is False:
                    self._warn(f"{label}: policing on {port.name} is configured but NOT enforced by this host")
        for rule in policy.mirrors:
            m = snap.mirrors.get((rule.bridge, rule.name))
            if m is not None:
                cs.mirrors.append(
                    MirrorInfo(rule.name, rule.bridge, m.cols.output_port, list(m.cols.src), list(m.cols.dst),
                               tunnel=_tunnel(m.cols.tunnel))
                )  # fmt: skip
        for tap in policy.taps:
            br = snap.bridges.get(tap.bridge)
            cols = br.taps.get(tap.name) if br is not None else None
            if cols is not None and not tap.remove:
                src = list(cols.vifs) if cols.direction in ("in", "both") else []
                dst = list(cols.vifs) if cols.direction in ("out", "both") else []
                cs.mirrors.append(MirrorInfo(tap.name, tap.bridge, cols.output_port, src, dst, f"tap-{cols.method}",
                                             _tunnel(cols.tunnel)))  # fmt: skip
        self._emit("info", f"{label}: policy applied ({len(cs.changes)} change(s))")
        return cs

    def _restore(self, changes: list[Change], label: str) -> None:
        result = self.engine.undo(changes, label=f"hvnet suite run: restore {label}")
        for w in result.plan.warnings:
            self._warn(f"restore {label}: {w}")
        if not result.ok:
            problem = f"restore {label}: {result.status}: {'; '.join(result.problems) or 'see the audit log'}"
            if self.doc.meta.restore_problems is None:
                self.doc.meta.restore_problems = []
            self.doc.meta.restore_problems.append(problem)
            self._warn(problem)
            return
        self._emit("info", f"{label}: restored")

    # -- cases and steps -------------------------------------------------------------

    def _run_case(self, case: Case, setup: _CaseState) -> None:
        cs = self._apply(case.policy, f"case {case.name}") if case.policy is not None else _CaseState()
        try:
            if case.capture is not None:
                found = self.guests.require(self.suite.topology, list(case.capture.guests))
                cs.capture_vifs = {g: found[g].vif for g in case.capture.guests if found[g].vif}
            if case.collector_guest is not None:
                found = self.guests.require(self.suite.topology, [case.collector_guest])
                cs.collector = arrival.CollectorCounters(Endpoint.of(found[case.collector_guest]),
                                                         self.host.local_runner)  # fmt: skip
            if case.monitors():
                bridge = next((m.bridge for m in case.monitors() if m.bridge), None) or self._client_port()[0]
                if bridge is None:
                    raise HvnetError(f"case {case.name}: the client's VIF is on no bridge: nothing to monitor")
                source: Any = self.guests  # the lab starts collectors (checked at preflight)
                cs.monitoring = monitoring.CaseMonitoring(case, bridge, self.engine, self.out_dir, source)
                cs.monitoring.start()
                self._emit("info", f"case {case.name}: collectors at {', '.join(cs.monitoring.targets())}")
            for step in self.steps:
                if step.case is not case:
                    continue
                if self.stopping:
                    break
                self._run_step(step, cs, setup)
        finally:
            try:
                for problem in cs.monitoring.close() if cs.monitoring else []:
                    self.doc.meta.restore_problems = [*(self.doc.meta.restore_problems or []), problem]
                    self._warn(problem)
            finally:
                if cs.changes:
                    self._restore(cs.changes, f"case {case.name}")

    def _run_step(self, step: Step, cs: _CaseState, setup: _CaseState) -> None:
        t = step.test
        rec = StepResult(
            key=step.key,
            index=step.index,
            test=t.name,
            type=t.type,
            case=step.case.name,
            message_size=step.message_size,
            request_size=t.request_size,
            response_size=t.response_size,
            concurrency=step.concurrency,
            duration=t.duration,
            warmup=t.warmup,
            metric=t.metric,
            units=t.metric,
            confidence=t.confidence.__dict__ if t.confidence else None,
            policing=cs.policing or setup.policing,
            mirrors=cs.mirrors,
            enforcement=cs.enforcement,
        )
        if t.is_pps:
            rec.frame_size, rec.generator = step.frame_size, self.generator
            rec.offered = step.offered.to_json(step.frame_size or 0) if step.offered else None
        rec.collector_guest = step.case.collector_guest
        if step.case.capture is not None:
            rec.capture = {"guests": list(step.case.capture.guests), "ports": list(cs.capture_vifs.values()),
                           "snaplen": step.case.capture.snaplen}  # fmt: skip
        if cs.monitoring is not None:
            rec.monitor = cs.monitoring.describe()
            rec.phases = [p.to_json() for p in step.case.phases] or None
        self.doc.steps.append(rec)
        self._emit("step", f"{step.key}: {step.concurrency} x {t.type} for {t.duration} s", step=step)
        for rep in range(1, t.repetitions + 1):
            if self.stopping:
                break
            if t.warmup:
                self._batch(step, rep, cs, setup, warmup=True)
            if self.stopping:
                break
            r = self._batch(step, rep, cs, setup, warmup=False)
            assert r is not None  # a measured repetition always has a record
            if self.stopping:
                # cut short by the stop: its instances did not run their course; not a measurement
                rec.interrupted_repetitions = [*(rec.interrupted_repetitions or []), rep]
                break
            rec.repetitions.append(r)
            rec.summary = aggregate.summary(rec.repetitions)
            rec.vswitchd_threads = thread_summary(rec.repetitions)
            rec.collector = combine([x.collector for x in rec.repetitions if x.collector]) if rec.monitor else None
            found = verdict.of_step(rec, facts=self.doc.meta.preflight["facts"], client_vif=self.client.vif)
            rec.verdict = found.to_json() if found else None
            self._save()
            self._done_s += t.max_seconds() + t.warmup
            line = _with_verdict(_progress_line(step, rep, r), found)
            self._emit("repetition", line, step=step, repetition=rep, aggregate=r.aggregate,
                       verdict=found.verdict if found else None)  # fmt: skip

    def _batch(
        self, step: Step, rep: int, cs: _CaseState, setup: _CaseState, *, warmup: bool
    ) -> Optional[RepetitionResult]:
        t = step.test
        seconds = t.warmup if warmup else t.duration
        argvs = self._argvs(step, seconds, warmup)
        tag = f"rep{rep}-warmup" if warmup else f"rep{rep}"
        raw = self.out_dir / "raw" / f"{step.index:03d}-{step.key.replace('/', '_')}" / tag
        batch = Batch(argvs, self.client, raw, runner=self.host.local_runner, host=self.host)
        bridge, ofport = self._client_port() if not warmup else (None, None)
        policing = cs.policing or setup.policing
        metered = not warmup and policing is not None and policing.mechanism == "meter"
        listeners = None
        if cs.capture_vifs and not warmup and step.case.capture is not None and self.listen is not None:
            listeners = Listeners(self.listen, cs.capture_vifs, step.case.capture.snaplen,
                                  listener_prefix(step.index, rep))  # fmt: skip
            listeners.start()  # before the counters are read: every packet counted was offered to a listener
        before = self._port_counters(bridge) if not warmup else {}
        arrived_before, arrival_problem = cs.collector.read() if cs.collector and not warmup else (None, None)
        drops_before = self._meter_drops(bridge, ofport) if metered else None
        sampler: Optional[CpuSampler] = None
        watch = _Watch(cs.monitoring, step, before, lambda: self._port_counters(bridge)) if not warmup else None
        try:
            if watch is not None:
                watch.begin()
            batch.spawn()
            sampler = CpuSampler(
                interval_for(seconds),
                self.of.vswitchd_pid() if self.of and self.kernel_here else None,
                self._receiver_pid(step),
                seconds=float(t.max_seconds()),
            )
            if not warmup:
                sampler.start()
            started = datetime.now(timezone.utc).isoformat(timespec="seconds")
            batch.release()
            if watch is not None:
                watch.released()
            batch.wait((t.max_seconds() if not warmup else seconds) + GRACE_S, lambda: self.stopping, quiet_s=seconds)
        except BaseException:
            batch.kill()
            if sampler is not None and not warmup:
                sampler.stop()
            if watch is not None:
                watch.stop()
            if listeners is not None:
                listeners.stop()
            raise
        cpu = sampler.stop() if not warmup else {}
        if not self.kernel_here:  # this machine's cores are not the host's: not the host's figures
            cpu = {k: v for k, v in cpu.items() if k not in ("host_pct", "per_core_pct", "busiest_core_pct")}
        if warmup:
            return None
        after = self._port_counters(bridge)
        arrived_after, arrival_after_problem = cs.collector.after() if cs.collector else (None, None)
        listened, listen_problems = listeners.stop() if listeners is not None else ([], [])
        if watch is not None:
            watch.stop()
        drops_after = self._meter_drops(bridge, ofport) if metered else None
        instances = self._instances(step, batch)
        # netperf's own CPU (launcher excluded) over its whole life, tail included: divide by that span
        span = (batch.finished_ns - batch.released_ns) / 1e9 if batch.finished_ns and batch.released_ns else t.duration
        netperf_cpu = sum(o.netperf_cpu_s for o in batch.outcomes.values())
        cpu["netperf_pct_of_core"] = round(100.0 * netperf_cpu / max(span, 1e-3), 1)
        if self.client.in_vm:
            cpu["netperf_cpu_measured_in"] = f"QEMU guest {self.client.name} (its own accounting of its CPU)"
            if batch.cpu_unmeasured:
                cpu["netperf_pct_of_core"] = None  # unknown, never a made-up 0
        elif self.client.remote:
            cpu["netperf_pct_of_core"] = None  # started by a shell on that host: its rusage is not ours to read
            cpu["netperf_cpu_measured_in"] = f"not measured: netperf ran on {self.host.label or 'the host'}"
        counters = _deltas(before, after)
        if t.is_pps:
            agg = pps.step_figures(step, instances, cs.mirrors, counters)
        else:
            agg = aggregate.repetition(instances, rr=t.is_rr, udp_stream=t.type == "UDP_STREAM")
        ok = [i.elapsed_s for i in instances if i.ok and i.elapsed_s]
        seconds_run = sum(ok) / len(ok) if ok else float(t.duration)  # what the figures per second divide by
        if listened:  # a case's listeners, whatever generates the traffic
            _add_listened(agg, listened, cs.mirrors, counters, seconds_run)
        arrived = None
        if cs.collector is not None and step.case.collector_guest:
            arrived = arrival.figures(agg, step.case.collector_guest, arrived_before, arrived_after, cs.mirrors,
                                      counters, seconds_run)  # fmt: skip
        notes = self._notes(step, agg) + listen_problems + [p for p in (arrival_problem, arrival_after_problem) if p]
        notes += self._batch_notes(step, batch)
        result = RepetitionResult(
            repetition=rep,
            started=started,
            start_spread_ms=_r(aggregate.spread_ms([batch.outcomes[i].started_ns for i in range(step.concurrency)])),
            wall_s=round(span, 3),
            instances=[i.to_json() for i in instances],
            aggregate=agg,
            cpu=cpu,
            counters=counters,
            meter_drops=None if drops_before is None or drops_after is None else drops_after - drops_before,
            raw=str(raw.relative_to(self.out_dir)),
            argv=argvs[0],
            notes=notes,
            captures=listened or None,
            arrival=arrived,
        )
        if watch is not None:
            stdouts = [batch.out_path(i).read_text(errors="replace") for i in range(step.concurrency)]
            watch.finish(result, after, sampler, stdouts)
        return result

    def _instances(self, step: Step, batch: Batch) -> list[Any]:
        """Each instance's output read into its figures (netperf's or iperf3's); stopped ones say why."""
        instances = []
        for i in range(step.concurrency):
            outcome = batch.outcomes[i]
            stopped = None
            if outcome.timed_out is not None:
                stopped = (
                    self._stop_reason
                    if outcome.timed_out == 0.0
                    else f"no result after {outcome.timed_out:.0f} s: stopped"
                )
            stdout = batch.out_path(i).read_text(errors="replace")
            stderr = strip_start(batch.err_path(i).read_text(errors="replace"))
            if step.test.is_pps:
                inst = iperf.parse(i, step.frame_size or 0, stdout, stderr, outcome.returncode, stopped)
            else:
                inst = omni.parse(i, step.test, stdout, stderr, outcome.returncode, stopped)
            if outcome.started_ns is not None and batch.released_ns is not None:
                inst.start_offset_ms = round((outcome.started_ns - batch.released_ns) / 1e6, 2)
            instances.append(inst)
        return instances

    def _batch_notes(self, step: Step, batch: Batch) -> list[str]:
        """What the batch itself says of its figures: CPU not measured, a ragged start, a dead netserver."""
        notes = []
        if batch.cpu_unmeasured and not self.client.remote:
            notes.append(f"netperf CPU not measured: {batch.cpu_unmeasured} instance(s) in the VM reported none")
        if batch.ready < step.concurrency:
            notes.append(f"only {batch.ready} of {step.concurrency} instances were ready at the synchronised start")
        if self.netserver is not None and not self.netserver.alive():
            notes.append(f"netserver (pid {self.netserver.pid}) is not running (exit {self.netserver.exit_status()})")
        return notes

    def _argvs(self, step: Step, seconds: int, warmup: bool) -> list[list[str]]:
        """Each instance's command line: netperf, or iperf3 for packet-rate tests (instance i: server port + i)."""
        t = step.test
        if t.is_pps:
            program = self.client.tool("iperf3", self.iperf3)
            return [
                iperf.client_argv(program, self.address, iperf.DEFAULT_PORT + i, frame=step.frame_size or 0,
                                  offered=step.offered, seconds=seconds)
                for i in range(step.concurrency)
            ]  # fmt: skip
        return [
            omni.argv(
                self.netperf, t, self.address, self.suite.server.port, message_size=step.message_size,
                seconds=seconds, confidence=not warmup, interim_s=1.0 if step.case.phases and not warmup else None,
            )
            for _ in range(step.concurrency)
        ]  # fmt: skip

    def _receiver_pid(self, step: Step) -> Callable[[], Optional[int]]:
        """The receiving process whose CPU is sampled: the netserver, or for a packet-rate step with one
        sender its iperf3 server (several: which one served which sender is not known, so none)."""
        if self.server_ep is not None and (self.server_ep.in_vm or self.server_ep.remote):
            return lambda: None  # a process in a VM is not a host process: its CPU is not sampled (not reported)
        if step.test.is_pps:
            pids = self.iperf3_servers.pids if self.iperf3_servers is not None else []
            return lambda: pids[0] if pids and step.concurrency == 1 else None
        return lambda: self.netserver.pid if self.netserver else None

    def _notes(self, step: Step, agg: Aggregate) -> list[str]:
        notes = []
        ports = self.doc.meta.preflight["facts"].get("ephemeral_ports", {}).get("count")
        limit = crr_ceiling(ports, step.test.duration) * step.test.duration if ports else None
        done = agg.transactions or 0
        # beyond the ceiling, ports came back before TIME_WAIT ended: the ceiling did not bind
        if (
            step.test.type == "TCP_CRR"
            and limit
            and CRR_EXHAUSTION_FRACTION * limit <= done <= verdict.CRR_BEYOND_CEILING * limit
        ):
            notes.append(
                f"{agg.transactions} connections in {step.test.duration} s against {ports} ephemeral ports "
                f"(at most ~{limit:.0f} with TIME_WAIT): "
                "the rate is probably capped by port exhaustion (TIME_WAIT), not by the switch"
            )
        return notes

    def _client_port(self) -> tuple[Optional[str], Optional[int]]:
        port = self.engine.snapshot().ports.get(self.client.vif or "")
        return (port.bridge, port.ofport) if port else (None, None)

    def _meter_drops(self, bridge: Optional[str], ofport: Optional[int]) -> Optional[int]:
        """Packets the client VIF's policing meter has dropped so far (None: not readable)."""
        if self.of is None or bridge is None or ofport is None or not self.of.available(bridge):
            return None
        try:
            inst = self.of.read(bridge, stats=True)
        except HvnetError:
            return None
        meter = inst.flows.get(ofport)
        return inst.band_drops.get(meter) if meter is not None else None

    def _port_counters(self, bridge: Optional[str]) -> dict[str, Any]:
        if self.of is None or bridge is None or not self.of.available(bridge):
            return {}
        try:
            return {k: v.as_dict() for k, v in self.of.port_counters(bridge).items()}
        except HvnetError as exc:
            self._warn(f"port counters not read: {exc}")
            return {}


def _add_listened(
    agg: Aggregate, listened: list[dict[str, Any]], mirrors: Any, counters: dict[str, Any], seconds: float
) -> None:
    """A case's captures set against what the switch offered them and sent their ports."""
    for c in listened:
        c["offered"] = pps.offered_to(c["port"], mirrors, counters)
        c["sent_to_port"] = counters.get(c["port"], {}).get("tx_packets")
    pps.add_captures(agg, listened, seconds)


def _deltas(before: dict[str, Any], after: dict[str, Any]) -> dict[str, dict[str, int]]:
    out = {}
    for port, b in after.items():
        a = before.get(port)
        if a is None:
            continue
        out[port] = {k: b[k] - a[k] for k in b if b.get(k) is not None and a.get(k) is not None}
    return out


def _tunnel(cols: Any) -> Optional[dict[str, Any]]:
    """A GRE/ERSPAN output's tunnel port as a run records it (None: a port or VLAN output)."""
    return None if cols is None else {"type": cols.type, "options": dict(cols.options)}


def _r(x: Optional[float]) -> Optional[float]:
    return None if x is None else round(x, 2)


def _now() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def _progress_line(step: Step, rep: int, r: RepetitionResult) -> str:
    a = r.aggregate
    total = "-" if a.sum is None else f"{a.sum:.2f} {step.test.metric}"
    return f"{step.key} rep {rep}: sum {total}, lost {a.lost}/{a.instances}, spread {r.start_spread_ms} ms"


class _Watch:
    """A monitored repetition: collector readings and phases around the batch (nothing when not monitored)."""

    def __init__(
        self,
        cm: Optional[monitoring.CaseMonitoring],
        step: Step,
        before: dict[str, Any],
        port_counters: Callable[[], dict[str, Any]],
    ) -> None:
        self.cm, self.step, self.before, self.port_counters = cm, step, before, port_counters
        self.ticker: Optional[monitoring.Ticker] = None
        self.first_ack: Optional[dict[str, Any]] = None

    def begin(self) -> None:
        if self.cm is None:
            return
        if self.step.case.phases:  # each repetition starts in the first phase
            self.first_ack = self.cm.set(self.step.case.phases[0].monitor)
        self.counts = self.cm.counts()
        self.drops = self.cm.drops()
        self.ticker = monitoring.Ticker(
            self.cm, self.step.case.phases, self.port_counters, float(self.step.test.duration)
        )

    def released(self) -> None:
        self.t0, self.wall0 = time.monotonic(), time.time()
        if self.ticker is not None:
            self.ticker.start(self.t0)

    def stop(self) -> None:
        if self.ticker is not None and self.ticker.running:
            self.ticker.stop()

    def finish(self, rec: RepetitionResult, after: dict[str, Any], sampler: Any, stdouts: list[str]) -> None:
        """The repetition's collector figures (after the collector wrote the last samples) and its phases."""
        cm, ticker = self.cm, self.ticker
        if cm is None or ticker is None:
            return
        time.sleep(cm.settle_s())
        final, drops = cm.counts(), cm.drops()
        ticker.series.append((round(time.monotonic() - self.t0, 3), final))
        seconds = float(self.step.test.duration)
        counters = monitoring.deltas(self.before, after)
        m = cm.case.monitor
        if m is not None:
            got = (final[m.kind][0] - self.counts[m.kind][0], final[m.kind][1] - self.counts[m.kind][1])
            d0, d1 = self.drops.get(m.kind), drops.get(m.kind)
            rec.collector = monitoring.collector_record(
                m, cm.target(m.kind), got, counters, seconds,
                None if d0 is None or d1 is None else d1 - d0, monitoring.rates(ticker.series, m.kind),
            )  # fmt: skip
        if cm.case.phases:
            series = [omni.parse_interim(out) for out in stdouts]
            rec.throughput_series = omni.interim_series(series, self.wall0, self.step.test.duration)
            threads = [(a - self.t0, b - self.t0, g) for a, b, g in thread_series(sampler)] if sampler else []
            rec.phases = monitoring.phase_records(
                cm, ticker, self.before, after, final, threads, rec.throughput_series, seconds
            )
            if ticker.error:
                rec.notes.append(f"a phase was not applied: {ticker.error}")
        if sampler is not None:
            rec.cpu["vswitchd_threads_series"] = [[round(b - self.t0, 2), g] for a, b, g in thread_series(sampler)]


def _with_verdict(line: str, found: Optional[verdict.Verdict]) -> str:
    return line if found is None else f"{line}, bottleneck {found.verdict}"
