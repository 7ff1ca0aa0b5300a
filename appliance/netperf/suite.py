"""netperf suites (``netperf-suites/*.yaml``): tests as data, validated whole before anything runs.

A suite names its endpoints (a lab guest runs the netperf clients; the
server is a lab guest, whose netserver hvnet starts and stops, or an address
where someone else's netserver listens), an optional policy fragment applied
for the suite and restored afterwards, optional *cases* (further fragments,
one at a time: a policing-rate sweep, 0/1/2/4/8 mirrors) and the tests.

Each test expands into *steps*: case x message size x concurrency, each
repeated.  Every problem is reported with ``file:line: field`` and what is
allowed, so a bad file is fixed in one pass and changes nothing.
"""

from __future__ import annotations

import dataclasses
import hashlib
import ipaddress
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from .. import yamldoc
from ..errors import ConfigError, Problem
from ..policy import Policy
from ..policy.document import from_document as policy_from_document
from ..topology import DEFAULT_TOPOLOGY, Topology
from ..topology import load as load_topology
from .monitor import Monitor, Phase, parse_monitor, parse_phases, settle_seconds

SUITES_DIR = Path(__file__).resolve().parent.parent.parent / "netperf-suites"

TEST_TYPES = ("TCP_STREAM", "UDP_STREAM", "TCP_RR", "TCP_CRR", "UDP_RR")
STREAM_TYPES = ("TCP_STREAM", "UDP_STREAM")
RR_TYPES = ("TCP_RR", "TCP_CRR", "UDP_RR")

MAX_CONCURRENCY = 256  # instances per step; each needs a process, a control connection and a netserver child
MAX_DURATION_S = 3600
MAX_REPETITIONS = 100
MAX_STEPS = 500  # a size list written {from: 64, to: 1472} (step 1) would otherwise make 1409 steps
MAX_WARMUP_S = 60
UDP_MAX_PAYLOAD = 65507  # IPv4: 65535 - 20 (IP) - 8 (UDP)
TCP_MAX_MESSAGE = 1 << 20  # netperf allocates send rings of this size per instance
CONFIDENCE_LEVELS = (95, 99)
DEFAULT_NETSERVER_PORT = 12865

_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
_TOP = {
    "version",
    "name",
    "description",
    "topology",
    "endpoints",
    "netserver_port",
    "defaults",
    "setup",
    "cases",
    "tests",
}
_ENDPOINT_KEYS = {"client", "server"}
_SERVER_KEYS = {"address", "port"}
_DEFAULT_KEYS = {"duration", "repetitions", "warmup", "concurrency"}
_SETUP_KEYS = {"policy"}
_CASE_KEYS = {"name", "description", "policy", "monitor", "phases", "duration"}
_TEST_KEYS = {
    "name",
    "type",
    "message_size",
    "request_size",
    "response_size",
    "duration",
    "repetitions",
    "warmup",
    "concurrency",
    "confidence",
}
_CONFIDENCE_KEYS = {"level", "interval", "min_iterations", "max_iterations"}


@dataclass(frozen=True)
class Server:
    """Where the netservers listen: a lab guest (managed by hvnet) or an address (someone else's)."""

    guest: Optional[str] = None
    address: Optional[str] = None
    port: int = DEFAULT_NETSERVER_PORT

    @property
    def managed(self) -> bool:
        return self.guest is not None

    def describe(self) -> str:
        return f"{self.guest} (lab guest)" if self.guest else f"{self.address}:{self.port}"


@dataclass(frozen=True)
class Confidence:
    """netperf ``-I level,interval -i max,min``: iterate until the interval is met."""

    level: int = 99
    interval: float = 5.0  # full width, percent of the mean
    min_iterations: int = 3
    max_iterations: int = 10

    def argv(self) -> list[str]:
        return ["-I", f"{self.level},{self.interval:g}", "-i", f"{self.max_iterations},{self.min_iterations}"]


@dataclass(frozen=True)
class Case:
    """A variant the tests run under: a policy fragment applied for its steps, restored after."""

    name: str
    description: str = ""
    policy: Optional[Policy] = None
    monitor: Optional[Monitor] = None  # sFlow/IPFIX for the case's steps, to the lab's collector
    phases: tuple[Phase, ...] = ()  # or monitoring changed at set times within each repetition
    duration: Optional[int] = None  # seconds per instance for this case's steps (a phased case's long run)

    def monitors(self) -> list[Monitor]:
        """Every monitoring the case uses (a collector of each kind is started for it)."""
        return [m for m in [self.monitor, *(p.monitor for p in self.phases)] if m is not None]


@dataclass(frozen=True)
class Test:
    name: str
    type: str
    duration: int
    concurrency: tuple[int, ...]
    repetitions: int = 1
    warmup: int = 0
    message_sizes: tuple[Optional[int], ...] = (None,)  # streams: -m; None = netperf's default
    request_size: Optional[int] = None  # RR: -r req,resp
    response_size: Optional[int] = None
    confidence: Optional[Confidence] = None

    @property
    def is_rr(self) -> bool:
        return self.type in RR_TYPES

    @property
    def metric(self) -> str:
        """What a step sums: transactions/s for request/response tests, Mbit/s otherwise."""
        return "transactions/s" if self.is_rr else "Mbit/s"

    def max_seconds(self) -> float:
        """Longest one instance may legitimately run (confidence iterations multiply the length)."""
        iterations = self.confidence.max_iterations if self.confidence else 1
        return self.duration * iterations


@dataclass(frozen=True)
class Step:
    """One measured point: ``concurrency`` instances started together, once per repetition."""

    index: int
    test: Test
    case: Case
    message_size: Optional[int]
    concurrency: int

    @property
    def key(self) -> str:
        """Stable identity of the point across runs (what ``compare`` matches on)."""
        size = f"m{self.message_size}" if self.message_size else "m-"
        return f"{self.test.name}/{self.case.name}/{size}/c{self.concurrency}"


@dataclass
class Suite:
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

    def steps(self) -> list[Step]:
        """Every measured point in run order: case-major, so each case's policy is applied once."""
        out: list[Step] = []
        for case in self.cases:
            for test in self.tests:
                if case.duration is not None:
                    test = dataclasses.replace(test, duration=case.duration)
                for size in test.message_sizes:
                    for n in test.concurrency:
                        out.append(Step(len(out), test, case, size, n))
        return out

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
        """A copy with every test's concurrency/duration/repetitions replaced (CLI and TUI adjustments)."""
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

        ``ValueError`` names the guest that the topology lacks and lists the ones it has.
        """
        names = [g.name for g in topology.guests]
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
        return dataclasses.replace(self, topology=topology, client=client, server=new_server)


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


class _Checker:
    """Collects problems; small typed readers that report and return a fallback."""

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
    ck = _Checker(doc)
    data = doc.data
    if not isinstance(data, dict):
        raise ConfigError([*ck.problems, doc.problem((), "a suite is a mapping with keys: endpoints, tests, ...")])
    ck.problems += doc.unknown_keys(data, (), _TOP)
    if "version" in data and data["version"] != 1:
        ck.bad(("version",), f"unsupported version {data['version']!r}; allowed: 1")
    name = data.get("name", Path(doc.file).stem)
    if not isinstance(name, str) or not _NAME.match(name):
        ck.bad(("name",), "must be 1-64 letters, digits, '_', '.', '-'")
        name = Path(doc.file).stem

    topology = _topology(ck, data.get("topology"))
    client: Optional[str] = None
    server: Optional[Server] = None
    if topology is not None:  # endpoints are checked against the topology's guests
        client, server = _endpoints(
            ck, data.get("endpoints"), data.get("netserver_port"), {g.name for g in topology.guests}
        )

    defaults = data.get("defaults") or {}
    if not isinstance(defaults, dict):
        ck.bad(("defaults",), "must be a mapping with: " + ", ".join(sorted(_DEFAULT_KEYS)))
        defaults = {}
    ck.problems += doc.unknown_keys(defaults, ("defaults",), _DEFAULT_KEYS)
    setup_policy = _setup(ck, data.get("setup"))
    bridges = {b.name for b in topology.bridges} if topology is not None else set()
    cases = _cases(ck, data.get("cases"), bridges)
    if topology is not None and topology.ovn:
        _refuse_pool_policy(ck, data, topology)
    tests = _tests(ck, data.get("tests"), defaults)
    _check_phases(ck, cases, tests)
    n_steps = len(cases) * sum(len(t.message_sizes) * len(t.concurrency) for t in tests)
    if n_steps > MAX_STEPS:
        ck.bad(("tests",), f"{n_steps} steps (cases x message sizes x concurrency); at most {MAX_STEPS}")
    if ck.problems:
        # a bad value in 'defaults' is found once per test inheriting it: report it once
        raise ConfigError(list(dict.fromkeys(ck.problems)))
    assert topology is not None and client is not None and server is not None
    return Suite(
        name, doc.file, sha256, str(data.get("description", "")), topology, client, server, setup_policy, cases, tests
    )


def _refuse_pool_policy(ck: _Checker, data: dict[str, Any], topology: Topology) -> None:
    """A suite applies its setup and cases to the client's host switch; on an OVN pool that is br-int,
    which ovn-controller owns: limits there belong in the pool's NB (``hvnet --pool NAME apply``)."""
    for key in ("setup", "cases"):
        if data.get(key):
            ck.bad((key,), f"on an OVN pool ({topology.file}) a suite applies no policy (br-int is "
                           f"ovn-controller's); apply the pool's limits first: hvnet --pool {topology.name} "
                           "apply FILE")  # fmt: skip


def _setup(ck: _Checker, setup: Any) -> Optional[Policy]:
    """The policy fragment applied for the whole suite (and restored after), if any."""
    if setup is None:
        return None
    if not isinstance(setup, dict):
        ck.bad(("setup",), "must be a mapping with key: policy")
        return None
    ck.problems += ck.doc.unknown_keys(setup, ("setup",), _SETUP_KEYS)
    return ck.policy(setup.get("policy"), ("setup", "policy"))


def _topology(ck: _Checker, ref: Any) -> Optional[Topology]:
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


def _endpoints(ck: _Checker, value: Any, port_value: Any, guests: set[str]) -> tuple[Optional[str], Optional[Server]]:
    known = ", ".join(sorted(guests)) or "(none)"
    if not isinstance(value, dict):
        ck.bad(("endpoints",), "required: {client: GUEST, server: GUEST or {address: IP, port: N}}")
        return None, None
    ck.problems += ck.doc.unknown_keys(value, ("endpoints",), _ENDPOINT_KEYS)
    port = DEFAULT_NETSERVER_PORT
    if port_value is not None:
        port = ck.integer(port_value, ("netserver_port",), 1, 65535, "netserver_port") or DEFAULT_NETSERVER_PORT
    client = value.get("client")
    if not isinstance(client, str) or client not in guests:
        ck.bad(("endpoints", "client"), f"unknown guest {client!r}: the client is a lab guest; guests: {known}")
        client = None
    raw = value.get("server")
    server: Optional[Server] = None
    if isinstance(raw, str):
        if raw not in guests:
            ck.bad(("endpoints", "server"), f"unknown guest {raw!r}; guests: {known} (or {{address: IP}})")
        elif raw == client:
            ck.bad(("endpoints", "server"), "the server must be another guest than the client")
        else:
            server = Server(guest=raw, port=port)
    elif isinstance(raw, dict):
        ck.problems += ck.doc.unknown_keys(raw, ("endpoints", "server"), _SERVER_KEYS)
        try:
            addr = str(ipaddress.ip_address(raw.get("address")))
        except ValueError:
            ck.bad(("endpoints", "server", "address"), f"must be an IP address, not {raw.get('address')!r}")
            addr = None
        if "port" in raw:
            port = ck.integer(raw["port"], ("endpoints", "server", "port"), 1, 65535, "port") or port
        server = Server(address=addr, port=port) if addr else None
    else:
        ck.bad(("endpoints", "server"), f"required: a lab guest ({known}) or {{address: IP, port: N}}")
    return client, server


def _cases(ck: _Checker, value: Any, bridges: set[str]) -> list[Case]:
    if value is None:
        return [Case("default")]
    if not isinstance(value, list) or not value:
        ck.bad(("cases",), "must be a non-empty list of {name, description, policy}")
        return [Case("default")]
    out: list[Case] = []
    for i, raw in enumerate(value):
        path: yamldoc.PathKey = ("cases", i)
        if not isinstance(raw, dict):
            ck.bad(path, "each case is a mapping with name and optional policy")
            continue
        ck.problems += ck.doc.unknown_keys(raw, path, _CASE_KEYS)
        name = raw.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            ck.bad((*path, "name"), "required: 1-64 letters, digits, '_', '.', '-'")
            continue
        if any(c.name == name for c in out):
            ck.bad((*path, "name"), f"duplicate case name {name!r}")
        monitor, phases = _monitoring(ck, raw, path, bridges)
        policy = ck.policy(raw.get("policy"), (*path, "policy"))
        duration = None
        if "duration" in raw:
            duration = ck.integer(raw["duration"], (*path, "duration"), 1, MAX_DURATION_S, "duration (seconds)")
        out.append(Case(name, str(raw.get("description", "")), policy, monitor, phases, duration))
    return out or [Case("default")]


def _monitoring(
    ck: _Checker, raw: dict[str, Any], path: yamldoc.PathKey, bridges: set[str]
) -> tuple[Optional[Monitor], tuple[Phase, ...]]:
    """A case's ``monitor:`` or ``phases:`` (one or the other), and no sFlow/IPFIX of its own in ``policy:``."""
    if "monitor" in raw and "phases" in raw:
        ck.bad((*path, "phases"), "give monitor (for the whole case) or phases (changed during it), not both")
        return None, ()
    if "monitor" in raw or "phases" in raw:
        pol = raw.get("policy")
        for br, settings in (pol.get("bridges") or {}).items() if isinstance(pol, dict) else []:
            for kind in ("sflow", "ipfix"):
                if isinstance(settings, dict) and kind in settings:
                    ck.bad((*path, "policy", "bridges", br, kind), f"the case's monitor sets {kind}; not both")
    monitor = None
    if "monitor" in raw:
        _, monitor = parse_monitor(raw["monitor"], ck.bad, (*path, "monitor"), bridges)
    phases = parse_phases(raw["phases"], ck.bad, (*path, "phases"), bridges) if "phases" in raw else ()
    return monitor, phases


def _check_phases(ck: _Checker, cases: list[Case], tests: list[Test]) -> None:
    """Every phase must start within every test's run (a phase after the end would never be measured)."""
    for i, case in enumerate(cases):
        if not case.phases:
            continue
        last = case.phases[-1].at
        for t in tests:
            seconds = case.duration or t.duration
            if seconds <= last:
                ck.bad(("cases", i, "phases"), f"the last phase starts at {last} s; test {t.name} runs {seconds} s "
                       "(give the case a duration)")  # fmt: skip
            if t.confidence is not None:
                ck.bad(("cases", i, "phases"), f"test {t.name} iterates for confidence: phases need one run")


def _tests(ck: _Checker, value: Any, defaults: dict[str, Any]) -> list[Test]:
    if not isinstance(value, list) or not value:
        ck.bad(("tests",), "required: a non-empty list of tests (type, duration, concurrency, ...)")
        return []
    out: list[Test] = []
    for i, raw in enumerate(value):
        path: yamldoc.PathKey = ("tests", i)
        if not isinstance(raw, dict):
            ck.bad(path, "each test is a mapping with at least: type")
            continue
        ck.problems += ck.doc.unknown_keys(raw, path, _TEST_KEYS)
        test = _test(ck, raw, path, defaults)
        if test is None:
            continue
        if any(t.name == test.name for t in out):
            ck.bad((*path, "name"), f"duplicate test name {test.name!r}: names identify results across runs")
        out.append(test)
    return out


def _setting(raw: dict[str, Any], defaults: dict[str, Any], key: str, fallback: Any, path: yamldoc.PathKey):
    """A test's value, else the suite default (reported at the default's line), else ``fallback``."""
    if key in raw:
        return raw[key], (*path, key)
    if key in defaults:
        return defaults[key], ("defaults", key)
    return fallback, (*path, key)


def _test(ck: _Checker, raw: dict[str, Any], path: yamldoc.PathKey, defaults: dict[str, Any]) -> Optional[Test]:
    ttype = raw.get("type")
    if ttype not in TEST_TYPES:
        ck.bad((*path, "type"), f"unknown test type {ttype!r}; allowed: {', '.join(TEST_TYPES)}")
        return None
    name = raw.get("name", ttype.lower().replace("_", "-"))
    if not isinstance(name, str) or not _NAME.match(name):
        ck.bad((*path, "name"), "must be 1-64 letters, digits, '_', '.', '-'")
        return None
    value, where = _setting(raw, defaults, "duration", 10, path)
    duration = ck.integer(value, where, 1, MAX_DURATION_S, "duration (seconds)")
    value, where = _setting(raw, defaults, "repetitions", 1, path)
    reps = ck.integer(value, where, 1, MAX_REPETITIONS, "repetitions")
    value, where = _setting(raw, defaults, "warmup", 0, path)
    warmup = ck.integer(value, where, 0, MAX_WARMUP_S, "warmup (seconds)")
    value, where = _setting(raw, defaults, "concurrency", [1], path)
    concurrency = ck.int_list(value, where, 1, MAX_CONCURRENCY, "concurrency")

    sizes, req, resp = _sizes(ck, ttype, raw, path)
    confidence = None
    if raw.get("confidence") is not None:
        confidence = _confidence(ck, raw["confidence"], (*path, "confidence"))
    if None in (duration, reps, warmup) or not concurrency or not sizes:
        return None
    return Test(name, ttype, duration, concurrency, reps, warmup, sizes, req, resp, confidence)  # type: ignore[arg-type]


def _sizes(
    ck: _Checker, ttype: str, raw: dict[str, Any], path: yamldoc.PathKey
) -> tuple[tuple[Optional[int], ...], Optional[int], Optional[int]]:
    """Message sizes (a stream's sends) or request/response sizes (RR), limited by UDP's payload or netperf's rings."""
    sizes: tuple[Optional[int], ...] = (None,)
    req = resp = None
    if ttype in STREAM_TYPES:
        limit = UDP_MAX_PAYLOAD if ttype == "UDP_STREAM" else TCP_MAX_MESSAGE
        for key in ("request_size", "response_size"):
            if key in raw:
                ck.bad((*path, key), f"{ttype} has no requests; use message_size (bytes per send)")
        if "message_size" in raw:
            sizes = ck.int_list(raw["message_size"], (*path, "message_size"), 1, limit, f"{ttype} message_size (bytes)")
    else:
        limit = UDP_MAX_PAYLOAD if ttype == "UDP_RR" else TCP_MAX_MESSAGE
        if "message_size" in raw:
            ck.bad((*path, "message_size"), f"{ttype} sends requests and responses; use request_size/response_size")
        req = ck.integer(raw.get("request_size", 1), (*path, "request_size"), 1, limit, f"{ttype} request_size")
        resp = ck.integer(raw.get("response_size", 1), (*path, "response_size"), 1, limit, f"{ttype} response_size")
    return sizes, req, resp


def _confidence(ck: _Checker, value: Any, path: yamldoc.PathKey) -> Optional[Confidence]:
    if value is True:
        return Confidence()
    if not isinstance(value, dict):
        ck.bad(path, "must be true or {level: 95|99, interval: PCT, min_iterations: N, max_iterations: N}")
        return None
    ck.problems += ck.doc.unknown_keys(value, path, _CONFIDENCE_KEYS)
    level = value.get("level", 99)
    if level not in CONFIDENCE_LEVELS:
        ck.bad((*path, "level"), f"must be 95 or 99 (netperf's -I), not {level!r}")
    interval = value.get("interval", 5.0)
    if isinstance(interval, bool) or not isinstance(interval, (int, float)) or not 0.1 <= interval <= 50:
        ck.bad((*path, "interval"), f"must be a percentage 0.1..50 (full width of the interval), not {interval!r}")
    lo = ck.integer(value.get("min_iterations", 3), (*path, "min_iterations"), 3, 30, "min_iterations")
    hi = ck.integer(value.get("max_iterations", 10), (*path, "max_iterations"), 3, 30, "max_iterations")
    if lo is not None and hi is not None and hi < lo:
        ck.bad((*path, "max_iterations"), f"below min_iterations ({lo})")
    try:
        return Confidence(int(level), float(interval), int(lo), int(hi))  # type: ignore[arg-type]
    except (TypeError, ValueError):
        return None
