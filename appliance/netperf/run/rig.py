"""What every repetition of a run uses, fixed once preflight has passed: the endpoints, the programs, the switch.

A :class:`Rig` is built by the runner from its preflight; a repetition
(:mod:`.repetition`) takes from it what its instances run (:meth:`Rig.argvs`),
where their output goes (:meth:`Rig.raw_dir`) and what reads the switch
around them (:class:`SwitchReadings`: port counters, the policer's drops,
ovs-vswitchd's pid).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional

from appliance.core import ovsfeatures
from appliance.core.errors import HvnetError
from appliance.netperf.define.pairs import Pair
from appliance.netperf.define.suite import Step
from appliance.netperf.parse import iperf, omni
from appliance.netperf.run.launch import Endpoint
from appliance.netperf.run.pktgen import Listen
from appliance.netperf.store.records import Policing
from appliance.policy import PolicyEngine
from appliance.policy.apply import tcpolice
from appliance.policy.apply.openflow import OpenFlow
from appliance.switch.host import Host

# Every measured netperf instance prints an interim result about once a second (demo mode, ``-D``): one short
# line group per second is cheap, and gives every step a time series (the report's, a flent export's).
INTERIM_S = 1.0


def now() -> str:
    """The time a run records (UTC, to the second)."""
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


@dataclass
class SwitchReadings:
    """The switch read around a repetition: its ports' counters and the client VIF's policing meter.

    ``of`` is None where OpenFlow cannot be read (another switch): then nothing is read, never a zero."""

    engine: PolicyEngine
    of: Optional[OpenFlow]
    warn: Callable[[str], None]
    _too_old: Optional[str] = field(default=None, init=False)  # "" once asked and new enough

    def not_measured(self) -> Optional[str]:
        """Why this switch's ``ovs-ofctl`` cannot give the port counters as hvnet reads them (OVS older than
        2.8 has no ``--names``), asked once and said once; None when it can or does not say its version."""
        if self._too_old is None:
            why = ovsfeatures.missing("ofctl-names", self.engine.snapshot().ovs_version)
            self._too_old = why or ""
            if why:
                self.warn(f"port counters not measured: {why}")
        return self._too_old or None

    def client_port(self, vif: Optional[str]) -> tuple[Optional[str], Optional[int]]:
        """The bridge and OpenFlow port of the client's VIF (None, None: not on the switch)."""
        port = self.engine.snapshot().ports.get(vif or "")
        return (port.bridge, port.ofport) if port else (None, None)

    def port_counters(self, bridge: Optional[str]) -> dict[str, Any]:
        """Every port's counters on ``bridge`` by name ({}: not readable, with a warning when it failed)."""
        if self.of is None or bridge is None or not self.of.available(bridge) or self.not_measured():
            return {}
        try:
            return {k: v.as_dict() for k, v in self.of.port_counters(bridge).items()}
        except HvnetError as exc:
            self.warn(f"port counters not read: {exc}")
            return {}

    def policer_drops(self, policing: Policing, bridge: Optional[str], ofport: Optional[int]) -> Optional[int]:
        """Packets the client VIF's policer has dropped so far: its meter's band, or tc's police action on
        the interface's ingress (None: not readable, or a mechanism that keeps no count)."""
        if policing.mechanism == "meter":
            return self.meter_drops(bridge, ofport)
        if policing.mechanism == "tc" and policing.port:
            try:
                police = tcpolice.tc_enforcement(self.engine.host.runner, policing.port).police
            except HvnetError:
                return None
            return sum(a.dropped for a in police) if police else None
        return None

    def meter_drops(self, bridge: Optional[str], ofport: Optional[int]) -> Optional[int]:
        """Packets the client VIF's policing meter has dropped so far (None: not readable)."""
        if self.of is None or bridge is None or ofport is None or not self.of.available(bridge):
            return None
        try:
            inst = self.of.read(bridge, stats=True)
        except HvnetError:
            return None
        meter = inst.flows.get(ofport)
        return inst.band_drops.get(meter) if meter is not None else None

    def vswitchd_pid(self, kernel_here: bool) -> Optional[int]:
        """ovs-vswitchd's pid, when its threads are this machine's to sample (None otherwise)."""
        return self.of.vswitchd_pid() if self.of and kernel_here else None


@dataclass(frozen=True)
class PairEnds:
    """One client -> server pair of a suite with several, as the run reaches it.

    ``slot``: the pair's rank among the pairs its server serves: its iperf3 servers' ports follow the
    earlier pairs' (a step's ``concurrency`` each)."""

    pair: Pair
    client: Endpoint
    server: Endpoint
    slot: int = 0

    @property
    def address(self) -> str:
        return self.server.address or ""


@dataclass
class Rig:
    """The run's endpoints and programs (as preflight found them) and what reads its switch."""

    host: Host
    client: Endpoint
    server: Optional[Endpoint]  # a managed server guest (None: a netserver hvnet does not manage)
    address: str  # where the instances connect
    port: int  # the netserver's
    netperf: str
    iperf3: str  # the packet-rate generator ("" without packet-rate tests)
    out_dir: Path
    switch: SwitchReadings
    listen: Optional[Listen] = None  # captures for cases with listeners (the service layer's capture service)
    kernel_here: bool = True  # the host's kernel is this machine's (see meta.same_kernel)
    # several client -> server pairs (``client``/``server``/``address``: the first's); empty: the one pair
    pairs: list[PairEnds] = field(default_factory=list)
    taskset: str = "taskset"  # its full path here: the launcher execs an instance's argv[0] as a path

    def step_pairs(self) -> list[Pair]:
        """The pairs every step runs (empty: the single form's one pair, recorded as always)."""
        return [p.pair for p in self.pairs]

    def instance_clients(self, step: Step) -> list[Endpoint]:
        """Where each of a step's instances runs: the client, or each pair's client for its concurrency."""
        if not self.pairs:
            return [self.client] * step.concurrency
        return [p.client for p in self.pairs for _ in range(step.concurrency)]

    def raw_dir(self, step: Step, rep: int, warmup: bool) -> Path:
        """Where a repetition's instances write their output."""
        tag = f"rep{rep}-warmup" if warmup else f"rep{rep}"
        return self.out_dir / "raw" / f"{step.index:03d}-{step.key.replace('/', '_')}" / tag

    def argvs(self, step: Step, seconds: int, warmup: bool) -> list[list[str]]:
        """Each instance's command line, pair after pair: netperf, or iperf3 for packet-rate and many-flows
        tests (a server's instance i: port + i, after the ports of the earlier pairs it serves); a case's
        ``cpus.guests`` runs each under ``taskset -c`` (namespace guests only: see .pinning)."""
        if not self.pairs:
            argvs = self._argvs(step, seconds, warmup, self.client, self.address, 0)
        else:
            argvs = [
                argv for p in self.pairs
                for argv in self._argvs(step, seconds, warmup, p.client, p.address, p.slot * step.concurrency)
            ]  # fmt: skip
        cpus = step.case.cpus.guests if step.case.cpus is not None else None
        return [[self.taskset, "-c", cpus, *argv] for argv in argvs] if cpus else argvs

    def _argvs(
        self, step: Step, seconds: int, warmup: bool, client: Endpoint, address: str, first: int
    ) -> list[list[str]]:
        """One pair's instances from ``client`` to ``address``; iperf3's ports from DEFAULT_PORT + ``first``."""
        t = step.test
        ports = range(iperf.DEFAULT_PORT + first, iperf.DEFAULT_PORT + first + step.concurrency)
        if t.is_flows:
            program = client.tool("iperf3", self.iperf3)
            return [iperf.tcp_client_argv(program, address, port, flows=t.flows, offered=step.offered,
                                          seconds=seconds) for port in ports]  # fmt: skip
        if t.is_pps:
            program = client.tool("iperf3", self.iperf3)
            return [iperf.client_argv(program, address, port, frame=step.frame_size or 0, offered=step.offered,
                                      seconds=seconds) for port in ports]  # fmt: skip
        return [
            omni.argv(
                self.netperf, t, address, self.port, message_size=step.message_size,
                seconds=seconds, confidence=not warmup, interim_s=None if warmup else INTERIM_S,
            )
            for _ in range(step.concurrency)
        ]  # fmt: skip
