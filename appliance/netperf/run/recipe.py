"""The suite runner: preflight -> setup -> steps -> restore, saving as it goes.

Public API (what ``hvnet suite run`` and the TUI use)::

    runner = Runner(suite, host=host, guests=lab, conn=conn, out_dir=path, on_event=callback)
    doc = runner.run()          # the results (records.SuiteResult), also saved in out_dir
    runner.stop()               # from another thread or a signal handler: stop cleanly

``on_event`` receives :class:`Event` objects (progress, per-repetition
aggregates, warnings) from the runner's thread; it must not block.

:meth:`Runner.run` reads as the recipe: preflight (:mod:`.preflight`), the
servers the instances need (:mod:`.servers`), the suite's ``setup``
fragment, then each case -- its policy fragment (:mod:`.fragments`), its
listeners, collector guest and monitoring -- and each of its steps'
repetitions, a warm-up and a measured one (:mod:`.repetition`: the batch of
instances and everything measured around it, as one context manager),
recorded (:mod:`.record`) and saved after each; then the fragments are
restored and the servers stopped even when the run fails.  A lost instance
is recorded with its reason and the step goes on.
"""

from __future__ import annotations

import contextlib
import logging
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Optional

from appliance.core.errors import HvnetError
from appliance.core.ovsdb import Connection
from appliance.core.safedirs import make_private
from appliance.endpoints.guests import GuestSource
from appliance.netperf.define.cases import Case
from appliance.netperf.define.suite import Step, Suite
from appliance.netperf.figures import step as step_figures
from appliance.netperf.figures import verdict
from appliance.netperf.run import arrival, meta, perfstat, pinning, pktgen, preflight, record
from appliance.netperf.run import collectors as monitoring
from appliance.netperf.run.fragments import CaseState, Fragments
from appliance.netperf.run.launch import Endpoint
from appliance.netperf.run.pktgen import Listen
from appliance.netperf.run.preflight import Preflight
from appliance.netperf.run.repetition import Repetition
from appliance.netperf.run.rig import PairEnds, Rig, SwitchReadings, now
from appliance.netperf.run.servers import Servers
from appliance.netperf.store import results
from appliance.netperf.store.records import Aggregate, RepetitionResult, StepResult, SuiteInfo, SuiteResult
from appliance.policy import PolicyEngine
from appliance.policy.apply.openflow import OpenFlow
from appliance.policy.plan import export
from appliance.switch.host import Host

log = logging.getLogger(__name__)


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


class Runner:
    rig: Rig  # the endpoints, programs and switch readings, once preflight passed
    servers: Servers
    fragments: Fragments

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
        self.host = host
        self.guests = guests
        self.conn = conn
        self.out_dir = Path(out_dir)
        self.on_event = on_event or (lambda e: None)
        self._stop = threading.Event()
        self._stop_reason = "stopped by the operator"
        self._t0 = 0.0
        self._done_s = 0.0  # planned seconds of the steps finished (for the ETA)
        self._planned_s = 0.0  # the suite's estimated seconds, computed once the run starts
        self.engine = PolicyEngine(conn, host, command="hvnet suite run")
        self.of = OpenFlow.for_host(host)
        self.doc = SuiteResult()
        self.steps: list[Step] = []
        self.generator: Optional[str] = None  # the packet-rate generator (UDP_PPS tests), found at preflight

    # -- control -----------------------------------------------------------------

    def stop(self, reason: str = "stopped by the operator") -> None:
        self._stop_reason = reason
        self._stop.set()

    @property
    def stopping(self) -> bool:
        return self._stop.is_set()

    def _emit(self, kind: str, message: str = "", **kw: Any) -> None:
        elapsed = time.monotonic() - self._t0
        total = self._planned_s
        eta = max(0.0, total - self._done_s) if total else None
        try:
            self.on_event(Event(kind, message, steps_total=len(self.steps), elapsed_s=elapsed, eta_s=eta, **kw))
        except Exception:  # a broken progress display must not break a measurement
            log.exception("progress callback failed")

    def _info(self, message: str) -> None:
        self._emit("info", message)

    def _warn(self, message: str) -> None:
        self.doc.meta.warnings.append(message)
        self._emit("warning", message)

    def _restore_problem(self, problem: str) -> None:
        """Something the run could not undo: recorded with the results, and said."""
        self.doc.meta.restore_problems = [*(self.doc.meta.restore_problems or []), problem]
        self._warn(problem)

    def _save(self) -> None:
        results.write(self.out_dir, self.doc)

    # -- the run: preflight -> setup -> cases -> restore -------------------------------

    def run(self) -> SuiteResult:
        self._t0 = time.monotonic()
        self.steps = self.suite.steps()
        self._planned_s = self.suite.estimated_seconds()
        self._prepare(self._preflight())
        setup = CaseState()
        state = "failed"
        try:
            self._start_servers()
            if self.suite.setup is not None:
                setup = self.fragments.apply(self.suite.setup, "setup")
            self._record_setup(setup)
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
            self._restore_and_save(setup, state)
        self._emit("done", f"{state}: {len(self.doc.steps)} of {len(self.steps)} steps")
        return self.doc

    def _preflight(self) -> Preflight:
        """Check everything before starting anything (PreflightFailed: nothing was started); the rig."""
        client, server, address = self._endpoints()
        pairs = self._pair_ends()
        for left in getattr(self.guests, "swept", ()):  # a real VM's guest source stopped what a killed run left
            self._warn(f"stopped what an earlier run left in a VM: {left}")
        # a VM's tools were checked inside it by its guest source: the server VM's netserver is not the client's
        managed = server is not None and server.vm is None
        s = self.suite
        pf = preflight.check(client.runner_for(self.host), client, s.tests, peak=s.peak_instances,
                             managed_server=managed,
                             server_runner=server.runner_for(self.host) if managed else None)  # fmt: skip
        pf.failures += preflight.fragment_failures(s.fragments, s.cases, self.engine, self.guests, self.host.label)
        failures, iperf3, self.generator = pktgen.packet_rate(s.iperf_types, s.cases, self.host.local_runner,
                                                              have_listen=self.listen is not None,
                                                              host_label=self.host.label)  # fmt: skip
        ends = [client, server, *(e for p in pairs for e in (p.client, p.server))]
        pinning.refusal(s.cases, ends)
        pf.warnings += pinning.settle_left(pinning.ledger_of(self.host), self.host.runner, self.host.local_runner)
        pf.failures += pinning.failures(s.cases, self.host.runner, self.host.local_runner, self.host.label)
        pf.failures += failures + pktgen.remote_failures(bool(s.iperf_types), ends) + _pair_failures(pairs)
        if any(c.perf_stat for c in s.cases):
            pf.warnings += perfstat.missing(self.host)
        pf.raise_if_failed()
        self.rig = Rig(self.host, client, server, address, self.suite.server.port,
                       client.tool("netperf", pf.netperf), iperf3, self.out_dir,
                       SwitchReadings(self.engine, self.of, self._warn), self.listen, pairs=pairs,
                       taskset=self.host.local_runner.which_optional("taskset") or "taskset")  # fmt: skip
        return pf

    def _prepare(self, pf: Preflight) -> None:
        """What the run will start and apply, its raw directory, the results' meta and the preflight's warnings."""
        server = self.rig.server
        netserver = server.tool("netserver", pf.netserver or "") if server else (pf.netserver or "")
        self.servers = Servers(self.rig, self.suite.server, self.suite.iperf_concurrency, netserver)
        self.fragments = Fragments(self.engine, self.rig.client.vif, warn=self._warn, info=self._info,
                                   problem=self._restore_problem)  # fmt: skip
        make_private(self.out_dir / "raw")  # wherever the runs directory is, no other user may own a part of it
        self.rig.kernel_here = meta.same_kernel(self.host)
        s = self.suite
        info = SuiteInfo(s.name, str(Path(s.file).resolve()), s.sha256, s.description)
        self.doc = meta.new_doc(info, s.topology, s.server, self.rig, self.engine, self.conn, pf)
        for w in pf.warnings:
            self._warn(w)
        if not self.rig.kernel_here:
            self._warn(f"{self.host.label} is another machine: its CPU and ovs-vswitchd's are not measured "
                       f"{cpu_left(self.rig.client, self.rig.server)}")  # fmt: skip

    def _endpoints(self) -> tuple[Endpoint, Optional[Endpoint], str]:
        """The client, a managed server guest (None: the suite names an address), and where to connect."""
        wanted = [self.suite.client] + ([self.suite.server.guest] if self.suite.server.guest else [])
        found = self.guests.require(self.suite.topology, wanted)
        client = Endpoint.of(found[self.suite.client])
        if self.suite.server.guest:
            server = Endpoint.of(found[self.suite.server.guest])
            return client, server, server.address or ""
        return client, None, self.suite.server.address or ""

    def _pair_ends(self) -> list[PairEnds]:
        """Each client -> server pair as the guest source found it (empty: the single form's one pair)."""
        found = self.guests.require(self.suite.topology, self.suite.guest_names()) if self.suite.pairs else {}
        out: list[PairEnds] = []
        for p in self.suite.pairs:
            slot = sum(e.pair.server == p.server for e in out)
            out.append(PairEnds(p, Endpoint.of(found[p.client]), Endpoint.of(found[p.server]), slot))
        return out

    def _start_servers(self) -> None:
        """The netserver (reached from the client before going on), then iperf3's servers."""
        netserver = self.servers.start_netserver()
        if netserver is not None:
            self.doc.meta.server.netserver_pid = netserver.pid
        others = {name: ns.pid for name, ns in self.servers.others.items() if ns is not None and ns.pid is not None}
        if others:  # a pair's server that is not the first pair's: its netserver is the run's too
            self.doc.meta.server.netserver_pids = others
        self.servers.await_netserver()
        where = sorted({p.address for p in self.rig.pairs}) or [self.rig.address]
        self._info(f"netserver answers at {', '.join(f'{a}:{self.suite.server.port}' for a in where)}")
        listening = self.servers.start_iperf3()
        if listening is not None:
            self._info(listening)

    def _record_setup(self, setup: CaseState) -> None:
        self.doc.meta.setup = {
            "enforcement": setup.enforcement,
            "policing": setup.policing.to_json() if setup.policing else None,
        }
        self.doc.meta.policy_snapshot = export.to_yaml(self.engine.snapshot())
        self._save()

    def _restore_and_save(self, setup: CaseState, state: str) -> None:
        """The setup fragment undone and the servers stopped, whatever happened; the results saved."""
        try:
            if setup.changes:
                self.fragments.restore(setup.changes, "setup")
        finally:
            self.servers.stop()
            self.doc.state = state
            self.doc.partial = state != "complete"
            if state == "partial":
                self.doc.partial_reason = self._stop_reason
            self.doc.meta.finished = now()
            self._save()

    # -- a case: its fragment, what runs beside it, its steps -------------------------

    def _run_case(self, case: Case, setup: CaseState) -> None:
        cs = self.fragments.apply(case.policy, f"case {case.name}") if case.policy is not None else CaseState()
        try:
            self._open_case(case, cs)
            with self._pinning(case) as pinned:
                cs.cpus = pinned.record if pinned is not None else None
                for step in [s for s in self.steps if s.case is case]:
                    if self.stopping:
                        break
                    self._run_step(step, cs, setup)
        finally:
            try:
                for problem in cs.monitoring.close() if cs.monitoring else []:
                    self._restore_problem(problem)
            finally:
                if cs.changes:
                    self.fragments.restore(cs.changes, f"case {case.name}")

    def _open_case(self, case: Case, cs: CaseState) -> None:
        """The case's listeners' VIFs, its collector guest, and its sFlow/IPFIX with the lab's collectors."""
        if case.capture is not None:
            found = self.guests.require(self.suite.topology, list(case.capture.guests))
            cs.capture_vifs = {g: found[g].vif for g in case.capture.guests if found[g].vif}
        if case.collector_guest is not None:
            found = self.guests.require(self.suite.topology, [case.collector_guest])
            cs.collector = arrival.CollectorCounters(Endpoint.of(found[case.collector_guest]), self.host.local_runner)
        if case.monitors():
            bridge = next((m.bridge for m in case.monitors() if m.bridge), None)
            bridge = bridge or self.rig.switch.client_port(self.rig.client.vif)[0]
            if bridge is None:
                raise HvnetError(f"case {case.name}: the client's VIF is on no bridge: nothing to monitor")
            source: Any = self.guests  # the lab starts collectors (checked at preflight)
            cs.monitoring = monitoring.CaseMonitoring(case, bridge, self.engine, self.out_dir, source)
            cs.monitoring.start()
            self._info(f"case {case.name}: collectors at {', '.join(cs.monitoring.targets())}")

    def _pinning(self, case: Case) -> contextlib.AbstractContextManager[Optional[pinning.Pinning]]:
        """The case's ``cpus:``: ovs-vswitchd's threads where the switch runs, the servers hvnet started
        here (the clients' argv carry their own taskset); nothing for a case without the key."""
        if case.cpus is None:
            return contextlib.nullcontext()
        targets = []
        if case.cpus.vswitchd is not None:
            pid = self.rig.switch.vswitchd_pid(True)
            if pid is None:
                raise HvnetError(f"case {case.name}: cpus.ovs-vswitchd: no ovs-vswitchd pid on {self.host.label}")
            targets.append(("ovs-vswitchd", self.host.runner, [pid], case.cpus.vswitchd))
        if case.cpus.guests is not None:
            targets.append((pinning.GUESTS, self.host.local_runner, self.servers.pids(), case.cpus.guests))
        self._info(f"case {case.name}: {case.cpus.describe()}")
        return pinning.Pinning(case.cpus, targets, self._restore_problem, pinning.ledger_of(self.host))

    # -- a step: its repetitions, each a warm-up and a measurement ----------------------

    def _run_step(self, step: Step, cs: CaseState, setup: CaseState) -> None:
        t = step.test
        rec = record.step_record(step, cs, setup, self.generator, self.rig.step_pairs())
        self.doc.steps.append(rec)
        per_pair = f" for each of {len(self.rig.pairs)} pairs" if self.rig.pairs else ""
        self._emit("step", f"{step.key}: {step.concurrency} x {t.type}{per_pair} for {t.duration} s", step=step)
        for rep in range(1, t.repetitions + 1):
            if self.stopping:
                break
            if t.warmup:
                self._warm_up(step, rep, cs, setup)
            if self.stopping:
                break
            r = self._measure(step, rep, cs, setup)
            if self.stopping:
                # cut short by the stop: its instances did not run their course; not a measurement
                rec.interrupted_repetitions = [*(rec.interrupted_repetitions or []), rep]
                break
            self._add_repetition(rec, step, rep, r)

    def _repetition(self, step: Step, rep: int, cs: CaseState, setup: CaseState, *, warmup: bool) -> Repetition:
        return Repetition(self.rig, step, rep, cs, cs.policing or setup.policing, self.servers.receiver_pid(step),
                          warmup=warmup)  # fmt: skip

    def _warm_up(self, step: Step, rep: int, cs: CaseState, setup: CaseState) -> None:
        """The batch alone, for the test's warm-up seconds: nothing measured, nothing recorded."""
        with self._repetition(step, rep, cs, setup, warmup=True) as r:
            r.run(lambda: self.stopping)

    def _measure(self, step: Step, rep: int, cs: CaseState, setup: CaseState) -> RepetitionResult:
        """A measured repetition: the batch, what was read around it, and its record."""
        with self._repetition(step, rep, cs, setup, warmup=False) as r:
            r.run(lambda: self.stopping)
            got = r.finish()
        facts = self.doc.meta.preflight["facts"]
        return record.repetition_record(
            r, got, stop_reason=self._stop_reason, facts=facts, server_notes=self.servers.notes
        )

    def _add_repetition(self, rec: StepResult, step: Step, rep: int, r: RepetitionResult) -> None:
        """A repetition into its step: the step's figures so far, saved, and said."""
        t = step.test
        rec.repetitions.append(r)
        found = step_figures.update(rec, self.doc.meta.preflight["facts"], self.rig.client.vif)
        self._save()
        self._done_s += t.max_seconds() + t.warmup
        line = _with_verdict(_progress_line(step, rep, r), found)
        self._emit("repetition", line, step=step, repetition=rep, aggregate=r.aggregate,
                   verdict=found.verdict if found else None)  # fmt: skip


def _pair_failures(pairs: list[PairEnds]) -> list[str]:
    """Pairs' clients start in one batch: on this machine (namespaces, QEMU guests) or all on the driven host."""
    if pairs and len({p.client.remote for p in pairs}) > 1:
        return ["the pairs' clients are on this machine and on a remote host: one step starts them together, "
                "so they must all be on one"]  # fmt: skip
    return []


def _progress_line(step: Step, rep: int, r: RepetitionResult) -> str:
    a = r.aggregate
    total = "-" if a.sum is None else f"{a.sum:.2f} {step.test.metric}"
    return f"{step.key} rep {rep}: sum {total}, lost {a.lost}/{a.instances}, spread {r.start_spread_ms} ms"


def _with_verdict(line: str, found: Optional[verdict.Verdict]) -> str:
    return line if found is None else f"{line}, bottleneck {found.verdict}"


def cpu_left(client: Endpoint, server: Optional[Endpoint]) -> str:
    """What CPU a run on another machine still measures: this machine's netperf and netserver, or nothing when
    they ran on that host too (its guests' namespaces are there: their rusage is not this machine's to read)."""
    here = [n for n, ep in (("netperf", client), ("netserver", server)) if ep is not None and not ep.remote]
    if not here:
        return "(nor are netperf's and netserver's: they ran there)"
    return f"(the CPU figures are this machine's {' and '.join(here)} only)"
