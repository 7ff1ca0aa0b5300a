"""HTML reports of real recorded runs and checks: what they hold, that they fetch and run nothing,
that hostile names stay text, and that they still carry every table where matplotlib is absent.

The runs are described in data/netperf/README.md; isolation-misconfigured.json and
isolation-mirror-exception.json are ``hvnet isolation check vlan-tests/NAME.yaml --json`` in the built-in lab.
"""

from __future__ import annotations

import copy
import json
import os
import sys
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from appliance.cli.main import main
from appliance.core import htmlpage
from appliance.isolation import html as iso_html
from appliance.isolation import report as iso_report
from appliance.netperf.figures import compare
from appliance.netperf.report import html as np_html
from appliance.netperf.report import text as report
from appliance.netperf.store import results
from appliance.netperf.store.records import SuiteResult

DATA = Path(__file__).resolve().parents[1] / "data"
ROOT = DATA.parent.parent.parent
QUICK = DATA / "netperf" / "quick-results.json"
POLICED = DATA / "netperf" / "quick-policed-results.json"
POLICING = DATA / "netperf" / "policing-results.json"
POLICING_SUITE = DATA / "netperf" / "policing-suite.yaml"
ISO_LEAK = DATA / "isolation-misconfigured.json"
ISO_MIRROR = DATA / "isolation-mirror-exception.json"

HOSTILE = "<script>alert('x')</script>\"onload=\"x() $\\frac{a}{$ -->&amp;"


class Tags(HTMLParser):
    """Every element and attribute of a page, as a browser's tokenizer sees them."""

    def __init__(self, text: str) -> None:
        super().__init__(convert_charrefs=True)
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []
        self.feed(text)

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)

    def named(self, tag: str) -> list[dict[str, str | None]]:
        return [a for t, a in self.tags if t == tag]


def assert_inert(page: str) -> Tags:
    """No script, no event handler, nothing fetched: the page is text, tables and drawings only."""
    tags = Tags(page)
    assert not tags.named("script") and not tags.named("iframe") and not tags.named("link")
    assert not tags.named("img") and not tags.named("foreignobject")
    for tag, attrs in tags.tags:
        assert not [k for k in attrs if k.startswith("on")], (tag, attrs)
        for key in ("src", "href", "xlink:href"):
            assert (attrs.get(key) or "#").startswith("#"), (tag, attrs)
    (csp,) = [a for a in tags.named("meta") if a.get("http-equiv") == "Content-Security-Policy"]
    assert csp["content"] == htmlpage.CSP and "default-src 'none'" in htmlpage.CSP
    assert "@import" not in page and "url(http" not in page
    return tags


def plot_labels(page: str) -> list[str]:
    return [str(a["aria-label"]) for a in Tags(page).named("svg")]


def test_a_run_report_holds_the_text_reports_tables_its_plots_and_metadata() -> None:
    doc = results.load(QUICK)
    page = np_html.suite_page(doc, "runs/quick-1")
    tags = assert_inert(page)
    text = "".join(tags.text)
    for t in report.tables(doc):  # cell for cell what 'hvnet suite report' prints
        assert t.title in text
        for row in t.rows:
            for c in row:
                assert htmlpage.esc(c) in page
    assert (
        len(report.tables(doc)) == 5 and page.count("<table") == 5 + 3
    )  # + the run, the test settings, the policy per case
    svgs = tags.named("svg")
    assert len(svgs) == 5 and all(a.get("role") == "img" for a in svgs)
    assert [a["aria-label"] for a in svgs] == [f"quick / {t}" for t in ("tcp-stream", "udp-stream", "tcp-rr",
                                                                         "tcp-crr", "udp-rr")]  # fmt: skip
    m = doc.meta
    for fact in (m.host, m.kernel, m.ovs_version, m.netperf_version, m.started, m.finished, m.suite.sha256[:16],
                 "runs/quick-1", "VM1 192.168.0.150 on vif1.0", "netserver started by hvnet"):  # fmt: skip
        assert str(fact) in text
    assert "TCP_CRR above 14,116 connections/s" in text  # the run's warning
    assert "vlan: {mode: access, tag: 2}" in text  # the policy on the switch when the run started
    # ids are unique across the inlined plots (matplotlib names glyphs and clips alike in each)
    ids = [a["id"] for _, a in tags.tags if a.get("id")]
    assert len(ids) == len(set(ids)) > 50


def test_the_policy_of_each_case_as_written_and_as_enforced() -> None:
    doc = results.load(POLICING)
    doc.meta.suite.file = str(POLICING_SUITE)  # the suite file as it was when the run was recorded
    page = np_html.suite_page(doc, str(POLICING))
    text = "".join(assert_inert(page).text)
    for rate in (1024, 5120, 10240, 20480, 51200):
        assert f"ingress:\n    rate: {rate}" in text  # the fragment the suite file wrote for the case
        assert f"{rate} kbit/s, burst {rate * 8 // 10} kbit, meter: enforced" in text  # what was in force
        assert f"meter 3: {rate} kbit/s burst {rate * 8 // 10} kbit installed" in text  # the engine's check
    assert "not there unchanged" not in text
    assert plot_labels(page) == ["policing / tcp-stream", "policing / udp-stream"]
    assert ">rate-50mbit<" in page  # one test, one concurrency, five cases: the cases are the x axis


def test_a_suite_file_that_changed_since_the_run_is_not_shown_as_its_policy() -> None:
    doc = results.load(POLICING)
    doc.meta.suite.file = str(POLICING_SUITE)
    doc.meta.suite.sha256 = "0" * 64  # the file on disk is no longer the one the run read
    text = "".join(Tags(np_html.suite_page(doc, "r")).text)
    assert "is not there unchanged (sha256 0000000000000000)" in text
    assert "rate: 1024" not in text  # not the fragment...
    assert "1024 kbit/s, burst 819 kbit, meter: enforced" in text  # ...but still what the run recorded


def hostile(doc: SuiteResult) -> SuiteResult:
    doc = copy.deepcopy(doc)
    m = doc.meta
    m.suite.name = m.suite.description = m.host = m.kernel = m.client.guest = HOSTILE
    m.warnings = [HOSTILE]
    m.policy_snapshot = HOSTILE
    for step in doc.steps:
        step.test, step.case = f"t{HOSTILE}", f"c{HOSTILE}"
        step.repetitions[0].notes = [HOSTILE]
    return doc


def test_hostile_names_stay_text_in_the_run_and_compare_reports() -> None:
    doc = hostile(results.load(QUICK))
    for page in (np_html.suite_page(doc, HOSTILE),
                 np_html.compare_page(compare.compare(doc, doc), doc, doc, (HOSTILE, HOSTILE))):  # fmt: skip
        tags = assert_inert(page)
        assert "<script>alert" not in page  # (a quote in text content is text; attributes are checked above)
        assert HOSTILE in "".join(tags.text)  # shown as the very characters, in the tables and in the plots
        assert tags.named("svg")  # '$' in a name is not matplotlib math: the plots are drawn
    (title,) = [t for t in Tags(np_html.suite_page(doc, "r")).text if t.startswith(f"{HOSTILE} / t")][:1]
    assert title == f"{HOSTILE} / t{HOSTILE} (TCP_STREAM, 2 s)"  # the plot's title, drawn from the escaped SVG


def test_without_matplotlib_the_report_says_how_to_get_plots_and_keeps_every_table(monkeypatch) -> None:
    monkeypatch.setitem(sys.modules, "matplotlib", None)  # import matplotlib -> ImportError, as on a bare host
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    doc = results.load(QUICK)
    page = np_html.suite_page(doc, "r")
    tags = assert_inert(page)
    assert not tags.named("svg")
    (note,) = [a for a in tags.named("p") if "plots-missing" in (a.get("class") or "")]
    assert note is not None and "dnf install hvnet-plots" in "".join(tags.text)
    assert page.count("<table") == len(report.tables(doc)) + 3
    cmp_page = np_html.compare_page(compare.compare(doc, doc), doc, doc, ("a", "b"))
    assert "comparison plot not drawn: plots need matplotlib" in "".join(Tags(cmp_page).text)


@pytest.fixture(scope="module")
def regression() -> tuple[compare.Result, SuiteResult, SuiteResult]:
    base, new = results.load(QUICK), results.load(POLICED)
    return compare.compare(base, new), base, new


def test_a_comparison_shows_each_step_both_runs_intervals_and_the_verdicts(regression) -> None:
    result, base, new = regression
    page = np_html.compare_page(result, base, new, ("runs/before", "runs/policed"))
    tags = assert_inert(page)
    text = "".join(tags.text)
    assert result.regressions  # VM1 policed at 10 Mbit/s: throughput fell
    assert f"{len(result.regressions)} significant regression(s) beyond 5%" in text
    rows = compare.table_rows(result)
    for row in rows:
        assert all(htmlpage.esc(c) in page for c in row)
    bad = [a for a in tags.named("td") if a.get("class") == "bad"]
    assert len(bad) == sum(1 for r in rows if r[-1] in ("REGRESSION", "NO RESULT"))
    (svg,) = tags.named("svg")
    assert svg["aria-label"] == "baseline against candidate, per step"
    for r in result.rows:  # every step compared on both sides has its row in the plot, named
        if r.base and r.new:
            assert f">{r.key}<" in page
    assert "only in base: tcp-crr/default/m-/c4" in text  # the policed run ran two tests of the five
    for run in ("runs/before", "runs/policed", base.meta.started, new.meta.started):
        assert run in text


def test_runs_with_no_step_in_common_compare_without_a_plot() -> None:
    base, new = results.load(QUICK), results.load(POLICING)
    result = compare.compare(base, new)
    page = np_html.compare_page(result, base, new, ("a", "b"))
    tags = assert_inert(page)
    assert not tags.named("svg") and "no plot: no step has a result in both runs" in "".join(tags.text)
    assert "the runs used different suite files" in "".join(tags.text)


def test_an_isolation_report_shows_the_matrices_the_leak_and_its_evidence() -> None:
    result = iso_report.from_json(json.loads(ISO_LEAK.read_text()))
    page = iso_html.page(result, source=str(ISO_LEAK))
    tags = assert_inert(page)
    text = "".join(tags.text)
    assert "FAIL: isolation differs from expected" in text and result.exit_code == 1
    for line in iso_report.problem_lines(result):  # the text report's findings, each one
        assert line in text
    matrices = [a for a in tags.named("table") if a.get("class") == "matrix"]
    assert len(matrices) == 1 + len(result.methods)  # expected, then one per method
    assert "Yes (LEAK)" in text
    leaks = [a for a in tags.named("td") if a.get("class") == "bad"]
    assert len(leaks) >= 2 * 2  # VM3 hears VM1 and VM2, by both methods (plus their evidence rows)
    ev = result.methods["traffic"].evidence[("VM3", "VM1")]
    assert ev.pcap in text and ev.src_mac in text and "192.168.0.150" in text
    assert result.methods["trace"].stats["datapath_actions"]["VM1"] in text


def test_an_isolation_report_lists_declared_mirror_exceptions() -> None:
    result = iso_report.from_json(json.loads(ISO_MIRROR.read_text()))
    text = "".join(assert_inert(iso_html.page(result)).text)
    assert "PASS: isolation as expected" in text
    for line in iso_report.exception_lines(result):
        assert line in text
    assert "Yes*" in text


def test_hostile_names_stay_text_in_the_isolation_report() -> None:
    doc = json.loads(ISO_LEAK.read_text())
    raw = json.dumps(doc).replace("VM3", HOSTILE.replace("\\", "\\\\").replace('"', '\\"'))
    result = iso_report.from_json(json.loads(raw))
    page = iso_html.page(result, source=HOSTILE)
    tags = assert_inert(page)
    assert "<script>alert" not in page and HOSTILE in "".join(tags.text)


# -- the CLI ---------------------------------------------------------------------------------------


def test_cli_writes_the_reports(tmp_path, capsys) -> None:
    out = tmp_path / "run.html"
    assert main(["suite", "report", str(QUICK), "--html", str(out)]) == 0
    assert capsys.readouterr().out.strip() == f"report: {out}"
    assert out.read_text().startswith("<!DOCTYPE html>") and not (DATA / "netperf" / "plots").exists()
    assert out.read_text().count("<svg") == 5
    assert main(["suite", "report", str(QUICK), "--html", str(out), "--no-plots"]) == 0
    assert "<svg" not in out.read_text() and "plots left out (--no-plots)" in out.read_text()
    capsys.readouterr()
    cmp = tmp_path / "cmp.html"
    assert main(["suite", "compare", str(QUICK), str(POLICED), "--html", str(cmp)]) == 1  # a regression: exit 1
    assert "REGRESSION" in capsys.readouterr().out and "REGRESSION" in cmp.read_text()
    iso = tmp_path / "iso.html"
    assert main(["isolation", "report", str(ISO_LEAK), "--html", str(iso)]) == 1  # the leak: exit 1, as the check
    assert "Yes (LEAK)" in iso.read_text()
    assert main(["isolation", "report", str(ISO_MIRROR)]) == 0
    assert "PASS" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv, message",
    [
        (["suite", "report", str(QUICK), "--html", "/nonexistent/r.html"], "directory /nonexistent does not exist"),
        (["suite", "report", str(QUICK), "--html", "{tmp}"], "is a directory; give a file name"),
        (["suite", "compare", str(QUICK), str(QUICK), "--html", "/nonexistent/c.html"], "/nonexistent does not"),
        (["isolation", "report", str(QUICK), "--html", "{tmp}/i.html"], "not a saved isolation result"),
        (["isolation", "report", "/nonexistent.json"], "/nonexistent.json: cannot read"),
        (
            ["isolation", "check", str(ROOT / "vlan-tests" / "seed-three-vm.yaml"), "--html", "/nonexistent/i.html"],
            "/nonexistent does",
        ),
    ],
)
def test_cli_refuses_a_bad_target_or_input_before_writing(tmp_path, capsys, argv, message) -> None:
    argv = [a.replace("{tmp}", str(tmp_path)) for a in argv]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err and "Traceback" not in err
    assert list(tmp_path.iterdir()) == []


def test_html_and_json_together_is_a_usage_error(capsys) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["suite", "report", str(QUICK), "--json", "--html", "x.html"])
    assert exc.value.code == 2 and "not allowed with argument" in capsys.readouterr().err


# -- hand-edited or damaged files ---------------------------------------------------------------------

_POLICING = json.loads(POLICING.read_text())
_ISO = json.loads(ISO_LEAK.read_text())


def _places(doc: Any, at: tuple[Any, ...] = ()) -> list[tuple[Any, ...]]:
    """Every place in a JSON document (dict keys and list indices) below the root."""
    items = doc.items() if isinstance(doc, dict) else enumerate(doc) if isinstance(doc, list) else []
    out = []
    for key, value in items:
        out += [(*at, key), *_places(value, (*at, key))]
    return out


_JSON = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(), st.floats(), st.text(max_size=8)),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3),
    max_leaves=8,
)


def _replaced(doc: Any, path: tuple[Any, ...], value: Any) -> Any:
    out = json.loads(json.dumps(doc))
    parent = out
    for key in path[:-1]:
        parent = parent[key]
    parent[path[-1]] = value
    return out


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(where=st.sampled_from([p for p in _places(_POLICING) if p[0] not in ("schema", "version")]), value=_JSON)
def test_any_run_the_text_report_prints_makes_a_page(tmp_path_factory, where: tuple[Any, ...], value: Any) -> None:
    """A free-form part of results.json (setup, enforcement, confidence...) edited by hand is shown, not a crash."""
    f = tmp_path_factory.mktemp("run") / results.RESULTS
    f.write_text(json.dumps(_replaced(_POLICING, where, value)))
    try:
        doc = results.load(f)
        report.text(doc)
    except Exception:  # not a run this hvnet reads or prints: not the page's to render
        return
    assert np_html.suite_page(doc, str(f), plots=False).startswith("<!DOCTYPE html>")


@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(where=st.sampled_from(_places(_ISO)), value=_JSON)
def test_any_isolation_result_that_loads_and_prints_makes_a_page(where: tuple[Any, ...], value: Any) -> None:
    try:
        result = iso_report.from_json(_replaced(_ISO, where, value))
        iso_report.format_result(result)
    except (TypeError, ValueError, AttributeError, KeyError, IndexError):
        return
    assert iso_html.page(result).startswith("<!DOCTYPE html>")


def test_a_symlink_planted_at_the_temporary_name_is_not_followed(tmp_path) -> None:
    """The page used to be written to ``.NAME.PID.tmp``, opened with O_TRUNC and following links: a link
    planted there made hvnet (root) overwrite the file it points at."""
    victim = tmp_path / "victim"
    victim.write_text("precious\n")
    target = tmp_path / "report.html"
    (tmp_path / f".{target.name}.{os.getpid()}.tmp").symlink_to(victim)
    htmlpage.write(target, "<html>page</html>\n")
    assert victim.read_text() == "precious\n"
    assert target.read_text() == "<html>page</html>\n" and not target.is_symlink()
    mask = os.umask(0o022)
    os.umask(mask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~mask
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted([f".{target.name}.{os.getpid()}.tmp", "report.html", "victim"]), left
