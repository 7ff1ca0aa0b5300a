"""netperf suites (``netperf-suites/*.yaml``): tests as data, validated whole before anything runs.

A suite names its endpoints (a lab guest runs the netperf clients; the
server is a lab guest, whose netserver hvnet starts and stops, or an address
where someone else's netserver listens) -- or several client -> server pairs
of lab guests, ``endpoints: {pairs: [...]}``, whose instances every step
starts at once (its concurrency per pair; a server shared by pairs gets one
netserver) --, an optional policy fragment applied
for the suite and restored afterwards, optional *cases* (further fragments,
one at a time: a policing-rate sweep, 0/1/2/4/8 mirrors) and the tests.

Each test expands into *steps*: case x message size x concurrency, each
repeated.  Every problem is reported with ``file:line: field`` and what is
allowed, so a bad file is fixed in one pass and changes nothing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Optional

from appliance.core import yamldoc
from appliance.core.errors import ConfigError, Problem
from appliance.endpoints.topology import DEFAULT_TOPOLOGY, Topology, with_vm_guests
from appliance.endpoints.topology import load as load_topology
from appliance.netperf.define.cases import Case, check_phases, parse_cases, with_perf_stat
from appliance.netperf.define.frames import Offered
from appliance.netperf.define.monitoring import settle_seconds
from appliance.netperf.define.pairs import Pair, Server, check_iperf_server, check_pairs, parse_endpoints
from appliance.netperf.define.tests import (
    MAX_CONCURRENCY,
    MAX_STEP_FLOWS,
    NAME,
    Test,
    parse_defaults,
    parse_tests,
)
from appliance.policy import Policy
from appliance.policy.plan.document import from_document as policy_from_document
from appliance.probes import spec as probe_spec
from appliance.probes.spec import ProbeSpec

SUITES_DIR = Path(__file__).resolve().parents[3] / "netperf-suites"

MAX_STEPS = 500  # a size list written {from: 64, to: 1472} (step 1) would otherwise make 1409 steps

_VM_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_TOP = {
    "version",
    "name",
    "description",
    "topology",
    "probes",
    "vms",
    "endpoints",
    "netserver_port",
    "defaults",
    "setup",
    "cases",
    "tests",
    "perf_stat",
}
_SETUP_KEYS = {"policy"}


@dataclass(frozen=True)
class Step:
    """One measured point: ``concurrency`` instances started together, once per repetition."""

    index: int
    test: Test
    case: Case
    message_size: Optional[int]
    concurrency: int
    frame_size: Optional[int] = None  # packet-rate tests
    offered: Optional[Offered] = None

    @property
    def key(self) -> str:
        """Stable identity of the point across runs (what ``compare`` matches on)."""
        if self.test.is_pps:
            rate = self.offered.label if self.offered else "-"
            return f"{self.test.name}/{self.case.name}/f{self.frame_size}/o{rate}/c{self.concurrency}"
        if self.test.is_flows:  # p: flows per instance (iperf3's -P); the offered rate is per flow
            rate = self.offered.label if self.offered else "-"
            return f"{self.test.name}/{self.case.name}/p{self.test.flows}/o{rate}/c{self.concurrency}"
        size = f"m{self.message_size}" if self.message_size else "m-"
        return f"{self.test.name}/{self.case.name}/{size}/c{self.concurrency}"


@dataclass(frozen=True)
class GuestNeeds:
    """What a suite asks of the guest source that runs it, as plain values: where its guests are, which
    programs each must have.  The front door picks the source from this, never from the whole suite."""

    label: str  # "suite quick": what a refusal calls the run
    topology: Topology
    probes: tuple[ProbeSpec, ...]
    vms: tuple[str, ...]
    client: str
    tools: tuple[str, ...]  # on the host whose probes run them
    vm_tools: dict[str, tuple[str, ...]]  # in each real VM, by guest name


@dataclass(frozen=True)
class Suite:
    """A validated suite.  Frozen: an adjusted run is a new Suite (``with_overrides``, ``with_endpoints``), so
    what is derived from one (its steps, its peak, its guest needs) is computed once and stays true."""

    name: str
    file: str
    sha256: str
    description: str
    topology: Topology
    client: str
    server: Server
    setup: Optional[Policy] = None
    cases: list[Case] = field(default_factory=lambda: [Case("default")])
    tests: list[Test] = field(default_factory=list)
    # Probe ports hvnet adds to the host's bridge for the run (``probes:``); empty: the topology's lab guests.
    probes: tuple[ProbeSpec, ...] = ()
    # Real VMs of the VM inventory among the endpoints (``vms:``), beside probes or alone.
    vms: tuple[str, ...] = ()
    # ``endpoints: {pairs: [...]}``: every step runs its concurrency for each pair at once; ``client`` and
    # ``server`` are then the first pair's (the VIF a policer or monitor is read on).  Empty: the one pair.
    pairs: tuple[Pair, ...] = ()

    def endpoint_pairs(self) -> tuple[Pair, ...]:
        """The pairs a step runs (the single form's one pair when the server is a guest; () for an address)."""
        if self.pairs:
            return self.pairs
        return (Pair(self.client, self.server.guest),) if self.server.guest else ()

    def guest_names(self) -> list[str]:
        """Every endpoint guest, clients first, each once (what the guest source must provide)."""
        names = [self.client, *(p.client for p in self.pairs)]
        names += [g for g in [self.server.guest, *(p.server for p in self.pairs)] if g]
        return list(dict.fromkeys(names))

    def server_guests(self) -> list[str]:
        """The guests hvnet starts servers in, each once however many pairs it serves."""
        return list(dict.fromkeys(p.server for p in self.endpoint_pairs()))

    def instances(self, concurrency: int) -> int:
        """Instances a step of this concurrency starts: its concurrency for each pair."""
        return concurrency * max(1, len(self.pairs))

    # -- what the run's stages need, computed once (a copy with overrides computes its own) ---------------

    @cached_property
    def peak_instances(self) -> int:
        """The instances the busiest step starts, every pair's (what the open-file and process limits must hold)."""
        return self.instances(max(max(t.concurrency) for t in self.tests))

    @cached_property
    def iperf_types(self) -> tuple[str, ...]:
        """The test types iperf3 generates (UDP_PPS, TCP_IPERF), sorted; empty: netperf alone."""
        return tuple(sorted({t.type for t in self.tests if t.is_iperf}))

    @cached_property
    def iperf_concurrency(self) -> int:
        """The busiest iperf3 step's concurrency per pair (0: no iperf3 test): how many iperf3 servers a pair needs."""
        return max((max(t.concurrency) for t in self.tests if t.is_iperf), default=0)

    @cached_property
    def fragments(self) -> tuple[tuple[str, Optional[Policy]], ...]:
        """Every policy fragment with the label the run gives it: the setup's, then each case's."""
        return (("setup", self.setup), *((f"case {c.name}", c.policy) for c in self.cases))

    @cached_property
    def guest_needs(self) -> GuestNeeds:
        """What the guest source must provide: the client and every server guest, with the programs each runs."""
        pps = ("iperf3",) if self.iperf_types else ()
        vm_tools = {c: ("netperf", *pps) for c in [self.client, *(p.client for p in self.pairs)]}
        for s in self.server_guests():  # every pair's server (a server is never its pair's client)
            vm_tools[s] = tuple(dict.fromkeys((*vm_tools.get(s, ()), "netserver", *pps)))
        return GuestNeeds(f"suite {self.name}", self.topology, self.probes, self.vms, self.client,
                          ("netperf", "netserver", *pps), vm_tools)  # fmt: skip

    @cached_property
    def _steps(self) -> tuple[Step, ...]:
        out: list[Step] = []
        for case in self.cases:
            for test in self.tests:
                if case.duration is not None:
                    test = dataclasses.replace(test, duration=case.duration)
                for size, frame, offered in test.points():
                    for n in test.concurrency:
                        out.append(Step(len(out), test, case, size, n, frame, offered))
        return tuple(out)

    def steps(self) -> list[Step]:
        """Every measured point in run order: case-major, so each case's policy is applied once (built once;
        each caller gets its own list)."""
        return list(self._steps)

    def estimated_seconds(self) -> float:
        """Lower bound of the run's length (test time plus warm-ups), for the ETA."""
        return sum(
            (s.test.warmup + s.test.max_seconds() + settle_seconds(s.case.monitors())) * s.test.repetitions
            for s in self.steps()
        )

    def with_overrides(
        self,
        *,
        concurrency: Optional[tuple[int, ...]] = None,
        duration: Optional[int] = None,
        repetitions: Optional[int] = None,
    ) -> Suite:
        """A copy with every test's concurrency/duration/repetitions replaced (CLI and TUI adjustments).

        ValueError when the new concurrency takes a many-flows test past the flows a step may hold: the file's
        own check cannot see an override."""
        n = self.instances(max(concurrency)) if concurrency else 0
        if n > MAX_CONCURRENCY:
            raise ValueError(f"concurrency is per pair: {max(concurrency or (0,))} x {len(self.pairs)} pairs = {n} "
                             f"instances in a step; at most {MAX_CONCURRENCY}")  # fmt: skip
        for t in self.tests:
            if concurrency and t.flows > 1 and n * t.flows > MAX_STEP_FLOWS:
                raise ValueError(f"test {t.name}: {n} instances x {t.flows} flows is more than the "
                                 f"{MAX_STEP_FLOWS} flows a step may hold")  # fmt: skip
        tests = [
            dataclasses.replace(
                t,
                concurrency=concurrency or t.concurrency,
                duration=duration or t.duration,
                repetitions=repetitions or t.repetitions,
            )
            for t in self.tests
        ]
        return dataclasses.replace(self, tests=tests)

    def with_endpoints(self, topology: Topology, client: Optional[str] = None, server: Optional[str] = None) -> Suite:
        """A copy run on another lab topology's guests (any kind: namespace or QEMU).

        ``ValueError`` names the guest that the topology lacks and lists the ones it has; a suite of pairs
        keeps its pairs (another client or server would say which pair it replaces).
        """
        names = [g.name for g in topology.guests]
        if self.pairs:
            return self._pairs_on(topology, names, client, server)
        client = client or self.client
        server_guest = server or self.server.guest
        for role, guest in (("client", client), ("server", server_guest)):
            if guest is not None and guest not in names:
                raise ValueError(
                    f"{role} {guest!r} is not a guest of topology {topology.file}; guests: {', '.join(names)}"
                )
        if server_guest is not None and server_guest == client:
            raise ValueError(f"client and server are both {client!r}: netperf needs two guests")
        new_server = dataclasses.replace(self.server, guest=server_guest) if server_guest else self.server
        probes = self.probes if topology is self.topology else ()  # another topology: its lab guests
        return dataclasses.replace(self, topology=topology, client=client, server=new_server, probes=probes)

    def _pairs_on(self, topology: Topology, names: list[str], client: Optional[str], server: Optional[str]) -> Suite:
        if client or server:
            raise ValueError(f"the suite runs {len(self.pairs)} pairs ({', '.join(p.label() for p in self.pairs)}): "
                             "edit its endpoints.pairs, not one client or server")  # fmt: skip
        missing = [g for g in self.guest_names() if g not in names]
        if missing:
            raise ValueError(f"{', '.join(missing)} not guests of topology {topology.file}; guests: {', '.join(names)}")
        probes = self.probes if topology is self.topology else ()
        return dataclasses.replace(self, topology=topology, probes=probes)


# -- loading -------------------------------------------------------------------


def concurrency_list(text: str) -> tuple[int, ...]:
    """An operator's concurrency override (``1,4,8``); ``ValueError`` says what is allowed."""
    try:
        values = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise ValueError(f"expected integers like 1,4,8, not {text!r}") from None
    if not values or any(not 1 <= v <= MAX_CONCURRENCY for v in values):
        raise ValueError(f"concurrency values are 1..{MAX_CONCURRENCY}")
    return values


def bounded_int(text: str, lo: int, hi: int, what: str) -> int:
    """An operator's integer override (duration, repetitions) in ``lo..hi``; ``ValueError`` otherwise."""
    try:
        v = int(text)
    except ValueError:
        raise ValueError(f"{what} must be an integer, not {text!r}") from None
    if not lo <= v <= hi:
        raise ValueError(f"{what} must be {lo}..{hi}, not {v}")
    return v


def load(path: str | Path) -> Suite:
    """Read and validate a suite; a bare name finds a shipped suite (``quick`` -> netperf-suites/quick.yaml)."""
    p = resolve(path)
    try:
        text = p.read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(
            [Problem(str(p), None, "suite", f"cannot read: {getattr(exc, 'strerror', None) or exc}")]
        ) from None
    return from_document(yamldoc.parse(text, str(p), strict=False), hashlib.sha256(text.encode()).hexdigest())


def resolve(path: str | Path) -> Path:
    p = Path(path)
    if not p.exists() and "/" not in str(path):
        shipped = SUITES_DIR / (p.name if p.suffix == ".yaml" else f"{p.name}.yaml")
        if shipped.exists():
            return shipped
    if not p.exists():
        raise ConfigError([Problem(str(path), None, "suite", "no such file (and no shipped suite of that name)")])
    return p


def shipped() -> list[Path]:
    return sorted(SUITES_DIR.glob("*.yaml"))


class Checker:
    """Collects problems; small typed readers that report and return a fallback.

    The parsers of a suite's parts (:mod:`.tests`, :mod:`.cases`, :mod:`.pairs`) get their sub-mapping and
    this checker (as :class:`~appliance.netperf.define.tests.Checks`), never the document: what they report
    keeps its ``file:line: field`` all the same."""

    def __init__(self, doc: yamldoc.Document) -> None:
        self.doc = doc
        self.problems: list[Problem] = list(doc.problems)

    def bad(self, path: yamldoc.PathKey, message: str) -> None:
        self.problems.append(self.doc.problem(path, message))

    def integer(self, value: Any, path: yamldoc.PathKey, lo: int, hi: int, what: str) -> Optional[int]:
        if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
            self.bad(path, f"{what} must be an integer {lo}..{hi}, not {value!r}")
            return None
        return value

    def int_list(self, value: Any, path: yamldoc.PathKey, lo: int, hi: int, what: str) -> tuple[int, ...]:
        """An integer, a list of integers, or ``{from, to, step}``."""
        if isinstance(value, dict):
            self.problems += self.doc.unknown_keys(value, path, {"from", "to", "step"})
            a = self.integer(value.get("from"), (*path, "from"), lo, hi, what)
            b = self.integer(value.get("to"), (*path, "to"), lo, hi, what)
            s = self.integer(value.get("step", 1), (*path, "step"), 1, hi, "step")
            if a is None or b is None or s is None:
                return ()
            if b < a:
                self.bad(path, f"'to' ({b}) is below 'from' ({a})")
                return ()
            return tuple(range(a, b + 1, s))
        items = value if isinstance(value, list) else [value]
        if not items:
            self.bad(path, f"{what}: give at least one value")
            return ()
        out = [
            self.integer(v, (*path, i) if isinstance(value, list) else path, lo, hi, what) for i, v in enumerate(items)
        ]
        if any(v is None for v in out):
            return ()
        if len(set(out)) != len(out):
            self.bad(path, f"{what}: a value is listed twice")
        return tuple(v for v in out if v is not None)

    def unknown(self, mapping: dict[str, Any], path: yamldoc.PathKey, allowed: set[str]) -> None:
        """A problem for each key of ``mapping`` (found at ``path``) that is not in ``allowed``."""
        self.problems += self.doc.unknown_keys(mapping, path, allowed)

    def policy(self, value: Any, path: yamldoc.PathKey) -> Optional[Policy]:
        """An inline policy fragment, validated by the policy loader; problems keep this file's lines."""
        if value is None:
            return None
        n = len(path)
        sub = yamldoc.Document(
            self.doc.file, value, {k[n:]: line for k, line in self.doc.lines.items() if k[:n] == path}
        )
        try:
            return policy_from_document(sub)
        except ConfigError as exc:
            prefix = yamldoc.dotted(path)
            for p in exc.problems:
                self.problems.append(Problem(p.file, p.line, f"{prefix}.{p.field}" if p.field else prefix, p.message))
            return None


def from_document(doc: yamldoc.Document, sha256: str = "") -> Suite:
    ck = Checker(doc)
    data = doc.data
    if not isinstance(data, dict):
        raise ConfigError([*ck.problems, doc.problem((), "a suite is a mapping with keys: endpoints, tests, ...")])
    ck.problems += doc.unknown_keys(data, (), _TOP)
    if "version" in data and data["version"] != 1:
        ck.bad(("version",), f"unsupported version {data['version']!r}; allowed: 1")
    name = data.get("name", Path(doc.file).stem)
    if not isinstance(name, str) or not NAME.match(name):
        ck.bad(("name",), "must be 1-64 letters, digits, '_', '.', '-'")
        name = Path(doc.file).stem

    probes: tuple[ProbeSpec, ...] = ()
    vms = _vm_names(ck, data["vms"]) if "vms" in data else ()
    if "topology" in data and ("probes" in data or "vms" in data):
        ck.bad(("topology",), "a suite runs on a lab topology's guests, or on probes and real VMs: not both")
    if "probes" in data:  # endpoints that hvnet adds to the host's bridge for the run, not lab guests
        specs, problems = probe_spec.parse(doc, data["probes"], ("probes",))
        ck.problems += problems
        probes = tuple(specs)
        topology: Optional[Topology] = probe_spec.topology_of(specs, str(name), doc.file)
    elif "vms" in data:
        topology = Topology(f"VMs of {name}", doc.file, "vms", ())
    else:
        topology = _topology(ck, data.get("topology"))
    if topology is not None and vms:
        clash = sorted({g.name for g in topology.guests} & set(vms))
        if clash:
            ck.bad(("vms",), f"{', '.join(clash)} named as a probe and as a VM")
        topology = with_vm_guests(topology, vms)
    client: Optional[str] = None
    server: Optional[Server] = None
    pairs: tuple[Pair, ...] = ()
    if topology is not None:  # endpoints are checked against the topology's guests
        client, server, pairs = parse_endpoints(
            ck, data.get("endpoints"), data.get("netserver_port"), {g.name for g in topology.guests}
        )

    defaults = parse_defaults(ck, data.get("defaults"))
    setup_policy = _setup(ck, data.get("setup"))
    bridges = {b.name for b in topology.bridges} if topology is not None else set()
    guests = {g.name for g in topology.guests} if topology is not None else set()
    cases = parse_cases(ck, data.get("cases"), bridges, guests)
    if topology is not None and topology.ovn:
        _refuse_pool_policy(ck, data, topology)
    cases = with_perf_stat(ck, data, cases)
    tests = parse_tests(ck, data.get("tests"), defaults, max(1, len(pairs)))
    check_phases(ck, cases, tests)
    check_iperf_server(ck, tests, server)
    check_pairs(ck, data, pairs)
    n_steps = len(cases) * sum(len(t.points()) * len(t.concurrency) for t in tests)
    if n_steps > MAX_STEPS:
        ck.bad(("tests",), f"{n_steps} steps (cases x sizes x offered rates x concurrency); at most {MAX_STEPS}")
    if ck.problems:
        # a bad value in 'defaults' is found once per test inheriting it: report it once
        raise ConfigError(list(dict.fromkeys(ck.problems)))
    assert topology is not None and client is not None and server is not None
    return Suite(
        name, doc.file, sha256, str(data.get("description", "")), topology, client, server, setup_policy, cases, tests,
        probes, vms, pairs,
    )  # fmt: skip


def _vm_names(ck: Checker, value: Any) -> tuple[str, ...]:
    """``vms:``: the inventory names of real VMs among the endpoints (each resolved at run time)."""
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        ck.bad(("vms",), "a list of VM names of the VM inventory (--vms): [VM1, VM2]")
        return ()
    for i, v in enumerate(value):
        if not _VM_NAME.match(v):
            ck.bad(("vms", i), "a VM's inventory name: 1-63 letters, digits, '_', '.', '-'")
    if len(set(value)) != len(value):
        ck.bad(("vms",), "a VM is named twice")
    return tuple(value)


def _refuse_pool_policy(ck: Checker, data: dict[str, Any], topology: Topology) -> None:
    """A suite applies its setup and cases to the client's host switch; on an OVN pool that is br-int,
    which ovn-controller owns: limits there belong in the pool's NB (``hvnet --pool NAME apply``)."""
    for key in ("setup", "cases"):
        if data.get(key):
            ck.bad((key,), f"on an OVN pool ({topology.file}) a suite applies no policy (br-int is "
                           f"ovn-controller's); apply the pool's limits first: hvnet --pool {topology.name} "
                           "apply FILE")  # fmt: skip


def _setup(ck: Checker, setup: Any) -> Optional[Policy]:
    """The policy fragment applied for the whole suite (and restored after), if any."""
    if setup is None:
        return None
    if not isinstance(setup, dict):
        ck.bad(("setup",), "must be a mapping with key: policy")
        return None
    ck.unknown(setup, ("setup",), _SETUP_KEYS)
    return ck.policy(setup.get("policy"), ("setup", "policy"))


def _topology(ck: Checker, ref: Any) -> Optional[Topology]:
    if ref is None:
        path = DEFAULT_TOPOLOGY
    elif isinstance(ref, str):
        path = (Path(ck.doc.file).parent / ref).resolve()
    else:
        ck.bad(("topology",), "must be the path of a lab topology file (relative to this file)")
        return None
    if not path.is_file():
        ck.bad(("topology",), f"no topology file {path}")
        return None
    try:
        return load_topology(path)
    except ConfigError as exc:
        ck.bad(("topology",), f"topology {path} is invalid: {exc.problems[0]}")
    except OSError as exc:
        ck.bad(("topology",), f"cannot read topology {path}: {exc.strerror}")
    return None
