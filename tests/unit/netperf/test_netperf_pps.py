"""Packet-rate tests (UDP_PPS): frame-size arithmetic, iperf3's command line and JSON (real reports in
tests/unit/data/iperf3), the repetition's figures (sender, receiver, monitor ports, captures), the suite
keys and their refusals, and the report's tables."""

from __future__ import annotations

import json
import textwrap
from pathlib import Path
from typing import Any

import pytest

from appliance.core.errors import EXIT_USAGE, ConfigError
from appliance.netperf.define import cases, frames, suite
from appliance.netperf.define.frames import Offered
from appliance.netperf.figures import pps
from appliance.netperf.parse import iperf
from appliance.netperf.report import text as report
from appliance.netperf.store import results
from appliance.netperf.store.records import MirrorInfo, RepetitionResult, StepResult, SuiteResult

DATA = Path(__file__).parents[1] / "data" / "iperf3"
ROOT = Path(__file__).resolve().parents[3]


def read(name: str) -> str:
    return (DATA / name).read_text()


# -- frames ------------------------------------------------------------------------------------


@pytest.mark.parametrize(("frame", "payload"), [(64, 18), (128, 82), (512, 466), (1518, 1472)])
def test_payload_is_the_frame_less_udp_ip_ethernet_and_fcs(frame: int, payload: int) -> None:
    assert frames.payload_of(frame) == payload
    assert payload + 8 + 20 + 14 + 4 == frame


@pytest.mark.parametrize("frame", [63, 1519, 0, 9000])
def test_frames_outside_ethernet_are_refused(frame: int) -> None:
    with pytest.raises(ValueError, match=r"64\.\.1518"):
        frames.payload_of(frame)


def test_offered_rates_convert_between_mbps_and_pps() -> None:
    o = Offered(100, "Mbit/s")
    assert o.pps(1250) == pytest.approx(10_000)  # 1250 B = 10,000 bits: 10,000 frames make 100 Mbit/s
    assert o.mbps(1250) == pytest.approx(100)
    p = Offered(20_000, "packets/s")
    assert p.pps(64) == 20_000 and p.mbps(64) == pytest.approx(10.24)
    # iperf3's -b counts payload bits: 20,000 x 18 B x 8
    assert p.payload_bps(64) == 2_880_000
    assert o.label == "100Mbps" and p.label == "20000pps"
    assert frames.offered_from_json(p.to_json(64)) == p
    assert frames.offered_from_json(None) is None


def test_client_command_line() -> None:
    argv = iperf.client_argv("/usr/bin/iperf3", "10.0.0.2", 5202, frame=64, offered=Offered(20_000, "packets/s"),
                             seconds=2)  # fmt: skip
    assert argv == ["/usr/bin/iperf3", "-c", "10.0.0.2", "-p", "5202", "-u", "-b", "2880000", "-l", "18",
                    "-t", "2", "-J"]  # fmt: skip
    unpaced = iperf.client_argv("iperf3", "10.0.0.2", 5201, frame=1518, offered=None, seconds=10)
    assert unpaced[unpaced.index("-b") + 1] == "0" and unpaced[unpaced.index("-l") + 1] == "1472"


# -- iperf3's JSON -------------------------------------------------------------------------------


def test_parse_a_paced_run_without_loss() -> None:
    inst = iperf.parse(0, 64, read("loopback-64B-8Mbps.json"), "", 0)
    assert inst.ok, inst.lost
    assert inst.packets_sent == inst.packets_received == 111_099
    assert inst.sent_pps == pytest.approx(111_099 / 2.00008, abs=0.1)
    assert inst.throughput == inst.received_pps
    assert inst.sent_mbps == pytest.approx(inst.sent_pps * 64 * 8 / 1e6, abs=0.001)  # frames, not payload
    assert inst.loss_pct == 0 and inst.units == "packets/s"


def test_parse_counts_received_as_highest_sequence_less_gaps() -> None:
    inst = iperf.parse(0, 1518, read("loopback-1518B-unpaced.json"), "", 0)
    doc = json.loads(read("loopback-1518B-unpaced.json"))["end"]
    assert inst.packets_sent == doc["sum_sent"]["packets"]
    assert inst.packets_received == doc["sum_received"]["packets"] - doc["sum_received"]["lost_packets"]
    assert inst.packets_received * 1472 == doc["sum_received"]["bytes"]  # what arrived, byte for byte
    assert 30 < inst.loss_pct < 45  # type: ignore[operator]


def test_an_iperf3_error_loses_the_instance_with_its_message() -> None:
    inst = iperf.parse(0, 64, read("refused.json"), "", 1)
    assert not inst.ok and inst.lost == "iperf3: unable to connect to server: Connection refused"
    assert inst.received_pps is None


@pytest.mark.parametrize(
    ("stdout", "stderr", "rc", "stopped", "reason"),
    [
        ("", "", -9, None, "killed by SIGKILL"),
        ("", "iperf3: error - boom\n", 1, None, "iperf3 exited 1: iperf3: error - boom"),
        ("not json", "", 0, None, "no JSON report in iperf3's output"),
        ('{"end": {}}', "", 0, None, "iperf3's report has no sent and received packet counts"),
        ("", "", None, "no result after 17 s: stopped", "no result after 17 s: stopped"),
    ],
)
def test_lost_instances_keep_their_reason(stdout: str, stderr: str, rc: int, stopped: str, reason: str) -> None:
    inst = iperf.parse(3, 64, stdout, stderr, rc, stopped)
    assert inst.lost is not None and inst.lost.startswith(reason)


# -- a repetition's figures ----------------------------------------------------------------------


def _instances() -> list:
    return [iperf.parse(0, 64, read("loopback-64B-8Mbps.json"), "", 0), iperf.parse(1, 64, read("refused.json"), "", 1)]


def test_repetition_figures_and_achieved_over_offered() -> None:
    offered = Offered(8_000_000 / (18 * 8), "packets/s").pps(64)  # what -b 8M of 18-byte payloads asks for
    agg = pps.repetition(_instances(), offered)
    assert (agg.instances, agg.ok, agg.lost) == (2, 1, 1)
    assert agg.sum == agg.received_pps and agg.sent_pps == pytest.approx(55_547.3, abs=1)
    assert agg.paced_ratio == pytest.approx(1.0, abs=0.01)  # iperf3 kept the pace on loopback
    assert agg.achieved_ratio == pytest.approx(1.0, abs=0.01)
    assert agg.udp_loss_pct == 0
    assert agg.monitor_pps is None and agg.captured_ratio is None  # nothing measured them: not 0
    unpaced = pps.repetition(_instances(), None)
    assert unpaced.achieved_ratio is None and unpaced.paced_ratio is None


def test_nothing_received_is_no_figure() -> None:
    agg = pps.repetition([iperf.parse(0, 64, read("refused.json"), "", 1)], 1000.0)
    assert agg.sum is None and agg.received_pps is None and agg.achieved_ratio is None


MIRROR = MirrorInfo("m1", "br-mon", "vif3.0", ["vif1.0"], ["vif1.0"])
TAP = MirrorInfo("t1", "br-mon", "vif4.0", ["vif1.0"], [], kind="tap-group")


def test_monitor_figures_from_the_output_ports_counters() -> None:
    agg = pps.repetition(_instances(), None)
    counters = {"vif3.0": {"tx_packets": 2000, "tx_bytes": 2000 * 64}, "vif4.0": {"tx_packets": 1000, "tx_bytes": 0}}
    pps.add_monitor(agg, counters, pps.copy_ports([MIRROR, TAP, MIRROR]), 2.0)
    assert agg.monitor_ports == 2 and agg.monitor_pps == 750.0  # mean of 1000/s and 500/s
    # bytes + 4 FCS per frame: (2000 x 68 x 8 / 2 s + 1000 x 4 x 8 / 2 s) / 2 ports
    assert agg.monitor_mbps == pytest.approx((0.544 + 0.016) / 2, abs=1e-3)
    unread = pps.repetition(_instances(), None)
    pps.add_monitor(unread, {"vif3.0": counters["vif3.0"]}, ["vif3.0", "vif4.0"], 2.0)
    assert unread.monitor_pps is None  # one port unread: not the mean of the other alone


def test_offered_to_a_capture_is_what_its_mirror_selected() -> None:
    counters = {"vif1.0": {"rx_packets": 900, "tx_packets": 100}, "vif3.0": {"tx_packets": 1003},
                "vif4.0": {"tx_packets": 450}}  # fmt: skip
    assert pps.offered_to("vif3.0", [MIRROR], counters) == 1000  # VM1's rx (src) + tx (dst)
    assert pps.offered_to("vif4.0", [TAP], counters) == 450  # a TAP's subset: what the port was sent
    assert pps.offered_to("vif3.0", [MIRROR], {"vif3.0": {"tx_packets": 5}}) is None
    agg = pps.repetition(_instances(), None)
    caps = [
        {"captured": 990, "dropped": 0, "offered": 1000, "sent_to_port": 995},
        {"captured": 400, "dropped": 7, "offered": 450, "sent_to_port": 407},
    ]
    pps.add_captures(agg, caps, 2.0)
    assert agg.captured == 1390 and agg.capture_dropped == 7 and agg.captured_pps == 347.5
    assert agg.captured_ratio == pytest.approx(1390 / 1450, abs=1e-4)
    assert agg.captured_port_ratio == pytest.approx(1390 / 1402, abs=1e-4)
    unknown = pps.repetition(_instances(), None)
    pps.add_captures(unknown, [{"captured": None, "dropped": None, "offered": 1000}], 2.0)
    assert unknown.captured is None and unknown.captured_ratio is None


# -- suites --------------------------------------------------------------------------------------

HEAD = """\
version: 1
topology: {topology}
endpoints: {{client: VM1, server: VM2}}
"""


def _write(tmp_path: Path, body: str) -> Path:
    f = tmp_path / "s.yaml"
    topo = ROOT / "netperf-suites" / "topologies" / "monitors.yaml"
    f.write_text(HEAD.format(topology=topo) + textwrap.dedent(body))
    return f


def _problems(tmp_path: Path, body: str) -> list[str]:
    f = _write(tmp_path, body)
    with pytest.raises(ConfigError) as exc:
        suite.load(f)
    assert exc.value.exit_code == EXIT_USAGE
    out = [str(p) for p in exc.value.problems]
    assert all(p.startswith(f"{f}:") for p in out), out
    return out


def test_steps_expand_frames_by_offered_rates_with_stable_keys(tmp_path: Path) -> None:
    s = suite.load(_write(tmp_path, """\
        cases: [{name: none}, {name: one, capture: {guests: [MON1], snaplen: 96, buffer_kib: 8192}}]
        tests:
          - {name: udp, type: UDP_PPS, frame_size: [64, 1518], offered_mbps: [10, 20.5], duration: 2}
        """))  # fmt: skip
    keys = [st.key for st in s.steps()]
    assert keys[:4] == ["udp/none/f64/o10Mbps/c1", "udp/none/f64/o20.5Mbps/c1", "udp/none/f1518/o10Mbps/c1",
                        "udp/none/f1518/o20.5Mbps/c1"]  # fmt: skip
    assert len(keys) == 8 and s.tests[0].metric == "packets/s"
    assert s.cases[1].capture == cases.CaseCapture(("MON1",), 96, 8192)
    unpaced = suite.load(_write(tmp_path, "tests: [{type: UDP_PPS, frame_size: 64}]\n"))
    assert [st.key for st in unpaced.steps()] == ["udp-pps/default/f64/o-/c1"]


@pytest.mark.parametrize(
    ("body", "field", "fragment"),
    [
        ("tests: [{type: UDP_PPS}]", "tests[0].frame_size", "required: frame sizes on the wire, 64..1518"),
        ("tests: [{type: UDP_PPS, frame_size: 60}]", "tests[0].frame_size", "payload = frame - 46) must be an integer 64..1518, not 60"),
        ("tests: [{type: UDP_PPS, frame_size: [64, 9000]}]", "tests[0].frame_size[1]", "64..1518, not 9000"),
        ("tests: [{type: UDP_PPS, frame_size: 64, offered_mbps: 0}]", "tests[0].offered_mbps", "> 0"),
        ("tests: [{type: UDP_PPS, frame_size: 64, offered_pps: [1000, abc]}]", "tests[0].offered_pps[1]",
         "packets/s of frames"),
        ("tests: [{type: UDP_PPS, frame_size: 64, offered_pps: 1, offered_mbps: 1}]", "tests[0].offered_pps",
         "not both"),
        ("tests: [{type: UDP_PPS, frame_size: 64, message_size: 18}]", "tests[0].message_size", "give frame_size"),
        ("tests: [{type: UDP_STREAM, frame_size: 64}]", "tests[0].frame_size", "UDP_PPS's"),
        ("tests: [{type: UDP_PPS, frame_size: 64, confidence: true}]", "tests[0].confidence", "iperf3"),
        ("cases: [{name: c, capture: {guests: [NOPE]}}]\ntests: [{type: UDP_PPS, frame_size: 64}]",
         "cases[0].capture.guests", "guests: MON1, MON2, VM1, VM2"),
        ("cases: [{name: c, capture: {guests: [MON1], snaplen: 5}}]\ntests: [{type: UDP_PPS, frame_size: 64}]",
         "cases[0].capture.snaplen", "14..262144"),
        ("cases: [{name: c, capture: {guests: [MON1], ring: 1}}]\ntests: [{type: UDP_PPS, frame_size: 64}]",
         "cases[0].capture.ring", "allowed: buffer_kib, guests, snaplen"),
        ("cases: [{name: c, capture: {guests: [MON1], buffer_kib: 32}}]\ntests: [{type: UDP_PPS, frame_size: 64}]",
         "cases[0].capture.buffer_kib", "64..1048576"),
    ],
)  # fmt: skip
def test_bad_packet_rate_tests_are_refused(tmp_path: Path, body: str, field: str, fragment: str) -> None:
    found = _problems(tmp_path, body + "\n")
    assert any(f": {field}: " in p and fragment in p for p in found), found


def test_packet_rates_need_a_lab_guest_server(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    topo = ROOT / "netperf-suites" / "topologies" / "monitors.yaml"
    f.write_text(f"version: 1\ntopology: {topo}\nendpoints: {{client: VM1, server: {{address: 10.0.0.9}}}}\n"
                 "tests: [{type: UDP_PPS, frame_size: 64}]\n")  # fmt: skip
    with pytest.raises(ConfigError) as exc:
        suite.load(f)
    assert "endpoints.server: UDP_PPS tests need the server to be a lab guest" in str(exc.value.problems[0])


# -- the report ----------------------------------------------------------------------------------


def _doc() -> SuiteResult:
    """Two cases' steps as the runner records them, figures from the real reports above."""
    doc = SuiteResult(results.SCHEMA, results.SCHEMA_VERSION, "complete", False)
    for case, mirrors, monitor in (("no-copy", [], None), ("mirror", [MIRROR], 50_000)):
        step = StepResult(key=f"udp/{case}/f64/o-/c1", test="udp", type="UDP_PPS", case=case, concurrency=1,
                          duration=2, metric="packets/s", units="packets/s", frame_size=64, generator="iperf3 3.12",
                          mirrors=mirrors)  # fmt: skip
        agg = pps.repetition([iperf.parse(0, 64, read("loopback-64B-8Mbps.json"), "", 0)], None)
        if monitor:
            pps.add_monitor(agg, {"vif3.0": {"tx_packets": monitor * 2, "tx_bytes": 0}}, ["vif3.0"], 2.0)
        step.repetitions.append(RepetitionResult(repetition=1, aggregate=agg))
        from appliance.netperf.figures import aggregate

        step.summary = aggregate.summary(step.repetitions)
        doc.steps.append(step)
    return doc


def test_report_shows_pps_per_case_and_side_by_side() -> None:
    doc = _doc()
    text = report.text(doc)
    assert "udp: UDP_PPS (iperf3 3.12), 2 s, 1 repetition(s), case no-copy; copies: none" in text
    assert "copies: m1: mirror -> vif3.0" in text
    assert "received pps" in text and "monitor pps" in text and "50,000" in text
    assert "udp: cases side by side" in text and "mirror: monitor pps" in text
    no_copy = next(t for t in report.tables(doc) if t.case == "no-copy")
    col = no_copy.headers.index("monitor pps")
    assert no_copy.rows[0][col] == "-"  # no monitor in that case: not measured, not 0
    assert "achieved ÷ offered" not in no_copy.headers  # unpaced: nothing to divide by
    # results.csv gains the packet-rate columns only for a run that has such steps
    import io

    buf = io.StringIO()
    results.write_csv(buf, doc)
    header = buf.getvalue().splitlines()[0].split(",")
    assert header[-len(results.PPS_CSV_COLUMNS) :] == list(results.PPS_CSV_COLUMNS)


def test_the_plot_draws_received_and_monitor_pps_per_case() -> None:
    pytest.importorskip("matplotlib")
    from appliance.netperf.report import plots

    svg = dict(plots.svgs(_doc()))["udp"]
    for text in ("no-copy: received", "mirror: received", "mirror: monitor", "frame size on the wire (bytes)"):
        assert text in svg, text
    assert "no-copy: monitor" not in svg  # not measured: no line


def test_a_netperf_step_with_listeners_reports_what_they_captured() -> None:
    from appliance.netperf.figures import aggregate

    step = StepResult(key="tcp/mirrors-1-listener/m64/c1", test="tcp", type="TCP_STREAM", case="mirrors-1-listener",
                      message_size=64, concurrency=1, duration=2, metric="Mbit/s", units="Mbit/s", mirrors=[MIRROR],
                      capture={"guests": ["MON1"], "ports": ["vif3.0"], "snaplen": None})  # fmt: skip
    agg = aggregate.repetition([], rr=False, udp_stream=False)
    pps.add_captures(agg, [{"captured": 980, "dropped": 3, "offered": 1000}], 2.0)
    step.repetitions.append(RepetitionResult(repetition=1, aggregate=agg))
    step.summary = aggregate.summary(step.repetitions)
    doc = SuiteResult(results.SCHEMA, results.SCHEMA_VERSION, "complete", False, steps=[step])
    rows = {r[0]: r[1] for r in report.tables(doc)[0].rows}
    assert rows["listeners (captures on the monitor ports)"] == "1" and rows["captured ÷ offered"] == "0.980"
    assert rows["capture drops (pkts, total)"] == "3"


def test_the_html_page_carries_the_packet_rate_tables_and_settings() -> None:
    from appliance.netperf.report import html

    page = html.suite_page(_doc(), "RUN", plots=False)
    assert "frames 64 B on the wire; offered unpaced" in page
    assert "udp: cases side by side" in page and "mirror: monitor pps" in page


def test_parse_a_lab_run_through_a_mirror() -> None:
    inst = iperf.parse(0, 64, read("lab-64B-20000pps-mirror.json"), "", 0)
    doc = json.loads(read("lab-64B-20000pps-mirror.json"))
    assert doc["start"]["test_start"]["blksize"] == frames.payload_of(64)
    assert inst.ok and inst.sent_pps == pytest.approx(20_000, rel=0.01)  # paced at 20,000 packets/s
    assert inst.received_pps <= inst.sent_pps  # type: ignore[operator]


def _cap(**kw: Any) -> dict[str, Any]:
    base = {"captured": 27907, "received": 146800, "dropped_by_kernel": 90986, "dropped_by_interface": None,
            "offered": 150000, "sent_to_port": 149000, "buffer_kib": None, "buffer": "default (2048 KiB)",
            "snaplen": None, "tcpdump_cpu_pct": 97.5, "tcpdump_cpu": {"pct_of_core": 97.5}}  # fmt: skip
    return {**base, **kw}


def test_capture_limits_name_the_kernel_drops_when_the_buffer_filled() -> None:
    got = pps.capture_limits([[_cap()], None])
    assert got is not None
    assert (got["captured"], got["offered"], got["ratio"]) == (27907, 150000, 0.186)
    assert got["dropped_by_kernel"] == 90986 and got["dropped_by_interface"] is None  # not reported, not 0
    assert got["buffer_kib"] == [None] and got["snaplen"] == [None] and got["tcpdump_cpu_pct"] == 97.5
    reading = got["reading"]
    assert reading.startswith("122,093 of 150,000 offered missing: 90,986 dropped by the kernel: the buffer")
    assert "while tcpdump used 98% of a core" in reading
    assert "1,000 never sent to the capture's port by the switch" in reading
    assert "2,200 sent to the port but never received by the capture" in reading
    assert "27,907 received but neither kept nor counted dropped" in reading


def test_capture_limits_without_drops_say_the_capture_never_got_them() -> None:
    cap = _cap(captured=1000, received=1000, dropped_by_kernel=0, offered=5000, sent_to_port=5000)
    got = pps.capture_limits([[cap]])
    assert got is not None and got["reading"] == (
        "4,000 of 5,000 offered missing: 4,000 sent to the port but never received by the capture "
        "(no drops counted by the capture)"
    )
    assert pps.capture_limits([None, []]) is None
    unmeasured = _cap(tcpdump_cpu_pct=None, tcpdump_cpu={"reason": "not measured: remote"})
    got = pps.capture_limits([[_cap(), unmeasured]])
    assert got is not None and got["tcpdump_cpu_pct"] is None and got["tcpdump_cpu_reason"] == "not measured: remote"
    killed = pps.capture_limits([[_cap(captured=None)]])
    assert killed is not None and killed["reading"].startswith("unknown")


def test_perf_stat_counts_are_columns_of_the_packet_rate_tables() -> None:
    from appliance.netperf.parse import perfstat

    doc = _doc()
    text = (Path(__file__).resolve().parents[1] / "data" / "perf" / "vswitchd-per-thread-no-pmu.txt").read_text()
    rec = perfstat.parse(text, ("task-clock", "cycles", "instructions"), 0, 7784, "this machine")
    doc.steps[1].repetitions[0].perf_stat = rec  # the mirrored case counted; the baseline did not
    mirror = next(t for t in report.tables(doc) if t.case == "mirror")
    no_copy = next(t for t in report.tables(doc) if t.case == "no-copy")
    assert mirror.headers == no_copy.headers  # one test: the same columns, '-' where a case did not count
    clock = mirror.headers.index("perf task-clock (msec), ovs-vswitchd")
    assert mirror.rows[0][clock] == f"{rec['events']['task-clock']['count']:,.2f}"
    assert no_copy.rows[0][clock] == "-"
    assert mirror.rows[0][mirror.headers.index("perf cycles, ovs-vswitchd")] == "-"  # <not supported>: no number
    assert "perf CPI (cycles ÷ instructions)" in mirror.headers
