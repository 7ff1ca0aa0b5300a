"""The Isolation screen's calls into the engine, and the pure rules for showing a result.

The run follows ``hvnet isolation check`` step for step (scenario validated
whole first, root and tcpdump checked for the traffic method, the guests
from the one guest source the front door chooses), so the console and the
CLI cannot disagree about what a scenario means.  Everything after the run -- which state a cell is in, which
marker and words it gets, what evidence explains it -- is pure, so it is unit
tested without a lab.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from appliance.core.errors import EXIT_FAILED, EXIT_OK, EXIT_UNDECIDED
from appliance.services import isolation
from appliance.services.isolation import CheckResult, Scenario, model

if TYPE_CHECKING:
    from tui.backend import Backend

SCENARIO_DIR = Path(__file__).resolve().parents[2] / "vlan-tests"
METHOD_CHOICES = ("both", "traffic", "trace")

Cell = tuple[str, str]  # (listener, sender), as the engine keys its matrices


def shipped_scenarios(directory: Path = SCENARIO_DIR) -> list[Path]:
    """The scenarios shipped with hvnet (empty when installed without them)."""
    return sorted(directory.glob("*.yaml")) if directory.is_dir() else []


def methods_for(choice: str) -> tuple[str, ...]:
    """The engine's method tuple for the picker's choice (both runs traffic then trace)."""
    return isolation.methods_of(choice)


def load(path: str | Path) -> Scenario:
    """Validate the scenario file whole; raises ConfigError (file:line: field) before anything is touched."""
    return isolation.load_scenario(str(Path(path).expanduser()))


def run(backend: Backend, path: str | Path, choice: str) -> CheckResult:
    """Run one scenario as ``hvnet isolation check`` does; call from a worker thread.

    The guests come from the front door's guest source, as for the CLI: the
    lab's (its own switch, changed for the check's duration and restored), or
    probes on the switch the console watches; a console watching a real host
    never falls back to the lab silently (``[measure] guests = lab`` says so).
    """
    from appliance.frontdoor.guests import console_target, scenario_measurement

    sc = load(path)
    args, real = console_target(backend.host)
    with scenario_measurement(sc, args, method=choice, reuse=backend.host, real=real) as m:
        backend.note(f"isolation check {sc.name} ({', '.join(methods_for(choice))}) started")
        result = isolation.run_check(
            m.host, m.guests, sc, choice, root_hint="run the console as root, or choose the trace method",
            conn=backend.conn if m.host is backend.host else None,
            hosts={n: h for n, h in m.switches.items() if n is not None},
        )  # fmt: skip
    backend.note(f"isolation check {sc.name}: {VERDICT[result.exit_code]} in {result.duration_s:.1f} s")
    return result


# -- showing a result (pure) ------------------------------------------------------

VERDICT = {  # by the check's exit code
    EXIT_OK: "PASS: isolation as expected",
    EXIT_FAILED: "FAIL: isolation differs from expected",
    EXIT_UNDECIDED: "INCOMPLETE: not every cell could be decided",
}


@dataclass(frozen=True)
class CellStyle:
    """How one kind of cell is shown: a text marker (survives NO_COLOR) and a style."""

    kind: str
    marker: str
    word: str
    style: str
    legend: str


STYLES = {
    s.kind: s
    for s in (
        CellStyle("yes", "+", "yes", "bold green", "hears, as expected"),
        CellStyle("no", "-", "no", "dim", "isolated, as expected"),
        CellStyle("leak", "!", "LEAK", "bold white on red", "heard, should not"),
        CellStyle("blocked", "x", "BLOCK", "bold black on yellow", "should hear, did not"),
        CellStyle("unknown", "?", "unkn", "bold magenta", "not decided"),
    )
}
SELF = "·"  # the diagonal: a guest and itself is not measured


def cell_kind(expected: str, verdict: str) -> str:
    """One of yes, no, leak, blocked, unknown: the verdict, or on a match what was expected."""
    if verdict in ("leak", "blocked", "unknown"):
        return verdict
    return "yes" if expected in (model.YES, model.EXCEPTION) else "no"


def cell_text(expected: str, verdict: str) -> str:
    """The cell's words: marker first, ``*`` on a mirror copy (a declared exception)."""
    s = STYLES[cell_kind(expected, verdict)]
    star = "*" if expected == model.EXCEPTION and s.kind == "yes" else ""
    return f"{s.marker} {s.word}{star}"


def legend() -> list[tuple[str, str]]:
    """(text, style) pairs for the legend line."""
    return [(f"{s.marker} {s.word}: {s.legend}", s.style) for s in STYLES.values()] + [
        ("*: a mirror's copy (declared exception)", "")
    ]


def observed(result: CheckResult, method: str, cell: Cell) -> str:
    """What the method observed for ``cell`` (unknown when the method could not run)."""
    mr = result.methods[method]
    return model.UNKNOWN if mr.error else mr.cells.get(cell, model.UNKNOWN)


def evidence(result: CheckResult, method: str, cell: Cell) -> str:
    """Why ``cell`` reads as it does: the frame, the trace's actions, or why it is unknown."""
    listener, sender = cell
    if listener == sender:
        return f"{sender} and itself: not measured"
    mr = result.methods[method]
    expected = result.expected.cells.get(cell, model.UNKNOWN)
    verdict = result.verdicts(method).get(cell, "unknown")
    seen = observed(result, method, cell)
    want = {model.YES: "yes", model.NO: "no", model.EXCEPTION: "yes (mirror copy)"}.get(expected, "?")
    head = f"{method}: does {listener} hear {sender}? observed {seen}, expected {want}: {_VERDICT_WORDS[verdict]}"
    lines = [head]
    if mr.error:
        lines.append(f"{method} could not run: {mr.error}")
    elif seen == model.UNKNOWN:
        lines.append(f"unknown: {mr.reasons.get(cell, 'not decided')}")
    elif method == "trace":
        actions = mr.stats.get("datapath_actions", {}).get(sender, "?")
        lines.append(f"ofproto/trace of {sender}'s ARP broadcast: datapath actions {actions}")
    elif seen == model.YES:
        ev = mr.evidence.get(cell)
        if ev is not None:
            vlan = f"VLAN {ev.vlan}" if ev.vlan is not None else "untagged"
            lines.append(f"first frame {ev.clock} from {ev.src_mac} {ev.src_ip} {vlan}")
            lines.append(f"pcap {ev.pcap}")
    else:
        pcap = mr.stats.get("pcaps", {}).get(listener, "?")
        lines.append(
            f"no ARP request from {sender} in {listener}'s capture, which heard the positive control or another"
            f" guest, and {sender}'s own capture shows its probes leaving"
        )
        lines.append(f"pcap {pcap}")
    mirrors = result.expected.exceptions.get(cell)
    if mirrors:
        lines.append(f"declared exception: copies via mirror {', '.join(mirrors)}")
    return "\n".join(lines)


_VERDICT_WORDS = {
    "ok": "as expected",
    "leak": "LEAK",
    "blocked": "UNEXPECTED BLOCK",
    "unknown": "unknown",
}


def summary(result: CheckResult) -> str:
    """One line for the status bar: the verdict and how long the check took."""
    return f"{result.scenario}: {VERDICT[result.exit_code]} ({', '.join(result.methods)}, {result.duration_s:.1f} s)"
