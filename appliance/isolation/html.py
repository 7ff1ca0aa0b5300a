"""An isolation check's result as one self-contained HTML page.

The expected matrix and each method's observed matrix (cells coloured by
verdict), the same findings the text report lists (:func:`.report.problem_lines`),
and the evidence behind every "yes": the first matching frame and the pcap
it is in (traffic), the datapath actions of each sender's broadcast (trace),
which probes were answered, and why a cell could not be decided.  The
scenario's settings applied for the check are shown when the check was run
from its file (``hvnet isolation check --html``); a saved result
(``hvnet isolation report``) carries only what the check recorded.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from datetime import datetime, timezone
from typing import Any, Optional

from appliance.core import htmlpage as hp
from appliance.core.errors import EXIT_FAILED, EXIT_OK, EXIT_UNDECIDED
from appliance.core.htmlpage import esc
from appliance.isolation import model, report
from appliance.isolation.check import CheckResult
from appliance.isolation.scenario import _UNSET, Scenario

VERDICT_CSS = {"ok": "good", "leak": "bad", "blocked": "bad", "unknown": "unknown"}
EXIT_CSS = {EXIT_OK: "good", EXIT_FAILED: "bad", EXIT_UNDECIDED: "warn"}
CORNER = "hears \u2193 from \u2192"
Cell = tuple[str, str]  # (listener, sender)


def page(result: CheckResult, *, source: str = "", scenario: Optional[Scenario] = None) -> str:
    """The whole report; ``source``: where the result came from (a saved file, or the host checked)."""
    verdict = f"{report.VERDICT[result.exit_code]} ({result.duration_s:.1f} s)"
    sections = [
        f'<p><span class="verdict {EXIT_CSS.get(result.exit_code, "warn")}">{esc(verdict)}</span></p>',
        "<h2>Check</h2>" + hp.meta_table(_meta(result, source, scenario)),
    ]
    if scenario is not None:
        sections.append("<h2>Settings applied for the check</h2>" + _settings(scenario))
    sections.append("<h2>Expected</h2>" + _expected(result))
    for m in result.methods:
        sections.append(f"<h2>Observed by {esc(m)}</h2>" + _observed(result, m))
    problems = report.problem_lines(result)
    sections.append("<h2>Findings</h2>" + (hp.notes(problems) if problems else "<p>every cell as expected</p>"))
    sections.append("<h2>Evidence</h2>" + _evidence(result))
    title = f"hvnet isolation check {result.scenario}: {report.VERDICT[result.exit_code].split(':')[0]}"
    return hp.page(title, sections, subtitle=scenario.description if scenario else "")


def _meta(result: CheckResult, source: str, scenario: Optional[Scenario]) -> list[tuple[str, object]]:
    rows: list[tuple[str, object]] = [("scenario", result.scenario)]
    if scenario is not None:
        rows += [("scenario file", scenario.file), ("topology", scenario.topology.file)]
    rows += [
        ("source", source or None),
        ("guests", ", ".join(result.guests)),
        ("methods", ", ".join(result.methods)),
        ("duration", f"{result.duration_s:.2f} s"),
        ("captures", result.out_dir),
    ]
    traffic = report.traffic_line(result)
    if traffic:
        rows.append(("traffic", traffic))
    return rows


def _settings(sc: Scenario) -> str:
    """The scenario's VLAN overrides and mirrors (applied for the check and undone after it)."""

    def shown(v: object) -> str:
        if v is _UNSET:
            return "unchanged"
        if v is None:
            return "cleared"
        if isinstance(v, (set, frozenset, list, tuple)):
            return ", ".join(map(str, sorted(v))) or "every VLAN"
        return str(v)

    out = []
    if sc.vlans:
        rows = [[ov.guest, shown(ov.vlan_mode), shown(ov.tag), shown(ov.trunks)] for ov in sc.vlans]
        out.append(hp.table(["guest", "vlan_mode", "tag", "trunks"], rows, css="text"))
    if sc.mirrors:
        rows = [
            [m.name, "all" if m.select_all else ", ".join(sorted(m.select_src)) or "-",
             ", ".join(sorted(m.select_dst)) or "-", ", ".join(map(str, sorted(m.select_vlans))) or "all", m.output]
            for m in sc.mirrors
        ]  # fmt: skip
        out.append(hp.table(["mirror", "select src", "select dst", "VLANs", "output"], rows, css="text"))
    expectation = "derived from the VLAN settings in force" if sc.derive else "as the scenario file states it"
    out.append(f'<p class="note">expected matrix: {esc(expectation)}</p>')
    return "".join(out) if (sc.vlans or sc.mirrors) else "<p>none</p>" + out[-1]


def _matrix(result: CheckResult, text: Callable[[Cell], str], css: Callable[[Cell], str]) -> str:
    guests, senders = result.guests, result.senders or result.guests
    cells = result.expected.cells
    rows = [[g, *["/" if (g, s) not in cells else text((g, s)) for s in senders]] for g in guests]
    classes = [["", *["self" if (g, s) not in cells else css((g, s)) for s in senders]] for g in guests]
    return hp.table([CORNER, *senders], rows, classes=classes, css="matrix")


def _expected(result: CheckResult) -> str:
    matrix = _matrix(result, lambda c: report.WORD[result.expected.cells[c]], lambda c: "")
    exceptions = report.exception_lines(result)
    legend = '<p class="note">Yes* = a copy by a mirror, a declared isolation exception</p>'
    return matrix + legend + (hp.notes(exceptions) if exceptions else "")


def _observed(result: CheckResult, method: str) -> str:
    mr = result.methods[method]
    if mr.error:
        return f'<p class="bad">{esc(method)} could not run: {esc(mr.error)}</p>'
    verdicts = result.verdicts(method)

    def text(c: tuple[str, str]) -> str:
        word = report.WORD[mr.cells.get(c, model.UNKNOWN)].rstrip("*")
        return word + {"leak": " (LEAK)", "blocked": " (BLOCKED)"}.get(verdicts[c], "")

    legend = '<p class="note">green: as expected; red: a leak or an unexpected block; grey: not decided</p>'
    return _matrix(result, text, lambda c: VERDICT_CSS[verdicts[c]]) + legend


def _evidence(result: CheckResult) -> str:
    out = []
    for m, mr in result.methods.items():
        if mr.error:
            continue
        if mr.evidence:
            rows = [
                [listener, sender, _when(ev.time), ev.src_mac, ev.src_ip, "untagged" if ev.vlan is None else ev.vlan,
                 ev.pcap]
                for (listener, sender), ev in _sorted(mr.evidence.items())
            ]  # fmt: skip
            css = [["bad" if result.verdicts(m).get(k) == "leak" else ""] * 7 for k, _ in _sorted(mr.evidence.items())]
            out.append(f"<h3>{esc(m)}: first frame heard per cell</h3>")
            out.append(hp.table(["listener", "sender", "time (UTC)", "source MAC", "source IP", "VLAN", "pcap"],
                                rows, classes=css, css="text"))  # fmt: skip
        actions = mr.stats.get("datapath_actions") if isinstance(mr.stats, dict) else None
        if isinstance(actions, dict) and actions:
            out.append(f"<h3>{esc(m)}: datapath actions of each sender's broadcast</h3>")
            out.append(
                hp.table(["sender", "datapath actions"], [[k, str(v)] for k, v in _sorted(actions.items())], css="text")
            )
        logical = mr.stats.get("logical") if isinstance(mr.stats, dict) else None
        if isinstance(logical, dict) and logical:  # an OVN pool: ovn-trace's verdict for each pair
            rows = [[snd, lst, str(why)] for snd, row in _sorted(logical.items()) if isinstance(row, dict)
                    for lst, why in _sorted(row.items())]  # fmt: skip
            out.append(f"<h3>{esc(m)}: ovn-trace's logical verdict per pair</h3>")
            out.append(hp.table(["sender", "listener", "logical verdict"], rows, css="text"))
        if mr.replies:
            rows = [[s, r, "yes" if seen else "no"] for (s, r), seen in _sorted(mr.replies.items())]
            out.append(
                f"<h3>{esc(m)}: probes answered</h3>" + hp.table(["sender", "replier", "reply seen"], rows, css="text")
            )
        if mr.reasons:
            rows = [[lst, snd, why] for (lst, snd), why in _sorted(mr.reasons.items())]
            out.append(
                f"<h3>{esc(m)}: cells not decided</h3>" + hp.table(["listener", "sender", "why"], rows, css="text")
            )
        pcaps = mr.stats.get("pcaps") if isinstance(mr.stats, dict) else None
        if isinstance(pcaps, dict) and pcaps:
            out.append(
                f"<h3>{esc(m)}: captures</h3>"
                + hp.table(["guest", "pcap"], [list(kv) for kv in _sorted(pcaps.items())], css="text")
            )
    return "".join(out) or "<p>none recorded</p>"


def _sorted(items: Iterable[tuple[Any, Any]]) -> list[tuple[Any, Any]]:
    """By key as text: a hand-edited result may hold keys that do not compare (None beside a name)."""
    return sorted(items, key=lambda kv: str(kv[0]))


def _when(t: float) -> str:
    try:
        return datetime.fromtimestamp(t, timezone.utc).strftime("%Y-%m-%d %H:%M:%S.%f")
    except (OverflowError, OSError, ValueError, TypeError):
        return str(t)
