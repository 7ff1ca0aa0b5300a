"""Any text where hvnet expects tool output ends in a result or a documented error, quickly.

hvnet reads what ``ovs-ofctl``, ``ovs-appctl`` and netperf print, port names
from OVSDB and saved ``results.json`` files.  A newer tool, a truncated
capture or a hand-edited file must never surface as an IndexError or a
UnicodeError from deep inside a parser.  Each property below feeds one
parser text made from pieces of a real capture (tests/unit/data), hostile
tokens and arbitrary text, and accepts only its documented outcomes:

=======================  ====================================================
parser                   documented outcome
=======================  ====================================================
openflow.parse_flows     (flows, foreign lines); never raises
openflow.parse_meters    {meter: (rate, burst)}; never raises
openflow.parse_meter_st  {meter: packets}; never raises
counters.parse_ofctl_po  {port: Counters}; never raises
omni.parse               an Instance (lost with a reason when unreadable)
preflight.parse_version  a version tuple or None
trace.parse_dpif_show    {datapath port: name}; never raises
trace.passes/deliveries  deliveries; ValueError when no 'Datapath actions' or unreadable ones
reader.parse_xen_port    (kind, domid, devid) or None; port names sort
results.load             a SuiteResult or NotARun (a UsageError)
=======================  ====================================================

Each property runs ``EXAMPLES`` generated inputs (300; 3,000 in all, about
five seconds); the inputs that once crashed a parser are regression tests
of their own at the end.
"""

from __future__ import annotations

import json
import re
import time
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from appliance.isolation import ofproto as trace
from appliance.netperf.define.tests import Test as NetperfTest
from appliance.netperf.parse import omni
from appliance.netperf.run import preflight
from appliance.netperf.store import results
from appliance.netperf.store.records import SuiteResult
from appliance.policy.apply import openflow
from appliance.switch import counters, inventory, reader

DATA = Path(__file__).resolve().parent / "data"
EXAMPLES = 300
FAST_S = 1.0  # one parse of a few kilobytes; anything slower is a pathological regex or loop

# Characters that break naive parsers: non-ASCII digits (str.isdigit() but not int()),
# separators of other scripts, surrogates, NUL, and very long numbers.
HOSTILE = ["\u2028", "\x85", "\x00", "\ud800", "\ufeff", "nan", "inf", "1e400", "=", ",", ":", " ", "\n", "\t", '"',
           "/", "(", ")", "."]  # fmt: skip
NUMBERS = ["²", "١٢", "٣", "9" * 5000, "0x", "0xzz", "-1", "", "18446744073709551616", "007"]

TESTS = [
    NetperfTest("ts", "TCP_STREAM", 2, (1,)),
    NetperfTest("us", "UDP_STREAM", 2, (1,)),
    NetperfTest("rr", "TCP_RR", 2, (1,), request_size=64, response_size=1024),
]


def _pieces(text: str) -> list[str]:
    """A capture cut at its separators (kept), so that generated text recombines real tokens."""
    return [p for p in re.split(r"([\s,=:/()\"]+)", text) if p]


def _mutations(*captures: str) -> st.SearchStrategy[str]:
    pieces = sorted({p for c in captures for p in _pieces(c)})
    atoms = st.one_of(st.sampled_from(pieces), st.sampled_from(HOSTILE), st.sampled_from(NUMBERS), st.text(max_size=8))
    whole_lines = st.sampled_from([ln + "\n" for c in captures for ln in c.splitlines()])
    return st.lists(st.one_of(atoms, whole_lines), max_size=60).map("".join)


def _capture(*names: str) -> list[str]:
    return [(DATA / n).read_text() for n in names]


def _timed(call: Any, *args: Any) -> Any:
    started = time.monotonic()
    out = call(*args)
    assert time.monotonic() - started < FAST_S, f"{call.__name__} took {time.monotonic() - started:.2f} s"
    return out


FAST = settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# -- OpenFlow ---------------------------------------------------------------------------------


@FAST
@given(text=_mutations(*_capture("ofctl-dump-flows.txt", "ofctl-dump-flows-foreign.txt")))
def test_dump_flows_any_text(text: str) -> None:
    ours, foreign = _timed(openflow.parse_flows, text)
    assert all(isinstance(p, int) and isinstance(m, int) for p, m in ours.items())
    assert all(isinstance(line, str) for line in foreign)


@FAST
@given(text=_mutations(*_capture("ofctl-dump-meters.txt")))
def test_dump_meters_any_text(text: str) -> None:
    meters = _timed(openflow.parse_meters, text)
    assert all(isinstance(m, int) and len(band) == 2 for m, band in meters.items())


@FAST
@given(text=_mutations(*_capture("ofctl-meter-stats.txt")))
def test_meter_stats_any_text(text: str) -> None:
    assert all(isinstance(v, int) for v in _timed(openflow.parse_meter_stats, text).values())


@FAST
@given(text=_mutations(*_capture("ofctl-dump-ports.txt")))
def test_dump_ports_any_text(text: str) -> None:
    assert all(isinstance(c, counters.Counters) for c in _timed(counters.parse_ofctl_ports, text).values())


# -- netperf -----------------------------------------------------------------------------------

_NETPERF = [p.read_text() for p in sorted((DATA / "netperf").glob("*.out")) + sorted((DATA / "netperf").glob("*.err"))]


@FAST
@given(
    test=st.sampled_from(TESTS),
    stdout=_mutations(*_NETPERF),
    stderr=_mutations(*_NETPERF),
    rc=st.one_of(st.none(), st.integers(-100, 300)),
)
def test_netperf_output_any_text(test: NetperfTest, stdout: str, stderr: str, rc: int | None) -> None:
    inst = _timed(omni.parse, 0, test, stdout, stderr, rc)
    assert inst.ok or inst.lost
    json.dumps(inst.to_json(), allow_nan=True)


@FAST
@given(text=_mutations("netperf version 2.7.0\n", "Netperf version 2.6\n"))
def test_netperf_version_any_text(text: str) -> None:
    version = _timed(preflight.parse_version, text)
    assert version is None or all(isinstance(x, int) for x in version)


# -- ports and datapaths ---------------------------------------------------------------------


@FAST
@given(text=_mutations(*_capture("dpif-show-many-vlans.txt")))
def test_dpif_show_any_text(text: str) -> None:
    assert all(isinstance(k, int) for k in _timed(trace.parse_dpif_show, text, "br0"))


@FAST
@given(text=_mutations(*_capture("trace-many-vlans-g01.txt")), ports=st.dictionaries(st.integers(0, 99), st.text()))
def test_trace_any_text(text: str, ports: dict[int, str]) -> None:
    try:
        passes = _timed(trace.passes, text)
    except ValueError as exc:
        assert "Datapath actions" in str(exc)
        return
    try:
        assert all(isinstance(d.port, str) for d in _timed(trace.deliveries, passes, ports))
    except ValueError as exc:
        assert "datapath action" in str(exc) or "push_vlan" in str(exc)


@FAST
@given(names=st.lists(_mutations("vif3.0", "tap12.1", "vnet0", "eth0"), max_size=5))
def test_port_names_any_text(names: list[str]) -> None:
    for name in names:
        parsed = _timed(reader.parse_xen_port, name)
        assert parsed is None or parsed[0] in ("vif", "tap")
    sorted(names, key=inventory._natural)


# -- saved runs -------------------------------------------------------------------------------

_QUICK = json.loads((DATA / "netperf" / "quick-results.json").read_text())


def _paths(doc: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON document (dict keys and list indices), the root included."""
    out = [at]
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else []
    for key, value in items:
        out += _paths(value, (*at, key))
    return out


_JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=10)),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=10,
)


def _replaced(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    if not path:
        return value
    out = json.loads(json.dumps(doc))
    parent = out
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return out


@settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    where=st.sampled_from([p for p in _paths(_QUICK) if p[:1] != ("schema",) and p[:1] != ("version",)]),
    value=_JSON,
    raw=st.one_of(st.none(), _mutations(json.dumps(_QUICK)[:2000], "[" * 50, "{" * 50)),
)
def test_results_json_any_document(tmp_path_factory, where: tuple[Any, ...], value: Any, raw: str | None) -> None:
    f = tmp_path_factory.mktemp("run") / results.RESULTS
    f.write_text(raw if raw is not None else json.dumps(_replaced(_QUICK, where, value)), errors="surrogatepass")
    try:
        doc = _timed(results.load, f)
    except results.NotARun:
        return
    assert isinstance(doc, SuiteResult)


# -- inputs that once crashed a parser -------------------------------------------------------


def test_a_superscript_port_number_is_not_an_in_port() -> None:
    """``"²".isdigit()`` is true but ``int("²")`` raises: the flow is someone else's, not a crash."""
    ours, foreign = openflow.parse_flows(" cookie=0x68766e6574, priority=100,in_port=² actions=meter:3,NORMAL\n")
    assert ours == {} and foreign == []


def test_an_unreadable_cookie_or_priority_makes_a_foreign_flow() -> None:
    text = " cookie=0xzz, priority=100,in_port=3 actions=NORMAL\n table=x actions=drop\n priority=1e3 actions=drop\n"
    ours, foreign = openflow.parse_flows(text)
    assert ours == {} and len(foreign) == 3


def test_an_empty_cookie_makes_a_foreign_flow() -> None:
    """The first crash the property found."""
    line = "cookie cookie=0x68766e6574, priority=100,in_port=3 actions=meter:3,NORMAL"
    assert openflow.parse_flows(line + "\n") == ({}, [line])


HUGE = "9" * 5000  # int() refuses more than 4,300 digits (Python 3.11)


def test_huge_numbers_are_not_read() -> None:
    assert openflow.parse_meters(f"meter={HUGE} kbps bands=\ntype=drop rate=1\n") == {}
    assert openflow.parse_meters(f"meter=1 kbps bands=\ntype=drop rate={HUGE}\n") == {1: (0, 0)}
    assert openflow.parse_meter_stats(f"meter:{HUGE} flow_count:1 bands:\n0: packet_count:1 byte_count:0\n") == {}
    flow = "cookie=0x68766e6574, priority=100,in_port={} actions=meter:{},NORMAL\n"
    assert openflow.parse_flows(flow.format(HUGE, 3))[0] == {}
    assert openflow.parse_flows(flow.format(3, HUGE))[0] == {}
    assert openflow.parse_flows(f"priority={HUGE} actions=drop\n")[1] == [f"priority={HUGE} actions=drop"]
    assert counters.parse_ofctl_ports(f"  port 1: rx pkts={HUGE}\n tx pkts=1\n")["1"].rx_packets is None
    assert reader.parse_xen_port(f"vif{HUGE}.0") is None
    assert trace.parse_dpif_show(f"  br0:\n    p 1/{HUGE}: (system)\n", "br0") == {}
    with pytest.raises(ValueError, match="push_vlan without a VLAN id"):  # the tag of what follows is unknown
        trace.deliveries(f"push_vlan(vid={HUGE}),{HUGE}", {})
    assert trace.deliveries(f"{HUGE},3", {3: "vif3.0"}) == [trace.Delivery("vif3.0", None)]
    assert preflight.parse_version(f"netperf version {HUGE}.1") is None


@pytest.mark.parametrize("name", ["²", "vif²", f"vif{HUGE}.0"])
def test_port_names_sort_whatever_their_digits(name: str) -> None:
    ordered = sorted([name, "vif10.0", "vif2.0"], key=inventory._natural)
    assert ordered.index("vif2.0") < ordered.index("vif10.0")


def test_a_superscript_datapath_port_is_no_delivery() -> None:
    assert trace.deliveries("²,3", {3: "vif3.0"}) == [trace.Delivery("vif3.0", None)]


def test_a_superscript_counter_is_not_a_counter() -> None:
    text = '  port  "vif2.0": rx pkts=²\n           tx pkts=1, bytes=2\n'
    assert counters.parse_ofctl_ports(text)["vif2.0"].rx_packets is None


@pytest.mark.parametrize("text", ["[" * 100_000, '{"a":' * 100_000])
def test_deeply_nested_results_json_is_not_a_run(tmp_path: Path, text: str) -> None:
    f = tmp_path / results.RESULTS
    f.write_text(text)
    with pytest.raises(results.NotARun, match="not a readable hvnet run"):
        results.load(f)
