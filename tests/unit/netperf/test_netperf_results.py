"""What a run's figures become: per-repetition aggregates and summaries, comparisons between runs,
results.json/csv on disk, the study-shaped text report, preflight's pure helpers and OpenFlow port
counters.  Everything is built from constructed instances and synthetic result documents."""

from __future__ import annotations

import csv
import json
import math
import re
from pathlib import Path
from typing import Any, Optional

import pytest

from appliance.core.errors import EXIT_USAGE, HvnetError
from appliance.netperf.figures import aggregate, compare, stats, verdict
from appliance.netperf.parse.omni import Instance
from appliance.netperf.report import text as report
from appliance.netperf.run import preflight
from appliance.netperf.store import results
from appliance.netperf.store.records import Figure, RepetitionResult, StepResult, SuiteResult
from appliance.switch.counters import parse_ofctl_ports

DATA = Path(__file__).resolve().parents[1] / "data"

ESTABLISH = "establish control: no netserver answered at 192.168.0.151 port 12865"


def inst(index: int, throughput: Optional[float], **kw: Any) -> Instance:
    return Instance(index, 0, throughput=throughput, **kw)


def lost(index: int, reason: str = ESTABLISH) -> Instance:
    return Instance(index, 255, lost=reason)


# -- aggregate.repetition ----------------------------------------------------------------


def test_repetition_stream_figures_and_lost_instances() -> None:
    insts = [
        inst(0, 100.0, retransmissions=3),
        inst(1, 200.0, retransmissions=4),
        inst(2, 300.0),
        lost(3),
        lost(4),
        lost(5, "killed by SIGKILL"),
    ]
    a = aggregate.repetition(insts, rr=False, udp_stream=False)
    assert (a.instances, a.ok, a.lost) == (6, 3, 3)
    assert a.lost_reasons == {ESTABLISH: 2, "killed by SIGKILL": 1}
    assert (a.sum, a.mean, a.min, a.max) == (600.0, 200.0, 100.0, 300.0)
    assert a.jain == round(600.0**2 / (3 * (100.0**2 + 200.0**2 + 300.0**2)), 4) == 0.8571
    assert a.retransmissions == 7
    saved = a.to_json()
    assert "udp_loss_pct" not in saved and "latency_mean_us" not in saved and "transactions" not in saved


def test_repetition_even_shares_are_perfectly_fair() -> None:
    a = aggregate.repetition([inst(i, 250.0) for i in range(4)], rr=False, udp_stream=False)
    assert a.jain == 1.0 and a.lost == 0 and a.lost_reasons == {}
    assert a.retransmissions is None and "retransmissions" not in a.to_json()  # not measured is not 0


def test_repetition_all_lost_has_no_figures() -> None:
    a = aggregate.repetition([lost(0), lost(1)], rr=True, udp_stream=False)
    assert a.lost == 2 and a.ok == 0
    assert a.sum is None and a.mean is None and a.min is None and a.jain is None
    assert a.to_json()["latency_mean_us"] is None and "transactions" not in a.to_json()


def test_repetition_udp_loss_is_from_bytes() -> None:
    insts = [
        inst(0, 8.0, sent_mbps=10.0, received_mbps=8.0, bytes_sent=1000.0, bytes_received=900.0),
        inst(1, 4.0, sent_mbps=10.0, received_mbps=4.0, bytes_sent=1000.0, bytes_received=500.0),
        lost(2),  # a lost instance's bytes (none) do not count
    ]
    a = aggregate.repetition(insts, rr=False, udp_stream=True)
    assert a.udp_loss_pct == 30.0  # 1 - 1400/2000, not the mean of 10% and 50%
    assert (a.sent_mbps, a.received_mbps) == (20.0, 12.0)
    assert a.sum == 12.0


def test_repetition_udp_nothing_received() -> None:
    insts = [inst(0, 0.0, sent_mbps=7490.67, received_mbps=0.0, bytes_sent=1e9, bytes_received=0.0)]
    a = aggregate.repetition(insts, rr=False, udp_stream=True)
    assert a.udp_loss_pct == 100.0 and a.sum == 0.0 and a.lost == 0
    assert a.jain is None  # nobody got anything: fairness undefined


def test_repetition_rr_latency_means_and_transactions() -> None:
    insts = [
        inst(0, 7000.0, elapsed_s=2.0, latency_us={"mean": 100.0, "p50": 90.0, "p90": 150.0, "p99": 300.0}),
        inst(1, 5000.0, elapsed_s=2.0, latency_us={"mean": 200.0, "p50": 180.0, "p90": 250.0, "p99": 500.0}),
        lost(2),
    ]
    a = aggregate.repetition(insts, rr=True, udp_stream=False)
    assert (a.latency_mean_us, a.latency_p50_us, a.latency_p90_us, a.latency_p99_us) == (
        150.0,
        135.0,
        200.0,
        400.0,
    )
    assert a.transactions == 24000
    assert a.sum == 12000.0 and a.lost == 1


def test_repetition_confidence() -> None:
    conf = {"level": 99, "iterations": 3, "interval_pct": 5.0}
    met = [inst(0, 100.0, confidence={**conf, "achieved_width_pct": 2.0})]
    a = aggregate.repetition(met, rr=True, udp_stream=False)
    assert a.confidence_width_pct_max == 2.0 and a.confidence_met is True
    missed = [*met, inst(1, 100.0, confidence={**conf, "achieved_width_pct": 116.066})]
    a = aggregate.repetition(missed, rr=True, udp_stream=False)
    assert a.confidence_width_pct_max == 116.07 and a.confidence_met is False


# -- aggregate.summary / spread_ms ------------------------------------------------------------


def rep_record(n: int, sums: list[float], **extra: Any) -> RepetitionResult:
    """One saved repetition whose instances achieved ``sums``."""
    agg = aggregate.repetition([inst(i, s) for i, s in enumerate(sums)], rr=False, udp_stream=False)
    return RepetitionResult(repetition=n, aggregate=agg, **extra)


def test_summary_across_three_repetitions() -> None:
    reps = [
        rep_record(1, [50.0, 50.0], cpu={"host_pct": 10.0, "vswitchd_pct_of_core": 80.0}, start_spread_ms=1.5),
        rep_record(2, [55.0, 55.0], cpu={"host_pct": 20.0, "vswitchd_pct_of_core": 90.0}, start_spread_ms=4.0),
        rep_record(3, [60.0, 60.0], cpu={"host_pct": 30.0}, start_spread_ms=2.0),
    ]
    reps[2].aggregate.lost = 1
    reps[2].aggregate.instances = 3
    reps[2].aggregate.lost_reasons = {ESTABLISH: 1}
    s = aggregate.summary(reps)
    assert s.repetitions == 3
    # sums 100, 110, 120: mean 110, s = 10, half width t(0.975, 2) * 10 / sqrt(3)
    assert s.sum is not None and s.sum.mean == 110.0 and s.sum.n == 3
    assert s.sum.ci95 == pytest.approx(4.303 * 10 / math.sqrt(3), abs=1e-2)
    assert s.mean is not None
    assert s.mean.to_json() == {"mean": 55.0, "ci95": pytest.approx(s.sum.ci95 / 2, abs=1e-3), "n": 3}
    assert s.jain is not None and s.jain.mean == 1.0 and s.jain.ci95 == 0.0
    saved = s.to_json()
    assert "retransmissions" not in saved and "latency_mean_us" not in saved  # never measured: absent, not 0
    assert (s.lost, s.instances, s.lost_reasons) == (1, 7, {ESTABLISH: 1})
    assert s.cpu_host_pct == 20.0 and s.cpu_vswitchd_pct_of_core == 85.0
    assert "cpu_busiest_core_pct" not in saved
    assert s.start_spread_ms_max == 4.0


def test_summary_of_one_repetition_has_a_mean_and_no_interval() -> None:
    s = aggregate.summary([rep_record(1, [10.0, 30.0])])
    assert s.sum is not None and s.sum.to_json() == {"mean": 40.0, "ci95": None, "n": 1}
    assert s.sum == Figure(40.0, None, 1)
    assert s.repetitions == 1 and s.lost == 0


def test_spread_ms() -> None:
    assert aggregate.spread_ms([]) is None
    assert aggregate.spread_ms([None, None]) is None
    assert aggregate.spread_ms([123_000_000]) == 0.0
    assert aggregate.spread_ms([1_000_000, None, 3_500_000, 2_000_000]) == 2.5


# -- synthetic results documents -------------------------------------------------------------


def step_doc(
    key: str,
    sums: list[Optional[float]],
    *,
    type_: str = "TCP_STREAM",
    latency: Optional[list[float]] = None,
    lost_per_rep: int = 0,
) -> dict[str, Any]:
    """A saved step: one repetition per value of ``sums`` (None = every instance lost)."""
    test, case, size, conc = key.split("/")
    reps = []
    for n, total in enumerate(sums, 1):
        n_lost = (1 if total is None else 0) + lost_per_rep
        agg: dict[str, Any] = {
            "instances": 1 + lost_per_rep,
            "ok": 0 if total is None else 1,
            "lost": n_lost,
            "lost_reasons": {ESTABLISH: n_lost} if n_lost else {},
            "sum": total,
            "mean": total,
            "min": total,
            "max": total,
            "jain": None if total is None else 1.0,
        }
        if latency is not None:
            agg["latency_mean_us"] = None if total is None else latency[n - 1]
        reps.append({"repetition": n, "aggregate": agg, "cpu": {}, "counters": {}, "notes": []})
    rr = type_ in ("TCP_RR", "TCP_CRR", "UDP_RR")
    return {
        "key": key,
        "test": test,
        "type": type_,
        "case": case,
        "message_size": None if size == "m-" else int(size[1:]),
        "request_size": 1 if rr else None,
        "response_size": 1 if rr else None,
        "concurrency": int(conc[1:]),
        "duration": 2,
        "units": "transactions/s" if rr else "Mbit/s",
        "repetitions": reps,
        "summary": aggregate.summary([RepetitionResult.from_json(r) for r in reps]).to_json(),
    }


def run_doc(
    *steps: dict[str, Any], sha: str = "a" * 64, name: str = "quick", started: str = "2024-05-01T10:00:00"
) -> dict:
    """A results document as ``results.json`` holds it."""
    return {
        "schema": results.SCHEMA,
        "version": results.SCHEMA_VERSION,
        "state": "complete",
        "partial": False,
        "meta": {
            "hvnet_version": "0.9",
            "host": "lab1",
            "kernel": "5.14.0",
            "ovs_version": "3.1.0",
            "datapath_types": ["netdev"],
            "netperf_version": "2.7.0",
            "suite": {"name": name, "file": f"/x/{name}.yaml", "sha256": sha, "description": ""},
            "client": {"guest": "VM1", "address": "192.168.0.150", "vif": "vif1.0"},
            "server": {"guest": "VM2", "address": "192.168.0.151", "port": 12865, "managed": True},
            "started": started,
            "finished": "2024-05-01T10:05:00",
            "warnings": [],
        },
        "steps": list(steps),
    }


def run(*steps: dict[str, Any], **kw: Any) -> SuiteResult:
    """The same, loaded: what ``results.load`` gives report and compare."""
    return SuiteResult.from_json(run_doc(*steps, **kw))


KEY = "tcp-stream/default/m10000/c4"
RR_KEY = "tcp-rr/default/m-/c1"


def verdicts(result: compare.Result) -> dict[tuple[str, str], str]:
    return {(r.key, r.figure): r.verdict for r in result.rows}


# -- compare ---------------------------------------------------------------------------


def test_compare_significant_regression() -> None:
    base = run(step_doc(KEY, [1000.0, 1010.0, 990.0]))
    new = run(step_doc(KEY, [800.0, 810.0, 790.0]))
    r = compare.compare(base, new)
    assert verdicts(r) == {(KEY, "sum"): "regression"}
    (row,) = r.regressions
    assert row.key == KEY and row.change_pct == pytest.approx(-20.0)
    assert row.p_value is not None and row.p_value < 0.05
    assert r.to_json()["regressions"] == 1 and not r.warnings
    assert "1 significant regression(s) beyond 5%" in compare.text(r)
    assert "REGRESSION" in compare.text(r)


def test_compare_identical_runs() -> None:
    doc = run(step_doc(KEY, [1000.0, 1010.0, 990.0]), step_doc(RR_KEY, [7000.0, 7100.0], latency=[130.0, 131.0]))
    r = compare.compare(doc, doc)
    assert r.regressions == [] and not r.warnings and not r.only_base and not r.only_new
    assert set(verdicts(r).values()) == {"within threshold"}
    assert {row.figure for row in r.rows} == {"sum", "latency_mean_us"}
    assert compare.text(r).endswith("no significant regression beyond 5%")


def test_compare_improvement_is_not_a_regression() -> None:
    base = run(step_doc(KEY, [1000.0, 1010.0, 990.0]))
    r = compare.compare(base, run(step_doc(KEY, [1200.0, 1210.0, 1190.0])))
    assert verdicts(r) == {(KEY, "sum"): "improvement"} and r.regressions == []


def test_compare_a_small_change_is_within_threshold_unless_the_threshold_is_lower() -> None:
    base = run(step_doc(KEY, [1000.0, 1001.0, 999.0]))
    new = run(step_doc(KEY, [970.0, 971.0, 969.0]))  # -3 %, clearly significant
    assert verdicts(compare.compare(base, new)) == {(KEY, "sum"): "within threshold"}
    assert verdicts(compare.compare(base, new, threshold_pct=2.0)) == {(KEY, "sum"): "regression"}


def test_compare_noisy_change_is_not_significant() -> None:
    r = compare.compare(run(step_doc(KEY, [1000.0, 600.0, 1400.0])), run(step_doc(KEY, [700.0, 1100.0, 500.0])))
    assert verdicts(r) == {(KEY, "sum"): "not significant"} and r.regressions == []


def test_compare_one_repetition_each_is_untestable() -> None:
    r = compare.compare(run(step_doc(KEY, [1000.0])), run(step_doc(KEY, [500.0])))
    (row,) = r.rows
    assert row.verdict == "untestable" and row.p_value is None and row.change_pct == pytest.approx(-50.0)
    assert r.regressions == []
    out = compare.text(r)
    assert "could not be tested for significance" in out and "no significant regression" in out


def test_compare_no_result_in_the_new_run_is_a_regression() -> None:
    r = compare.compare(run(step_doc(KEY, [1000.0, 1010.0])), run(step_doc(KEY, [None, None])))
    (row,) = r.rows
    assert row.verdict == "no result" and row.new is None and row.base is not None
    assert r.regressions == [row]
    assert "NO RESULT" in compare.text(r) and "1 significant regression(s)" in compare.text(r)


def test_compare_latency_higher_is_worse() -> None:
    base = run(step_doc(RR_KEY, [7000.0, 7010.0, 6990.0], type_="TCP_RR", latency=[100.0, 101.0, 99.0]))
    slower = run(step_doc(RR_KEY, [7000.0, 7010.0, 6990.0], type_="TCP_RR", latency=[130.0, 131.0, 129.0]))
    r = compare.compare(base, slower)
    assert verdicts(r) == {(RR_KEY, "sum"): "within threshold", (RR_KEY, "latency_mean_us"): "regression"}
    assert [row.figure for row in r.regressions] == ["latency_mean_us"]
    assert r.regressions[0].change_pct == pytest.approx(30.0)
    r = compare.compare(slower, base)  # the other way round: latency dropped
    assert verdicts(r)[(RR_KEY, "latency_mean_us")] == "improvement" and r.regressions == []


def test_compare_steps_in_one_run_only() -> None:
    a, b, c = KEY, "tcp-stream/default/m10000/c8", "tcp-stream/default/m10000/c16"
    base = run(step_doc(a, [1.0, 1.0]), step_doc(b, [2.0, 2.0]))
    new = run(step_doc(a, [1.0, 1.0]), step_doc(c, [3.0, 3.0]))
    r = compare.compare(base, new)
    assert r.only_base == [b] and r.only_new == [c]
    assert [row.key for row in r.rows] == [a] and r.regressions == []
    out = compare.text(r)
    assert f"only in base: {b}" in out and f"only in new: {c}" in out


def test_compare_different_suite_files_warns() -> None:
    base = run(step_doc(KEY, [1.0, 1.0]), sha="1" * 64, name="quick")
    new = run(step_doc(KEY, [1.0, 1.0]), sha="2" * 64, name="regression")
    r = compare.compare(base, new)
    (w,) = r.warnings
    assert "different suite files" in w and "quick 111111111111" in w and "regression 222222222222" in w
    assert compare.text(r).startswith(f"warning: {w}")


def test_compare_partial_run_warns() -> None:
    new = run(step_doc(KEY, [1.0, 1.0]))
    new.partial, new.partial_reason = True, "stopped by the operator"
    r = compare.compare(run(step_doc(KEY, [1.0, 1.0])), new)
    assert r.warnings == ["the new run is partial (stopped by the operator)"]


# -- results.json / results.csv ------------------------------------------------------------


def full_doc() -> SuiteResult:
    return run(
        step_doc("tcp-stream/default/m10000/c1", [900.0, 910.0]),
        step_doc("tcp-stream/default/m10000/c4", [1500.0, None], lost_per_rep=1),
        step_doc(RR_KEY, [7000.0, 7100.0, 7050.0], type_="TCP_RR", latency=[130.0, 131.0, 129.0]),
    )


def test_write_and_load_round_trip(tmp_path) -> None:
    doc = full_doc()
    results.write(tmp_path, doc)
    assert results.load(tmp_path) == doc
    assert results.load(tmp_path / results.RESULTS) == doc
    assert results.load(tmp_path).to_json() == doc.to_json() == json.loads((tmp_path / results.RESULTS).read_text())
    assert sorted(p.name for p in tmp_path.iterdir()) == [results.CSV, results.RESULTS]  # no temporary files left


def test_csv_has_a_header_and_one_row_per_repetition(tmp_path) -> None:
    doc = full_doc()
    results.write(tmp_path, doc)
    with open(tmp_path / results.CSV, newline="") as fh:
        rows = list(csv.reader(fh))
    assert tuple(rows[0]) == results.CSV_COLUMNS
    assert len(rows) == 1 + 2 + 2 + 3
    recs = [dict(zip(rows[0], r)) for r in rows[1:]]
    first = recs[0]
    assert (first["step"], first["test"], first["type"], first["case"]) == (
        "tcp-stream/default/m10000/c1",
        "tcp-stream",
        "TCP_STREAM",
        "default",
    )
    assert (first["message_size"], first["concurrency"], first["repetition"], first["units"]) == (
        "10000",
        "1",
        "1",
        "Mbit/s",
    )
    assert first["sum"] == "900.0" and first["lost"] == "0" and first["lost_reasons"] == ""
    assert first["retransmissions"] == ""  # not measured: empty, not 0
    lost_rep = recs[3]
    assert lost_rep["sum"] == "" and lost_rep["lost"] == "2" and lost_rep["lost_reasons"] == f"2x {ESTABLISH}"
    assert [r["latency_mean_us"] for r in recs[4:]] == ["130.0", "131.0", "129.0"]


def test_load_refuses_what_is_not_a_run(tmp_path) -> None:
    with pytest.raises(results.NotARun) as exc:
        results.load(tmp_path)
    assert isinstance(exc.value, HvnetError) and exc.value.exit_code == EXIT_USAGE
    assert "no results.json" in str(exc.value)

    other = tmp_path / "other.json"
    other.write_text(json.dumps({"schema": "something.else", "version": 1}))
    with pytest.raises(results.NotARun) as exc:
        results.load(other)
    assert exc.value.exit_code == EXIT_USAGE and "something.else" in str(exc.value)

    garbage = tmp_path / "garbage.json"
    garbage.write_text("{not json")
    with pytest.raises(results.NotARun):
        results.load(garbage)

    listing = tmp_path / "list.json"
    listing.write_text("[1, 2]")
    with pytest.raises(results.NotARun):
        results.load(listing)


def test_load_refuses_another_results_version(tmp_path) -> None:
    doc = full_doc().to_json()
    doc["version"] = results.SCHEMA_VERSION + 1
    (tmp_path / results.RESULTS).write_text(json.dumps(doc))
    with pytest.raises(HvnetError) as exc:
        results.load(tmp_path)
    assert "results version" in str(exc.value)


def test_list_runs(tmp_path) -> None:
    older, newer, foreign = tmp_path / "run-a", tmp_path / "run-b", tmp_path / "not-a-run"
    for d in (older, newer, foreign):
        d.mkdir()
    results.write(older, full_doc())
    results.write(newer, run(step_doc(KEY, [1.0]), name="regression", started="2024-06-01T08:00:00"))
    (foreign / results.RESULTS).write_text(json.dumps({"schema": "other"}))
    runs = results.list_runs(tmp_path)
    assert [r["run"] for r in runs] == [str(newer), str(older)]  # newest first; the foreign one skipped
    assert runs[1] == {
        "run": str(older),
        "suite": "quick",
        "started": "2024-05-01T10:00:00",
        "state": "complete",
        "steps": 3,
        "lost": 3,
        "pinned": False,
    }
    assert runs[0]["suite"] == "regression" and runs[0]["steps"] == 1


def test_runs_dir_follows_the_environment(tmp_path) -> None:
    from appliance.frontdoor.hosts import data_paths
    from appliance.switch.host import DataPaths

    assert data_paths({"HVNET_RUNS_DIR": str(tmp_path)}).runs_dir == tmp_path
    assert data_paths({}).runs_dir == DataPaths().runs_dir == Path("/var/lib/hvnet/runs")


# -- report -----------------------------------------------------------------------------


def table_row(text: str, label: str) -> list[str]:
    """The cells of the report row ``label`` (columns are separated by two or more spaces)."""
    lines = [ln for ln in text.splitlines() if ln.startswith(label + "  ") or ln == label]
    assert len(lines) == 1, (label, lines)
    return re.split(r"\s{2,}", lines[0])[1:]


def test_report_text_has_the_studys_shape() -> None:
    out = report.text(full_doc())
    lines = out.splitlines()
    stream, rr = out.split("tcp-rr:")
    assert lines[0] == "suite quick: complete"
    assert "netperf 2.7.0" in out and "client VM1 (192.168.0.150) -> server VM2 192.168.0.151:12865" in out
    assert "tcp-stream: TCP_STREAM -m 10000, 2 s, 2 repetition(s), case default" in out
    assert "tcp-rr: TCP_RR -r 1,1, 2 s, 3 repetition(s), case default" in out
    # metrics down, concurrency across
    assert table_row(stream, "concurrent instances") == ["1", "4"]
    avg = table_row(stream, "avg throughput (Mbit/s)")
    assert avg[0].startswith("905.00 ±") and avg[1] == "1,500.00"  # one measured repetition: no interval
    assert table_row(stream, "total throughput (Mbit/s)")[0].startswith("905.00 ±")
    # one instance per repetition: the mean over repetitions of each one's min and max
    assert table_row(stream, "min/max per instance (Mbit/s)") == ["905.0/905.0", "1,500.0/1,500.0"]
    assert table_row(stream, "lost (of started)") == ["0/2", "3/4"]
    assert "  lost at 4: 3 x " + ESTABLISH in lines
    assert "latency mean (µs)" not in stream  # stream tables have no latency rows
    # the RR group
    assert table_row(rr, "concurrent instances") == ["1"]
    assert table_row(rr, "avg transaction rate (trans/s)")[0].startswith("7,050.00 ±")
    assert table_row(rr, "latency mean (µs)") == ["130.0"]
    assert table_row(rr, "latency p50/p90/p99 (µs)") == ["-/-/-"]


def test_report_prints_a_dash_for_what_was_not_measured() -> None:
    out = report.text(full_doc())
    rr = out.split("tcp-rr:")[1]
    assert table_row(rr, "TCP retransmissions") == ["-"]
    assert table_row(rr, "host CPU (%) / busiest core (%)") == ["-/-"]
    assert table_row(rr, "ovs-vswitchd (% of a core)") == ["-"]
    assert table_row(rr, "start spread (ms)") == ["-"]
    assert table_row(rr, "switch drops, all ports (pkts, total)") == ["-"]
    assert table_row(rr, "fairness (Jain, 1 = even)") == ["1.000"]


def test_report_of_a_run_without_steps() -> None:
    doc = run()
    doc.state, doc.partial, doc.partial_reason = "failed", True, "preflight failed"
    out = report.text(doc)
    assert out.splitlines()[0] == "suite quick: failed (preflight failed)"
    assert out.endswith("no step was measured")


def test_report_policing_and_mirror_rows() -> None:
    base = step_doc("ts/default/m1400/c1", [9.0, 9.2])
    policed = step_doc("ts/policed/m1400/c1", [4.5, 4.7])
    policed["policing"] = {"rate_bits_per_s": 5000000, "burst_bits": 4000000, "mechanism": "meter", "verified": False}
    for rep in policed["repetitions"]:
        rep["meter_drops"] = 1200
    mirrored = step_doc("ts/mirrored/m1400/c1", [8.0, 8.2])
    mirrored["mirrors"] = [{"name": "m", "bridge": "xenbr0", "output_port": "vif3.0", "src": ["vif1.0"], "dst": []}]
    for rep in mirrored["repetitions"]:
        rep["counters"] = {"vif1.0": {"rx_packets": 1000, "rx_dropped": 5}, "vif3.0": {"tx_packets": 1000}}
    out = report.text(run(base, policed, mirrored))
    default, policed_part, mirrored_part = out.split(", case ")[1:]
    assert "policing kbit/s" not in default and "mirrors on" not in default and " vs case" not in default

    assert table_row(policed_part, "policing kbit/s / burst kbit") == ["5000/4000 meter NOT ENFORCED"]
    assert table_row(policed_part, "achieved ÷ configured") == ["0.92"]  # 4.6 Mbit/s of 5000 kbit/s
    assert table_row(policed_part, "policer drops (pkts, total)") == ["2,400"]
    assert "mirrors on" not in policed_part

    assert table_row(mirrored_part, "mirrors on the client VIF") == ["1"]
    assert table_row(mirrored_part, "mirror delivery (copies ÷ pkts)") == ["1.000 (min 1.000)"]
    assert table_row(mirrored_part, "switch drops, all ports (pkts, total)") == ["10"]
    assert table_row(mirrored_part, "total vs case default") == ["-11.0%"]  # mean total 8.1 against 9.1
    assert "policing kbit/s" not in mirrored_part


def test_achieved_ratio() -> None:
    pol = {"rate_bits_per_s": 10000000, "burst_bits": 8000000, "mechanism": "tc", "verified": True}
    tcp = {"type": "TCP_STREAM", "policing": pol, "summary": {"sum": {"mean": 9.5, "ci95": None, "n": 1}}}
    assert report.achieved_ratio(StepResult.from_json(tcp)) == pytest.approx(0.95)
    udp = {
        "type": "UDP_STREAM",
        "policing": pol,
        "summary": {"sum": {"mean": 8.0}, "sent_mbps": {"mean": 50.0}, "received_mbps": {"mean": 10.5}},
    }
    assert report.achieved_ratio(StepResult.from_json(udp)) == pytest.approx(1.05)  # what arrived, not what was sent
    assert report.achieved_ratio(StepResult.from_json({**tcp, "policing": None})) is None
    assert report.achieved_ratio(StepResult.from_json({**tcp, "type": "TCP_RR"})) is None
    assert report.achieved_ratio(StepResult.from_json({**tcp, "summary": {}})) is None  # nothing measured


def mirror_counters(rx: int, tx: int, out_tx: int) -> dict[str, dict[str, int]]:
    """vif1.0 sent ``rx`` packets to the switch and received ``tx``; the monitor port vif3.0 was sent ``out_tx``."""
    return {"vif1.0": {"rx_packets": rx, "tx_packets": tx}, "vif3.0": {"tx_packets": out_tx}}


def test_delivery_ratio() -> None:
    # both directions of the client VIF, as netperf-suites/mirror-cost.yaml mirrors it
    mirror = {"name": "m", "output_port": "vif3.0", "src": ["vif1.0"], "dst": ["vif1.0"]}
    step = {
        "mirrors": [mirror],
        "repetitions": [{"counters": mirror_counters(600, 400, 1000)}, {"counters": mirror_counters(600, 400, 500)}],
    }
    assert report.delivery_ratio(StepResult.from_json(step)) == (0.75, 0.5)
    assert report.delivery_ratio(StepResult.from_json({**step, "mirrors": []})) is None
    no_output = {**step, "repetitions": [{"counters": {"vif1.0": {"rx_packets": 600}}}]}
    assert report.delivery_ratio(StepResult.from_json(no_output)) is None
    nothing_selected = {**step, "repetitions": [{"counters": {"vif3.0": {"tx_packets": 7}}}]}
    assert report.delivery_ratio(StepResult.from_json(nothing_selected)) is None


# -- preflight's pure helpers ------------------------------------------------------------------


def test_parse_version() -> None:
    assert preflight.parse_version("Netperf version 2.7.0") == (2, 7, 0)
    assert preflight.parse_version("netperf version 2.6\n") == (2, 6)
    assert preflight.parse_version("netperf: invalid option -- 'V'") is None
    assert preflight.parse_version("Netperf version 2.4.5")[:2] < preflight.MIN_NETPERF


def test_port_range() -> None:
    assert preflight.port_range("32768\t60999\n") == (32768, 60999)
    assert preflight.port_range("1024 65535") == (1024, 65535)
    assert preflight.port_range("32768") is None
    assert preflight.port_range("low high") is None
    assert preflight.port_range("") is None


def test_crr_ceiling() -> None:
    ports = 60999 - 32768 + 1
    # within TIME_WAIT nothing comes back: the ports are all a test can use
    assert verdict.crr_ceiling(ports, 2) == ports / 2
    assert verdict.crr_ceiling(ports, 60) == ports / 60
    # longer: every port is recycled once TIME_WAIT (60 s) ends
    assert verdict.crr_ceiling(ports, 120) * 120 == pytest.approx(2 * ports)
    assert verdict.crr_ceiling(ports, 90) * 90 == pytest.approx(ports + ports * 30 / 60)
    assert verdict.crr_ceiling(ports, 3600) == pytest.approx(ports / verdict.TIME_WAIT_S)


# -- OpenFlow port counters --------------------------------------------------------------------


def test_parse_ofctl_ports_captured_dump() -> None:
    ports = parse_ofctl_ports((DATA / "ofctl-dump-ports.txt").read_text())
    assert set(ports) == {"vif1.0", "vif2.0", "vif3.0", "LOCAL"}
    vif2 = ports["vif2.0"]
    assert vif2.tx_dropped == 40935 and vif2.tx_packets == 1600056 and vif2.tx_bytes == 2252009075
    assert (vif2.rx_packets, vif2.rx_bytes, vif2.rx_dropped, vif2.rx_errors) == (232596, 16982630, 0, 0)
    assert vif2.source == "openflow"
    assert ports["LOCAL"].tx_dropped == 40 and ports["LOCAL"].rx_packets == 0
    assert ports["vif1.0"].rx_bytes == 7106986972


def test_parse_ofctl_ports_unknown_counters_are_none() -> None:
    text = '  port  "vif9.0": rx pkts=5, bytes=?, drop=?, errs=0\n           tx pkts=?, bytes=10, drop=3, errs=?\n'
    c = parse_ofctl_ports(text)["vif9.0"]
    assert (c.rx_packets, c.rx_bytes, c.rx_dropped) == (5, None, None)
    assert (c.tx_packets, c.tx_bytes, c.tx_dropped) == (None, 10, 3)


def test_stats_interval_matches_summary() -> None:
    # the summary's ci95 is stats.ci's half width (what report and compare print)
    xs = [100.0, 110.0, 120.0]
    assert aggregate.summary([rep_record(i, [x]) for i, x in enumerate(xs, 1)]).sum.ci95 == round(
        stats.ci(xs).half_width, 3
    )


def test_compare_a_step_the_new_run_never_finished_is_not_run_not_a_regression() -> None:
    stopped = step_doc(KEY, [])  # a run stopped before this step's first repetition finished
    r = compare.compare(run(step_doc(KEY, [1000.0, 1010.0, 990.0])), run(stopped))
    assert r.regressions == [] and r.only_base == [KEY]


def test_compare_warns_when_durations_differ() -> None:
    new = step_doc(KEY, [1000.0, 1010.0, 990.0])
    new["duration"] = 60
    r = compare.compare(run(step_doc(KEY, [1000.0, 1010.0, 990.0])), run(new))
    assert any("different durations" in w for w in r.warnings)


def test_report_shows_a_mirror_that_delivered_nothing_as_zero() -> None:
    step = step_doc("tcp-stream/mirrors-1/m1472/c1", [900.0])
    step["mirrors"] = [{"name": "m", "bridge": "br", "output_port": "vif9.0", "src": ["vif1.0"], "dst": ["vif1.0"]}]
    step["repetitions"][0]["counters"] = {"vif1.0": {"rx_packets": 100, "tx_packets": 50},
                                          "vif9.0": {"tx_packets": 0, "rx_packets": 0}}  # fmt: skip
    assert report.delivery_ratio(StepResult.from_json(step)) == (0.0, 0.0)
