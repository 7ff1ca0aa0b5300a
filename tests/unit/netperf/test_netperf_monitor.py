"""Monitored suite cases: the monitor:/phases: grammar (bad values refused with file:line: field), the
binomial arithmetic of received ÷ expected, netperf's interim results (a real lab capture), the socket's
drop counter (a real /proc/net/udp) and how a step's repetitions combine."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

from appliance.netperf.define import monitoring as monitor
from appliance.netperf.define.tests import Test as NetperfTest
from appliance.netperf.parse import omni
from appliance.netperf.run.collectors import socket_drops
from appliance.netperf.store.records import RepetitionResult
from tests.unit.netperf.test_netperf_suite import line_of, load, problems

DATA = Path(__file__).parents[1] / "data"
HEAD = """\
    version: 1
    topology: {topology}
    endpoints: {{client: VM1, server: VM2}}
    tests:
      - {{name: s, type: TCP_STREAM, duration: 10}}
    cases:
"""
SEED = Path(__file__).resolve().parents[3] / "vlan-tests" / "topologies" / "seed-2010.yaml"


def doc(cases: str) -> str:
    return HEAD.format(topology=SEED) + cases


def test_monitor_and_phases_load(tmp_path: Path) -> None:
    s = load(
        tmp_path,
        doc("""\
      - name: off
      - name: sflow-64
        monitor: {kind: sflow, sampling: 64, polling: 5, header: 256}
      - name: ipfix-nocache
        monitor: {kind: ipfix, sampling: 8, cache_active_timeout: 0, cache_max_flows: 0, bridge: xenbr0}
      - name: sweep
        duration: 30
        phases:
          - {at: 0, monitor: off}
          - {at: 10, monitor: {kind: sflow, sampling: 1024}}
          - {at: 20, monitor: {kind: ipfix, sampling: 1}}
    """),
    )
    off, sflow, nocache, sweep = s.cases
    assert off.monitors() == [] and off.monitor is None
    assert (sflow.monitor.kind, sflow.monitor.sampling, sflow.monitor.get("header")) == ("sflow", 64, 256)
    assert sflow.monitor.variant == "sFlow" and sflow.monitor.bridge is None  # the client's bridge at run time
    assert nocache.monitor.variant == "IPFIX no cache" and not nocache.monitor.cached
    assert [p.at for p in sweep.phases] == [0, 10, 20] and sweep.phases[0].monitor is None
    assert [m.kind for m in sweep.monitors()] == ["sflow", "ipfix"]
    durations = {st.case.name: st.test.duration for st in s.steps()}
    assert durations == {"off": 10, "sflow-64": 10, "ipfix-nocache": 10, "sweep": 30}  # the case's own length
    assert sflow.monitor.describe() == "sFlow 1-in-64 polling 5 s header 256 B"
    policy = monitor.policy(("sflow", "xenbr0"), sflow.monitor, "127.0.0.1:6343")
    (rule,) = policy.sampling
    assert (rule.bridge, rule.value.targets, rule.value.sampling) == ("xenbr0", ("127.0.0.1:6343",), 64)
    assert str(monitor.policy(("ipfix", "xenbr0"), None, None).sampling[0].value) == "REMOVE"


def test_bad_monitoring_is_refused_with_its_line(tmp_path: Path) -> None:
    text = doc("""\
      - name: a
        monitor: {kind: netflow, sampling: 64}
      - name: b
        monitor: {kind: sflow, sampling: 0, header: 9000, targets: ["192.0.2.9:6343"]}
      - name: c
        monitor: {kind: ipfix, cache_active_timeout: -1, bridge: br9, polling: 5}
      - name: d
        monitor: {kind: sflow}
        phases: [{at: 0, monitor: off}]
      - name: e
        phases:
          - {at: 5, monitor: off}
          - {at: 5, monitor: {kind: sflow}}
          - {at: 60, monitor: {kind: sflow}, policy: x}
      - name: f
        monitor: {kind: sflow}
        policy: {bridges: {xenbr0: {sflow: {targets: ["192.0.2.9:6343"]}}}}
    """)
    got = problems(tmp_path, text)
    joined = "\n".join(got)

    def has(needle: str, field: str, message: str, below: int = 0) -> None:
        line = line_of(text, needle) + below
        assert any(f":{line}: {field}: " in p and message in p for p in got), (needle, field, joined)

    has("kind: netflow", "cases[0].monitor.kind", "must be one of: sflow, ipfix")
    has("sampling: 0", "cases[1].monitor.sampling", "must be an integer 1..4294967295")
    has("sampling: 0", "cases[1].monitor.header", "14..600")
    has("sampling: 0", "cases[1].monitor.targets", "leave targets out")
    has("cache_active_timeout: -1", "cases[2].monitor.cache_active_timeout", "0..4200")
    has("cache_active_timeout: -1", "cases[2].monitor.bridge", "no bridge 'br9' in the topology; bridges: xenbr0")
    has("cache_active_timeout: -1", "cases[2].monitor.polling", "unknown key; allowed: kind, bridge, sampling")
    has("phases: [{at: 0", "cases[3].phases", "monitor (for the whole case) or phases")
    has("{at: 5, monitor: off}", "cases[4].phases[0].at", "the first phase starts at 0")
    has("{at: 5, monitor: {kind", "cases[4].phases[1].at", "later than the phase before (5 s)")
    has("policy: x", "cases[4].phases[2].policy", "unknown key; allowed: at, monitor")
    has("- name: e", "cases[4].phases", "the last phase starts at 60 s; test s runs 10 s", below=1)
    has("sflow: {targets", "cases[5].policy.bridges.xenbr0.sflow", "the case's monitor sets sflow; not both")


def test_wilson_interval() -> None:
    lo, hi = monitor.wilson(50, 100)  # a textbook value: 0.5 of 100 -> [0.404, 0.596]
    assert (round(lo, 3), round(hi, 3)) == (0.404, 0.596)
    assert monitor.wilson(0, 0) is None
    lo, hi = monitor.wilson(100, 100)
    assert hi == 1.0 and 0.96 < lo < 0.97


COUNTERS = {  # a real repetition's deltas (sflow-1 of the quick suite): 253,263 packets forwarded
    "vif1.0": {"rx_packets": 229796, "tx_packets": 60714},
    "vif2.0": {"rx_packets": 60714, "tx_packets": 192549},
    "LOCAL": {"rx_packets": 0, "tx_packets": 0},
}


def test_reception_counts_what_the_switch_forwarded() -> None:
    r = monitor.reception("sflow", 1, 252855, COUNTERS, 3.0)
    assert r["sampled_packets"] == 253263 and r["expected"] == 253263.0
    assert r["ports_rx_packets"] == 290510  # the kernel's count at the ports: more than was forwarded
    assert r["ratio"] == round(252855 / 253263, 4)
    assert r["ratio_ci95"][1] < 1.0  # 408 samples short at 1-in-1 is no accident
    assert monitor.ratio_verdict({**r, "socket_drops": 65}) == (
        "FEWER than expected: 65 datagram(s) dropped at the collector's socket"
    )
    ipfix = monitor.reception("ipfix", 1, 2 * 253263, COUNTERS, 3.0)  # ingress and egress: twice
    assert ipfix["ratio"] == 1.0 and monitor.ratio_verdict(ipfix) == "as expected"
    assert monitor.reception("sflow", 64, 10, {}, 3.0)["ratio"] is None  # no counters: not measured


def test_binomial_interval_holds_the_truth_at_one_in_64() -> None:
    packets = 253263
    expected = packets / 64
    for received in (round(expected), round(expected - 1.5 * math.sqrt(expected))):
        lo, hi = monitor.reception("sflow", 64, received, COUNTERS, 3.0)["ratio_ci95"]
        assert lo <= 1.0 <= hi
    lo, hi = monitor.reception("sflow", 64, round(0.9 * expected), COUNTERS, 3.0)["ratio_ci95"]
    assert hi < 1.0  # a tenth of the samples lost is outside the interval


def test_ipfix_counts_are_scaled_by_the_sampling_rate() -> None:
    assert monitor.samples_from("ipfix", 64, 609664) == 9526
    assert monitor.samples_from("sflow", 64, 3044) == 3044


def test_combine_sums_counts_and_averages_rates() -> None:
    reps = [monitor.reception("sflow", 64, n, COUNTERS, 3.0, socket_drops=d) for n, d in ((3900, 0), (4000, 2))]
    c = monitor.combine(reps)
    assert c["received"] == 7900 and c["expected"] == round(2 * 253263 / 64, 1) and c["socket_drops"] == 2
    assert c["received_per_s"]["n"] == 2 and c["received_per_s"]["ci95"] is not None
    assert monitor.combine([]) is None


def test_interim_results_of_a_lab_run() -> None:
    out = (DATA / "netperf" / "omni-demo-interim-lab-tcp-stream.out").read_text()
    series = omni.parse_interim(out)
    assert len(series) >= 6 and series[0] == (1795476614.108, 1.516, 859.59)
    assert omni.parse_fields(out)["THROUGHPUT"]  # the final result is still read as before
    inst = omni.parse(0, NetperfTest("s", "TCP_STREAM", 9, (1,)), out, "", 0)
    assert inst.ok and inst.throughput is not None
    start = series[0][0] - series[0][1]
    bins = omni.interim_series([series], start, 9)
    assert len(bins) == 9 and all(b is not None for b in bins)
    assert bins[0] == 859.59  # the first second lies inside the first interim interval
    mean = sum(bins) / len(bins)
    assert abs(mean - inst.throughput) / inst.throughput < 0.05  # the series averages to netperf's result
    assert omni.interim_series([], start, 3) == [None, None, None]  # nothing measured, never 0


def test_planted_interim_results_that_are_no_rate_are_left_out() -> None:
    """netperf's output may come from a guest: nan, inf, a negative rate or a zero interval never reach the
    series (results.json has no NaN, and a flent export must not fail on one)."""
    out = (DATA / "netperf" / "omni-demo-interim-lab-tcp-stream.out").read_text()
    good = omni.parse_interim(out)
    planted = "".join(
        f"NETPERF_INTERIM_RESULT[{90 + i}]={rate}\nNETPERF_INTERVAL[{90 + i}]={interval}\n"
        f"NETPERF_ENDING[{90 + i}]={ending}\n"
        for i, (rate, interval, ending) in enumerate(
            [("nan", "1.0", "1795476700.0"), ("inf", "1.0", "1795476701.0"), ("-5", "1.0", "1795476702.0"),
             ("10", "0", "1795476703.0"), ("10", "1.0", "nan")]
        )
    )  # fmt: skip
    assert omni.parse_interim(out + planted) == good


def test_interim_argv() -> None:
    t = NetperfTest("s", "TCP_STREAM", 9, (1,))
    argv = omni.argv("netperf", t, "192.0.2.1", 12865, message_size=None, seconds=9, interim_s=1.0)
    assert argv[argv.index("-D") + 1] == "1" and argv.index("-D") < argv.index("--")
    assert "-D" not in omni.argv("netperf", t, "192.0.2.1", 12865, message_size=None, seconds=9)


LOOPBACK = DATA / "netperf"


def loopback(name: str) -> str:
    """netperf 2.7.0 -D 1 against a netserver on 127.0.0.1 (see the data README)."""
    return (LOOPBACK / f"omni-demo-interim-loopback-{name}.out").read_text()


def test_interim_results_of_a_tcp_rr_are_transactions_per_second() -> None:
    out = loopback("tcp-rr")
    series = omni.parse_interim(out)
    assert series == [
        (1795808632.799, 1.0, 84164.41),
        (1795808633.8, 1.001, 87751.06),
        (1795808634.799, 0.999, 83337.92),
    ]
    inst = omni.parse(0, NetperfTest("r", "TCP_RR", 3, (1,)), out, "", 0)
    assert inst.ok and inst.throughput == 85082.90 and inst.units == "Trans/s"  # the final result, as before
    bins = omni.aligned_series([series], [0.0])
    assert bins is not None and len(bins) == 3 and bins[0] == pytest.approx(84164.41, abs=0.1)


def test_interim_results_of_a_udp_stream_are_the_sending_rate() -> None:
    out = loopback("udp-stream")
    series = omni.parse_interim(out)
    inst = omni.parse(0, NetperfTest("u", "UDP_STREAM", 3, (1,)), out, "", 0)
    assert len(series) == 3 and inst.ok and inst.sent_mbps and inst.received_mbps
    mean = sum(rate for _, _, rate in series) / len(series)
    # what netperf's demo mode counts is what the client sent, not what arrived: near the sent figure
    assert abs(mean - inst.sent_mbps) < abs(mean - inst.received_mbps)


def test_interim_results_of_a_confidence_run_cover_every_iteration() -> None:
    out = loopback("tcp-stream-confidence")  # -l 3 -I 99,5 -i 3,2: three iterations, numbered on
    series = omni.parse_interim(out)
    assert len(series) == 9 and [round(e - series[0][0]) for e, _, _ in series] == [0, 1, 2, 3, 4, 5, 6, 7, 8]
    bins = omni.aligned_series([series], [0.0])
    assert bins is not None and len(bins) == 9 and all(b is not None for b in bins)


def test_aligned_series_puts_each_instance_on_its_own_start() -> None:
    a = omni.parse_interim(loopback("tcp-rr"))
    # the same output from a client whose clock is 1000 s ahead, started 1 s after the release
    b = [(e + 1000.0, i, r) for e, i, r in a]
    bins = omni.aligned_series([a, b], [0.0, 1.0])
    assert bins is not None and len(bins) == 4
    assert bins[0] == pytest.approx(84164.41, abs=0.1)  # a alone in the first second
    assert bins[3] == pytest.approx(83337.92, rel=1e-3)  # b alone in its last second (ms of its previous)
    assert abs(bins[1] - (87751.06 + 84164.41)) < 100  # both running
    assert omni.aligned_series([[], []], [0.0, None]) is None  # no interim result: not measured, never zeros
    assert omni.aligned_series([a, []], [None, 0.0]) == omni.aligned_series([a], [0.0])


def test_socket_drops_from_proc_net_udp() -> None:
    table = DATA / "proc-net-udp-drops.txt"  # a socket with a 4 kB buffer sent 200 datagrams of 1000 bytes
    assert socket_drops(47258, str(table)) == 197
    assert socket_drops(41319, str(table)) == 0
    assert socket_drops(1, str(table)) is None


def test_thread_summary() -> None:
    reps = [RepetitionResult(cpu={"vswitchd_threads_pct": {"ovs": 60.0, "revalidator": 1.0}}),
            RepetitionResult(cpu={"vswitchd_threads_pct": {"ovs": 70.0}})]  # fmt: skip
    s = monitor.thread_summary(reps)
    assert s["ovs"]["mean"] == 65.0 and s["ovs"]["n"] == 2 and s["revalidator"]["mean"] == 0.5
    assert monitor.thread_summary([RepetitionResult()]) is None


@pytest.mark.parametrize("name", ["monitoring-cost", "monitoring-cost-quick"])
def test_shipped_monitoring_suites(name: str) -> None:
    from appliance.netperf.define import suite

    s = suite.load(name)
    kinds = {(m.variant, m.sampling) for c in s.cases for m in c.monitors()}
    for variant in ("sFlow", "IPFIX"):
        assert {(variant, 1), (variant, 64)} <= kinds
    assert any(c.monitor is None and not c.phases for c in s.cases)  # the no-monitoring baseline
    assert any(c.phases for c in s.cases)


def test_monitoring_cost_report_of_a_lab_run(tmp_path: Path) -> None:
    from appliance.netperf.report import plots
    from appliance.netperf.report import text as report
    from appliance.netperf.store import results

    doc = results.load(DATA / "netperf" / "monitoring-cost-mid-results.json")
    text = report.text(doc)
    tables = text[text.index("monitoring cost (sampling rate across") :]
    for title in ("tcp-stream: sFlow ", "tcp-stream: IPFIX ", "tcp-stream: IPFIX no cache "):
        head = next(line for line in tables.splitlines() if line.startswith(title))
        assert head.split()[-3:] == ["off", "1-in-64", "1-in-1"]  # sampling rate across, the heaviest last
    for row in ("throughput ÷ off", "ovs-vswitchd main (% of a core)", "ovs-vswitchd per Gbit/s",
                "collector: samples/s", "received ÷ expected [95%]", "collector socket drops"):  # fmt: skip
        assert tables.count(row) == 3, row
    # IPFIX without its cache at 1-in-1 overran the collector: the report says so, with the drops
    assert "received ÷ expected at 1-in-1: FEWER than expected: 277643 datagram(s) dropped" in tables
    sflow64 = next(s for s in doc.steps if s.case == "sflow-64")
    lo, hi = sflow64.collector["ratio_ci95"]
    assert lo <= 1.0 <= hi
    written = {p.name for p in plots.write(doc, tmp_path)}
    assert {"tcp-stream-threads.png", "tcp-stream-monitoring-cost.png"} <= written
