"""netperf suite files: every shipped suite loads; steps expand in run order with stable keys;
bad suites are refused whole, each problem with file:line, the field and what is allowed."""

from __future__ import annotations

import dataclasses
import re
import textwrap
from pathlib import Path

import pytest

from appliance.core.errors import EXIT_USAGE, ConfigError
from appliance.netperf.define import suite, tests
from appliance.netperf.define.pairs import Server
from appliance.netperf.define.tests import MAX_CONCURRENCY, TCP_MAX_MESSAGE, UDP_MAX_PAYLOAD, Confidence

ROOT = Path(__file__).resolve().parents[3]
SHIPPED = sorted((ROOT / "netperf-suites").glob("*.yaml"))
SEED_2010 = ROOT / "vlan-tests" / "topologies" / "seed-2010.yaml"


def write(tmp_path: Path, text: str, name: str = "s.yaml") -> Path:
    f = tmp_path / name
    f.write_text(textwrap.dedent(text))
    return f


def load(tmp_path: Path, text: str) -> suite.Suite:
    return suite.load(write(tmp_path, text))


def problems(tmp_path: Path, text: str) -> list[str]:
    f = write(tmp_path, text)
    with pytest.raises(ConfigError) as exc:
        suite.load(f)
    assert exc.value.exit_code == EXIT_USAGE
    out = [str(p) for p in exc.value.problems]
    assert all(p.startswith(f"{f}:") for p in out), out  # every problem names the suite file and a line
    return out


def line_of(text: str, needle: str) -> int:
    """1-based line of the only line of ``text`` containing ``needle``."""
    hits = [i for i, line in enumerate(textwrap.dedent(text).splitlines(), 1) if needle in line]
    assert len(hits) == 1, f"{needle!r} is on lines {hits}"
    return hits[0]


# -- shipped suites -----------------------------------------------------------------


def test_suites_are_shipped() -> None:
    assert SHIPPED, "netperf-suites/*.yaml is empty"
    assert suite.shipped() == SHIPPED


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_suite_loads(path: Path) -> None:
    s = suite.load(path)
    steps = s.steps()
    assert len(steps) >= 1
    assert s.tests and s.cases
    assert len({st.key for st in steps}) == len(steps)  # compare matches steps on their keys
    assert [st.index for st in steps] == list(range(len(steps)))
    assert len(s.sha256) == 64
    assert s.estimated_seconds() > 0


def test_a_bare_name_finds_a_shipped_suite() -> None:
    assert suite.resolve("quick") == ROOT / "netperf-suites" / "quick.yaml"
    assert suite.resolve("quick.yaml") == ROOT / "netperf-suites" / "quick.yaml"
    assert suite.load("quick").name == "quick"


def test_a_missing_suite_is_a_config_error(tmp_path) -> None:
    with pytest.raises(ConfigError) as exc:
        suite.load(tmp_path / "nothing.yaml")
    assert "no such file" in str(exc.value)
    with pytest.raises(ConfigError):
        suite.load("no-such-shipped-suite")


# -- a good suite -------------------------------------------------------------------

GOOD = f"""\
    version: 1
    name: inline
    description: every kind of test
    topology: {SEED_2010}
    endpoints:
      client: VM1
      server: VM2
    defaults:
      duration: 5
      repetitions: 3
      concurrency: [1, 4]
    cases:
      - name: base
      - name: policed
        description: 10 Mbit/s on the client
        policy:
          vifs:
            - vm: VM1
              ingress: 10mbit
    tests:
      - {{name: ts, type: TCP_STREAM, message_size: [1000, 10000]}}
      - {{name: rr, type: TCP_RR, request_size: 64, response_size: 1024, concurrency: 2, confidence: true}}
      - {{name: us, type: UDP_STREAM, message_size: 1400, duration: 7, warmup: 2}}
    """

GOOD_KEYS = [
    "ts/base/m1000/c1",
    "ts/base/m1000/c4",
    "ts/base/m10000/c1",
    "ts/base/m10000/c4",
    "rr/base/m-/c2",
    "us/base/m1400/c1",
    "us/base/m1400/c4",
    "ts/policed/m1000/c1",
    "ts/policed/m1000/c4",
    "ts/policed/m10000/c1",
    "ts/policed/m10000/c4",
    "rr/policed/m-/c2",
    "us/policed/m1400/c1",
    "us/policed/m1400/c4",
]


def test_good_suite_loads(tmp_path) -> None:
    s = load(tmp_path, GOOD)
    assert s.name == "inline" and s.description == "every kind of test"
    assert s.topology.file == str(SEED_2010)
    assert s.client == "VM1"
    assert s.server == Server(guest="VM2") and s.server.managed and s.server.port == 12865
    assert [c.name for c in s.cases] == ["base", "policed"]
    assert s.cases[0].policy is None and s.cases[1].policy is not None
    assert s.cases[1].policy.vifs[0].ingress.rate_kbps == 10000
    ts, rr, us = s.tests
    assert (ts.type, ts.duration, ts.repetitions, ts.warmup) == ("TCP_STREAM", 5, 3, 0)
    assert ts.message_sizes == (1000, 10000) and ts.concurrency == (1, 4) and ts.metric == "Mbit/s"
    assert (rr.request_size, rr.response_size, rr.concurrency) == (64, 1024, (2,))
    assert rr.is_rr and rr.metric == "transactions/s" and rr.message_sizes == (None,)
    assert rr.confidence == Confidence(99, 5.0, 3, 10)
    assert (us.duration, us.warmup, us.message_sizes) == (7, 2, (1400,))


def test_steps_are_case_major_then_test_size_concurrency(tmp_path) -> None:
    steps = load(tmp_path, GOOD).steps()
    assert [st.key for st in steps] == GOOD_KEYS
    assert [st.index for st in steps] == list(range(len(GOOD_KEYS)))
    first, last = steps[0], steps[-1]
    assert (first.test.name, first.case.name, first.message_size, first.concurrency) == ("ts", "base", 1000, 1)
    assert (last.test.name, last.case.name, last.message_size, last.concurrency) == ("us", "policed", 1400, 4)


def test_step_keys_are_stable_across_loads_and_files(tmp_path) -> None:
    a = suite.load(write(tmp_path, GOOD, "a.yaml"))
    b = suite.load(write(tmp_path, GOOD, "b.yaml"))
    assert [st.key for st in a.steps()] == [st.key for st in b.steps()] == GOOD_KEYS
    assert a.sha256 == b.sha256  # same text, same hash: compare can tell the runs used the same suite
    c = suite.load(write(tmp_path, GOOD.replace("duration: 5", "duration: 6"), "c.yaml"))
    assert c.sha256 != a.sha256
    assert [st.key for st in c.steps()] == GOOD_KEYS  # a longer run still compares step by step


def test_estimated_seconds_counts_warmups_repetitions_and_confidence_iterations(tmp_path) -> None:
    s = load(tmp_path, GOOD)
    # per case: ts 4 steps x 5 s x 3; rr 1 step x 5 s x 10 iterations x 3; us 2 steps x (2 + 7) s x 3
    assert s.estimated_seconds() == 2 * (4 * 5 * 3 + 1 * 50 * 3 + 2 * 9 * 3)


def test_with_overrides_replaces_every_test_and_keeps_the_original(tmp_path) -> None:
    s = load(tmp_path, GOOD)
    o = s.with_overrides(concurrency=(2, 8), duration=30, repetitions=5)
    assert all(t.concurrency == (2, 8) and t.duration == 30 and t.repetitions == 5 for t in o.tests)
    assert [t.message_sizes for t in o.tests] == [t.message_sizes for t in s.tests]
    assert o.tests[1].confidence == s.tests[1].confidence
    assert [st.key for st in o.steps()][:2] == ["ts/base/m1000/c2", "ts/base/m1000/c8"]
    assert len(o.steps()) == 2 * (2 * 2 + 2 + 2)
    assert s.tests[0].concurrency == (1, 4) and s.tests[0].duration == 5  # unchanged


def test_a_suite_is_frozen_and_builds_its_steps_once(tmp_path) -> None:
    """Its steps are computed once (estimated_seconds and the front ends ask again and again); an adjusted
    run is a new Suite with its own, and each caller gets a list of its own."""
    s = load(tmp_path, GOOD)
    with pytest.raises(dataclasses.FrozenInstanceError):
        s.tests = []  # type: ignore[misc]
    first, again = s.steps(), s.steps()
    assert first == again and first is not again and all(a is b for a, b in zip(first, again))
    first.clear()
    assert [st.key for st in s.steps()][:1] == GOOD_KEYS[:1]
    o = s.with_overrides(concurrency=(2,))
    assert {st.concurrency for st in o.steps()} == {2}
    assert {st.concurrency for st in s.steps()} == {n for t in s.tests for n in t.concurrency} != {2}


def test_with_overrides_of_nothing_keeps_every_value(tmp_path) -> None:
    s = load(tmp_path, GOOD)
    o = s.with_overrides(duration=2)
    assert [t.duration for t in o.tests] == [2, 2, 2]
    assert [t.concurrency for t in o.tests] == [t.concurrency for t in s.tests]
    assert [t.repetitions for t in o.tests] == [3, 3, 3]


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("{from: 1, to: 4}", (1, 2, 3, 4)),
        ("{from: 1, to: 16, step: 5}", (1, 6, 11, 16)),
        ("{from: 2, to: 9, step: 3}", (2, 5, 8)),
        ("{from: 8, to: 8}", (8,)),
        ("3", (3,)),
        ("[1, 2, 8]", (1, 2, 8)),
        (f"{{from: {MAX_CONCURRENCY - 1}, to: {MAX_CONCURRENCY}}}", (MAX_CONCURRENCY - 1, MAX_CONCURRENCY)),
    ],
)
def test_concurrency_forms(tmp_path, spec, expected) -> None:
    s = load(tmp_path, f"endpoints: {{client: VM1, server: VM2}}\ntests:\n  - {{type: TCP_RR, concurrency: {spec}}}\n")
    assert s.tests[0].concurrency == expected
    assert [st.concurrency for st in s.steps()] == list(expected)


def test_defaults_without_topology_and_test_names(tmp_path) -> None:
    s = load(tmp_path, "endpoints: {client: VM3, server: VM1}\ntests: [{type: UDP_RR}, {type: TCP_CRR}]\n")
    assert {g.name for g in s.topology.guests} == {"VM1", "VM2", "VM3"}
    assert s.name == "s"  # the file's stem
    assert [t.name for t in s.tests] == ["udp-rr", "tcp-crr"]
    t = s.tests[0]
    assert (t.duration, t.repetitions, t.warmup, t.concurrency) == (10, 1, 0, (1,))
    assert (t.request_size, t.response_size, t.confidence) == (1, 1, None)
    assert [c.name for c in s.cases] == ["default"]
    assert [st.key for st in s.steps()] == ["udp-rr/default/m-/c1", "tcp-crr/default/m-/c1"]


def test_relative_topology_is_read_from_the_suite_directory(tmp_path) -> None:
    (tmp_path / "topo").mkdir()
    (tmp_path / "topo" / "t.yaml").write_text(SEED_2010.read_text())
    s = load(tmp_path, "topology: topo/t.yaml\nendpoints: {client: VM1, server: VM2}\ntests: [{type: TCP_RR}]\n")
    assert s.topology.file == str(tmp_path / "topo" / "t.yaml")


def test_unmanaged_server_by_address(tmp_path) -> None:
    s = load(
        tmp_path,
        "endpoints:\n  client: VM1\n  server: {address: 192.168.0.200, port: 12866}\ntests: [{type: TCP_RR}]\n",
    )
    assert s.server == Server(address="192.168.0.200", port=12866)
    assert not s.server.managed and s.server.describe() == "192.168.0.200:12866"


def test_netserver_port_applies_to_a_managed_server(tmp_path) -> None:
    s = load(tmp_path, "netserver_port: 13000\nendpoints: {client: VM1, server: VM2}\ntests: [{type: TCP_RR}]\n")
    assert s.server == Server(guest="VM2", port=13000)


def test_confidence_mapping(tmp_path) -> None:
    s = load(
        tmp_path,
        "endpoints: {client: VM1, server: VM2}\n"
        "tests:\n  - {type: TCP_RR, confidence: {level: 95, interval: 2.5, min_iterations: 4, max_iterations: 6}}\n",
    )
    c = s.tests[0].confidence
    assert c == Confidence(95, 2.5, 4, 6)
    assert c.argv() == ["-I", "95,2.5", "-i", "6,4"]
    assert s.tests[0].max_seconds() == 10 * 6


def test_setup_policy(tmp_path) -> None:
    s = load(
        tmp_path,
        "endpoints: {client: VM1, server: VM2}\nsetup:\n  policy:\n    vifs:\n      - {vm: VM2, ingress: 1gbit}\n"
        "tests: [{type: TCP_STREAM}]\n",
    )
    assert s.setup is not None and s.setup.vifs[0].ingress.rate_kbps == 1_000_000


# -- bad suites -----------------------------------------------------------------------

HEAD = "endpoints:\n  client: VM1\n  server: VM2\n"

BAD = [
    pytest.param(
        HEAD + "tests:\n  - {type: TCP_MAERTS}\n",
        "TCP_MAERTS",
        "tests[0].type",
        ["unknown test type 'TCP_MAERTS'", "allowed: TCP_STREAM, UDP_STREAM, TCP_RR, TCP_CRR, UDP_RR"],
        id="unknown-type",
    ),
    pytest.param(
        HEAD + "tests:\n  - {type: TCP_STREAM, concurrency: 0}\n",
        "concurrency: 0",
        "tests[0].concurrency",
        [f"must be an integer 1..{MAX_CONCURRENCY}", "not 0"],
        id="concurrency-0",
    ),
    pytest.param(
        HEAD + f"tests:\n  - type: TCP_STREAM\n    concurrency: [1, {MAX_CONCURRENCY + 1}]\n",
        "concurrency:",
        "tests[0].concurrency[1]",
        [f"must be an integer 1..{MAX_CONCURRENCY}", f"not {MAX_CONCURRENCY + 1}"],
        id="concurrency-above-max",
    ),
    pytest.param(
        HEAD + f"defaults:\n  concurrency: {MAX_CONCURRENCY + 1}\ntests:\n  - {{type: TCP_STREAM}}\n",
        f"concurrency: {MAX_CONCURRENCY + 1}",
        "defaults.concurrency",
        [f"must be an integer 1..{MAX_CONCURRENCY}"],
        id="default-concurrency-above-max",
    ),
    pytest.param(
        HEAD + "tests:\n  - type: TCP_STREAM\n    concurrency: {from: 8, to: 2}\n",
        "from: 8",
        "tests[0].concurrency",
        ["'to' (2) is below 'from' (8)"],
        id="concurrency-range-backwards",
    ),
    pytest.param(
        HEAD + "tests:\n  - type: TCP_STREAM\n    concurrency: {from: 1, to: 4, by: 2}\n",
        "from: 1",
        "tests[0].concurrency.by",
        ["unknown key; allowed: from, step, to"],
        id="concurrency-range-unknown-key",
    ),
    pytest.param(
        HEAD + "tests:\n  - type: TCP_RR\n    duration: 0\n",
        "duration: 0",
        "tests[0].duration",
        ["duration (seconds) must be an integer 1..3600", "not 0"],
        id="duration-0",
    ),
    pytest.param(
        HEAD + "tests:\n  - type: TCP_RR\n    duration: -5\n",
        "duration: -5",
        "tests[0].duration",
        ["must be an integer 1..3600", "not -5"],
        id="duration-negative",
    ),
    pytest.param(
        HEAD + "tests:\n  - type: UDP_STREAM\n    message_size: 65508\n",
        "message_size",
        "tests[0].message_size",
        [f"UDP_STREAM message_size (bytes) must be an integer 1..{UDP_MAX_PAYLOAD}", "not 65508"],
        id="udp-message-size",
    ),
    pytest.param(
        HEAD + f"tests:\n  - type: TCP_STREAM\n    message_size: [1000, {TCP_MAX_MESSAGE + 1}]\n",
        "message_size",
        "tests[0].message_size[1]",
        [f"must be an integer 1..{TCP_MAX_MESSAGE}"],
        id="tcp-message-size",
    ),
    pytest.param(
        HEAD + "tests:\n  - type: TCP_RR\n    message_size: 100\n",
        "message_size",
        "tests[0].message_size",
        ["TCP_RR sends requests and responses", "use request_size/response_size"],
        id="message-size-on-rr",
    ),
    pytest.param(
        HEAD + "tests:\n  - type: TCP_STREAM\n    request_size: 100\n",
        "request_size",
        "tests[0].request_size",
        ["TCP_STREAM has no requests", "use message_size"],
        id="request-size-on-stream",
    ),
    pytest.param(
        HEAD + f"tests:\n  - type: UDP_RR\n    response_size: {UDP_MAX_PAYLOAD + 1}\n",
        "response_size",
        "tests[0].response_size",
        [f"UDP_RR response_size must be an integer 1..{UDP_MAX_PAYLOAD}"],
        id="udp-rr-response-size",
    ),
    pytest.param(
        "endpoints:\n  client: VM9\n  server: VM2\ntests: [{type: TCP_RR}]\n",
        "VM9",
        "endpoints.client",
        ["unknown guest 'VM9'", "guests: VM1, VM2, VM3"],
        id="unknown-client",
    ),
    pytest.param(
        "endpoints:\n  client: [VM1]\n  server: VM2\ntests: [{type: TCP_RR}]\n",
        "client",
        "endpoints.client",
        ["unknown guest ['VM1']", "guests: VM1, VM2, VM3"],
        id="client-not-a-name",
    ),
    pytest.param(
        "endpoints:\n  client: VM1\n  server: VM7\ntests: [{type: TCP_RR}]\n",
        "VM7",
        "endpoints.server",
        ["unknown guest 'VM7'", "guests: VM1, VM2, VM3", "{address: IP}"],
        id="unknown-server",
    ),
    pytest.param(
        "endpoints:\n  client: VM1\n  server: VM1\ntests: [{type: TCP_RR}]\n",
        "server",
        "endpoints.server",
        ["must be another guest than the client"],
        id="server-is-client",
    ),
    pytest.param(
        "endpoints:\n  client: VM1\n  server:\n    address: 192.168.0.300\ntests: [{type: TCP_RR}]\n",
        "address",
        "endpoints.server.address",
        ["must be an IP address", "'192.168.0.300'"],
        id="server-address-not-ip",
    ),
    pytest.param(
        "endpoints:\n  client: VM1\n  server: {address: 10.0.0.1, port: 70000}\ntests: [{type: TCP_RR}]\n",
        "port",
        "endpoints.server.port",
        ["port must be an integer 1..65535", "not 70000"],
        id="server-port",
    ),
    pytest.param(
        HEAD + "colour: red\ntests: [{type: TCP_RR}]\n",
        "colour",
        "colour",
        [
            "unknown key; allowed: cases, defaults, description, endpoints, name, netserver_port, perf_stat, probes, "
            "setup, tests, topology, version"
        ],
        id="unknown-top-level-key",
    ),
    pytest.param(
        HEAD + "tests:\n  - {type: TCP_RR, name: x, colour: red}\n",
        "colour",
        "tests[0].colour",
        ["unknown key; allowed: concurrency, confidence, duration, flows, frame_size, message_size, name"],
        id="unknown-test-key",
    ),
    pytest.param(
        HEAD + "tests:\n  - {name: x, type: TCP_STREAM}\n  - {name: x, type: TCP_RR}\n",
        "TCP_RR",
        "tests[1].name",
        ["duplicate test name 'x'"],
        id="duplicate-test-name",
    ),
    pytest.param(
        HEAD + "cases:\n  - {name: a}\n  - {name: a, description: again}\ntests: [{type: TCP_RR}]\n",
        "again",
        "cases[1].name",
        ["duplicate case name 'a'"],
        id="duplicate-case-name",
    ),
    pytest.param(
        "name: first\n" + HEAD + "name: second\ntests: [{type: TCP_RR}]\n",
        "second",
        "name",
        ["duplicate key (first given on line 1)"],
        id="duplicate-yaml-key",
    ),
    pytest.param(
        HEAD + "tests:\n  - type: TCP_RR\n    confidence:\n      level: 90\n",
        "level",
        "tests[0].confidence.level",
        ["must be 95 or 99", "not 90"],
        id="confidence-level-90",
    ),
    pytest.param(
        HEAD + "tests:\n  - type: TCP_RR\n    confidence:\n      interval: 0\n",
        "interval",
        "tests[0].confidence.interval",
        ["must be a percentage 0.1..50", "not 0"],
        id="confidence-interval",
    ),
    pytest.param(
        HEAD + "tests:\n  - type: TCP_RR\n    confidence: {min_iterations: 8, max_iterations: 4}\n",
        "confidence",
        "tests[0].confidence.max_iterations",
        ["below min_iterations (8)"],
        id="confidence-iterations-backwards",
    ),
    pytest.param(
        HEAD + "cases:\n  - name: slow\n    policy:\n      vifs:\n        - vm: VM1\n          ingress:\n"
        "            rate: fast\ntests: [{type: TCP_STREAM}]\n",
        "rate: fast",
        "cases[0].policy.vifs[0].ingress.rate",
        ["'fast'", "not a rate/size", "'10mbit'"],
        id="case-policy-bad-rate",
    ),
    pytest.param(
        HEAD + "setup:\n  policy:\n    vifs:\n      - vm: VM1\n        vlan: 5000\ntests: [{type: TCP_STREAM}]\n",
        "vlan: 5000",
        "setup.policy.vifs[0].vlan.tag",
        ["5000"],
        id="setup-policy-bad-vlan",
    ),
    pytest.param(
        HEAD + "version: 2\ntests: [{type: TCP_RR}]\n",
        "version",
        "version",
        ["unsupported version 2", "allowed: 1"],
        id="version",
    ),
    pytest.param(
        HEAD + "name: 'my suite'\ntests: [{type: TCP_RR}]\n",
        "my suite",
        "name",
        ["must be 1-64 letters, digits, '_', '.', '-'"],
        id="bad-name",
    ),
    pytest.param(
        HEAD + "tests: []\n",
        "tests",
        "tests",
        ["required: a non-empty list of tests"],
        id="no-tests",
    ),
    pytest.param(
        f"topology: {SEED_2010.parent / 'missing.yaml'}\n" + HEAD + "tests: [{type: TCP_RR}]\n",
        "topology",
        "topology",
        ["no topology file", "missing.yaml"],
        id="missing-topology",
    ),
]


@pytest.mark.parametrize("text, needle, field, fragments", BAD)
def test_bad_suite(tmp_path, text, needle, field, fragments) -> None:
    found = problems(tmp_path, text)
    where = f"{tmp_path / 's.yaml'}:{line_of(text, needle)}: {field}: "
    hits = [p for p in found if p.startswith(where)]
    assert hits, f"no problem at {where!r}: {found}"
    assert any(all(f in p for f in fragments) for p in hits), (fragments, hits)


def test_case_policy_problem_keeps_the_suite_file_and_line(tmp_path) -> None:
    text = HEAD + "cases:\n  - name: slow\n    policy:\n      vifs:\n        - vm: VM1\n          ingress: {rate: 0}\n"
    text += "tests: [{type: TCP_STREAM}]\n"
    f = write(tmp_path, text)
    with pytest.raises(ConfigError) as exc:
        suite.load(f)
    (p,) = exc.value.problems
    assert p.file == str(f)
    assert p.line == line_of(text, "rate: 0")
    assert p.field.startswith("cases[0].policy.")


def test_every_problem_is_reported_at_once(tmp_path) -> None:
    text = textwrap.dedent(
        """\
        name: several
        colour: red
        endpoints:
          client: VM9
          server: {address: nowhere}
        defaults:
          duration: 0
        tests:
          - {type: TCP_MAERTS}
          - {type: UDP_STREAM, message_size: 65508}
          - {type: TCP_RR, message_size: 1, confidence: {level: 90}}
        """
    )
    found = problems(tmp_path, text)
    f = str(tmp_path / "s.yaml")
    expected = [
        f"{f}:2: colour: unknown key",
        f"{f}:4: endpoints.client: unknown guest 'VM9'",
        f"{f}:5: endpoints.server.address: must be an IP address",
        f"{f}:7: defaults.duration: duration (seconds) must be an integer 1..3600",  # once per test using it
        f"{f}:9: tests[0].type: unknown test type 'TCP_MAERTS'",
        f"{f}:10: tests[1].message_size: UDP_STREAM message_size (bytes) must be an integer 1..65507",
        f"{f}:11: tests[2].message_size: TCP_RR sends requests and responses",
        f"{f}:11: tests[2].confidence.level: must be 95 or 99",
    ]
    for e in expected:
        assert any(p.startswith(e) for p in found), (e, found)
    with pytest.raises(ConfigError) as exc:
        suite.load(tmp_path / "s.yaml")
    assert str(exc.value).startswith(f"{len(found)} problems:\n")
    assert len(found) >= len(expected)


def test_a_suite_that_is_not_a_mapping(tmp_path) -> None:
    found = problems(tmp_path, "- just\n- a list\n")
    assert len(found) == 1 and "a suite is a mapping" in found[0]


def test_too_many_steps_is_refused(tmp_path: Path) -> None:
    found = problems(tmp_path, "endpoints: {client: VM1, server: VM2}\n"
                               "tests: [{type: TCP_STREAM, message_size: {from: 64, to: 1472}}]\n")  # fmt: skip
    assert any("1409 steps" in p and "at most 500" in p for p in found), found


def test_a_bad_default_is_reported_once(tmp_path: Path) -> None:
    found = problems(tmp_path, "endpoints: {client: VM1, server: VM2}\ndefaults: {duration: 0}\n"
                               "tests: [{type: TCP_RR}, {type: UDP_RR}, {type: TCP_CRR}]\n")  # fmt: skip
    assert len([p for p in found if "defaults.duration" in p]) == 1, found


def test_cli_override_bounds_match_the_suite_loader() -> None:
    """The overrides' parser (the CLI's options, the console's fields) bounds them as the suite loader does."""
    from appliance.services import suites as cli_suite

    assert (cli_suite.MAX_DURATION_S, cli_suite.MAX_REPETITIONS) == (tests.MAX_DURATION_S, tests.MAX_REPETITIONS)
    # The parser itself, not only its constants: the loader's limits are accepted, one more is refused.
    for field, top in (("duration", tests.MAX_DURATION_S), ("repetitions", tests.MAX_REPETITIONS)):
        assert cli_suite.parse_override(field, str(top)) == top
        with pytest.raises(cli_suite.OverrideError):
            cli_suite.parse_override(field, str(top + 1))


def test_a_suite_may_name_real_vms_alone_or_beside_probes(tmp_path: Path) -> None:
    from appliance.netperf.define.suite import load as load_suite

    f = tmp_path / "s.yaml"
    f.write_text("name: v\nvms: [web-01, db-01]\nendpoints: {client: web-01, server: db-01}\n"
                 "tests: [{name: rr, type: TCP_RR}]\n")  # fmt: skip
    s = load_suite(f)
    assert s.vms == ("web-01", "db-01") and [g.kind for g in s.topology.guests] == ["vm", "vm"]
    f.write_text("name: v\nprobes: [{name: P1, vlan: 10, ip: 10.0.0.1/24}]\nvms: [db-01]\n"
                 "endpoints: {client: P1, server: db-01}\ntests: [{name: rr, type: TCP_RR}]\n")  # fmt: skip
    s = load_suite(f)
    assert [g.kind for g in s.topology.guests] == ["probe", "vm"] and len(s.probes) == 1
    for text, what in (
        ("vms: [a]\ntopology: x.yaml\n", "not both"),
        ("vms: ['a;b']\n", "vms[0]"),
        ("vms: [a, a]\n", "named twice"),
        ("vms: []\n", "a list of VM names"),
        ("probes: [{name: a, vlan: 10, ip: 10.0.0.1/24}]\nvms: [a]\n", "as a probe and as a VM"),
    ):
        f.write_text(f"name: v\n{text}endpoints: {{client: a, server: b}}\ntests: [{{name: rr, type: TCP_RR}}]\n")
        with pytest.raises(ConfigError, match=re.escape(what)):
            load_suite(f)
