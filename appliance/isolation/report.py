"""Printing an isolation result: the study's table, differences marked, evidence listed."""

from __future__ import annotations

from dataclasses import asdict, fields
from typing import Any

from appliance.core import documents, render
from appliance.core.errors import EXIT_FAILED, EXIT_OK, EXIT_UNDECIDED
from appliance.isolation import model
from appliance.isolation.check import CheckResult, Evidence, MethodResult

WORD = {model.YES: "Yes", model.NO: "No", model.EXCEPTION: "Yes*", model.UNKNOWN: "?"}
VERDICT = {  # by the check's exit code
    EXIT_OK: "PASS: isolation as expected",
    EXIT_FAILED: "FAIL: isolation differs from expected",
    EXIT_UNDECIDED: "INCOMPLETE: not every cell could be decided",
}
MARK = {"ok": "", "leak": "!", "blocked": "!", "unknown": ""}

# What ``isolation check --json`` (and ``isolation audit --json``) prints and ``isolation report`` reads back.
# A result saved before the document named its schema is version 1 all the same: no key has been renamed.
SCHEMA = documents.ISOLATION_RESULT.name
SCHEMA_VERSION = documents.ISOLATION_RESULT.version


def _table(result: CheckResult, cell_text) -> str:
    guests, senders, cells = result.guests, result.senders or result.guests, result.expected.cells
    rows = [[g, *[("/" if (g, s) not in cells else cell_text((g, s))) for s in senders]] for g in guests]
    return render.table(["hears \u2193 from \u2192", *senders], rows)


def format_result(result: CheckResult) -> str:
    methods = list(result.methods)
    verdicts = {m: result.verdicts(m) for m in methods}
    lines = [
        render.terminal(f"isolation check {result.scenario}: {', '.join(methods)}")
        + (f" (each cell: {' / '.join(methods)})" if len(methods) > 1 else ""),
        "",
        "expected (Yes* = copy by a mirror, a declared exception):",
        _table(result, lambda c: WORD[result.expected.cells[c]]),
        "",
        "observed ('!' differs from expected, '?' unknown):",
    ]

    def observed(cell: tuple[str, str]) -> str:
        parts = []
        for m in methods:
            mr = result.methods[m]
            value = model.UNKNOWN if mr.error else mr.cells.get(cell, model.UNKNOWN)
            parts.append(WORD[value].rstrip("*") + MARK[verdicts[m][cell]])
        return " / ".join(parts)

    lines.append(_table(result, observed))
    # One line each, escaped: a name holding a line end cannot add a line (a fake "LEAK" or "PASS").
    problems = [render.terminal(x) for x in problem_lines(result)]
    if problems:
        lines += ["", *problems]
    if result.expected.exceptions:
        lines += ["", "declared isolation exceptions (mirror copies):",
                  *(render.terminal(f"  {x}") for x in exception_lines(result))]  # fmt: skip
    logical = [render.terminal(x) for x in logical_lines(result)]
    if logical:
        lines += ["", *logical]
    disagree = [render.terminal(x) for x in disagreement_lines(result)]
    if disagree:
        lines += ["", *disagree]
    traffic = traffic_line(result)
    if traffic:
        lines += ["", traffic]
    verdict = VERDICT[result.exit_code]
    lines += ["", f"{verdict} ({result.duration_s:.1f} s)"]
    return "\n".join(lines)


def problem_lines(result: CheckResult) -> list[str]:
    """Every cell that is not as expected, per method, with its evidence; methods that could not run."""
    problems = []
    for m in result.methods:
        mr = result.methods[m]
        if mr.error:
            problems.append(f"{m}: could not run: {mr.error}")
            continue
        for cell, verdict in sorted(result.verdicts(m).items()):
            listener, sender = cell
            if verdict == "leak":
                ev = mr.evidence.get(cell)
                where = (
                    f": frame at {ev.clock} from {ev.src_mac} {ev.src_ip}"
                    f"{f' VLAN {ev.vlan}' if ev.vlan is not None else ' untagged'} in {ev.pcap}"
                    if ev
                    else ""
                )
                if m == "trace" and mr.stats.get("engine") == "ovn-trace":
                    where = f": ovn-trace: {mr.stats['logical'][sender][listener]}"
                elif m == "trace":
                    actions = mr.stats.get("datapath_actions", {}).get(sender, "not recorded")
                    where = f": datapath actions for {sender}'s broadcast: {actions}"
                problems.append(f"{m}: LEAK: {listener} hears {sender}{where}")
            elif verdict == "blocked":
                problems.append(f"{m}: UNEXPECTED BLOCK: {listener} does not hear {sender}")
            elif verdict == "unknown":
                problems.append(f"{m}: unknown: {listener} hears {sender}? {mr.reasons.get(cell, 'not decided')}")
    return problems


def logical_lines(result: CheckResult) -> list[str]:
    """On an OVN pool, ovn-trace's verdict for each pair beside what the traffic method observed."""
    t = result.methods.get("trace")
    if t is None or t.error or t.stats.get("engine") != "ovn-trace":
        return []
    traffic = result.methods.get("traffic")
    lines = ["logical verdicts (ovn-trace against the pool's SB; [traffic method's observation]):"]
    for sender, row in t.stats.get("logical", {}).items():
        for listener, why in row.items():
            seen = ""
            if traffic is not None and not traffic.error:
                seen = f" [traffic: {WORD[traffic.cells.get((listener, sender), model.UNKNOWN)].rstrip('*')}]"
            lines.append(f"  {sender} -> {listener}: {why}{seen}")
    return lines


def disagreement_lines(result: CheckResult) -> list[str]:
    """Cells the two methods both decided, differently: one of them is wrong about the switch."""
    t, f = result.methods.get("trace"), result.methods.get("traffic")
    if t is None or f is None or t.error or f.error:
        return []
    out = []
    for cell in sorted(result.expected.cells):
        a, b = f.cells.get(cell, model.UNKNOWN), t.cells.get(cell, model.UNKNOWN)
        if model.UNKNOWN not in (a, b) and a != b:
            listener, sender = cell
            out.append(f"METHODS DISAGREE: does {listener} hear {sender}? traffic: {WORD[a]}, trace: {WORD[b]}")
    return out


def exception_lines(result: CheckResult) -> list[str]:
    """The declared isolation exceptions: who receives whose traffic through which mirrors."""
    return [
        f"{listener} receives {sender}'s traffic via mirror {', '.join(names)}"
        for (listener, sender), names in sorted(result.expected.exceptions.items())
    ]


def traffic_line(result: CheckResult) -> str:
    """What the traffic method sent and where its captures are ("" when it did not run)."""
    t = result.methods.get("traffic")
    if not t or t.error:
        return ""
    closing = (
        f", {t.stats['closing_controls_sent']} closing controls (waited {t.stats.get('settle_s', 0):.2f} s)"
        if "closing_controls_sent" in t.stats
        else ""
    )
    kept = f"captures in {result.out_dir}" if result.out_dir else "captures deleted after counting"
    notes = "".join(f"\n  note: {n}" for n in t.stats.get("notes", []))
    return (
        f"traffic: {t.stats.get('probes_sent', 0)} probes in one {t.stats.get('window_s', 0):.2f} s window, "
        f"{t.stats.get('controls_sent', 0)} positive controls{closing}; {kept}{notes}"
    )


def to_json(result: CheckResult) -> dict[str, Any]:
    def cells(d: dict[tuple[str, str], Any]) -> list[dict[str, Any]]:
        return [{"listener": k[0], "sender": k[1], "value": v} for k, v in sorted(d.items())]

    out: dict[str, Any] = {
        "schema": SCHEMA,
        "version": SCHEMA_VERSION,
        "scenario": result.scenario,
        "guests": result.guests,
        **({"senders": result.senders} if result.senders else {}),
        "exit_code": result.exit_code,
        "duration_s": round(result.duration_s, 3),
        "out_dir": result.out_dir,
        "expected": cells(result.expected.cells),
        "exceptions": [
            {"listener": k[0], "sender": k[1], "mirrors": v} for k, v in sorted(result.expected.exceptions.items())
        ],
        "methods": {},
    }
    for name, mr in result.methods.items():
        out["methods"][name] = {
            "error": mr.error,
            "observed": cells(mr.cells),
            "verdicts": cells(result.verdicts(name)),
            "unknown_reasons": cells(mr.reasons),
            "evidence": [{"listener": k[0], "sender": k[1], **asdict(v)} for k, v in sorted(mr.evidence.items())],
            "replies": [{"sender": k[0], "replier": k[1], "reply_seen": v} for k, v in sorted(mr.replies.items())],
            "stats": mr.stats,
        }
    return out


def from_json(doc: dict[str, Any]) -> CheckResult:
    """A saved result (``hvnet isolation check --json``) back as the check returned it.

    So a result can be printed, compared or re-judged later without re-running the
    check.  The saved verdicts and exit code are not read back: they follow from the
    expected and observed cells, and :class:`CheckResult` derives them again, so
    ``to_json(from_json(doc)) == doc`` for any result this hvnet wrote.  Raises
    ``KeyError``/``TypeError``/``ValueError`` on a document that is not one.
    """
    _check_schema(doc)
    expected = model.Expected(
        guests=list(doc["guests"]),
        cells=_cells(doc["expected"], "value"),
        exceptions={(e["listener"], e["sender"]): list(e["mirrors"]) for e in doc["exceptions"]},
    )
    methods = {name: _method(name, m) for name, m in doc["methods"].items()}
    return CheckResult(
        scenario=doc["scenario"],
        guests=list(doc["guests"]),
        expected=expected,
        methods=methods,
        out_dir=doc["out_dir"],
        duration_s=doc["duration_s"],
        senders=list(doc["senders"]) if "senders" in doc else None,
    )


def _cells(items: list[dict[str, Any]], key: str) -> dict[tuple[str, str], Any]:
    return {(c["listener"], c["sender"]): c[key] for c in items}


def _method(name: str, m: dict[str, Any]) -> MethodResult:
    evidence_keys = [f.name for f in fields(Evidence)]
    return MethodResult(
        method=name,
        cells=_cells(m["observed"], "value"),
        reasons=_cells(m["unknown_reasons"], "value"),
        evidence={(e["listener"], e["sender"]): Evidence(**{k: e[k] for k in evidence_keys}) for e in m["evidence"]},
        replies={(r["sender"], r["replier"]): r["reply_seen"] for r in m["replies"]},
        error=m["error"],
        stats=m["stats"],
    )


def _check_schema(doc: Any) -> None:
    """Refuse another document, or a result a newer hvnet wrote; one saved before the key existed is version 1."""
    if not isinstance(doc, dict):
        raise TypeError(f"expected an object, found {type(doc).__name__}")
    schema, version = doc.get("schema", SCHEMA), doc.get("version", 1)
    if schema != SCHEMA:
        raise ValueError(f"schema {schema!r}, not {SCHEMA!r}")
    if version != SCHEMA_VERSION:
        raise ValueError(f"{SCHEMA} version {version!r}; this hvnet reads version {SCHEMA_VERSION}")
