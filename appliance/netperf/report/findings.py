"""A run beside a study as a page of the manual: MyST markdown for ``docs/findings/``.

The text report (:func:`appliance.netperf.report.against.text`) is for a
terminal; a findings page is kept, so it carries what makes it checkable
later: which run (suite, command, hvnet's version, host, kernel, Open
vSwitch, start, end, duration), then each of the study's tables with the
run's figure and the ratio, then each conclusion with its verdict and the
figures that decide it.  Everything here is the run's record and the study
file; prose a person adds (what the study left open, what was scaled)
goes around it.  Text from the run -- a host name, a command line -- is
escaped for markdown, so a planted name cannot become a link or markup.
"""

from __future__ import annotations

import datetime as dt
import re

from appliance.netperf.report.against import Against, num
from appliance.netperf.store.records import Meta

_SPECIAL = re.compile(r"([\\`*_{}\[\]<>#|~$])")


def esc(text: object) -> str:
    """``text`` as literal markdown inline text: one line, every markup character escaped."""
    flat = " ".join(str(text).split())
    return _SPECIAL.sub(r"\\\1", flat)


def _duration(meta: Meta) -> str:
    try:
        start = dt.datetime.fromisoformat(str(meta.started))
        end = dt.datetime.fromisoformat(str(meta.finished))
    except ValueError:
        return "not recorded"
    seconds = int((end - start).total_seconds())
    return f"{seconds // 60} min {seconds % 60:02d} s ({seconds} s)"


def run_lines(meta: Meta) -> list[str]:
    """The run's identity, as a list: what a reader needs to find or repeat it."""
    cmd = " ".join(meta.command) if meta.command else "not recorded"
    rows = [
        ("suite", f"{meta.suite.name} (sha256 {meta.suite.sha256[:12]})" if meta.suite.sha256 else meta.suite.name),
        ("command", cmd),
        ("hvnet", meta.hvnet_version or "not recorded"),
        ("host", f"{meta.host}, kernel {meta.kernel}" if meta.kernel else meta.host),
        ("Open vSwitch", f"{meta.ovs_version or 'version not recorded'}, datapath "
                         f"{', '.join(meta.datapath_types) or 'not recorded'}"),
        ("netperf", meta.netperf_version or "not recorded"),
        ("started", meta.started or "not recorded"),
        ("finished", meta.finished or "not finished"),
        ("duration", _duration(meta)),
    ]  # fmt: skip
    return [f"- {name}: {esc(value)}" for name, value in rows]


def _table(headers: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(esc(h) for h in headers) + " |", "|" + "---|" * len(headers)]
    out += ["| " + " | ".join(esc(c) for c in row) + " |" for row in rows]
    return out


def markdown(result: Against, meta: Meta, heading_level: int = 2) -> str:
    """The run, the study's tables beside it, and the verdicts, as MyST markdown sections."""
    h = "#" * heading_level
    s = result.study
    out = [f"{h} The run", "", *run_lines(meta), ""]
    if meta.warnings:
        out += ["The run's warnings:", "", *[f"- {esc(w)}" for w in meta.warnings], ""]
    for side in result.tables:
        t = side.table
        out += [f"{h} {esc(t.title)}", "", f"{esc(t.where)}; hvnet suite {esc(t.suite)}.", ""]
        headers = ["row", "step"]
        for col in t.columns:
            headers += [f"{col.heading} (study)", "hvnet", "hvnet ÷ study"]
        rows = [[line.label, line.step or line.note,
                 *[x for c in line.cells for x in (num(c.study, 12), num(c.hvnet), num(c.ratio, 3))]]
                for line in side.lines]  # fmt: skip
        out += [*_table(headers, rows), ""]
        for col in t.columns:
            conv = "" if col.scale == 1 else f", ×{col.scale:g} into the study's unit"
            out.append(f"- {esc(col.heading)}: the study's unit: {esc(col.unit)}; hvnet: {esc(col.figure)} in "
                       f"{esc(col.hvnet_unit)}{conv}" + (f" ({esc(col.note)})" if col.note else ""))  # fmt: skip
        out += [f"- {esc(x.label)}: {esc(x.note)}" for x in side.lines if x.step and x.note] + [""]
    if not result.tables:
        out += ["The study prints no table of numbers (its figures are plots): its conclusions only.", ""]
    if result.not_in_study:
        out += [f"Steps of the run the study has no row for: {esc(', '.join(result.not_in_study))}.", ""]
    if result.conclusions:
        out += [f"{h} The study's conclusions, decided from this run", ""]
        for j in result.conclusions:
            out += [f"- **{esc(j.status)}**: {esc(j.conclusion.claim)}",
                    f"  - study: {esc(j.conclusion.study_figures)}", f"  - this run: {esc(j.figures)}"]  # fmt: skip
        out.append("")
    out.append(f"Study: {esc(s.title)} ({s.year or 'year not given'}), seeds/{esc(s.source)}.")
    return "\n".join(out) + "\n"
