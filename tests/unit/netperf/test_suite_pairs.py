"""Several client -> server pairs in one step (``endpoints: {pairs: [...]}``): what loads, and every way a
pairs list is refused, with the suite file's line and field."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from appliance.core.errors import EXIT_USAGE, ConfigError
from appliance.netperf.define import suite
from appliance.netperf.define.pairs import MAX_PAIRS, Pair, Server
from appliance.netperf.define.tests import MAX_CONCURRENCY, MAX_STEP_FLOWS

TWO_INTO_VM3 = """\
endpoints:
  pairs:
    - {client: VM1, server: VM3}
    - {client: VM2, server: VM3}
"""


def write(tmp_path: Path, text: str) -> Path:
    f = tmp_path / "s.yaml"
    f.write_text(textwrap.dedent(text))
    return f


def problems(tmp_path: Path, text: str) -> list[str]:
    f = write(tmp_path, text)
    with pytest.raises(ConfigError) as exc:
        suite.load(f)
    assert exc.value.exit_code == EXIT_USAGE
    return [str(p) for p in exc.value.problems]


def at(tmp_path: Path, text: str, needle: str, field: str) -> str:
    """The ``file:line: field: `` prefix of the one line of ``text`` holding ``needle``."""
    (line,) = [i for i, ln in enumerate(textwrap.dedent(text).splitlines(), 1) if needle in ln]
    return f"{tmp_path / 's.yaml'}:{line}: {field}: "


def only(found: list[str], prefix: str) -> str:
    hits = [p for p in found if p.startswith(prefix)]
    assert len(hits) == 1, (prefix, found)
    return hits[0]


def test_two_senders_into_one_receiver_load(tmp_path: Path) -> None:
    s = suite.load(write(tmp_path, TWO_INTO_VM3 + "tests: [{type: TCP_STREAM, duration: 2, concurrency: [1, 2]}]\n"))
    assert s.pairs == (Pair("VM1", "VM3"), Pair("VM2", "VM3"))
    assert (s.client, s.server) == ("VM1", Server(guest="VM3"))  # the first pair's: its VIF is read
    assert s.endpoint_pairs() == s.pairs
    assert s.guest_names() == ["VM1", "VM2", "VM3"]
    assert s.server_guests() == ["VM3"]  # one netserver however many pairs it serves
    assert [st.concurrency for st in s.steps()] == [1, 2]  # concurrency stays per pair in the step
    assert [s.instances(st.concurrency) for st in s.steps()] == [2, 4]
    assert s.steps()[0].key == "tcp-stream/default/m-/c1"  # keys do not change with pairs


def test_the_single_form_is_one_pair_and_keeps_its_fields(tmp_path: Path) -> None:
    s = suite.load(write(tmp_path, "endpoints: {client: VM1, server: VM2}\ntests: [{type: TCP_RR}]\n"))
    assert s.pairs == ()
    assert s.endpoint_pairs() == (Pair("VM1", "VM2"),)
    assert s.instances(4) == 4
    s = suite.load(write(tmp_path, "endpoints: {client: VM1, server: {address: 10.0.0.9}}\ntests: [{type: TCP_RR}]\n"))
    assert s.endpoint_pairs() == () and s.server_guests() == []  # an address's netserver is not ours to start


def test_the_netserver_port_applies_to_every_server(tmp_path: Path) -> None:
    s = suite.load(write(tmp_path, "netserver_port: 13000\n" + TWO_INTO_VM3 + "tests: [{type: TCP_RR}]\n"))
    assert s.server.port == 13000


PAIRS_BAD = [
    pytest.param(
        "endpoints:\n  pairs:\n    - {client: VM1, server: VM3}\n    - {client: VM9, server: VM3}\n",
        "VM9",
        "endpoints.pairs[1].client",
        ["unknown guest 'VM9'", "lab guest", "VM1, VM2, VM3"],
        id="unknown-client",
    ),
    pytest.param(
        "endpoints:\n  pairs:\n    - {client: VM1, server: {address: 10.0.0.1}}\n",
        "address",
        "endpoints.pairs[0].server",
        ["in pairs the server is a lab guest"],
        id="server-by-address",
    ),
    pytest.param(
        "endpoints:\n  pairs:\n    - {client: VM1, server: VM3}\n    - {client: VM2, server: VM2}\n",
        "VM2, server: VM2",
        "endpoints.pairs[1].server",
        ["the pair's server is its client 'VM2'"],
        id="client-is-server",
    ),
    pytest.param(
        "endpoints:\n  pairs:\n    - {client: VM1, server: VM3}\n    - {client: VM1, server: VM3}  # again\n",
        "again",
        "endpoints.pairs[1]",
        ["VM1->VM3 is listed twice", "concurrency"],
        id="duplicate",
    ),
    pytest.param(
        "endpoints:\n  client: VM1\n  pairs:\n    - {client: VM2, server: VM3}\n",
        "client: VM1",
        "endpoints.client",
        ["not both"],
        id="both-forms",
    ),
    pytest.param(
        "endpoints:\n  pairs: []\n",
        "pairs",
        "endpoints.pairs",
        ["non-empty list", "concurrency per pair"],
        id="empty",
    ),
    pytest.param(
        "endpoints:\n  pairs:\n    - [VM1, VM3]\n",
        "[VM1, VM3]",
        "endpoints.pairs[0]",
        ["{client: GUEST, server: GUEST}"],
        id="not-a-mapping",
    ),
    pytest.param(
        "endpoints:\n  pairs:\n    - {client: VM1, server: VM3, port: 1}\n",
        "port",
        "endpoints.pairs[0].port",
        ["unknown key"],
        id="unknown-key",
    ),
]


@pytest.mark.parametrize("endpoints, needle, field, fragments", PAIRS_BAD)
def test_bad_pairs(tmp_path: Path, endpoints: str, needle: str, field: str, fragments: list[str]) -> None:
    text = endpoints + "tests: [{type: TCP_RR}]\n"
    hit = only(problems(tmp_path, text), at(tmp_path, text, needle, field))
    assert all(f in hit for f in fragments), (fragments, hit)


def test_more_than_the_bound_of_pairs_is_refused(tmp_path: Path) -> None:
    rows = "".join(f"    - {{client: VM{1 + i % 2}, server: VM3}}\n" for i in range(MAX_PAIRS + 1))
    text = "endpoints:\n  pairs:\n" + rows + "tests: [{type: TCP_RR}]\n"
    hit = only(problems(tmp_path, text), at(tmp_path, text, "pairs:", "endpoints.pairs"))
    assert f"{MAX_PAIRS + 1} pairs; at most {MAX_PAIRS}" in hit


def test_concurrency_is_per_pair_within_a_steps_bound(tmp_path: Path) -> None:
    n = MAX_CONCURRENCY // 2 + 1
    text = TWO_INTO_VM3 + f"tests:\n  - {{type: TCP_STREAM, concurrency: {n}}}\n"
    hit = only(problems(tmp_path, text), at(tmp_path, text, "concurrency", "tests[0].concurrency"))
    assert f"concurrency is per pair: {n} x 2 pairs = {2 * n} instances" in hit
    assert suite.load(write(tmp_path, TWO_INTO_VM3 + f"tests: [{{type: TCP_STREAM, concurrency: {n - 1}}}]\n"))


def test_flows_count_every_pairs_instances(tmp_path: Path) -> None:
    flows = MAX_STEP_FLOWS // 2  # one instance per pair: two pairs fill the bound exactly
    ok = TWO_INTO_VM3 + f"tests: [{{type: TCP_IPERF, flows: {min(flows, 128)}, concurrency: 4}}]\n"
    assert suite.load(write(tmp_path, ok))
    text = TWO_INTO_VM3 + "tests:\n  - {type: TCP_IPERF, flows: 128, concurrency: 5}\n"
    hit = only(problems(tmp_path, text), at(tmp_path, text, "flows", "tests[0].flows"))
    assert f"10 instances x 128 flows = 1280 flows in a step; at most {MAX_STEP_FLOWS}" in hit


def test_overrides_and_other_topologies_keep_the_pairs(tmp_path: Path) -> None:
    s = suite.load(write(tmp_path, TWO_INTO_VM3 + "tests: [{type: TCP_STREAM}]\n"))
    assert s.with_overrides(concurrency=(MAX_CONCURRENCY // 2,)).tests[0].concurrency == (MAX_CONCURRENCY // 2,)
    with pytest.raises(ValueError, match="concurrency is per pair"):
        s.with_overrides(concurrency=(MAX_CONCURRENCY // 2 + 1,))
    assert s.with_endpoints(s.topology).pairs == s.pairs
    with pytest.raises(ValueError, match=r"edit its endpoints\.pairs"):
        s.with_endpoints(s.topology, client="VM2")


def test_what_the_run_stages_need_is_computed_from_the_suite(tmp_path: Path) -> None:
    # the stages get these plain values, not the Suite: their sums must follow pairs and iperf3 tests
    s = suite.load(write(tmp_path, TWO_INTO_VM3 + textwrap.dedent("""\
        cases: [{name: a}, {name: b}]
        tests:
          - {type: TCP_STREAM, duration: 2, concurrency: [1, 6]}
          - {name: many, type: TCP_IPERF, duration: 2, flows: 2, concurrency: [1, 3]}
        """)))  # fmt: skip
    assert s.peak_instances == 12  # the busiest step's concurrency, for each of two pairs
    assert s.iperf_types == ("TCP_IPERF",) and s.iperf_concurrency == 3
    assert [label for label, _ in s.fragments] == ["setup", "case a", "case b"]  # no setup: a None policy
    assert s.fragments[0][1] is None
    needs = s.guest_needs
    assert (needs.label, needs.client, needs.vms) == (f"suite {s.name}", "VM1", ())
    assert needs.tools == ("netperf", "netserver", "iperf3")
    assert needs.vm_tools == {"VM1": ("netperf", "iperf3"), "VM2": ("netperf", "iperf3"),
                              "VM3": ("netserver", "iperf3")}  # fmt: skip
    fewer = s.with_overrides(concurrency=(2,))  # an override's copy computes its own
    assert fewer.peak_instances == 4 and fewer.iperf_concurrency == 2 and s.peak_instances == 12


def test_a_netperf_only_suite_needs_no_iperf3(tmp_path: Path) -> None:
    s = suite.load(write(tmp_path, "endpoints: {client: VM1, server: VM2}\ntests: [{type: TCP_RR}]\n"))
    assert s.iperf_types == () and s.iperf_concurrency == 0
    assert s.guest_needs.tools == ("netperf", "netserver")
    assert s.guest_needs.vm_tools == {"VM1": ("netperf",), "VM2": ("netserver",)}
