"""Per-pair figures of a step with several client -> server pairs: each pair's sum, mean and lost beside the
step's total, across repetitions, through results.json and into the text report; and the instances each
pair's client runs.  Built from the project's own records and parsed instances."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Optional

import pytest

from appliance.core.htmlpage import esc
from appliance.endpoints.guests import GuestEndpoint
from appliance.netperf.define import suite
from appliance.netperf.figures import aggregate, pairs
from appliance.netperf.figures import step as step_figures
from appliance.netperf.parse.omni import Instance
from appliance.netperf.report import html
from appliance.netperf.report import pairs as report_pairs
from appliance.netperf.report import text as report
from appliance.netperf.run.launch import Endpoint
from appliance.netperf.run.rig import PairEnds, Rig
from appliance.netperf.store import results
from appliance.netperf.store.records import RepetitionResult, StepResult, SuiteResult

PAIRS = [{"client": "VM1", "server": "VM3"}, {"client": "VM2", "server": "VM3"}]


def inst(index: int, throughput: Optional[float]) -> Instance:
    if throughput is None:
        return Instance(index, 255, lost="establish control: no netserver answered")
    return Instance(index, 0, throughput=throughput)


def repetition(n: int, values: list[Optional[float]], per_pair: int) -> RepetitionResult:
    """A measured repetition as the runner records it: the total and each pair's figures."""
    instances = [inst(i, v) for i, v in enumerate(values)]
    agg = aggregate.repetition(instances, rr=False, udp_stream=False)
    agg.pairs = pairs.repetition(instances, PAIRS, per_pair)
    return RepetitionResult(repetition=n, instances=[i.to_json() for i in instances], aggregate=agg)


def test_instances_belong_to_pairs_in_batch_order() -> None:
    assert [pairs.pair_of(i, 2) for i in range(4)] == [0, 0, 1, 1]
    assert [pairs.pair_of(i, 1) for i in range(2)] == [0, 1]


def test_a_repetition_has_each_pairs_sum_mean_and_lost_beside_the_total() -> None:
    rep = repetition(1, [400.0, 200.0, 300.0, None], per_pair=2)
    assert rep.aggregate.sum == 900.0 and rep.aggregate.lost == 1  # the total: every pair's instances
    first, second = rep.aggregate.pairs or []
    assert first == {"client": "VM1", "server": "VM3", "instances": 2, "ok": 2, "lost": 0, "sum": 600.0,
                     "mean": 300.0}  # fmt: skip
    assert second == {"client": "VM2", "server": "VM3", "instances": 2, "ok": 1, "lost": 1, "sum": 300.0,
                      "mean": 300.0}  # fmt: skip


def test_a_pair_that_lost_everything_has_no_sum_not_zero() -> None:
    rep = repetition(1, [500.0, None], per_pair=1)
    assert rep.aggregate.pairs[1]["sum"] is None and rep.aggregate.pairs[1]["lost"] == 1  # type: ignore[index]


def step_of_pairs() -> StepResult:
    rec = StepResult(key="tcp-stream/default/m-/c1", test="tcp-stream", type="TCP_STREAM", case="default",
                     concurrency=1, duration=2, metric="Mbit/s", units="Mbit/s", pairs=PAIRS)  # fmt: skip
    rec.repetitions = [repetition(1, [600.0, 300.0], 1), repetition(2, [620.0, 280.0], 1)]
    step_figures.update(rec, {}, None)
    return rec


def test_across_repetitions_each_pair_gets_a_mean_and_interval() -> None:
    rec = step_of_pairs()
    assert rec.summary is not None and rec.summary.sum is not None
    assert rec.summary.sum.mean == 900.0  # the total, as a single pair's step has it
    first, second = rec.summary.pairs or []
    assert (first["client"], first["sum"]["mean"], first["sum"]["n"]) == ("VM1", 610.0, 2)
    assert first["sum"]["ci95"] == pytest.approx(127.062, abs=0.01)  # t(0.975, 1) x 10 / sqrt(2)
    assert (second["client"], second["mean"]["mean"], second["lost"], second["instances"]) == ("VM2", 290.0, 0, 2)


def test_a_single_pairs_step_has_no_pair_figures_and_keeps_its_json() -> None:
    rec = StepResult(key="k", type="TCP_STREAM", concurrency=2)
    instances = [inst(0, 1.0), inst(1, 2.0)]
    rec.repetitions = [RepetitionResult(repetition=1, aggregate=aggregate.repetition(instances, rr=False,
                                                                                       udp_stream=False))]  # fmt: skip
    step_figures.update(rec, {}, None)
    assert rec.summary is not None and rec.summary.pairs is None
    saved = rec.to_json()
    assert (
        "pairs" not in saved and "pairs" not in saved["summary"] and "pairs" not in saved["repetitions"][0]["aggregate"]
    )


def test_pair_figures_survive_results_json(tmp_path: Path) -> None:
    doc = SuiteResult(schema="hvnet.netperf.results", version=results.SCHEMA_VERSION, state="complete", partial=False,
                      steps=[step_of_pairs()])  # fmt: skip
    results.write(tmp_path, doc)
    back = results.load(tmp_path)
    assert back.to_json() == doc.to_json()
    assert back.steps[0].pairs == PAIRS and back.steps[0].summary.pairs == doc.steps[0].summary.pairs  # type: ignore[union-attr]


def row(text: str, label: str) -> list[str]:
    (line,) = [ln for ln in text.splitlines() if ln.strip().startswith(label + "  ")]
    return re.split(r"\s{2,}", line.strip())[1:]


def test_the_text_report_shows_each_pair_under_the_total() -> None:
    doc = SuiteResult(state="complete", partial=False, steps=[step_of_pairs()])
    out = report.text(doc)
    assert "2 pairs, each running a step's concurrency, all at once: VM1 -> VM3, VM2 -> VM3" in out
    assert "client  (" not in out  # the first pair is not passed off as the run's only client
    assert row(out, "total throughput (Mbit/s)")[0].startswith("900.00")
    assert row(out, "pair VM1 -> VM3: total (Mbit/s)")[0].startswith("610.00 ±127.06")
    assert row(out, "pair VM2 -> VM3: avg (Mbit/s)")[0].startswith("290.00 ±")
    assert row(out, "pair VM2 -> VM3: lost") == ["0/2"]
    lines = [ln.strip().split("  ")[0] for ln in out.splitlines()]
    total = lines.index("total throughput (Mbit/s)")
    assert lines[total + 1].startswith("pair VM1 -> VM3: total")  # under the step's total


def endpoint(name: str, ip: str) -> Endpoint:
    return Endpoint.of(GuestEndpoint(name, "netns", f"{ip}/24", "02:00:00:00:00:01", f"vif-{name}", netns=name))


def rig_of(tmp_path: Path, text: str) -> tuple[Rig, suite.Suite]:
    (tmp_path / "s.yaml").write_text(text)
    s = suite.load(tmp_path / "s.yaml")
    ends = {"VM1": endpoint("VM1", "10.0.0.1"), "VM2": endpoint("VM2", "10.0.0.2"), "VM3": endpoint("VM3", "10.0.0.3")}
    ps = [PairEnds(p, ends[p.client], ends[p.server], slot=k) for k, p in enumerate(s.pairs)]
    rig = Rig(None, ps[0].client, ps[0].server, ps[0].address, 12865, "/usr/bin/netperf", "/usr/bin/iperf3",  # type: ignore[arg-type]
              tmp_path, None, pairs=ps)  # fmt: skip
    return rig, s


TWO = "endpoints:\n  pairs:\n    - {client: VM1, server: VM3}\n    - {client: VM2, server: VM3}\n"


def test_every_pairs_client_runs_its_concurrency_to_its_server(tmp_path: Path) -> None:
    rig, s = rig_of(tmp_path, TWO + "tests: [{type: TCP_STREAM, concurrency: 2}]\n")
    (step,) = s.steps()
    argvs = rig.argvs(step, 2, warmup=False)
    assert len(argvs) == 4 and all("10.0.0.3" in a for a in argvs)
    assert all(a[a.index("-D") + 1] == "1" for a in argvs)  # every measured step records interim results
    assert all("-D" not in a for a in rig.argvs(step, 2, warmup=True))  # a warm-up's are not read
    assert [c.name for c in rig.instance_clients(step)] == ["VM1", "VM1", "VM2", "VM2"]
    assert [p.client for p in rig.step_pairs()] == ["VM1", "VM2"]


def port_of(argv: list[str]) -> str:
    return argv[argv.index("-p") + 1]


def test_pairs_sharing_a_server_use_their_own_iperf3_ports(tmp_path: Path) -> None:
    rig, s = rig_of(tmp_path, TWO + "tests: [{type: UDP_PPS, frame_size: 64, concurrency: 2}]\n")
    argvs: list[list[Any]] = rig.argvs(s.steps()[0], 2, warmup=False)
    assert [port_of(a) for a in argvs] == ["5201", "5202", "5203", "5204"]  # pair 2 after pair 1's


def test_tables_of_steps_give_each_pair_a_line() -> None:
    lines = report_pairs.step_notes(step_of_pairs(), "64 B @ -", "packets/s")
    assert lines[0].startswith("at 64 B @ -: pair VM1 -> VM3: 610.00 ±127.06 packets/s in all, 610.00 ±")
    assert lines[1].endswith("lost 0/2")
    assert report_pairs.step_notes(StepResult(key="k"), "x", "Mbit/s") == []  # a single pair's step: none


def test_the_html_page_names_every_pair_and_a_single_pairs_page_no_pairs() -> None:
    page = html.suite_page(SuiteResult(state="complete", partial=False, steps=[step_of_pairs()]), "r")
    assert esc("VM1 -> VM3, VM2 -> VM3 (each a step's concurrency") in page
    assert esc("pair VM2 -> VM3: lost") in page  # the text report's rows, cell for cell
    single = step_of_pairs()
    single.pairs = None
    assert "<th>pairs</th>" not in html.suite_page(SuiteResult(state="complete", partial=False, steps=[single]), "r")


def test_results_csv_gives_each_pair_its_columns_per_repetition() -> None:
    import csv
    import io

    doc = SuiteResult(state="complete", partial=False, steps=[step_of_pairs()])
    buf = io.StringIO()
    results.write_csv(buf, doc)
    rows = list(csv.DictReader(io.StringIO(buf.getvalue())))
    assert list(rows[0])[-8:] == ["pair1", "pair1_sum", "pair1_mean", "pair1_lost",
                                  "pair2", "pair2_sum", "pair2_mean", "pair2_lost"]  # fmt: skip
    reps = doc.steps[0].repetitions
    for row, rep in zip(rows, reps):
        for k, p in enumerate(rep.aggregate.pairs):
            assert row[f"pair{k + 1}"] == f"{p['client']}->{p['server']}"
            assert row[f"pair{k + 1}_sum"] == ("" if p["sum"] is None else str(p["sum"]))
            assert row[f"pair{k + 1}_lost"] == str(p["lost"])
    # a single pair's run keeps today's columns
    single = io.StringIO()
    results.write_csv(single, SuiteResult(state="complete", partial=False, steps=[]))
    assert "pair1" not in single.getvalue()


def test_every_server_guests_netserver_pid_survives_results_json() -> None:
    from appliance.netperf.store.records import ServerInfo

    info = ServerInfo(guest="VM2", address="10.0.0.2", port=12865, managed=True, netserver_pid=4242,
                      netserver_pids={"VM1": 4343})  # fmt: skip
    assert ServerInfo.from_json(info.to_json()).netserver_pids == {"VM1": 4343}
    assert "netserver_pids" not in ServerInfo(guest="VM2", netserver_pid=4242).to_json()  # one server: as before
