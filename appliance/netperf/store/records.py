"""A run's results as typed records: what the runner builds and every reader reads back.

``results.json`` (schema ``hvnet.netperf.results`` version 2) is the contract
with operators' scripts and with older runs, so each record's ``to_json``
writes exactly the keys, values and order the file has always had, and
``from_json`` reads any version 2 file (an older version is upgraded first, by
:mod:`appliance.netperf.store.upgrade`).  Two fields keep a load/save round
trip exact: ``extra`` holds keys this hvnet does not know (written back after
the known ones), and ``absent`` names known keys the record does not carry --
a figure that does not apply to the test type (no latency for a stream), or a
key an older version 1 file predates (``runs_in``, ``meter_drops``) -- so
saving never invents them.

Free-form parts stay dicts: each instance's raw record, CPU samples, port
counters, preflight facts and enforcement reports are looked up by a key or
two at most, and their shape follows netperf, psutil and OVS, not hvnet.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import TYPE_CHECKING, Any, Callable, ClassVar, Optional, TypeVar

Json = dict[str, Any]
R = TypeVar("R", bound="Record")

_BOOKKEEPING = ("extra", "absent")


@dataclass
class Record:
    """Shared (de)serialisation: one JSON key per field, in field order."""

    # Keys written only when set (the runner adds them when they apply: a summary once a
    # repetition finished, the reason of a partial run...). A None there means "not in the file".
    OPTIONAL: ClassVar[frozenset[str]] = frozenset()
    # How a field's JSON value becomes a record (nested records, lists of them).
    NESTED: ClassVar[dict[str, Callable[[Any], Any]]] = {}
    if TYPE_CHECKING:  # every record declares these two last, after its defaulted fields
        extra: Json
        absent: frozenset[str]

    @classmethod
    def keys(cls) -> tuple[str, ...]:
        return tuple(f.name for f in fields(cls) if f.name not in _BOOKKEEPING)

    def to_json(self) -> Json:
        out: Json = {}
        absent: frozenset[str] = self.absent
        for key in self.keys():
            value = getattr(self, key)
            if key in absent or (value is None and key in self.OPTIONAL):
                continue
            out[key] = _dump(value)
        out.update(self.extra)
        return out

    @classmethod
    def from_json(cls: type[R], doc: Any) -> R:
        if not isinstance(doc, dict):
            raise ValueError(f"{cls.__name__}: expected an object, found {type(doc).__name__}")
        known = cls.keys()
        values = {k: cls.NESTED.get(k, _same)(doc[k]) for k in known if k in doc}
        extra = {k: v for k, v in doc.items() if k not in known}
        return cls(**values, extra=extra, absent=frozenset(k for k in known if k not in doc))  # type: ignore[call-arg]

    def figure(self, key: str) -> Any:
        """A field by its JSON key (CSV columns, compared figures); None when the record lacks it."""
        return None if key in self.absent or key not in self.keys() else getattr(self, key)


def _same(value: Any) -> Any:
    return value


def _dump(value: Any) -> Any:
    if isinstance(value, Record):
        return value.to_json()
    if isinstance(value, list):
        return [_dump(v) for v in value]
    return value


def _list_of(cls: type[Record]) -> Callable[[Any], list[Any]]:
    return lambda items: [cls.from_json(x) for x in items]


def _optional(cls: type[Record]) -> Callable[[Any], Any]:
    return lambda value: None if value is None else cls.from_json(value)


# -- one repetition's figures ------------------------------------------------------------------

UDP_FIGURES = ("sent_mbps", "received_mbps", "udp_loss_pct")
# packet-rate tests (UDP_PPS): what the generator sent and the receiver got, what each monitor port was
# sent (the switch's counters) and what a capture on it kept; each None (not written) when not measured
PPS_FIGURES = (
    "sent_pps",
    "received_pps",
    "achieved_ratio",
    "paced_ratio",
    "monitor_pps",
    "monitor_mbps",
    "captured_pps",
    "captured_ratio",
    "captured_port_ratio",
    "mirrored_pps",
    "mirrored_mbps",
    "arrived_pps",
    "arrived_mbps",
    "arrived_inner_mbps",
    "arrived_ratio",
)
# many-flows tests (TCP_IPERF): every stream of the step, all instances together (see .figures.flows)
FLOW_FIGURES = ("flow_mean_mbps", "flow_min_mbps", "flow_max_mbps", "flow_jain")
LATENCY_FIGURES = ("latency_mean_us", "latency_p50_us", "latency_p90_us", "latency_p99_us")


@dataclass
class Aggregate(Record):
    """What one repetition's instances achieved together (see :func:`.aggregate.repetition`).

    Rates are Mbit/s for streams, transactions/s for request/response tests.  UDP
    figures exist for UDP_STREAM only and latencies for request/response only: for
    other tests their keys are ``absent`` (not applicable), never 0.
    """

    OPTIONAL = frozenset(
        {"retransmissions", "transactions", "confidence_width_pct_max", "confidence_met", *PPS_FIGURES,
         "monitor_ports", "captured", "capture_dropped", "arrived", "flows", *FLOW_FIGURES, "pairs"}
    )  # fmt: skip

    instances: int = 0
    ok: int = 0
    lost: int = 0
    lost_reasons: dict[str, int] = field(default_factory=dict)
    sum: Optional[float] = None
    mean: Optional[float] = None
    min: Optional[float] = None
    max: Optional[float] = None
    jain: Optional[float] = None
    retransmissions: Optional[int] = None  # TCP only, when netperf reported it
    sent_mbps: Optional[float] = None
    received_mbps: Optional[float] = None
    udp_loss_pct: Optional[float] = None  # from bytes: what was sent against what arrived
    latency_mean_us: Optional[float] = None
    latency_p50_us: Optional[float] = None
    latency_p90_us: Optional[float] = None
    latency_p99_us: Optional[float] = None
    transactions: Optional[int] = None
    confidence_width_pct_max: Optional[float] = None
    confidence_met: Optional[bool] = None
    sent_pps: Optional[float] = None  # packets/s the generator sent (iperf3's client)
    received_pps: Optional[float] = None  # packets/s that arrived (iperf3's server)
    achieved_ratio: Optional[float] = None  # received ÷ offered (None: no offered rate)
    paced_ratio: Optional[float] = None  # sent ÷ offered: did the generator keep the pace?
    monitor_pps: Optional[float] = None  # copies/s each monitor port was sent (mean over the case's outputs)
    monitor_mbps: Optional[float] = None  # the same in Mbit/s: counted bytes + 4 FCS per frame
    monitor_ports: Optional[int] = None  # mirror/TAP outputs those figures cover
    captured: Optional[int] = None  # packets the case's captures kept (all of them)
    captured_pps: Optional[float] = None  # per capture, mean
    captured_ratio: Optional[float] = None  # captured ÷ offered to the captures (the switch's counters)
    captured_port_ratio: Optional[float] = None  # captured ÷ what the switch sent the captured ports
    capture_dropped: Optional[int] = None  # the captures' own drops (tcpdump: kernel and interface)
    # a remote collector (GRE/ERSPAN): what its interface received, against what the switch sent the tunnel
    mirrored_pps: Optional[float] = None  # copies/s the mirror selected for the tunnels (its ports' counters)
    mirrored_mbps: Optional[float] = None  # the same in Mbit/s: the selected frames, + 4 FCS each
    arrived: Optional[int] = None  # packets the collector guest's interface received
    arrived_pps: Optional[float] = None
    arrived_mbps: Optional[float] = None  # as the uplink carried them: encapsulated, + 4 FCS per frame
    arrived_inner_mbps: Optional[float] = None  # decapsulated: less the outer headers' bytes per packet
    arrived_ratio: Optional[float] = None  # arrived ÷ mirrored, in packets
    flows: Optional[int] = None  # TCP streams measured (of the instances that reported)
    flow_mean_mbps: Optional[float] = None  # received Mbit/s per stream
    flow_min_mbps: Optional[float] = None
    flow_max_mbps: Optional[float] = None
    flow_jain: Optional[float] = None  # Jain's index over every stream of the step (``jain``: over instances)
    # several client -> server pairs: each pair's {client, server, instances, ok, lost, sum, mean} (see
    # .figures.pairs); the figures above are the total over every pair's instances
    pairs: Optional[list[Json]] = None
    extra: Json = field(default_factory=dict)
    absent: frozenset[str] = frozenset()


@dataclass
class RepetitionResult(Record):
    """One measured repetition of a step: its instances, figures, CPU and the switch's counters."""

    NESTED = {"aggregate": lambda v: Aggregate.from_json(v)}
    OPTIONAL = frozenset({"collector", "phases", "throughput_series", "captures", "arrival", "perf_stat"})

    repetition: int = 0
    started: Optional[str] = None
    start_spread_ms: Optional[float] = None
    wall_s: Optional[float] = None
    instances: list[Json] = field(default_factory=list)  # netperf's figures per instance, as parsed
    aggregate: Aggregate = field(default_factory=Aggregate)
    cpu: Json = field(default_factory=dict)  # host_pct, vswitchd_pct_of_core, netperf_pct_of_core, ...
    counters: dict[str, dict[str, int]] = field(default_factory=dict)  # port -> counter deltas
    meter_drops: Optional[int] = None
    raw: str = ""
    argv: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    # monitored cases (sFlow/IPFIX to the lab's collector): what it received against what was expected
    collector: Optional[Json] = None
    phases: Optional[list[Json]] = None  # phased cases: each phase's figures (see .monitoring)
    # netperf's interim results summed in 1 s bins from the release (phased cases: from the phases' clock);
    # None: not recorded (iperf3 steps, runs before every step recorded them)
    throughput_series: Optional[list[Optional[float]]] = None
    captures: Optional[list[Json]] = None  # a case's listeners: each capture's port, counts and offered packets
    arrival: Optional[Json] = None  # a remote collector's receive counters (deltas) and the tunnel's overhead
    # the suite's perf_stat: each event's count on ovs-vswitchd's threads or why not measured, CPI, thread groups
    perf_stat: Optional[Json] = None
    extra: Json = field(default_factory=dict)
    absent: frozenset[str] = frozenset()


# -- across repetitions ------------------------------------------------------------------------


@dataclass
class Figure(Record):
    """A figure across repetitions: mean, 95% CI half width (None with one repetition), sample count."""

    mean: Optional[float] = None
    ci95: Optional[float] = None
    n: int = 0
    extra: Json = field(default_factory=dict)
    absent: frozenset[str] = frozenset()


SUMMARY_FIGURES = (
    "sum",
    "mean",
    "min",
    "max",
    "jain",
    "retransmissions",
    "udp_loss_pct",
    "sent_mbps",
    "received_mbps",
    *LATENCY_FIGURES,
    *PPS_FIGURES,
    *FLOW_FIGURES,
)
CPU_FIGURES = (
    "host_pct",
    "busiest_core_pct",
    "vswitchd_pct_of_core",
    "netserver_pct_of_core",
    "hvnet_pct_of_core",
    "netperf_pct_of_core",
)


@dataclass
class Summary(Record):
    """A step across its repetitions (see :func:`.aggregate.summary`): only what was measured is set."""

    OPTIONAL = frozenset({*SUMMARY_FIGURES, *(f"cpu_{k}" for k in CPU_FIGURES), "start_spread_ms_max", "pairs"})
    NESTED = {k: _optional(Figure) for k in SUMMARY_FIGURES}

    repetitions: int = 0
    sum: Optional[Figure] = None
    mean: Optional[Figure] = None
    min: Optional[Figure] = None
    max: Optional[Figure] = None
    jain: Optional[Figure] = None
    retransmissions: Optional[Figure] = None
    udp_loss_pct: Optional[Figure] = None
    sent_mbps: Optional[Figure] = None
    received_mbps: Optional[Figure] = None
    latency_mean_us: Optional[Figure] = None
    latency_p50_us: Optional[Figure] = None
    latency_p90_us: Optional[Figure] = None
    latency_p99_us: Optional[Figure] = None
    sent_pps: Optional[Figure] = None
    received_pps: Optional[Figure] = None
    achieved_ratio: Optional[Figure] = None
    paced_ratio: Optional[Figure] = None
    monitor_pps: Optional[Figure] = None
    monitor_mbps: Optional[Figure] = None
    captured_pps: Optional[Figure] = None
    captured_ratio: Optional[Figure] = None
    captured_port_ratio: Optional[Figure] = None
    mirrored_pps: Optional[Figure] = None
    mirrored_mbps: Optional[Figure] = None
    arrived_pps: Optional[Figure] = None
    arrived_mbps: Optional[Figure] = None
    arrived_inner_mbps: Optional[Figure] = None
    arrived_ratio: Optional[Figure] = None
    flow_mean_mbps: Optional[Figure] = None
    flow_min_mbps: Optional[Figure] = None
    flow_max_mbps: Optional[Figure] = None
    flow_jain: Optional[Figure] = None
    lost: int = 0
    instances: int = 0
    lost_reasons: dict[str, int] = field(default_factory=dict)
    cpu_host_pct: Optional[float] = None
    cpu_busiest_core_pct: Optional[float] = None
    cpu_vswitchd_pct_of_core: Optional[float] = None
    cpu_netserver_pct_of_core: Optional[float] = None
    cpu_hvnet_pct_of_core: Optional[float] = None
    cpu_netperf_pct_of_core: Optional[float] = None
    start_spread_ms_max: Optional[float] = None
    pairs: Optional[list[Json]] = None  # each pair's {client, server, sum, mean ({mean, ci95, n}), lost, instances}
    extra: Json = field(default_factory=dict)
    absent: frozenset[str] = frozenset()

    def mean_of(self, key: str) -> Optional[float]:
        """The mean across repetitions of figure ``key`` (None: never measured)."""
        fig = self.figure(key)
        return fig.mean if isinstance(fig, Figure) else None


# -- a step --------------------------------------------------------------------------------------


@dataclass
class Policing(Record):
    """The ingress policing in force on the client VIF during a step, and whether it was enforced."""

    port: str = ""
    rate_bits_per_s: int = 0
    burst_bits: int = 0
    mechanism: str = ""
    verified: Optional[bool] = None  # False: configured but NOT enforced; None: not checked
    extra: Json = field(default_factory=dict)
    absent: frozenset[str] = frozenset()

    # OVS sets policing in kbit/s and kbit, which is how the verdict and the reports speak of it
    @property
    def rate_kbps(self) -> int:
        return self.rate_bits_per_s // 1000

    @property
    def burst_kbit(self) -> int:
        return self.burst_bits // 1000


@dataclass
class MirrorInfo(Record):
    """A mirror (or TAP) a case created: where its copies go and which ports it selects."""

    OPTIONAL = frozenset({"kind", "tunnel"})

    name: str = ""
    bridge: str = ""
    output_port: Optional[str] = None
    src: list[str] = field(default_factory=list)
    dst: list[str] = field(default_factory=list)
    kind: Optional[str] = None  # None: a port mirror; "tap-flows" | "tap-group": a TAP (its copies may be a subset)
    tunnel: Optional[Json] = None  # a GRE/ERSPAN output: {type, options} of the tunnel port the switch sends into
    extra: Json = field(default_factory=dict)
    absent: frozenset[str] = frozenset()


@dataclass
class StepResult(Record):
    """One step (test x case x message size x concurrency) and its repetitions so far."""

    OPTIONAL = frozenset(
        {"summary", "interrupted_repetitions", "monitor", "phases", "vswitchd_threads", "collector", "verdict",
         "frame_size", "offered", "generator", "capture", "collector_guest", "flows", "pairs", "cpus"}
    )  # fmt: skip
    NESTED = {
        "policing": _optional(Policing),
        "mirrors": _list_of(MirrorInfo),
        "repetitions": _list_of(RepetitionResult),
        "summary": _optional(Summary),
    }

    key: str = ""
    index: int = 0
    test: str = ""
    type: str = ""
    case: str = ""
    message_size: Optional[int] = None
    request_size: Optional[int] = None
    response_size: Optional[int] = None
    concurrency: int = 0
    duration: Optional[int] = None
    warmup: int = 0
    metric: str = ""
    units: str = ""
    confidence: Optional[Json] = None  # the suite's confidence settings (netperf -I/-i)
    policing: Optional[Policing] = None
    mirrors: list[MirrorInfo] = field(default_factory=list)
    enforcement: list[Json] = field(default_factory=list)  # the policy engine's enforcement reports
    repetitions: list[RepetitionResult] = field(default_factory=list)
    summary: Optional[Summary] = None
    verdict: Optional[Json] = None  # the bottleneck and its evidence (see .verdict), once a repetition finished
    interrupted_repetitions: Optional[list[int]] = None
    monitor: Optional[Json] = None  # the case's sFlow/IPFIX and its collector
    phases: Optional[list[Json]] = None  # the case's phases as planned
    vswitchd_threads: Optional[Json] = None  # {thread group: {mean, ci95, n}}, % of a core, across repetitions
    collector: Optional[Json] = None  # the collector's figures across repetitions (see .monitor.combine)
    frame_size: Optional[int] = None  # packet-rate tests: bytes on the wire (see .frames)
    offered: Optional[Json] = None  # {value, unit, pps, mbps}; None: unpaced (as fast as the generator can)
    generator: Optional[str] = None  # "iperf3 3.12" for packet-rate tests (netperf otherwise)
    capture: Optional[Json] = None  # the case's listeners: {guests, ports, snaplen}
    collector_guest: Optional[str] = None  # the remote collector whose receive counters say what arrived
    flows: Optional[int] = None  # TCP_IPERF: parallel streams per instance (iperf3 -P)
    # several client -> server pairs: [{client, server}], each running ``concurrency`` instances (the
    # step's instances are concurrency x pairs, pair after pair; each instance's record names its pair)
    pairs: Optional[list[Json]] = None
    # the case's ``cpus:``: {asked: {ovs-vswitchd, guests}, read_back: {ovs-vswitchd: [{pid, threads, affinity}],
    # guests: [...]}}, the affinity being what the kernel reported once it was set
    cpus: Optional[Json] = None
    extra: Json = field(default_factory=dict)
    absent: frozenset[str] = frozenset()


# -- the run ---------------------------------------------------------------------------------------


@dataclass
class SuiteInfo(Record):
    name: str = ""
    file: str = ""
    sha256: str = ""
    description: str = ""
    extra: Json = field(default_factory=dict)
    absent: frozenset[str] = frozenset()


@dataclass
class ClientInfo(Record):
    guest: str = ""
    address: Optional[str] = None
    vif: Optional[str] = None
    runs_in: Optional[str] = None  # "qemu" | "netns" | "probe" | "vm-ssh" | "vm-agent"
    extra: Json = field(default_factory=dict)
    absent: frozenset[str] = frozenset()


@dataclass
class ServerInfo(Record):
    OPTIONAL = frozenset({"netserver_pid", "netserver_pids"})

    guest: Optional[str] = None
    address: str = ""
    port: int = 0
    managed: bool = False
    runs_in: Optional[str] = None  # None: a netserver hvnet does not manage
    netserver_pid: Optional[int] = None
    # several pairs: every other server guest's netserver, {guest: pid} (the first pair's is netserver_pid)
    netserver_pids: Optional[Json] = None
    extra: Json = field(default_factory=dict)
    absent: frozenset[str] = frozenset()


@dataclass
class Meta(Record):
    """Where and with what a run measured: versions, endpoints, the policy in force, timestamps."""

    OPTIONAL = frozenset({"setup", "policy_snapshot", "restore_problems", "finished", "path"})
    NESTED = {
        "suite": lambda v: SuiteInfo.from_json(v),
        "client": lambda v: ClientInfo.from_json(v),
        "server": lambda v: ServerInfo.from_json(v),
    }

    hvnet_version: str = ""
    host: str = ""
    kernel: str = ""
    ovs_version: Optional[str] = None
    datapath_types: list[str] = field(default_factory=list)
    netperf_version: Optional[str] = None
    suite: SuiteInfo = field(default_factory=SuiteInfo)
    command: list[str] = field(default_factory=list)
    client: ClientInfo = field(default_factory=ClientInfo)
    server: ServerInfo = field(default_factory=ServerInfo)
    preflight: Json = field(default_factory=dict)  # {"warnings": [...], "facts": {...}}
    started: Optional[str] = None
    warnings: list[str] = field(default_factory=list)
    setup: Optional[Json] = None  # {"enforcement": [...], "policing": {...} | None}
    policy_snapshot: Optional[str] = None
    restore_problems: Optional[list[str]] = None
    finished: Optional[str] = None
    path: Optional[Json] = None  # across an OVN pool: chassis, tunnel, MTUs (appliance.netperf.run.path)
    extra: Json = field(default_factory=dict)
    absent: frozenset[str] = frozenset()


@dataclass
class SuiteResult(Record):
    """A whole run: the document saved as ``results.json`` (rewritten after every repetition)."""

    OPTIONAL = frozenset({"error", "partial_reason"})
    NESTED = {"meta": lambda v: Meta.from_json(v), "steps": _list_of(StepResult)}

    schema: str = ""
    version: int = 0
    state: str = "running"  # "running" | "complete" | "partial" | "failed"
    partial: bool = True
    meta: Meta = field(default_factory=Meta)
    steps: list[StepResult] = field(default_factory=list)
    error: Optional[str] = None
    partial_reason: Optional[str] = None
    extra: Json = field(default_factory=dict)
    absent: frozenset[str] = frozenset()
