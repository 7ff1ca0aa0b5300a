"""Where was the bottleneck?  A verdict per step, decided from what the step recorded, with its evidence.

The 2010 study could not say whether OVS or the receiving VM limited its
runs; a report of six rows per step still leaves the reader to work it out.
This module reads one recorded step -- CPU of the host's cores, of
ovs-vswitchd's threads, of netperf and of netserver; the switch's port
counters; the policer's drops and rate; the figures netperf reported -- and
names the bottleneck:

``ports``
    TCP_CRR opened about as many connections as the ephemeral ports allow
    (TIME_WAIT holds each for 60 s).
``policer``
    the ingress policer dropped packets (its own count: an OpenFlow meter's
    band, or tc's police action) and what got through is of the order of the
    configured rate -- set against the rate plus what the burst adds over the
    test, which is said beside it.
``receiver-cpu`` / ``sender-cpu``
    the netserver (netperf) processes were at their cores, or starved: every
    core of the host busy while they ran at almost nothing and what the
    switch delivered did not arrive.
``switch``
    an ovs-vswitchd thread at a core, or the switch dropping packets.
``unknown``
    none of these: the evidence says what was checked.

Lost instances are attributed the same way.  Pure: reads a
:class:`.records.StepResult`, measures nothing, so a report recomputes it
from any saved run.  Thresholds are judgement, stated once here.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from typing import Any, Optional

from appliance.netperf.store.records import RepetitionResult, StepResult

TIME_WAIT_S = 60  # Linux TCP_TIMEWAIT_LEN: fixed, not a sysctl


def crr_ceiling(ports: int, duration_s: int) -> float:
    """Connections per second one client address can open for ``duration_s`` before ports run out.

    Every closed connection holds its port in TIME_WAIT for 60 s; within the
    first 60 s nothing comes back, so a test can use ``ports`` connections
    plus what TIME_WAIT returns after 60 s.
    """
    if duration_s <= TIME_WAIT_S:
        return ports / duration_s
    return (ports + ports * (duration_s - TIME_WAIT_S) / TIME_WAIT_S) / duration_s


VERDICTS = ("policer", "switch", "sender-cpu", "receiver-cpu", "ports", "unknown")

AT_A_CORE_PCT = 85.0  # a single-threaded process or thread this busy has no more CPU to give
HOST_SATURATED_PCT = 95.0  # every core at least this busy: everything on the host competes for CPU
STARVED_PCT = 10.0  # % of a core: a process that wanted to run and barely did
CRR_EXHAUSTION_FRACTION = 0.9  # connections against the ports' ceiling: see crr_exhaustion
CRR_BEYOND_CEILING = 1.1  # more than the ceiling: ports were reused early, the ceiling did not bind
POLICER_ACHIEVED_MIN = 0.3  # TCP reaches about half a meter's rate with a small burst; UDP nearly all of it
POLICER_ABOVE = 1.2  # without a drop count: through no more than this times rate + burst, or it was not policing
UDP_IN_ONE_FRAME = 1472  # a UDP payload that fits one 1500-byte IPv4 frame; larger ones are fragmented
POLICER_NAMES = {"meter": "meter", "tc": "tc police action"}  # what dropped: the mechanism's own counter
LOST_IN_RECEIVER_FACTOR = 2.0  # the switch delivered at least this many times what netserver received
SWITCH_DROP_FRACTION = 0.01  # drops at the switch's ports against the packets it switched
IGNORED_PORTS = ("LOCAL",)  # the bridge's own port: down in a lab, it drops the broadcasts it is sent


def crr_exhaustion(test_type: str, duration_s: int, transactions: Optional[float], ports: Optional[int]) -> list[str]:
    """A TCP_CRR repetition's note when its connections came near what the ephemeral ports allow
    (``ports``: the client's ephemeral port count, None when preflight could not read it).

    Beyond the ceiling, ports came back before TIME_WAIT ended: the ceiling did not bind, and no note."""
    limit = crr_ceiling(ports, duration_s) * duration_s if ports else None
    done = transactions or 0
    if test_type != "TCP_CRR" or not limit or not CRR_EXHAUSTION_FRACTION * limit <= done <= CRR_BEYOND_CEILING * limit:
        return []
    return [
        f"{transactions} connections in {duration_s} s against {ports} ephemeral ports "
        f"(at most ~{limit:.0f} with TIME_WAIT): "
        "the rate is probably capped by port exhaustion (TIME_WAIT), not by the switch"
    ]


@dataclass
class Verdict:
    """The bottleneck of a step (or of one repetition), why, and whom its lost instances are put down to."""

    verdict: str
    evidence: list[str] = field(default_factory=list)
    lost: Optional[dict[str, Any]] = None  # {"instances": n, "verdict": ..., "evidence": [...]}

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {"verdict": self.verdict, "evidence": list(self.evidence)}
        if self.lost is not None:
            out["lost"] = self.lost
        return out

    @classmethod
    def from_json(cls, doc: Any) -> Optional[Verdict]:
        if not isinstance(doc, dict) or doc.get("verdict") not in VERDICTS:
            return None
        evidence = [str(e) for e in doc.get("evidence") or [] if isinstance(e, str)]
        lost = doc.get("lost") if isinstance(doc.get("lost"), dict) else None
        return cls(doc["verdict"], evidence, lost)


@dataclass
class _Seen:
    """The figures of one repetition the rules look at (None: not recorded)."""

    cores: list[float]
    host: Optional[float]
    vswitchd_thread: Optional[tuple[str, float]]  # the busiest thread group and its % of a core
    vswitchd_total: Optional[float]
    netperf: Optional[float]
    netserver: Optional[float]
    slots: int  # how many cores the instances could use at most: min(instances, cores)
    received_mbps: Optional[float]
    delivered_mbps: Optional[float]  # what the switch sent out of ports other than the client's
    switched_pkts: int
    switch_drops: Optional[int]

    @property
    def saturated(self) -> bool:
        return bool(self.cores) and min(self.cores) >= HOST_SATURATED_PCT


def _thread_name(group: str) -> str:
    # the sampler names a thread by its role: "ovs-vswitchd" (the main thread) becomes "ovs"
    return "main" if group in ("ovs", "ovs-vswitchd") else group


def _seen(step: StepResult, rep: RepetitionResult, client_vif: Optional[str]) -> _Seen:
    cpu = rep.cpu
    cores = [float(c) for c in cpu.get("per_core_pct") or [] if isinstance(c, (int, float))]
    threads = cpu.get("vswitchd_threads_pct") or {}
    busiest = max(threads.items(), key=lambda kv: kv[1]) if threads else None
    agg = rep.aggregate
    wall = float(step.duration or 0) or rep.wall_s  # data flows for the test length (the tail only closes)
    delivered = None
    switched = 0
    drops: Optional[int] = None
    for port, c in rep.counters.items():
        if port in IGNORED_PORTS:
            continue
        switched += c.get("rx_packets", 0)
        if c.get("rx_dropped") is not None or c.get("tx_dropped") is not None:
            drops = (drops or 0) + c.get("rx_dropped", 0) + c.get("tx_dropped", 0)
        if port != client_vif and c.get("tx_bytes") is not None and wall:
            delivered = (delivered or 0.0) + c["tx_bytes"] * 8 / wall / 1e6
    udp = step.type in ("UDP_STREAM", "UDP_PPS")  # their sum is not Mbit/s received (pps for UDP_PPS)
    return _Seen(
        cores=cores,
        host=cpu.get("host_pct"),
        vswitchd_thread=(_thread_name(busiest[0]), float(busiest[1])) if busiest else None,
        vswitchd_total=cpu.get("vswitchd_pct_of_core"),
        netperf=cpu.get("netperf_pct_of_core"),
        netserver=cpu.get("netserver_pct_of_core"),
        slots=max(1, min(step.concurrency or 1, len(cores) or 1)),
        received_mbps=agg.received_mbps if udp else agg.sum,
        delivered_mbps=delivered if client_vif else None,
        switched_pkts=switched,
        switch_drops=drops,
    )


def _pct(x: Optional[float]) -> str:
    return "not measured" if x is None else f"{x:.0f}%"


def _netserver_cpu(s: _Seen) -> str:
    return "netserver's CPU not measured" if s.netserver is None else f"netserver at {s.netserver:.0f}% of a core"


def _cores(s: _Seen) -> str:
    return "/".join(f"{c:.0f}" for c in s.cores) + "%"


def _ports(step: StepResult, rep: RepetitionResult, facts: dict[str, Any]) -> tuple[Optional[list[str]], list[str]]:
    """(evidence of port exhaustion or None, what the ports say anyway)."""
    ports = facts.get("ephemeral_ports") or {}
    count = ports.get("count")
    done = rep.aggregate.transactions
    if step.type != "TCP_CRR" or not count or not step.duration or done is None:
        return None, []
    limit = crr_ceiling(count, step.duration) * step.duration
    said = f"{done:,} connections in {step.duration} s against {count:,} ephemeral ports"
    said += f" (at most ~{limit:,.0f} with TIME_WAIT)"
    if done > CRR_BEYOND_CEILING * limit:  # ports came back early: the ceiling did not bind
        reuse = ports.get("tcp_tw_reuse", "?")
        return None, [f"{said}: ports were reused before TIME_WAIT ended (tcp_tw_reuse={reuse}), not capped by them"]
    if done < CRR_EXHAUSTION_FRACTION * limit:
        return None, []
    return [f"{said}: the rate is capped by port exhaustion"], []


def _policer(step: StepResult, rep: RepetitionResult, s: _Seen) -> tuple[Optional[list[str]], list[str]]:
    """(evidence it is the policer or None, what the policer did anyway: evidence for another verdict).

    The drops are the policer's own count (a meter's band, tc's police action) read around the repetition.
    What got through is set against the rate and, beside it, against the rate plus the burst: a policer's
    bucket starts full, so over a test of T seconds its burst lets ``burst / T`` more through -- a 3 s test
    at 10240 kbit/s with the 8192 kbit default burst may pass 1.27 times the rate, and that is no leak.
    """
    pol = step.policing
    if pol is None:
        return None, []
    if pol.verified is False:
        return None, [f"policing {pol.rate_kbps} kbit/s on {pol.port} was configured but NOT enforced"]
    rate_mbps = pol.rate_kbps / 1000.0
    drops = rep.meter_drops
    policer = POLICER_NAMES.get(pol.mechanism, pol.mechanism)
    said = []
    if drops is not None:
        said.append(f"the {policer} on {pol.port} dropped {drops:,} packets")
    stream = step.type in ("TCP_STREAM", "UDP_STREAM")
    ratio = None if not stream or s.received_mbps is None or not rate_mbps else s.received_mbps / rate_mbps
    allowed = policed_allowance_mbps(pol.rate_kbps, pol.burst_kbit, step.duration)
    if ratio is not None and s.received_mbps is not None:
        said.append(f"received {s.received_mbps:,.2f} Mbit/s of the {rate_mbps:,.2f} Mbit/s configured ({ratio:.2f})")
        if allowed > rate_mbps:
            said.append(
                f"its {pol.burst_kbit:,} kbit burst lets {allowed - rate_mbps:,.2f} Mbit/s more through over a "
                f"{step.duration} s test: {s.received_mbps / allowed:.2f} of rate plus burst"
            )
    dropped = drops is not None and drops > 0
    near = ratio is None or ratio >= POLICER_ACHIEVED_MIN
    if dropped and near:
        return said, []
    within = s.received_mbps is not None and s.received_mbps <= POLICER_ABOVE * allowed
    if drops is None and ratio is not None and ratio >= POLICER_ACHIEVED_MIN and within:
        return [*said, f"(drops of {pol.mechanism} policing are not counted here)"], []
    return None, said


def policed_allowance_mbps(rate_kbps: int, burst_kbit: int, duration_s: Optional[int]) -> float:
    """What a policer lets through on average over a test that starts with a full bucket: rate + burst / T."""
    if not duration_s or duration_s <= 0 or burst_kbit <= 0:
        return rate_kbps / 1000.0
    return (rate_kbps + burst_kbit / duration_s) / 1000.0


def _fragments_policed(step: StepResult, rep: RepetitionResult, s: _Seen) -> Optional[list[str]]:
    """Datagrams larger than a frame, through a policer that dropped: the switch delivered about the rate
    in fragments, but a datagram that lost one fragment is lost whole, so netserver received far less.

    The 2010 study's UDP test (``-m 10000``): asked only when no CPU explains the loss (a starved receiver
    is said first), as on a host whose cores are another machine's and not measured.
    """
    pol = step.policing
    drops = rep.meter_drops
    if (
        pol is None
        or pol.verified is False
        or step.type != "UDP_STREAM"
        or (step.message_size or 0) <= UDP_IN_ONE_FRAME
        or not drops
        or s.delivered_mbps is None
        or s.received_mbps is None
    ):
        return None
    rate_mbps = pol.rate_kbps / 1000.0
    # the counters span the whole repetition: senders that ran late (a loaded or emulated host) sent for longer
    test_s = float(step.duration or 0)
    span = max(test_s, rep.wall_s or 0.0)
    delivered = s.delivered_mbps * test_s / span if test_s and span else s.delivered_mbps
    allowed = policed_allowance_mbps(pol.rate_kbps, pol.burst_kbit, round(span) or step.duration)
    if not POLICER_ACHIEVED_MIN * rate_mbps <= delivered <= POLICER_ABOVE * allowed:
        return None
    if delivered < LOST_IN_RECEIVER_FACTOR * s.received_mbps:
        return None
    frames = -(-(step.message_size or 0) // UDP_IN_ONE_FRAME)
    return [
        f"the {POLICER_NAMES.get(pol.mechanism, pol.mechanism)} on {pol.port} dropped {drops:,} packets",
        f"{step.message_size:,}-byte datagrams leave as {frames} IP fragments: the switch delivered "
        f"{delivered:,.2f} Mbit/s of them towards the server over the {span:.1f} s its counters span (the rate is "
        f"{rate_mbps:,.2f}), netserver received {s.received_mbps:,.2f} Mbit/s of whole datagrams -- one fragment "
        "dropped loses its datagram",
    ]


def _starved(s: _Seen, step: StepResult) -> Optional[tuple[str, list[str]]]:
    """Every core busy while the netserver (or netperf) barely ran: it was starved of CPU."""
    if not s.saturated:
        return None
    host = f"the host's cores were at {_cores(s)}"
    lost_in_guest = (
        s.delivered_mbps is not None
        and s.received_mbps is not None
        and s.delivered_mbps > 0
        and s.delivered_mbps >= LOST_IN_RECEIVER_FACTOR * s.received_mbps
    )
    sent = s.netperf is not None and s.netperf >= STARVED_PCT  # the senders did run
    if s.netserver is not None and s.netserver < STARVED_PCT and sent and (lost_in_guest or step.type != "UDP_STREAM"):
        said = [f"netserver at {_pct(s.netserver)} of a core while {host}"]
        if lost_in_guest:
            said.append(
                f"the switch delivered {s.delivered_mbps:,.2f} Mbit/s towards the server, "
                f"netserver received {s.received_mbps:,.2f} Mbit/s"
            )
        if s.netperf is not None:
            said.append(f"netperf (the senders) at {_pct(s.netperf)} of a core")
        return "receiver-cpu", said
    if s.netperf is not None and s.netperf < STARVED_PCT and s.netserver is not None and s.netserver >= STARVED_PCT:
        return "sender-cpu", [f"netperf at {_pct(s.netperf)} of a core while {host}"]
    return None


def _at_a_core(s: _Seen) -> Optional[tuple[str, list[str]]]:
    """A thread or process at the CPU it can use: the switch's busiest thread first, then the endpoints."""
    if s.vswitchd_thread and s.vswitchd_thread[1] >= AT_A_CORE_PCT:
        name, pct = s.vswitchd_thread
        said = [f"ovs-vswitchd's {name} thread at {pct:.0f}% of a core"]
        if s.netperf is not None and s.netserver is not None:
            said.append(f"netperf {_pct(s.netperf)}, netserver {_pct(s.netserver)} of a core")
        return "switch", said
    ceiling = AT_A_CORE_PCT * s.slots
    for verdict, who, pct in (("receiver-cpu", "netserver", s.netserver), ("sender-cpu", "netperf", s.netperf)):
        if pct is not None and pct >= ceiling:
            return verdict, [f"{who} at {pct:.0f}% of a core, the most {s.slots} process(es) can use on these cores"]
    return None


def _switch_drops(s: _Seen) -> Optional[list[str]]:
    if s.switch_drops and s.switched_pkts and s.switch_drops >= SWITCH_DROP_FRACTION * s.switched_pkts:
        return [f"the switch's ports dropped {s.switch_drops:,} of {s.switched_pkts:,} packets"]
    return None


def of_repetition(
    step: StepResult, rep: RepetitionResult, *, facts: Optional[dict[str, Any]] = None, client_vif: Optional[str] = None
) -> Verdict:
    """The bottleneck of one measured repetition; ``facts`` are the run's preflight facts (ephemeral ports)."""
    s = _seen(step, rep, client_vif)
    found = _decide(step, rep, s, facts or {})
    return Verdict(found[0], found[1], _lost(rep, found[0], s))


def _decide(step: StepResult, rep: RepetitionResult, s: _Seen, facts: dict[str, Any]) -> tuple[str, list[str]]:
    ports, ports_said = _ports(step, rep, facts)
    if ports:
        return "ports", ports
    policer, policer_said = _policer(step, rep, s)
    policer_said = [*policer_said, *ports_said]  # evidence for whatever the verdict turns out to be
    if policer:
        return "policer", policer
    for rule in (_starved(s, step), _at_a_core(s)):
        if rule:
            return rule[0], [*rule[1], *policer_said]
    fragments = _fragments_policed(step, rep, s)
    if fragments:
        return "policer", fragments
    drops = _switch_drops(s)
    if drops:
        return "switch", [*drops, *policer_said]
    busiest = (
        f"ovs-vswitchd's busiest thread ({s.vswitchd_thread[0]}) {s.vswitchd_thread[1]:.0f}%"
        if s.vswitchd_thread
        else "ovs-vswitchd not measured"
    )
    checked = [
        f"no process at its cores ({busiest}, netperf {_pct(s.netperf)}, netserver {_pct(s.netserver)} of a core)",
        f"host at {_pct(s.host)}" + (f" (cores {_cores(s)})" if s.cores else ""),
    ]
    if s.saturated:
        charged = sum(x for x in (s.netperf, s.netserver, s.vswitchd_total) if x is not None)
        checked.append(
            f"every core busy, and netperf, netserver and ovs-vswitchd account for {charged:.0f}% of a core of "
            f"{100 * len(s.cores)}%: the rest is the kernel's (softirq) or other processes'"
        )
    return "unknown", [*policer_said, *checked]


def _lost(rep: RepetitionResult, verdict: str, s: _Seen) -> Optional[dict[str, Any]]:
    """Lost instances: no netserver answering while it was starved is the receiver; the rest share the step's."""
    agg = rep.aggregate
    if not agg.lost:
        return None
    reasons = agg.lost_reasons
    unanswered = sum(n for r, n in reasons.items() if r.startswith("establish control"))
    if unanswered == agg.lost and verdict != "receiver-cpu":
        return {
            "instances": agg.lost,
            "verdict": "unknown",
            "evidence": [f"{unanswered} instance(s) found no netserver answering; {_netserver_cpu(s)}"],
        }
    said = "; ".join(f"{n} x {r}" for r, n in reasons.items())
    return {
        "instances": agg.lost,
        "verdict": verdict,
        "evidence": [f"{agg.lost} of {agg.instances} lost ({said}) while the step was limited by {verdict}"],
    }


def of_step(
    step: StepResult, *, facts: Optional[dict[str, Any]] = None, client_vif: Optional[str] = None
) -> Optional[Verdict]:
    """The step's verdict: the repetitions' most frequent, its evidence from the first that found it."""
    if not step.repetitions:
        return None
    each = [of_repetition(step, r, facts=facts, client_vif=client_vif) for r in step.repetitions]
    top, _ = Counter(v.verdict for v in each).most_common(1)[0]
    first = next(v for v in each if v.verdict == top)
    out = Verdict(top, list(first.evidence), _lost_total(each))
    if len({v.verdict for v in each}) > 1:
        out.evidence.append(
            "repetitions disagree: "
            + ", ".join(f"rep {r.repetition} {v.verdict}" for r, v in zip(step.repetitions, each))
        )
    return out


def _lost_total(each: list[Verdict]) -> Optional[dict[str, Any]]:
    losts = [v.lost for v in each if v.lost]
    if not losts:
        return None
    top, _ = Counter(lost["verdict"] for lost in losts).most_common(1)[0]
    evidence = list(dict.fromkeys(e for lost in losts for e in lost["evidence"]))  # each said once
    return {"instances": sum(lost["instances"] for lost in losts), "verdict": top, "evidence": evidence}


def stored_or_computed(step: StepResult, facts: dict[str, Any], client_vif: Optional[str]) -> Optional[Verdict]:
    """The verdict the run recorded, or (a run from before verdicts) the one its figures give."""
    stored = Verdict.from_json(step.verdict) if step.verdict else None
    return stored or of_step(step, facts=facts, client_vif=client_vif)
