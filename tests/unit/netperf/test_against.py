"""``hvnet suite report RUN --against STUDY``: the shipped studies load and name steps their suites really
run; a study file with mistakes is refused with file:line: field; real saved runs are set beside the
studies (tests/unit/data/netperf: a seed-2010 run in the lab, a mid-sized monitoring-cost run), and runs
built from the runner's own records decide the 2010 study's conclusions from known figures."""

from __future__ import annotations

import dataclasses
import json
import textwrap
from pathlib import Path

import pytest

from appliance.core.errors import EXIT_USAGE, ConfigError, UsageError
from appliance.netperf.define import studies
from appliance.netperf.define import suite as suite_mod
from appliance.netperf.report import against
from appliance.netperf.run.fragments import CaseState
from appliance.netperf.run.record import step_record
from appliance.netperf.store import results
from appliance.netperf.store.records import Figure, StepResult, SuiteResult, Summary

DATA = Path(__file__).parents[1] / "data" / "netperf"
SEED_RUN = DATA / "verdict" / "seed-2010-tc-vmhost.json"  # the seed-2010 suite at 10 instances, UDP_RR all lost
MONITORING_RUN = DATA / "monitoring-cost-mid-results.json"


def suite_steps(name: str) -> list[StepResult]:
    """A shipped suite's steps as the runner records them before their first repetition."""
    return [step_record(s, CaseState(), CaseState(), None) for s in suite_mod.load(name).steps()]


# -- the shipped studies -------------------------------------------------------------------------


def test_the_five_studies_are_shipped_and_the_command_names_them() -> None:
    from appliance.cli.suite import STUDIES

    assert studies.names() == ["capture-2015", "cloudnet-2018", "seed-2010", "vtap-dissertation-2024",
                               "vtap-onos-thesis"]  # fmt: skip
    assert sorted(STUDIES) == studies.names()


@pytest.mark.parametrize("path", studies.shipped(), ids=lambda p: p.stem)
def test_a_shipped_study_loads_and_its_source_is_a_seed(path: Path) -> None:
    s = studies.load(path)
    assert s.name == path.stem
    assert s.source.endswith(".txt") and "/" not in s.source
    for t in s.tables:
        assert all(len(r.values) == len(t.columns) for r in t.rows)


# Rows the studies print that their suites do not run (the study's own case or size), by design.
NOT_IN_SUITE = {
    ("vtap-dissertation-2024", "table-4-1"): {"8 mirrors, monitoring (Test 1)", "4 mirrors, monitoring (Test 3)"},
}


@pytest.mark.parametrize("path", studies.shipped(), ids=lambda p: p.stem)
def test_every_row_names_one_step_of_its_suite(path: Path) -> None:
    """A row keyed with a typo (a case the suite does not have) would read "not in this run" forever."""
    s = studies.load(path)
    for t in s.tables:
        steps = suite_steps(t.suite)
        missing = set()
        for row in t.rows:
            found = [x.key for x in steps if against.matches(x, row.key)]
            assert len(found) <= 1, (row.label, found)
            if not found:
                missing.add(row.label)
        assert missing == NOT_IN_SUITE.get((s.name, t.id), set())


@pytest.mark.parametrize("path", studies.shipped(), ids=lambda p: p.stem)
def test_every_conclusion_selects_steps_a_shipped_suite_runs(path: Path) -> None:
    all_steps = {p.stem: suite_steps(p.stem) for p in suite_mod.shipped()}
    for c in studies.load(path).conclusions:
        for key in (c.a, c.b):
            if key is not None:
                assert any(against.select(steps, key)[1] is None for steps in all_steps.values()), (c.claim, key)


def test_an_unknown_study_is_a_usage_error_naming_the_known_ones() -> None:
    with pytest.raises(UsageError) as exc:
        studies.load_named("seed-2011")
    assert exc.value.exit_code == EXIT_USAGE
    assert "no study named 'seed-2011'" in str(exc.value) and "seed-2010, vtap-dissertation-2024" in str(exc.value)
    with pytest.raises(UsageError):
        studies.load_named("../seed-2010")


def test_a_study_with_mistakes_is_refused_with_file_line_and_field(tmp_path: Path) -> None:
    f = tmp_path / "broken.yaml"
    f.write_text(textwrap.dedent("""\
        version: 1
        name: broken
        title: t
        year: 2010
        source: s.txt
        tables:
          - id: x
            title: X
            where: Table 1
            suite: no-such-suite
            key: {type: TCP_STRIM}
            columns:
              - {heading: h, unit: u, figure: throughput, hvnet_unit: Mbit/s}
            rows:
              - {concurrency: [10, 20], values: [1]}
              - {concurrency: 30, values: [1, 2]}
        conclusions:
          - {claim: c, study_figures: f, kind: bigger, a: {type: TCP_STREAM}}
          - {claim: c, study_figures: f, kind: within, figure: mean, a: {case: a}, b: {case: b}}
    """))  # fmt: skip
    with pytest.raises(ConfigError) as exc:
        studies.load(f)
    assert exc.value.exit_code == EXIT_USAGE
    found = {str(p).split(": ", 1)[1] for p in exc.value.problems}
    assert all(str(p).startswith(f"{f}:") for p in exc.value.problems)
    assert {"tables[0].suite: no shipped suite 'no-such-suite' in netperf-suites/",
            "conclusions[0].kind: unknown kind 'bigger'; known: lower, higher, within, steadier, no_loss, fewer_lost",
            "conclusions[1].tolerance: expected a positive number",
            "tables[0].rows[0].concurrency: a row names one value per field (a list selects several steps)",
            "tables[0].rows[1].values: expected a list of 1 value(s), one per column (null: not given)",
            } <= found  # fmt: skip
    assert any(p.startswith("tables[0].key.type: unknown test type 'TCP_STRIM'") for p in found)
    assert any(p.startswith("tables[0].columns[0].figure: unknown figure 'throughput'") for p in found)
    lines = {p.field: p.line for p in exc.value.problems}
    assert lines["tables[0].suite"] == 10 and lines["conclusions[0].kind"] == 18


# -- real runs -----------------------------------------------------------------------------------


def test_a_seed_2010_run_beside_the_study() -> None:
    doc = results.load(SEED_RUN)
    out = against.against(doc, studies.load_named("seed-2010"))
    tcp = out.tables[0].lines
    assert tcp[0].step == "tcp-stream/default/m10000/c10" and tcp[1].note == "not in this run"
    step = doc.steps[0]
    assert step.summary is not None
    hv = step.summary.mean_of("mean")
    assert tcp[0].cells[0] == against.Cell(631.17, hv, hv / 631.17)  # type: ignore[operator]
    assert tcp[0].cells[1] == against.Cell(0, 0, None)  # a study's 0 gives no ratio
    udp_rr = out.tables[3].lines[0]
    assert udp_rr.cells[1].hvnet == 10 and udp_rr.note == "10 of 10 instances lost"
    doc.steps[1].summary = None  # a step whose first repetition never finished
    udp = against.against(doc, studies.load_named("seed-2010")).tables[1].lines[0]
    assert udp.note == "no finished repetition" and udp.cells[0].hvnet is None
    by_claim = {j.conclusion.claim: j for j in out.conclusions}
    j = by_claim["UDP_RR's transaction rate is far above TCP_CRR's"]
    assert j.status == against.NOT_COMPARABLE  # the run has 10 instances only
    assert j.figures == "a: no step with type=UDP_RR concurrency=20 in this run"
    text = out.text()
    assert "TCP stream  [Test 2 results, first table; hvnet suite: seed-2010]" in text
    assert "Average throughput: the study's unit: none given; hvnet: mean in Mbit/s" in text
    assert "- TCP_CRR loses no instance: NOT COMPARABLE HERE" in text
    assert not out.not_in_study  # every step of the run is in the study's tables
    json.dumps(out.to_json())  # --json: plain data


def test_a_monitoring_cost_run_decides_the_cloudnet_conclusions_from_its_figures() -> None:
    """The study has plots only: no table, its conclusions judged on the run (real lab figures: three
    10-second repetitions on a 2-core machine, too noisy to tell these cases apart)."""
    out = against.against(results.load(MONITORING_RUN), studies.load_named("cloudnet-2018"))
    status = {j.conclusion.claim: (j.status, j.figures) for j in out.conclusions}
    assert status["IPFIX costs more CPU than sFlow at the same sampling rate"] == (
        against.NOT_COMPARABLE,
        "cpu_vswitchd_pct_of_core: a 78 vs b 56.5: not significant at 95% (welch t-test, p=0.14; 3 and 3 repetitions)",
    )
    assert status["sFlow's polling interval costs no measurable CPU"] == (
        against.NOT_COMPARABLE,
        "a: no step with type=TCP_STREAM case=sflow-64-polling-1 in this run",
    )
    assert not out.tables and "its conclusions only" in out.text()


def test_a_difference_the_repetitions_tell_from_noise_decides() -> None:
    """The quick suite's real run: TCP_RR per instance at 4 instances against 1 (3 repetitions each)."""
    doc = results.load(DATA / "quick-results.json")
    rr = {"type": "TCP_RR", "concurrency": 4}
    c = studies.Conclusion("falls", "f", "lower", "mean", rr, {**rr, "concurrency": 1})
    j = against.judge(c, doc.steps)
    assert (j.status, j.figures) == (against.HOLDS, "mean: a 5823 vs b 7654")
    same = studies.Conclusion(
        "udp", "f", "higher", "mean", {"type": "UDP_RR", "concurrency": 1}, {**rr, "concurrency": 1}
    )
    j = against.judge(same, doc.steps)
    assert j.status == against.NOT_COMPARABLE and j.figures.startswith("mean: a 7629 vs b 7654: not significant")


# -- runs built from records: the 2010 study's conclusions from known figures --------------------

LEVELS = (10, 20, 30, 40, 50, 60, 70)


def _seed_run(lost: bool) -> SuiteResult:
    """The 2010 study's own table as a run (its figures as hvnet's means; its lost instances, or none)."""
    study = studies.load_named("seed-2010")
    proto = results.load(SEED_RUN).steps[0]
    doc = SuiteResult(results.SCHEMA, results.SCHEMA_VERSION, "complete", False)
    doc.meta.suite.name = "seed-2010"
    for table in study.tables:
        for row in table.rows:
            mean, gone = row.values[0], (row.values[1] if len(row.values) > 1 else 0) or 0
            c = int(row.key["concurrency"])  # type: ignore[arg-type]
            summary = Summary(repetitions=1, mean=Figure(mean=mean, n=1), instances=c, lost=int(gone) if lost else 0)
            doc.steps.append(dataclasses.replace(
                proto, key=f"{table.id}/c{c}", type=str(row.key["type"]), concurrency=c,
                message_size=row.key.get("message_size"), summary=summary, repetitions=[]))  # type: ignore[arg-type]  # fmt: skip
    return doc


def test_the_studys_own_figures_read_back_at_ratio_one() -> None:
    out = against.against(_seed_run(lost=True), studies.load_named("seed-2010"))
    for side in out.tables:
        for line in side.lines:
            assert line.step is not None
            assert line.cells[0].ratio == pytest.approx(1.0)


def test_the_2010_conclusions_on_the_studys_own_figures() -> None:
    """Lost instances make a mean over survivors: those conclusions are not comparable, as in the study."""
    out = against.against(_seed_run(lost=True), studies.load_named("seed-2010"))
    status = {j.conclusion.claim: (j.status, j.figures) for j in out.conclusions}
    assert status["TCP stream loses fewer instances than UDP stream"] == (
        against.HOLDS,
        "25 of 280 instances lost vs 39 of 280 instances lost",
    )
    assert status["TCP_CRR loses no instance"] == (against.HOLDS, "0 of 280 instances lost")
    assert status["UDP stream is steadier than TCP stream"] == (
        against.NOT_COMPARABLE,
        "udp-stream/c50: 15 of 50 instances lost (its mean is over the survivors)",
    )


def test_the_2010_conclusions_on_a_run_without_losses() -> None:
    out = against.against(_seed_run(lost=False), studies.load_named("seed-2010"))
    status = {j.conclusion.claim: (j.status, j.figures) for j in out.conclusions}
    assert status["UDP stream is steadier than TCP stream"] == (
        against.HOLDS,
        "mean spread (max-min)/mean: a 0.154 (266.5..310.9) vs b 0.947 (156.3..443)",
    )
    assert status["TCP_CRR's transaction rate is steadier than UDP_RR's"][0] == against.HOLDS
    assert status["UDP_RR's transaction rate is far above TCP_CRR's"][0] == against.HOLDS
    assert status["TCP stream's throughput falls from 10 to 40 streams"] == (against.HOLDS, "mean: a 156.3 vs b 631.2")
    assert status["TCP stream loses fewer instances than UDP stream"] == (
        against.FAILS,
        "0 of 280 instances lost vs 0 of 280 instances lost",
    )


def test_within_says_how_far_apart() -> None:
    c = studies.Conclusion("c", "f", "within", "mean", {"case": "a"}, {"case": "b"}, 0.06)
    assert against._decide(c, [94.0], [100.0]) == against.Judgement(
        c, against.HOLDS, "mean: a 94 vs b 100 (-6.0%; within 6% asked)"
    )
    assert against._decide(c, [93.0], [100.0]).status == against.FAILS


# -- the command ---------------------------------------------------------------------------------


def test_the_command_prints_the_study_beside_the_run(capsys: pytest.CaptureFixture[str]) -> None:
    from appliance.cli.main import main

    assert main(["suite", "report", str(SEED_RUN), "--against", "seed-2010"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("OVS on XenServer, Test 2 (performance) (2010; seeds/ovs-xenserver-2010-study.txt)")
    assert "concurrency=20  not in this run" in out
    assert main(["suite", "report", str(SEED_RUN), "--against", "seed-2010", "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["study"]["year"] == 2010 and doc["run_suite"] == "seed-2010"
    assert doc["tables"][0]["rows"][0]["cells"][0]["study"] == 631.17


def test_the_command_refuses_an_unknown_study_and_html(capsys: pytest.CaptureFixture[str]) -> None:
    from appliance.cli.main import main

    assert main(["suite", "report", str(SEED_RUN), "--against", "seed-2011"]) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "no study named 'seed-2011'" in err and "known studies: capture-2015, cloudnet-2018" in err
    assert main(["suite", "report", str(SEED_RUN), "--against", "seed-2010", "--html", "x.html"]) == EXIT_USAGE
    assert "writes no HTML" in capsys.readouterr().err


def test_one_repetition_a_side_is_said() -> None:
    doc = results.load(SEED_RUN)  # the seed-2010 suite's one repetition per step
    c = studies.Conclusion("c", "f", "higher", "mean", {"type": "TCP_CRR"}, {"type": "TCP_STREAM"})
    j = against.judge(c, doc.steps)
    assert j.status == against.HOLDS
    assert j.figures.endswith("(one repetition a side: not tested against noise)")


def test_a_findings_page_names_the_run_and_carries_tables_and_verdicts(capsys: pytest.CaptureFixture[str]) -> None:
    from appliance.cli.main import main

    assert main(["suite", "report", str(SEED_RUN), "--against", "seed-2010", "--format", "markdown"]) == 0
    page = capsys.readouterr().out
    doc = results.load(SEED_RUN)
    lines = page.splitlines()
    assert lines[0] == "## The run"
    assert f"- hvnet: {doc.meta.hvnet_version}" in lines
    assert any(ln.startswith("- command: ") and "suite run" in ln for ln in lines), lines[:12]
    assert "## TCP stream" in lines
    assert any(ln.startswith("| row | step | Average throughput (study) | hvnet | hvnet ÷ study |") for ln in lines)
    assert "## The study's conclusions, decided from this run" in lines
    assert any(ln.startswith("- **not comparable here**: ") for ln in lines)
    assert lines[-1] == "Study: OVS on XenServer, Test 2 (performance) (2010), seeds/ovs-xenserver-2010-study.txt."
    # markdown alone is a usage error: it is a run beside a study
    assert main(["suite", "report", str(SEED_RUN), "--format", "markdown"]) == EXIT_USAGE
    assert "--format markdown writes a run beside a study: it needs --against STUDY" in capsys.readouterr().err


def test_a_planted_host_name_is_literal_text_on_a_findings_page() -> None:
    from appliance.netperf.report import findings

    doc = results.load(SEED_RUN)
    doc.meta.host = "hv1 | [click](http://x) <script>"
    doc.meta.warnings = ["`rm -rf` *now*"]
    page = findings.markdown(against.against(doc, studies.load_named("seed-2010")), doc.meta)
    (host,) = [ln for ln in page.splitlines() if ln.startswith("- host: ")]
    assert host.startswith("- host: hv1 \\| \\[click\\](http://x) \\<script\\>")
    assert "- \\`rm -rf\\` \\*now\\*" in page
