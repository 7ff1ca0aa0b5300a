"""A saved run, or a comparison of two, as one self-contained HTML page.

The tables are the text report's (:func:`.report.tables`, :func:`.compare.table_rows`),
cell for cell, so the page and the terminal never disagree; the plots are the
PNG plots' figures as inline SVG.  Around them: the run's metadata (suite,
host, versions, start and end, each test's settings) and the policy applied
per case -- as the suite file wrote it, when that file is still there
unchanged, and as the run recorded it in force (policing, its enforcement,
mirrors).  Nothing here measures: a figure the run did not record reads ``-``.
"""

from __future__ import annotations

import hashlib
from collections import OrderedDict
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml

from appliance.core import htmlpage as hp
from appliance.core import yamldoc
from appliance.core.errors import HvnetError
from appliance.core.htmlpage import esc
from appliance.netperf.define.suite import SUITES_DIR
from appliance.netperf.figures import compare as compare_mod
from appliance.netperf.report import flows as report_flows
from appliance.netperf.report import pairs as report_pairs
from appliance.netperf.report import pps as report_pps
from appliance.netperf.report import text as report
from appliance.netperf.store.records import StepResult, SuiteResult

VERDICT_CSS = {"REGRESSION": "bad", "NO RESULT": "bad", "improvement": "good", "not significant": "warn",
               "untestable": "warn", "new result": "warn"}  # fmt: skip
STATE_CSS = {"complete": "good", "partial": "warn", "failed": "bad", "running": "warn"}
VERIFIED = {True: "enforced", False: "NOT ENFORCED", None: "not verified"}


# -- a run -------------------------------------------------------------------------------------------


def suite_page(doc: SuiteResult, run: str, *, plots: bool = True) -> str:
    """The whole report of the run saved at ``run`` (its directory or results file, as the operator named it);
    ``plots=False`` leaves the plots out (``--no-plots``: a smaller page, drawn without matplotlib)."""
    m = doc.meta
    tables = report.tables(doc)
    sections = [
        _state(doc),
        "<h2>Run</h2>" + hp.meta_table(_run_meta(doc, run)),
        hp.notes(report.notes(doc) + [f"restore: {p}" for p in _items(m.restore_problems)]),
        "<h2>Test settings</h2>" + _settings(doc),
        "<h2>Policy per case</h2>" + _policies(doc),
        "<h2>Results</h2>" + _results(doc, tables, plots),
    ]
    return hp.page(f"hvnet suite {m.suite.name}: {doc.state}", sections, subtitle=m.suite.description)


def _state(doc: SuiteResult) -> str:
    text = f"{doc.state}" + (f" ({doc.partial_reason})" if doc.partial and doc.partial_reason else "")
    err = f'<p class="bad">error: {esc(doc.error)}</p>' if doc.error else ""
    return f'<p><span class="verdict {STATE_CSS.get(str(doc.state), "warn")}">{esc(text)}</span></p>{err}'


def _run_meta(doc: SuiteResult, run: str) -> list[tuple[str, object]]:
    m = doc.meta
    c, s = m.client, m.server
    measured = sum(1 for st in doc.steps if st.summary)
    return [
        ("run", run),
        ("suite", m.suite.name),
        ("suite file", f"{m.suite.file} (sha256 {str(m.suite.sha256)[:16]})" if m.suite.file else None),
        ("command", _words(m.command) or None),
        ("host", m.host),
        ("kernel", m.kernel),
        ("hvnet", m.hvnet_version),
        ("Open vSwitch", f"{m.ovs_version or 'unknown'} ({_words(m.datapath_types, ', ') or 'datapath unknown'})"),
        ("netperf", m.netperf_version or "unknown"),
        ("client", f"{c.guest} {c.address or ''} on {c.vif or 'an unknown VIF'} ({c.runs_in or 'unknown'})"),
        ("server", f"{s.guest or '(not a lab guest)'} {s.address}:{s.port} "
                   f"({'netserver started by hvnet' if s.managed else 'netserver not managed by hvnet'})"),
        *_pairs(doc),
        ("started", m.started),
        ("finished", m.finished),
        ("steps measured", f"{measured} of {len(doc.steps)} started"),
    ]  # fmt: skip


def _pairs(doc: SuiteResult) -> list[tuple[str, object]]:
    """Several client -> server pairs: a row naming them all (client and server above are the first's);
    none for one pair, whose page is as it always was."""
    found = report_pairs.run_pairs(doc)
    if not found:
        return []
    said = ", ".join(f"{p['client']} -> {p['server']}" for p in found)
    return [("pairs", f"{said} (each a step's concurrency, all at once; client and server above: the first's)")]


def _settings(doc: SuiteResult) -> str:
    """Each test as it ran: type, sizes, length, repetitions, concurrency (from the steps themselves)."""
    by_test: OrderedDict[str, list[StepResult]] = OrderedDict()
    for st in doc.steps:
        by_test.setdefault(st.test, []).append(st)
    rows = []
    for test, steps in by_test.items():
        s0 = steps[0]
        sizes = _listed(st.message_size for st in steps if st.message_size is not None)
        if s0.frame_size is not None:  # a packet-rate test: frames on the wire, and its offered rates
            sizes = f"frames {_listed(st.frame_size for st in steps)} B on the wire; offered " + (
                ", ".join(dict.fromkeys(report_pps.offered_text(st) for st in steps))
            )
        if s0.flows is not None:  # a many-flows test: streams per instance, and its offered rates per flow
            sizes = f"{s0.flows} flows per instance; offered " + (
                ", ".join(dict.fromkeys(report_flows.offered_text(st).split(" (")[0] for st in steps))
            )
        conf = s0.confidence
        rows.append([
            test, s0.type, sizes or "default",
            f"{s0.request_size},{s0.response_size}" if s0.request_size else "-",
            f"{s0.duration} s" if s0.duration is not None else "-", f"{s0.warmup} s",
            _listed(st.concurrency for st in steps),
            str(max((_count(st.summary.repetitions) for st in steps if st.summary), default=0)),
            ", ".join(dict.fromkeys(str(st.case) for st in steps)),
            ", ".join(f"{k} {v}" for k, v in conf.items()) if isinstance(conf, dict) and conf else "-",
        ])  # fmt: skip
    headers = ["test", "type", "message size (bytes)", "request,response (bytes)", "length", "warm-up",
               "concurrency", "repetitions measured", "cases", "netperf confidence"]  # fmt: skip
    return hp.table(headers, rows)


def _listed(values: Iterable[object]) -> str:
    """Distinct values in order (numbers by value; a hand-edited file's odd ones after, as text)."""
    distinct = set(values)
    numbers = sorted(v for v in distinct if isinstance(v, (int, float)) and not isinstance(v, bool))
    others = sorted((str(v) for v in distinct if v not in numbers), key=str)
    return ", ".join([*map(str, numbers), *others])


def _count(value: object) -> int:
    return value if isinstance(value, int) else 0


# -- the policy per case ---------------------------------------------------------------------------


def _policies(doc: SuiteResult) -> str:
    written, why = written_policies(doc)
    out = [hp.notes([why])] if why else []
    setup = doc.meta.setup if isinstance(doc.meta.setup, dict) else {}
    rows = []
    if written.get("(setup)") or setup.get("enforcement") or setup.get("policing"):
        rows.append(["(setup, every case)", written.get("(setup)", ""), _policing_text(setup.get("policing")),
                     "-", _enforcement_text(setup.get("enforcement"))])  # fmt: skip
    for case, steps in _cases(doc).items():
        s0 = steps[0]
        rows.append([
            case, written.get(case, ""), _policing_text(s0.policing.to_json() if s0.policing else None),
            "; ".join(f"{mi.name} on {mi.bridge} -> {mi.output_port or '?'} (src {_words(mi.src, ', ') or '-'}, "
                      f"dst {_words(mi.dst, ', ') or '-'})" for mi in _items(s0.mirrors)) or "none",
            _enforcement_text(s0.enforcement),
        ])  # fmt: skip
    headers = ["case", "policy fragment (suite file)", "policing in force on the client VIF", "mirrors",
               "enforcement checked after applying"]  # fmt: skip
    trs = []
    for r in rows:
        frag = f"<td><pre>{esc(r[1])}</pre></td>" if r[1] else hp.cell("none" if not why else "not shown")
        css = "bad" if "NOT ENFORCED" in r[2] or "NOT ENFORCED" in r[4] else ""
        trs.append("<tr>" + hp.cell(r[0]) + frag + hp.cell(r[2], css) + hp.cell(r[3]) + hp.cell(r[4], css) + "</tr>")
    head = "".join(f"<th>{esc(h)}</th>" for h in headers)
    out.append(f'<table class="meta policy"><thead><tr>{head}</tr></thead><tbody>{"".join(trs)}</tbody></table>')
    if doc.meta.policy_snapshot:
        out.append("<h3>Policy on the switch when the run started</h3>" + hp.pre(doc.meta.policy_snapshot))
    return "".join(out)


def _cases(doc: SuiteResult) -> OrderedDict[str, list[StepResult]]:
    out: OrderedDict[str, list[StepResult]] = OrderedDict()
    for st in doc.steps:
        out.setdefault(st.case, []).append(st)
    return out


def _policing_text(p: object) -> str:
    if not isinstance(p, dict) or not p:
        return "none"
    v = p.get("verified")
    verdict = VERIFIED[v] if isinstance(v, (bool, type(None))) else "not verified"
    rate, burst = (_kilo(p.get(k)) for k in ("rate_bits_per_s", "burst_bits"))
    return f"{rate} kbit/s, burst {burst} kbit, {p.get('mechanism') or '?'}: {verdict}"


def _kilo(value: object) -> object:
    """A count of bits (or bit/s) in kilo, as OVS and a policy set it: exact when it is a whole number of them."""
    if isinstance(value, int) and not isinstance(value, bool):
        return value // 1000 if value % 1000 == 0 else value / 1000
    return value


def _enforcement_text(items: object) -> str:
    """The policy engine's enforcement reports, one clause each (what enforces a limit, and was it seen)."""
    clauses = []
    for e in _items(items):
        if isinstance(e, dict):
            seen = (
                VERIFIED.get(e.get("verified"), "not verified")
                if isinstance(e.get("verified"), (bool, type(None)))
                else "not verified"
            )
            detail = f" ({e['detail']})" if e.get("detail") else ""
            clauses.append(f"{e.get('port')} {e.get('kind')} by {e.get('mechanism')}: {seen}{detail}")
    return "; ".join(clauses) or "-"


def _items(value: object) -> list[Any]:
    """A list from the run's free-form parts; anything else (a hand-edited file) as nothing."""
    return value if isinstance(value, list) else []


def _words(value: object, sep: str = " ") -> str:
    return sep.join(map(str, value)) if isinstance(value, list) else ("" if value is None else str(value))


def written_policies(doc: SuiteResult) -> tuple[dict[str, str], str]:
    """Each case's policy fragment (and the setup's) as YAML, from the suite file the run used.

    Only from that very file: the one the run names, or the shipped suite of
    its name, if its sha256 is the one recorded.  Otherwise nothing, and why
    -- the fragments in force are still in the run's own record.
    """
    suite = doc.meta.suite
    for path in _candidates(doc):
        try:
            text = path.read_text()
        except (OSError, UnicodeDecodeError):
            continue
        if hashlib.sha256(text.encode()).hexdigest() != suite.sha256:
            continue
        try:
            data = yamldoc.parse(text, str(path), strict=False).data
        except HvnetError:
            continue
        return _fragments(data), ""
    where = suite.file or suite.name
    return {}, (f"the suite file {where} is not there unchanged (sha256 {str(suite.sha256)[:16]}): "
                "fragments as written are not shown; what was in force is recorded below")  # fmt: skip


def _candidates(doc: SuiteResult) -> Iterator[Path]:
    suite = doc.meta.suite
    if suite.file and isinstance(suite.file, str):
        yield Path(suite.file)
    if suite.name and isinstance(suite.name, str):
        yield SUITES_DIR / f"{Path(suite.name).name}.yaml"


def _fragments(data: Any) -> dict[str, str]:
    out = {}
    if not isinstance(data, dict):
        return out
    setup = data.get("setup")
    if isinstance(setup, dict) and setup.get("policy") is not None:
        out["(setup)"] = _yaml(setup["policy"])
    for case in data.get("cases") or []:
        if isinstance(case, dict) and case.get("policy") is not None:
            out[str(case.get("name"))] = _yaml(case["policy"])
    return out


def _yaml(value: Any) -> str:
    return yaml.safe_dump(value, sort_keys=False, default_flow_style=False, width=100).strip()


# -- results and plots -------------------------------------------------------------------------------


def _results(doc: SuiteResult, tables: list[report.Table], with_plots: bool) -> str:
    if not tables:
        return "<p>no step was measured</p>"
    plots, missing = _suite_plots(doc) if with_plots else ({}, '<p class="note">plots left out (--no-plots)</p>')
    out = [missing]
    by_test: OrderedDict[str, list[report.Table]] = OrderedDict()
    for t in tables:
        by_test.setdefault(t.test, []).append(t)
    for n, (test, ts) in enumerate(by_test.items()):
        out.append(f'<section class="test"><h3>{esc(test)}</h3><div class="side"><div class="tables">')
        for t in ts:
            out.append(f'<p class="table-title">{esc(t.title)}</p>' + hp.table(t.headers, t.rows) + hp.notes(t.notes))
        out.append("</div>")
        if test in plots:  # beside its tables where the page is wide enough, under them otherwise
            out.append(hp.inline_svg(plots[test], f"p{n}", f"{doc.meta.suite.name} / {test}"))
        out.append("</div></section>")
    return "\n".join(out)


def _suite_plots(doc: SuiteResult) -> tuple[dict[str, str], str]:
    """The plots by test, or none and the note saying why (matplotlib not installed)."""
    try:
        from appliance.netperf.report import plots
    except ImportError:
        return {}, hp.plots_missing("Plots")
    try:
        return dict(plots.svgs(doc)), ""
    except ImportError:
        return {}, hp.plots_missing("Plots")


# -- a comparison -----------------------------------------------------------------------------------


def compare_page(result: compare_mod.Result, base: SuiteResult, new: SuiteResult, names: tuple[str, str]) -> str:
    """Two runs step by step: their metadata side by side, the compare plot, the verdict table."""
    n = len(result.regressions)
    verdict = compare_mod.closing_lines(result)[-1]
    sections = [
        f'<p><span class="verdict {"bad" if n else "good"}">{esc(verdict)}</span></p>',
        "<h2>Runs</h2>" + _side_by_side(base, new, names),
        hp.notes(f"warning: {w}" for w in result.warnings),
        "<h2>Per step: baseline against candidate</h2>" + _compare_plot(result),
        "<h2>Figures</h2>" + _compare_table(result),
        hp.notes(compare_mod.closing_lines(result)[:-1]),
    ]
    title = f"hvnet suite compare {base.meta.suite.name}: {names[1]} against {names[0]}"
    return hp.page(title, sections, subtitle=f"threshold {result.threshold_pct:g}%, Welch's t-test at 95%")


def _side_by_side(base: SuiteResult, new: SuiteResult, names: tuple[str, str]) -> str:
    def facts(doc: SuiteResult, name: str) -> list[str]:
        m = doc.meta
        return [name, m.suite.name, str(m.suite.sha256)[:16], doc.state, m.host, m.kernel, m.hvnet_version,
                f"{m.ovs_version or 'unknown'} ({_words(m.datapath_types, ', ')})", m.netperf_version or "unknown",
                m.started or "-", m.finished or "-"]  # fmt: skip

    labels = ["run", "suite", "suite sha256", "state", "host", "kernel", "hvnet", "Open vSwitch", "netperf",
              "started", "finished"]  # fmt: skip
    rows = [[lab, b, c] for lab, b, c in zip(labels, facts(base, names[0]), facts(new, names[1]))]
    return hp.table(["", "baseline", "candidate"], rows, css="meta")


def _compare_plot(result: compare_mod.Result) -> str:
    try:
        from appliance.netperf.report import plots
    except ImportError:
        return hp.plots_missing("The comparison plot")
    try:
        svg = plots.compare_svg(result)
    except ImportError:
        return hp.plots_missing("The comparison plot")
    except ValueError as exc:  # nothing measured on both sides: nothing to draw
        return f'<p class="note">no plot: {esc(exc)}</p>'
    return hp.inline_svg(svg, "cmp", "baseline against candidate, per step")


def _compare_table(result: compare_mod.Result) -> str:
    rows = compare_mod.table_rows(result)
    classes = [["", "", "", "", "", "", VERDICT_CSS.get(r[-1], "")] for r in rows]
    return hp.table(compare_mod.HEADERS, rows, classes=classes)
