"""A suite's perf_stat: the key validated with file:line and the allowed events; perf's real output (captured on
a machine without a hardware PMU) read into counts or "not measured" with perf's reason; the report's rows and
notes."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

from appliance.cli.main import main
from appliance.core.errors import EXIT_USAGE, ConfigError
from appliance.netperf.define import perfstat as spec
from appliance.netperf.define import suite
from appliance.netperf.parse import perfstat
from appliance.netperf.report import perfstat as report
from appliance.netperf.report.text import text
from appliance.netperf.store.records import RepetitionResult, StepResult, SuiteResult, Summary

DATA = Path(__file__).resolve().parents[1] / "data" / "perf"
NINE = (
    "task-clock",
    "context-switches",
    "cpu-migrations",
    "page-faults",
    "cycles",
    "instructions",
    "cache-misses",
    "LLC-loads",
    "LLC-load-misses",
)  # fmt: skip  (what vswitchd-per-thread-no-pmu.txt was asked for)

SUITE = """\
version: 1
name: perf
endpoints: {{client: VM1, server: VM2}}
{perf}
cases:
  - name: a
  - name: b
tests:
  - {{name: ts, type: TCP_STREAM}}
"""


def write(tmp_path: Path, perf: str) -> Path:
    f = tmp_path / "s.yaml"
    f.write_text(SUITE.format(perf=textwrap.dedent(perf).strip()))
    return f


def problems(tmp_path: Path, perf: str) -> list[str]:
    f = write(tmp_path, perf)
    with pytest.raises(ConfigError) as exc:
        suite.load(f)
    assert exc.value.exit_code == EXIT_USAGE
    return [str(p) for p in exc.value.problems]


# -- the key -------------------------------------------------------------------------


def test_every_case_runs_the_suites_events(tmp_path) -> None:
    s = suite.load(write(tmp_path, "perf_stat: {events: [task-clock, cycles, instructions]}"))
    assert [c.perf_stat for c in s.cases] == [spec.PerfStatSpec(("task-clock", "cycles", "instructions"))] * 2
    assert all(st.case.perf_stat is not None for st in s.steps())
    assert s.cases[0].perf_stat.hardware == ("cycles", "instructions")


def test_true_asks_for_the_default_events_and_no_key_for_none(tmp_path) -> None:
    assert suite.load(write(tmp_path, "perf_stat: true")).cases[0].perf_stat == spec.PerfStatSpec(spec.DEFAULT_EVENTS)
    assert suite.load(write(tmp_path, "")).cases[0].perf_stat is None


CASES = """\
version: 1
name: perf
endpoints: {{client: VM1, server: VM2}}
{perf}
cases:
  - name: base
{base}
  - name: mirrored
{mirrored}
tests:
  - {{name: ts, type: TCP_STREAM}}
"""


def load_cases(tmp_path: Path, perf: str = "", base: str = "", mirrored: str = "") -> list:
    f = tmp_path / "c.yaml"
    f.write_text(CASES.format(perf=perf, base=base, mirrored=mirrored))
    return suite.load(f).cases


def test_a_case_counts_its_own_events_or_none_while_the_others_take_the_suites(tmp_path) -> None:
    own = "    perf_stat: {events: [task-clock, cycles]}"
    cases = load_cases(tmp_path, "perf_stat: {events: [page-faults]}", "    perf_stat: false", own)
    assert [c.perf_stat for c in cases] == [None, spec.PerfStatSpec(("task-clock", "cycles"))]
    cases = load_cases(tmp_path, "perf_stat: {events: [page-faults]}", "", own)
    assert cases[0].perf_stat == spec.PerfStatSpec(("page-faults",))
    cases = load_cases(tmp_path, "", "", "    perf_stat: true")  # no suite-wide key: only that case counts
    assert [c.perf_stat for c in cases] == [None, spec.PerfStatSpec(spec.DEFAULT_EVENTS)]


def test_a_bad_case_perf_stat_names_its_line_and_field(tmp_path) -> None:
    f = tmp_path / "c.yaml"
    f.write_text(CASES.format(perf="", base="", mirrored="    perf_stat: {events: [cyclez]}"))
    with pytest.raises(ConfigError) as exc:
        suite.load(f)
    (found,) = [str(p) for p in exc.value.problems]
    assert found.startswith(f"{f}:9: cases[1].perf_stat.events[0]: unknown perf event 'cyclez'"), found


def test_mirror_cost_counts_software_and_hardware_events() -> None:
    s = suite.load("mirror-cost")
    events = s.cases[0].perf_stat.events
    assert "task-clock" in events and "cycles" in events and "instructions" in events
    assert all(c.perf_stat == s.cases[0].perf_stat for c in s.cases)


@pytest.mark.parametrize(
    ("perf", "field", "message"),
    [
        (
            "perf_stat: {events: [cycles, bogus]}",
            "perf_stat.events[1]",
            "unknown perf event 'bogus'; allowed: task-clock",
        ),
        ("perf_stat: {events: [cycles, 7]}", "perf_stat.events[1]", "unknown perf event 7"),
        ("perf_stat: {events: cycles}", "perf_stat.events", "a non-empty list of perf events"),
        ("perf_stat: {events: []}", "perf_stat.events", "a non-empty list of perf events"),
        ("perf_stat: {events: [cycles, cycles]}", "perf_stat.events", "an event is listed twice"),
        ("perf_stat: {events: [cycles], pid: 1}", "perf_stat.pid", "unknown key; allowed: events"),
        ("perf_stat: yes please", "perf_stat", "must be true or {events: [EVENT, ...]}"),
        ("perf_stat: [cycles]", "perf_stat", "must be true or {events: [EVENT, ...]}"),
    ],
)
def test_bad_perf_stat_names_file_line_and_field(tmp_path, perf: str, field: str, message: str) -> None:
    found = problems(tmp_path, perf)
    assert len(found) == 1, found
    assert found[0].startswith(f"{tmp_path / 's.yaml'}:4: {field}: "), found  # perf_stat: is the file's line 4
    assert message in found[0]


def test_the_allowed_list_names_every_event(tmp_path) -> None:
    (found,) = problems(tmp_path, "perf_stat: {events: [LLC-misses]}")
    assert "allowed: " + ", ".join(spec.EVENTS) in found
    assert "LLC-load-misses" in found and "page-faults" in found


def test_hvnet_suite_validate_exits_2_naming_the_field(tmp_path, capsys) -> None:
    f = write(tmp_path, "perf_stat: {events: [cyclez]}")
    assert main(["suite", "validate", str(f)]) == 2
    err = capsys.readouterr().err
    assert f"{f}:4: perf_stat.events[0]" in err and "unknown perf event 'cyclez'" in err


# -- perf's output ---------------------------------------------------------------------


def read(name: str) -> str:
    return (DATA / name).read_text()


def test_argv_is_a_list_with_a_timeout_and_no_shell() -> None:
    got = perfstat.argv("/usr/bin/perf", ("task-clock", "cycles"), 7784, 10.0)
    assert got == ["/usr/bin/perf", "stat", "-x", ",", "--per-thread", "-e", "task-clock,cycles", "-p", "7784",
                   "--timeout", "10000"]  # fmt: skip


def test_software_events_are_summed_over_threads_and_hardware_ones_not_supported() -> None:
    got = perfstat.parse(read("vswitchd-per-thread-no-pmu.txt"), NINE, 0, 7784, "this machine")
    ev = got["events"]
    # task-clock: 980.42 + 0.11 + 0.02 + 0.02 (ovs-vswitchd-8801) ms; three threads <not counted>
    assert ev["task-clock"] == {"count": 980.57, "unit": "msec"}
    assert ev["context-switches"] == {"count": 188 + 2 + 1 + 0}
    assert ev["page-faults"] == {"count": 0}  # counted, and zero: a count, not "not measured"
    for hw in ("cycles", "instructions", "cache-misses", "LLC-loads", "LLC-load-misses"):
        assert ev[hw]["count"] is None
        assert ev[hw]["not_measured"].startswith("perf: <not supported>: this host exposes no such hardware")
    assert got["cpi"] is None and "<not supported>" in got["cpi_not_measured"]


def test_threads_are_grouped_by_role() -> None:
    got = perfstat.parse(read("vswitchd-per-thread-no-pmu.txt"), NINE, 0, 7784, "this machine")
    th = got["threads"]
    assert set(th) == {"main", "revalidator", "ct_clean"}  # handler, urcu, ipf_clean: never ran (<not counted>)
    assert th["main"]["task-clock"] == round(980.42 + 0.02, 3) and th["main"]["context-switches"] == 188
    assert th["revalidator"] == {"task-clock": 0.11, "context-switches": 2, "cpu-migrations": 0, "page-faults": 0}
    assert "cycles" not in th["main"]


@pytest.mark.parametrize(
    ("thread", "group"),
    [("ovs-vswitchd-7784", "main"), ("handler12-7819", "handler"), ("revalidator5-7820", "revalidator"),
     ("pmd-c03/id:5-9001", "pmd"), ("urcu2-7818", "urcu")],
)  # fmt: skip
def test_thread_group(thread: str, group: str) -> None:
    assert perfstat.thread_group(thread) == group


def test_a_run_stopped_by_sigint_keeps_its_counts() -> None:
    got = perfstat.parse(read("sigint.txt"), ("task-clock", "context-switches", "cycles"), 130, 7784, "this machine")
    assert got["events"]["task-clock"]["count"] > 1000 and got["events"]["context-switches"]["count"] == 223
    assert got["cpi"] is None and got["cpi_not_measured"] == "cycles and instructions were not both asked for"


def test_an_event_no_thread_ran_is_not_counted() -> None:
    lines = (
        "handler4-7819,<not counted>,msec,task-clock,0,100.00,,\nurcu2-7818,<not counted>,msec,task-clock,0,100.00,,"
    )
    ev = perfstat.parse(lines, ("task-clock",), 0, 1, "this machine")["events"]["task-clock"]
    assert ev["count"] is None and ev["not_measured"].startswith("perf: <not counted>")


def test_permission_denied_says_perf_event_paranoid() -> None:
    got = perfstat.parse(read("permission-denied.txt"), ("task-clock", "cycles"), 255, 7784, "hv1")
    for ev in got["events"].values():
        assert ev == {"count": None, "not_measured": ev["not_measured"]}
        assert ev["not_measured"].startswith("permission denied on hv1 (perf_event_paranoid is 2)")
    assert got["threads"] == {}


def test_a_pid_that_is_gone_is_said() -> None:
    got = perfstat.parse(read("pid-gone.txt"), ("task-clock",), 234, 999999, "this machine")
    assert got["events"]["task-clock"] == {
        "count": None,
        "not_measured": "ovs-vswitchd (pid 999999) is gone on this machine",
    }


def test_perf_stopped_before_it_printed_anything_is_said() -> None:
    why = perfstat.parse("", ("task-clock",), -2, 1, "hv1")["events"]["task-clock"]["not_measured"]
    assert why == "perf stat was stopped on hv1 before it counted (the repetition ended as it started)"


def test_other_failures_keep_perfs_last_word() -> None:
    said = "event syntax error: 'bogus'\n                          \\___ parser error\nRun 'perf list' for a list"
    why = perfstat.parse(said, ("task-clock",), 129, 1, "hv1")["events"]["task-clock"]["not_measured"]
    assert why == "perf stat failed on hv1 (exit 129): Run 'perf list' for a list"


def test_multiplexed_counts_say_how_long_they_ran_and_cpi_is_derived() -> None:
    lines = (
        "ovs-vswitchd-1,3000000,,cycles,1000,50.00,,\n"
        "handler1-2,1000000,,cycles,1000,100.00,,\n"
        "ovs-vswitchd-1,2000000,,instructions,1000,100.00,1.50,insn per cycle\n"
        "handler1-2,500000,,instructions,1000,100.00,,\n"
    )
    got = perfstat.parse(lines, ("cycles", "instructions"), 0, 1, "this machine")
    assert got["events"]["cycles"] == {"count": 4000000, "running_pct": 50.0}
    assert got["cpi"] == round(4000000 / 2500000, 4) and got["cpi_not_measured"] is None
    assert got["threads"]["main"]["cpi"] == 1.5 and got["threads"]["handler"]["cpi"] == 2.0


# -- the report ------------------------------------------------------------------------


def _doc(records: list[dict]) -> SuiteResult:
    doc = SuiteResult()
    step = StepResult(key="ts/a/m-/c1", test="ts", case="a", type="TCP_STREAM", concurrency=1, duration=10,
                      summary=Summary(repetitions=len(records)))  # fmt: skip
    step.repetitions = [RepetitionResult(repetition=i + 1, perf_stat=r) for i, r in enumerate(records)]
    doc.steps = [step]
    return doc


def _record(name: str, events: tuple[str, ...], rc: int = 0) -> dict:
    return perfstat.parse(read(name), events, rc, 7784, "this machine")


def test_the_report_shows_means_and_says_what_hardware_counters_need() -> None:
    doc = _doc([_record("vswitchd-per-thread-no-pmu.txt", NINE), _record("sigint.txt", NINE, 130)])
    step = doc.steps[0]
    assert report.event_mean(step, "task-clock") == pytest.approx((980.57 + 1451.69) / 2)
    assert report.event_mean(step, "cycles") is None
    labels = {label: fn(step) for label, fn in report.rows(doc.steps)}
    assert labels["perf task-clock (msec), ovs-vswitchd"] == f"{(980.57 + 1451.69) / 2:,.2f}"
    assert labels["perf cycles, ovs-vswitchd"] == "-" and labels["perf CPI (cycles ÷ instructions)"] == "-"
    notes = report.notes(doc)
    assert any(n.startswith("note: perf did not measure cycles, instructions, cache-misses") and "<not supported>" in n
               for n in notes)  # fmt: skip
    assert notes[-1] == f"note: {perfstat.HARDWARE_NOTE}"
    assert "perf task-clock (msec), ovs-vswitchd" in text(doc) and perfstat.HARDWARE_NOTE in text(doc)


def test_a_report_without_perf_stat_says_nothing_of_it() -> None:
    doc = _doc([{}])
    doc.steps[0].repetitions[0].perf_stat = None
    assert report.rows(doc.steps) == [] and report.notes(doc) == []


def test_perf_missing_is_one_note_and_no_hardware_claim_when_only_software_was_asked() -> None:
    rec = perfstat.not_measured(("task-clock",), "perf is not installed on hv1 (Debian: linux-perf; EL: perf)")
    assert report.notes(_doc([rec, rec])) == [
        "note: perf did not measure task-clock on ovs-vswitchd: perf is not installed on hv1 (Debian: linux-perf; "
        "EL: perf)"
    ]


def test_the_record_round_trips_through_results_json() -> None:
    rec = _record("vswitchd-per-thread-no-pmu.txt", NINE)
    rep = RepetitionResult(repetition=1, perf_stat=rec)
    assert RepetitionResult.from_json(rep.to_json()).perf_stat == rec
    assert "perf_stat" not in RepetitionResult(repetition=1).to_json()  # older runs' shape: no key


def test_a_run_warns_at_its_start_when_perf_is_not_where_ovs_vswitchd_runs(tmp_path, monkeypatch) -> None:
    from appliance.core import proc
    from appliance.core.target import DbTarget
    from appliance.netperf.run import perfstat as run_perfstat
    from appliance.switch.host import Host

    monkeypatch.setattr(proc, "_EXTRA_PATH", ())
    monkeypatch.setenv("PATH", str(tmp_path))  # a directory without perf: the real lookup finds nothing
    host = Host(DbTarget("unix:/x/db.sock", "--db"), label="hv1")
    (warning,) = run_perfstat.missing(host)
    assert warning.startswith("perf_stat: perf is not installed on hv1 (Debian: linux-perf; EL: perf)")
    assert warning.endswith("its events will be recorded as not measured")
    perf = tmp_path / "perf"
    perf.write_text("#!/bin/sh\n")
    perf.chmod(0o755)
    assert run_perfstat.missing(host) == []
