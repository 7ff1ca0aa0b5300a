"""Many-flows tests (TCP_IPERF): iperf3's TCP command line and per-stream JSON (real reports in
tests/unit/data/iperf3), Jain's index over flows, a repetition's figures, the suite keys and their
refusals (flows, offered rates, the step's flow bound), and the report's table and CSV columns."""

from __future__ import annotations

import io
import textwrap
from pathlib import Path

import pytest

from appliance.core.errors import EXIT_USAGE, ConfigError, UsageError
from appliance.netperf.define import suite, tests
from appliance.netperf.define.frames import Offered
from appliance.netperf.figures import aggregate, flows
from appliance.netperf.parse import iperf
from appliance.netperf.report import text as report
from appliance.netperf.store import results
from appliance.netperf.store.records import Aggregate, RepetitionResult, StepResult, SuiteResult
from appliance.services import suites as suites_service

DATA = Path(__file__).parents[1] / "data" / "iperf3"
ROOT = Path(__file__).resolve().parents[3]


def read(name: str) -> str:
    return (DATA / name).read_text()


# -- iperf3's TCP command line and JSON -----------------------------------------------------------


def test_tcp_client_command_line_paces_each_stream() -> None:
    argv = iperf.tcp_client_argv("/usr/bin/iperf3", "10.0.0.2", 5203, flows=125, offered=Offered(2.5, "Mbit/s"),
                                 seconds=10)  # fmt: skip
    assert argv == ["/usr/bin/iperf3", "-c", "10.0.0.2", "-p", "5203", "-P", "125", "-b", "2500000", "-t", "10",
                    "-i", "0", "-J"]  # fmt: skip
    unpaced = iperf.tcp_client_argv("iperf3", "10.0.0.2", 5201, flows=1, offered=None, seconds=2)
    assert unpaced[unpaced.index("-b") + 1] == "0" and "-u" not in unpaced


def test_parse_four_paced_streams() -> None:
    inst = iperf.parse_tcp(0, 4, read("loopback-tcp-4flows-80Mbps.json"), "", 0)
    assert inst.ok, inst.lost
    assert inst.streams is not None and [s["stream"] for s in inst.streams] == [0, 1, 2, 3]
    for s in inst.streams:  # each stream paced to 80 Mbit/s of payload (-b is per stream)
        assert s["received_mbps"] == pytest.approx(80.2, abs=0.1) and s["retransmissions"] == 0
        assert s["bytes_received"] == 20_054_016
    assert inst.received_mbps == pytest.approx(sum(inst.flow_mbps), abs=0.01) == inst.throughput
    assert inst.sent_mbps == pytest.approx(320.85, abs=0.01)
    assert inst.units == "Mbit/s" and inst.retransmissions == 0 and inst.elapsed_s == pytest.approx(2.0, abs=0.01)
    assert inst.bytes_received == 80_216_064
    assert inst.to_json()["streams"][0]["received_mbps"] == inst.flow_mbps[0]  # kept per instance in results


def test_parse_unpaced_streams_keeps_their_unequal_shares() -> None:
    inst = iperf.parse_tcp(1, 2, read("loopback-tcp-2flows-unpaced.json"), "", 0)
    assert inst.ok and inst.flow_mbps == [15271.882, 15146.187]
    assert inst.sent_mbps == pytest.approx(15279.819 + 15154.059, abs=0.01)


@pytest.mark.parametrize(
    ("name", "flows", "stdout_of", "rc", "stopped", "reason"),
    [
        ("refused", 4, "tcp-refused.json", 0, None, "iperf3: unable to connect to server: Connection refused"),
        ("fewer streams", 32, "loopback-tcp-16flows-8Mbps.json", 0, None, "iperf3 reported 16 of 32 streams"),
        ("killed", 4, "", -9, None, "killed by SIGKILL"),
        ("stopped", 4, "loopback-tcp-4flows-80Mbps.json", 0, "stopped by the operator", "stopped by the operator"),
        ("no JSON", 4, "", 0, None, "no JSON report in iperf3's output"),
    ],
)  # fmt: skip
def test_lost_tcp_instances_keep_their_reason(
    name: str, flows: int, stdout_of: str, rc: int, stopped: str | None, reason: str
) -> None:
    inst = iperf.parse_tcp(0, flows, read(stdout_of) if stdout_of else "", "", rc, stopped)
    assert inst.lost == reason, name
    assert inst.streams is None and inst.throughput is None


def test_a_stream_without_its_receiver_side_loses_the_instance() -> None:
    import json

    doc = json.loads(read("loopback-tcp-4flows-80Mbps.json"))
    del doc["end"]["streams"][2]["receiver"]
    inst = iperf.parse_tcp(0, 4, json.dumps(doc), "", 0)
    assert inst.lost is not None and "per-stream" in inst.lost


# -- fairness and a repetition's figures --------------------------------------------------------


@pytest.mark.parametrize(
    ("xs", "want"),
    [
        ([80.0, 80.0, 80.0, 80.0], 1.0),  # everyone the same
        ([100.0, 0.0, 0.0, 0.0], 0.25),  # one flow took it all: 1/n
        ([1.0, 2.0, 3.0], 36 / 42),  # (1+2+3)^2 / (3 * (1+4+9))
        ([5.0], 1.0),
    ],
)
def test_fairness_is_jains_index(xs: list[float], want: float) -> None:
    assert flows.fairness(xs) == pytest.approx(want)


@pytest.mark.parametrize("xs", [[], [0.0, 0.0]])
def test_fairness_of_nothing_is_not_a_figure(xs: list[float]) -> None:
    assert flows.fairness(xs) is None  # not 1.0: a total stall is not "fair"


def _two_instances() -> list[iperf.FlowsInstance]:
    return [iperf.parse_tcp(0, 4, read("loopback-tcp-4flows-80Mbps.json"), "", 0),
            iperf.parse_tcp(1, 16, read("loopback-tcp-16flows-8Mbps.json"), "", 0)]  # fmt: skip


def test_repetition_figures_are_per_instance_and_over_every_flow() -> None:
    insts = _two_instances()
    all_flows = insts[0].flow_mbps + insts[1].flow_mbps
    agg = flows.repetition(insts, None)
    assert agg.instances == agg.ok == 2 and agg.flows == 20
    assert agg.sum == pytest.approx(insts[0].received_mbps + insts[1].received_mbps, abs=0.01)  # type: ignore[operator]
    assert agg.received_mbps == pytest.approx(agg.sum, abs=0.01)
    assert agg.flow_min_mbps == min(all_flows) and agg.flow_max_mbps == max(all_flows)
    assert agg.flow_jain == pytest.approx(flows.fairness(all_flows), abs=1e-4)
    assert 0 < agg.flow_jain < 1 and agg.flow_jain != agg.jain  # type: ignore[operator]  # flows, not instances
    assert agg.retransmissions == 0 and agg.achieved_ratio is None  # unpaced: nothing to divide by
    out = agg.to_json()
    assert "udp_loss_pct" not in out and "latency_mean_us" not in out and out["sent_mbps"] > 0
    assert Aggregate.from_json(out).to_json() == out


def test_achieved_over_offered_counts_only_the_flows_measured() -> None:
    paced = iperf.parse_tcp(0, 4, read("loopback-tcp-4flows-80Mbps.json"), "", 0)
    lost = iperf.parse_tcp(1, 4, read("tcp-refused.json"), "", 0)
    agg = flows.repetition([paced, lost], 80.0)
    assert agg.lost == 1 and agg.flows == 4
    assert agg.achieved_ratio == pytest.approx(1.0, abs=0.01) and agg.paced_ratio == pytest.approx(1.0, abs=0.01)
    assert agg.lost_reasons == {"iperf3: unable to connect to server: Connection refused": 1}


def test_no_flow_measured_is_no_flow_figure() -> None:
    agg = flows.repetition([iperf.parse_tcp(0, 4, read("tcp-refused.json"), "", 0)], 80.0)
    assert agg.flows is None and agg.flow_jain is None and agg.achieved_ratio is None and agg.sum is None


# -- the suite -----------------------------------------------------------------------------------

HEAD = """\
version: 1
endpoints: {client: VM1, server: VM2}
"""


def _write(tmp_path: Path, body: str) -> Path:
    f = tmp_path / "s.yaml"
    f.write_text(HEAD + textwrap.dedent(body))
    return f


def _problems(tmp_path: Path, body: str) -> list[str]:
    f = _write(tmp_path, body)
    with pytest.raises(ConfigError) as exc:
        suite.load(f)
    assert exc.value.exit_code == EXIT_USAGE
    out = [str(p) for p in exc.value.problems]
    assert all(p.startswith(f"{f}:") for p in out), out
    return out


def test_steps_expand_offered_rates_with_flows_in_the_key(tmp_path: Path) -> None:
    s = suite.load(_write(tmp_path, """\
        tests:
          - {name: many, type: TCP_IPERF, flows: 125, concurrency: 8}
          - {name: paced, type: TCP_IPERF, offered_mbps: [80, 160.5], concurrency: [1, 2]}
        """))  # fmt: skip
    assert [st.key for st in s.steps()] == [
        "many/default/p125/o-/c8", "paced/default/p1/o80Mbps/c1", "paced/default/p1/o80Mbps/c2",
        "paced/default/p1/o160.5Mbps/c1", "paced/default/p1/o160.5Mbps/c2",
    ]  # fmt: skip
    many, paced = s.tests
    assert many.flows == 125 and many.offered == (None,) and many.is_iperf and not many.is_pps
    assert paced.flows == 1 and paced.metric == "Mbit/s"
    step = s.steps()[4]
    assert flows.offered_json(step) == {"value": 160.5, "unit": "Mbit/s", "per": "flow", "mbps": 321.0}


def test_the_step_bound_is_eight_full_clients(tmp_path: Path) -> None:
    s = suite.load(_write(tmp_path, "tests: [{type: TCP_IPERF, flows: 128, concurrency: [1, 8]}]\n"))
    assert max(s.tests[0].concurrency) * s.tests[0].flows == tests.MAX_STEP_FLOWS == 1024
    found = _problems(tmp_path, "tests: [{type: TCP_IPERF, flows: 114, concurrency: [4, 9]}]\n")
    assert any(":3: tests[0].flows: 9 instances x 114 flows = 1026 flows in a step; at most 1024" in p
               for p in found), found  # fmt: skip


def test_an_operators_concurrency_cannot_take_a_step_past_the_bound(tmp_path: Path) -> None:
    path = _write(tmp_path, "tests: [{type: TCP_IPERF, flows: 125, concurrency: [8]}]\n")
    assert suites_service.load_suite(path, concurrency=(2,)).tests[0].concurrency == (2,)
    with pytest.raises(UsageError, match=r"9 instances x 125 flows is more than the 1024 flows a step may hold"):
        suites_service.load_suite(path, concurrency=(1, 9))


@pytest.mark.parametrize(
    ("body", "field", "fragment"),
    [
        ("tests: [{type: TCP_IPERF, flows: 129}]", "tests[0].flows", "integer 1..128, not 129"),
        ("tests: [{type: TCP_IPERF, flows: 0}]", "tests[0].flows", "integer 1..128, not 0"),
        ("tests: [{type: TCP_STREAM, flows: 4}]", "tests[0].flows", "TCP_IPERF only, not TCP_STREAM"),
        ("tests: [{type: UDP_PPS, frame_size: 64, flows: 4}]", "tests[0].flows", "TCP_IPERF only, not UDP_PPS"),
        ("tests: [{type: TCP_IPERF, offered_mbps: [10, 0]}]", "tests[0].offered_mbps[1]", "per flow, > 0"),
        ("tests: [{type: TCP_IPERF, offered_mbps: 100001}]", "tests[0].offered_mbps", "at most 100000"),
        ("tests: [{type: TCP_IPERF, offered_mbps: [10, 10]}]", "tests[0].offered_mbps", "listed twice"),
        ("tests: [{type: TCP_IPERF, offered_pps: 1000}]", "tests[0].offered_pps", "give offered_mbps"),
        ("tests: [{type: TCP_IPERF, frame_size: 64}]", "tests[0].frame_size", "TCP_IPERF has no frame_size"),
        ("tests: [{type: TCP_IPERF, message_size: 1000}]", "tests[0].message_size", "128 KiB"),
        ("tests: [{type: TCP_IPERF, confidence: true}]", "tests[0].confidence", "run by iperf3"),
        ("tests: [{type: TCP_STREAM, offered_mbps: 10}]", "tests[0].offered_mbps", "TCP_IPERF's too"),
    ],
)  # fmt: skip
def test_bad_many_flows_tests_are_refused(tmp_path: Path, body: str, field: str, fragment: str) -> None:
    found = _problems(tmp_path, body + "\n")
    assert any(f": {field}: " in p and fragment in p for p in found), found


def test_many_flows_need_a_lab_guest_server(tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("version: 1\nendpoints: {client: VM1, server: {address: 10.0.0.9}}\n"
                 "tests: [{type: TCP_IPERF, flows: 4}]\n")  # fmt: skip
    with pytest.raises(ConfigError) as exc:
        suite.load(f)
    assert "endpoints.server: TCP_IPERF tests need the server to be a lab guest" in str(exc.value.problems[0])


def test_the_shipped_many_flows_suites() -> None:
    full = suite.load("many-flows")
    many = next(t for t in full.tests if t.name == "tcp-1000-flows")
    assert many.flows * max(many.concurrency) == 1000 and many.repetitions == 10
    paced = next(t for t in full.tests if t.name == "tcp-paced")
    assert [o.value for o in paced.offered if o] == [80, 160, 240, 320]
    quick = suite.load("many-flows-quick")
    assert all(t.type == "TCP_IPERF" for t in quick.tests) and len(quick.steps()) == 3


# -- the report ----------------------------------------------------------------------------------


def _doc() -> SuiteResult:
    """An unpaced and a paced step as the runner records them, figures from the real reports above."""
    doc = SuiteResult(results.SCHEMA, results.SCHEMA_VERSION, "complete", False)
    for key, offered, insts in (
        ("tcp/default/p20/o-/c2", None, _two_instances()),
        ("tcp/default/p4/o80Mbps/c1", 80.0, [iperf.parse_tcp(0, 4, read("loopback-tcp-4flows-80Mbps.json"), "", 0)]),
    ):
        n = sum(len(i.streams or []) for i in insts)
        step = StepResult(key=key, test="tcp", type="TCP_IPERF", case="default", concurrency=len(insts), duration=2,
                          metric="Mbit/s", units="Mbit/s", generator="iperf3 3.12", flows=n // len(insts),
                          offered={"value": offered, "unit": "Mbit/s", "per": "flow", "mbps": offered * n}
                          if offered else None)  # fmt: skip
        step.repetitions.append(RepetitionResult(repetition=1, aggregate=flows.repetition(insts, offered)))
        step.summary = aggregate.summary(step.repetitions)
        doc.steps.append(step)
    return doc


def test_report_shows_flows_fairness_and_offered() -> None:
    doc = _doc()
    tables = report.tables(doc)
    assert len(tables) == 1  # one many-flows table, not also netperf's
    t = tables[0]
    assert t.title.startswith("tcp: TCP_IPERF (iperf3 3.12), 10 flows per instance, 2 s, 1 repetition(s)")
    rows = {r[0]: dict(zip(t.headers, r)) for r in t.rows}
    unpaced, paced = rows["2 x 10 flows @ unpaced"], rows["1 x 4 flows @ 80 Mbit/s per flow (320 in all)"]
    assert paced["fairness over flows (Jain)"] == "1.000" and paced["received ÷ offered"] == "1.003"
    assert unpaced["received ÷ offered"] == "-"  # unpaced: not measured, not 0
    assert float(unpaced["fairness over flows (Jain)"]) < 1
    assert "fairness over flows" in report.text(doc)


def test_csv_gains_the_flow_columns() -> None:
    buf = io.StringIO()
    results.write_csv(buf, _doc())
    lines = buf.getvalue().splitlines()
    header = lines[0].split(",")
    assert header[-len(results.FLOW_CSV_COLUMNS) :] == list(results.FLOW_CSV_COLUMNS)
    paced = dict(zip(header, lines[2].split(",")))
    assert paced["flows_per_instance"] == "4" and paced["flows"] == "4" and paced["offered_mbps_per_flow"] == "80.0"
    assert paced["flow_jain"] == "1.0"


def test_the_html_page_carries_the_flows_table_and_settings() -> None:
    from appliance.netperf.report import html

    page = html.suite_page(_doc(), "RUN", plots=False)
    assert "fairness over flows (Jain)" in page
    assert "10 flows per instance; offered unpaced, 80 Mbit/s per flow" in page
