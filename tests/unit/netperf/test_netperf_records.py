"""Typed results against real saved runs: a version 1 ``results.json`` loads, saves back to the
same JSON (and CSV), and reports as it did; keys from older or newer writers survive a round trip."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from typing import Any

import pytest

from appliance.netperf.figures import compare
from appliance.netperf.report import text as report
from appliance.netperf.store import results
from appliance.netperf.store.records import Aggregate, RepetitionResult, StepResult, SuiteResult

DATA = Path(__file__).resolve().parents[1] / "data" / "netperf"
QUICK = DATA / "quick-results.json"


@pytest.fixture
def saved() -> dict[str, Any]:
    return json.loads(QUICK.read_text())


def test_a_saved_run_loads_and_saves_back_byte_for_byte(tmp_path) -> None:
    # a version 1 run with no policing: version 2 renamed nothing it has, so only the version changes
    doc = results.load(QUICK)
    assert isinstance(doc, SuiteResult) and doc.to_json() == {**json.loads(QUICK.read_text()), "version": 2}
    results.write(tmp_path, doc)
    as_v2 = QUICK.read_text().replace('\n "version": 1,\n', '\n "version": 2,\n', 1)
    assert (tmp_path / results.RESULTS).read_text() == as_v2  # same keys, order and values
    assert (tmp_path / results.CSV).read_bytes() == (DATA / "quick-results.csv").read_bytes()


def test_a_saved_run_reports_and_compares_as_before() -> None:
    doc = results.load(QUICK)
    text = report.text(doc)
    threads = [line for line in text.splitlines() if line.startswith("  ovs-vswitchd ")]
    assert threads and all("% of a core" in line for line in threads)  # per thread, added after that report
    rest = "\n".join(line for line in text.splitlines() if not line.startswith("  ovs-vswitchd "))
    assert rest + "\n" == (DATA / "quick-report.txt").read_text()
    r = compare.compare(doc, results.load(QUICK))
    assert r.regressions == [] and len(r.rows) == 10 + 6  # every step's total, and RR latency


def test_a_saved_run_reads_as_attributes() -> None:
    doc = results.load(QUICK)
    assert (doc.state, doc.partial, doc.meta.suite.name, doc.meta.server.managed) == ("complete", False, "quick", True)
    assert len(doc.steps) == 10 and all(isinstance(s, StepResult) for s in doc.steps)
    step = doc.steps[0]
    assert (step.type, step.concurrency, len(step.repetitions)) == ("TCP_STREAM", 1, 3)
    rep = step.repetitions[0]
    assert isinstance(rep, RepetitionResult) and isinstance(rep.aggregate, Aggregate)
    assert rep.aggregate.sum is not None and rep.aggregate.sum > 0
    assert step.summary is not None and step.summary.repetitions == 3
    rr = next(s for s in doc.steps if s.type == "TCP_RR")
    assert rr.repetitions[0].aggregate.latency_mean_us is not None
    assert "latency_mean_us" not in step.repetitions[0].aggregate.to_json()  # a stream has no latency


def test_an_older_version_1_file_without_later_keys_round_trips(saved) -> None:
    # runs_in and meter_drops came later within version 1: a file without them is not given them
    older = copy.deepcopy(saved)
    for side in ("client", "server"):
        del older["meta"][side]["runs_in"]
    for step in older["steps"]:
        for rep in step["repetitions"]:
            del rep["meter_drops"]
    doc = SuiteResult.from_json(older)
    assert doc.meta.client.runs_in is None and doc.steps[0].repetitions[0].meter_drops is None
    assert doc.to_json() == older
    assert report.text(doc) == report.text(SuiteResult.from_json(saved))  # nothing printed from those keys here


def test_unknown_keys_survive_a_round_trip(tmp_path, saved) -> None:
    newer = copy.deepcopy(saved)
    newer["annotation"] = {"by": "nightly"}
    newer["meta"]["site"] = "rack 4"
    newer["steps"][0]["label"] = "first"
    newer["steps"][0]["repetitions"][0]["aggregate"]["p999"] = 1.5
    newer["steps"][0]["summary"]["sum"]["median"] = 2.0
    (tmp_path / results.RESULTS).write_text(json.dumps(newer))
    doc = results.load(tmp_path)
    assert doc.extra == {"annotation": {"by": "nightly"}} and doc.steps[0].extra == {"label": "first"}
    results.write(tmp_path, doc)
    assert json.loads((tmp_path / results.RESULTS).read_text()) == {**newer, "version": 2}  # saved as this hvnet writes


def test_a_malformed_run_is_refused(tmp_path, saved) -> None:
    broken = copy.deepcopy(saved)
    broken["steps"] = [1, 2]
    (tmp_path / results.RESULTS).write_text(json.dumps(broken))
    with pytest.raises(results.NotARun):
        results.load(tmp_path)
