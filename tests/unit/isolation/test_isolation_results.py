"""A saved isolation result loads back into the check's own records (report.from_json, the inverse of
to_json): a real ``hvnet isolation check --json`` output round-trips to the same JSON and prints the same
report; verdicts and the exit code are derived again, not trusted from the file."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from appliance.isolation import model, report
from appliance.isolation.check import CheckResult, Evidence, MethodResult

SAVED = Path(__file__).resolve().parents[1] / "data" / "isolation-seed-three-vm.json"


def test_a_saved_check_round_trips_to_the_same_json() -> None:
    # saved before results named their schema: read as version 1, written back with the two keys first
    text = SAVED.read_text()
    result = report.from_json(json.loads(text))
    assert isinstance(result, CheckResult)
    stamped = text.replace("{\n", '{\n  "schema": "hvnet.isolation.result",\n  "version": 1,\n', 1)
    assert json.dumps(report.to_json(result), indent=2) + "\n" == stamped  # what --json printed, byte for byte
    again = report.to_json(report.from_json(json.loads(stamped)))
    assert json.dumps(again, indent=2) + "\n" == stamped


def test_another_document_or_a_newer_result_is_refused() -> None:
    doc = json.loads(SAVED.read_text())
    for bad, said in (({"schema": "hvnet.status"}, "schema 'hvnet.status'"), ({"version": 2}, "version 2")):
        with pytest.raises(ValueError, match=said):
            report.from_json({**doc, **bad})


def test_a_saved_check_reads_as_the_check_returned_it() -> None:
    result = report.from_json(json.loads(SAVED.read_text()))
    assert (result.scenario, result.guests, result.exit_code) == ("seed-three-vm", ["VM1", "VM2", "VM3"], 0)
    assert result.expected.cells[("VM1", "VM2")] == model.YES and result.expected.cells[("VM3", "VM1")] == model.NO
    traffic = result.methods["traffic"]
    assert isinstance(traffic, MethodResult) and traffic.error is None
    assert traffic.cells[("VM2", "VM1")] == model.YES and traffic.replies[("VM1", "VM3")] is False
    ev = traffic.evidence[("VM1", "VM2")]
    assert isinstance(ev, Evidence) and ev.src_ip == "192.168.0.151" and ev.vlan is None
    assert set(result.verdicts("trace").values()) == {"ok"}
    assert report.format_result(result).splitlines()[-1].startswith("PASS: isolation as expected")


def test_a_failed_method_unknown_cells_and_exceptions_round_trip() -> None:
    cells = {("A", "B"): model.YES, ("B", "A"): model.EXCEPTION}
    expected = model.Expected(["A", "B"], dict(cells), {("B", "A"): ["span1"]})
    traffic = MethodResult(
        "traffic",
        cells={("A", "B"): model.YES, ("B", "A"): model.UNKNOWN},
        reasons={("B", "A"): "no positive control"},
        evidence={("A", "B"): Evidence(1.5, "02:00:00:00:00:02", "10.0.0.2", 12, "/tmp/A.pcap")},
        replies={("A", "B"): True},
        stats={"probes_sent": 2, "window_s": 0.5, "controls_sent": 1},
    )
    trace = MethodResult("trace", error="ovs-appctl: no such bridge")
    original = CheckResult("s", ["A", "B"], expected, {"traffic": traffic, "trace": trace}, None, 1.25)
    saved = json.loads(json.dumps(report.to_json(original)))
    loaded = report.from_json(saved)
    assert loaded == original and loaded.exit_code == original.exit_code == 7
    assert report.to_json(loaded) == saved
    assert report.format_result(loaded) == report.format_result(original)
