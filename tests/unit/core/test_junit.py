"""JUnit XML for CI: isolation results (real saved checks) and run comparisons (real saved runs), parsed back
with xml.etree; hostile names (markup, quotes, control characters XML 1.0 cannot carry) stay text and the
file stays valid; what was not measured is never a pass."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from appliance.cli.main import main
from appliance.core import junit
from appliance.isolation import junit as iso_junit
from appliance.isolation import report as iso_report
from appliance.netperf.figures import compare
from appliance.netperf.report import junit as compare_junit
from appliance.netperf.store import results

DATA = Path(__file__).parents[1] / "data"
ISO_LEAK = DATA / "isolation-misconfigured.json"
ISO_DOWN = DATA / "isolation-guest-down.json"
ISO_MIRROR = DATA / "isolation-mirror-exception.json"
QUICK = DATA / "netperf" / "quick-results.json"
POLICED = DATA / "netperf" / "quick-policed-results.json"
HOSTILE = "<VM&\"x'>\x07\x1b[2J\x00\ufffe"


def suite_of(xml: str) -> ET.Element:
    root = ET.fromstring(xml)
    assert root.tag == "testsuites" and len(root) == 1
    (ts,) = root
    assert ts.tag == "testsuite"
    cases = ts.findall("testcase")
    for el in (root, ts):  # the counts say what the cases are
        assert int(el.get("tests", -1)) == len(cases)
        for kind in ("failures", "errors", "skipped"):
            assert int(el.get(kind, -1)) == sum(c.find(kind.rstrip("s") if kind != "skipped" else kind) is not None
                                                for c in cases)  # fmt: skip
        assert float(el.get("time", "x")) >= 0
    return ts


def outcome(case: ET.Element) -> str:
    kids = [k.tag for k in case if k.tag in ("failure", "error", "skipped")]
    assert len(kids) <= 1
    return kids[0] if kids else "passed"


def test_an_isolation_leak_fails_its_pair_with_the_evidence() -> None:
    result = iso_report.from_json(json.loads(ISO_LEAK.read_text()))
    ts = suite_of(iso_junit.document(result))
    cases = ts.findall("testcase")
    assert len(cases) == sum(len(result.expected.cells) for _ in result.methods)  # every method x pair
    assert float(ts.get("time")) == pytest.approx(result.duration_s) and ts.get("timestamp")
    failed = {(c.get("classname"), c.get("name")): c.find("failure") for c in cases if outcome(c) == "failure"}
    wanted = {(f"isolation.{result.scenario}.{m}", f"{a} hears {b}?")
              for m in result.methods for (a, b), v in result.verdicts(m).items() if v in ("leak", "blocked")}  # fmt: skip
    assert set(failed) == wanted and wanted
    leak = next(f for f in failed.values() if f.get("message", "").startswith("LEAK"))
    assert leak.text in iso_report.problem_lines(result) and leak.get("type") == "failure"  # the report's line
    passed = [c for c in cases if outcome(c) == "passed"]
    assert len(passed) + len(failed) + int(ts.get("skipped")) + int(ts.get("errors")) == len(cases)


def test_a_failures_evidence_is_its_own_pairs_line() -> None:
    problems = ["traffic: LEAK: VM1 hears VM20: frame at ...", "traffic: LEAK: VM1 hears VM2: frame at 12:00"]
    assert iso_junit._evidence(problems, "traffic", "VM1", "VM2", "leak") == problems[1]
    assert iso_junit._evidence(problems, "trace", "VM1", "VM2", "leak") == ""
    assert iso_junit._evidence(["trace: UNEXPECTED BLOCK: VM1 does not hear VM2"], "trace", "VM1", "VM2", "blocked")


def test_undecided_pairs_are_skipped_never_passed() -> None:
    result = iso_report.from_json(json.loads(ISO_DOWN.read_text()))  # a guest down: exit 7
    ts = suite_of(iso_junit.document(result))
    unknown = {(f"isolation.{result.scenario}.{m}", f"{a} hears {b}?")
               for m in result.methods for (a, b), v in result.verdicts(m).items() if v == "unknown"}  # fmt: skip
    skipped = {(c.get("classname"), c.get("name")): c.find("skipped") for c in ts if outcome(c) == "skipped"}
    assert unknown and set(skipped) == unknown
    assert all(s.get("message", "").startswith("not decided: ") for s in skipped.values())


def test_a_method_that_could_not_run_errs_on_every_pair() -> None:
    doc = json.loads(ISO_MIRROR.read_text())
    result = iso_report.from_json(doc)
    method = next(iter(result.methods))
    result.methods[method].error = "tcpdump: permission denied"
    ts = suite_of(iso_junit.document(result))
    errs = [c for c in ts if outcome(c) == "error" and c.get("classname").endswith(f".{method}")]
    assert len(errs) == len(result.expected.cells)
    assert errs[0].find("error").get("message") == f"{method} could not run: tcpdump: permission denied"


def test_hostile_names_stay_text_and_the_file_stays_xml() -> None:
    raw = ISO_LEAK.read_text().replace("VM3", json.dumps(HOSTILE)[1:-1])
    result = iso_report.from_json(json.loads(raw))
    xml = iso_junit.document(result)
    names = [c.get("name") for c in suite_of(xml)]  # parses: nothing XML 1.0 forbids is in the file
    shown = "<VM&\"x'>\\x07\\x1b[2J\\x00\\ufffe"  # the markup as characters, the controls as escapes
    assert any(n.startswith(f"{shown} hears ") for n in names)
    assert "<VM&" not in xml and "\x07" not in xml


def test_xml_text_replaces_only_what_xml_cannot_carry() -> None:
    assert junit.xml_text("a\tb\nc\rd é \U0001f600") == "a\tb\nc\rd é \U0001f600"
    assert junit.xml_text("\x00\x08\x0b\x1f\ud800\uffff") == "\\x00\\x08\\x0b\\x1f\\ud800\\uffff"
    with pytest.raises(ValueError, match="unknown test case outcome"):
        junit.document("s", [junit.Case("n", "c", "maybe")], time_s=0)


def test_a_regression_fails_its_step_and_an_identical_run_passes() -> None:
    base, new = results.load(QUICK), results.load(POLICED)
    result = compare.compare(base, new)
    ts = suite_of(compare_junit.document(result, "quick"))
    failed = [c for c in ts if outcome(c) == "failure"]
    assert failed and {c.get("name").split(" ")[0] for c in failed} == {r.key for r in result.regressions}
    assert all("regression" in c.find("failure").get("message") or "no result" in c.find("failure").get("message")
               for c in failed)  # fmt: skip
    only = [
        c for c in ts if c.find("skipped") is not None and "only in the base run" in c.find("skipped").get("message")
    ]
    assert len(only) == len(result.only_base)
    same = suite_of(compare_junit.document(compare.compare(base, base), "quick"))
    assert int(same.get("failures")) == 0 and int(same.get("tests")) > 0


def test_a_figure_that_could_not_be_judged_is_skipped() -> None:
    base, new = results.load(QUICK), results.load(POLICED)
    for doc in (base, new):
        for step in doc.steps:
            step.repetitions = step.repetitions[:1]  # one repetition a side: significance cannot be tested
    result = compare.compare(base, new)
    untestable = {f"{r.key} {r.figure}" for r in result.rows if r.verdict == "untestable"}
    ts = suite_of(compare_junit.document(result, "quick"))
    skipped = {
        c.get("name") for c in ts if outcome(c) == "skipped" and "only in" not in c.find("skipped").get("message")
    }
    assert untestable and skipped == untestable
    assert all(c.find("skipped").get("message").startswith("untestable") for c in ts if c.get("name") in untestable)


def test_the_cli_writes_junit_beside_its_report(tmp_path: Path, capsys) -> None:
    xml = tmp_path / "cmp.xml"
    assert main(["suite", "compare", str(QUICK), str(POLICED), "--junit", str(xml)]) == 1  # the regression
    assert f"junit: {xml}" in capsys.readouterr().out
    assert int(suite_of(xml.read_text()).get("failures")) > 0
    iso = tmp_path / "iso.xml"
    assert main(["isolation", "report", str(ISO_LEAK), "--junit", str(iso)]) == 1  # exits as the check did
    assert f"junit: {iso}" in capsys.readouterr().out and int(suite_of(iso.read_text()).get("failures")) > 0


@pytest.mark.parametrize(
    "argv",
    [
        ["suite", "compare", str(QUICK), str(POLICED), "--junit", "/nonexistent/c.xml"],
        ["isolation", "report", str(ISO_LEAK), "--junit", "/nonexistent/i.xml"],
        ["isolation", "check", str(DATA.parents[2] / "vlan-tests" / "seed-three-vm.yaml"), "--junit", "/nonexistent/j"],
    ],
)
def test_the_cli_refuses_a_junit_target_it_cannot_write(capsys, argv: list[str]) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert "--junit /nonexistent/" in err and "does not exist" in err and "Traceback" not in err
