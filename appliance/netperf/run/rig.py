"""What every repetition of a run uses, fixed once preflight has passed: the endpoints, the programs, the switch.

A :class:`Rig` is built by the runner from its preflight; a repetition
(:mod:`.repetition`) takes from it what its instances run (:meth:`Rig.argvs`),
where their output goes (:meth:`Rig.raw_dir`) and what reads the switch
around them (:class:`SwitchReadings`: port counters, the policer's drops,
ovs-vswitchd's pid).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Callable, Optional

from appliance.core.errors import HvnetError
from appliance.netperf.define.suite import Step
from appliance.netperf.parse import iperf, omni
from appliance.netperf.run.launch import Endpoint
from appliance.netperf.run.pktgen import Listen
from appliance.netperf.store.records import Policing
from appliance.policy import PolicyEngine
from appliance.policy.apply import tcpolice
from appliance.policy.apply.openflow import OpenFlow
from appliance.switch.host import Host


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

    def client_port(self, vif: Optional[str]) -> tuple[Optional[str], Optional[int]]:
        """The bridge and OpenFlow port of the client's VIF (None, None: not on the switch)."""
        port = self.engine.snapshot().ports.get(vif or "")
        return (port.bridge, port.ofport) if port else (None, None)

    def port_counters(self, bridge: Optional[str]) -> dict[str, Any]:
        """Every port's counters on ``bridge`` by name ({}: not readable, with a warning when it failed)."""
        if self.of is None or bridge is None or not self.of.available(bridge):
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

    def raw_dir(self, step: Step, rep: int, warmup: bool) -> Path:
        """Where a repetition's instances write their output."""
        tag = f"rep{rep}-warmup" if warmup else f"rep{rep}"
        return self.out_dir / "raw" / f"{step.index:03d}-{step.key.replace('/', '_')}" / tag

    def argvs(self, step: Step, seconds: int, warmup: bool) -> list[list[str]]:
        """Each instance's command line: netperf, or iperf3 for packet-rate and many-flows tests (instance i:
        server port + i)."""
        t = step.test
        if t.is_flows:
            program = self.client.tool("iperf3", self.iperf3)
            return [
                iperf.tcp_client_argv(program, self.address, iperf.DEFAULT_PORT + i, flows=t.flows,
                                      offered=step.offered, seconds=seconds)
                for i in range(step.concurrency)
            ]  # fmt: skip
        if t.is_pps:
            program = self.client.tool("iperf3", self.iperf3)
            return [
                iperf.client_argv(program, self.address, iperf.DEFAULT_PORT + i, frame=step.frame_size or 0,
                                  offered=step.offered, seconds=seconds)
                for i in range(step.concurrency)
            ]  # fmt: skip
        return [
            omni.argv(
                self.netperf, t, self.address, self.port, message_size=step.message_size,
                seconds=seconds, confidence=not warmup, interim_s=1.0 if step.case.phases and not warmup else None,
            )
            for _ in range(step.concurrency)
        ]  # fmt: skip
