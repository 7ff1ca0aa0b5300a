"""Suite verbs: load a suite with the operator's adjustments, name its run directory,
run it (a handle that streams events and can be stopped), list shipped suites and past runs,
report and compare saved runs.

``hvnet suite run`` and the console's Suites screen both go through here, so a
run started from either is the same run: same validation, same guest checks,
same run directory rule, same results files.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any, Callable, Optional

from appliance.core.errors import HvnetError, UsageError
from appliance.endpoints.guests import GuestSource
from appliance.endpoints.topology import load as load_topology
from appliance.netperf.define import suite as suite_mod
from appliance.netperf.define.suite import Step, Suite
from appliance.netperf.define.tests import MAX_DURATION_S, MAX_REPETITIONS, PPS_TYPES, RR_TYPES
from appliance.netperf.figures import compare as compare_mod
from appliance.netperf.figures.compare import Result, Row
from appliance.netperf.report import text as report
from appliance.netperf.report.against import Against
from appliance.netperf.run.recipe import Event, Runner
from appliance.netperf.store import results
from appliance.netperf.store.records import Aggregate, StepResult, SuiteResult
from appliance.policy import COLUMNS
from appliance.services.captures import SuiteListener
from appliance.switch.host import Host

# What front ends show, named here so that they depend on this module, not on the engine's inside.
__all__ = [
    "MAX_DURATION_S", "MAX_REPETITIONS", "PPS_TYPES", "RR_TYPES", "Against", "Aggregate", "Event", "FlentExport",
    "OverrideError", "Overrides", "Result", "Row", "ShippedSuite", "Step", "StepResult", "Suite", "SuiteResult",
    "SuiteRun", "against", "compare", "compare_junit", "compare_page", "compare_runs", "compare_text",
    "export_flent", "list_runs", "load_run", "load_suite", "parse_override", "parse_overrides", "plots_missing",
    "report_page", "report_text", "run_dir", "shipped_suites", "suite_mod", "write_plots",
]  # fmt: skip


# -- saved runs: report and compare ------------------------------------------------------


def load_run(path: str) -> SuiteResult:
    """A saved run's results (``results.json``), typed; version 1 files load."""
    return results.load(path)


def report_text(doc: SuiteResult) -> str:
    """The study's table shape, regenerated from saved results."""
    return report.text(doc)


def against(doc: SuiteResult, study: str) -> Against:
    """The run set beside a shipped study (``seed-2010`` ...): its tables with the run's figures in the
    study's units, and each of its conclusions judged on the run's measured figures.  An unknown study
    is a usage error naming the known ones; a broken study file, a ConfigError (both exit 2)."""
    from appliance.netperf.define import studies
    from appliance.netperf.report import against as against_mod

    return against_mod.against(doc, studies.load_named(study))


def findings_page(doc: SuiteResult, study: str) -> str:
    """The run beside a shipped study as markdown for a findings page of the manual (see
    :mod:`appliance.netperf.report.findings`): the run's identity, the tables, the verdicts."""
    from appliance.netperf.report import findings

    return findings.markdown(against(doc, study), doc.meta)


def report_page(doc: SuiteResult, run: str, *, plots: bool = True) -> str:
    """The whole report of the run saved at ``run`` as one self-contained HTML page (tables, SVG plots)."""
    from appliance.netperf.report import html

    return html.suite_page(doc, run, plots=plots)


def plots_missing() -> Optional[str]:
    """Why no plot can be drawn here (the plotting library is not installed), or None."""
    from appliance.netperf.report import plots

    return None if plots.available() else plots.MISSING


def write_plots(doc: SuiteResult, run: str) -> list[Path]:
    """One PNG per test in the run's ``plots`` directory (``run``: the run directory or its results file)."""
    from appliance.netperf.report import plots

    return plots.write(doc, Path(run) if Path(run).is_dir() else Path(run).parent)


@dataclass(frozen=True)
class FlentExport:
    """The flent files written for a run, the plot each opens with, and what was left out (and why)."""

    files: list[tuple[Path, str]]  # (path, ``flent -p`` plot)
    notes: list[str]


def export_flent(doc: SuiteResult, run: str, out: Optional[str] = None) -> FlentExport:
    """The run's netperf streams as flent data files, one per measured repetition of a step, in ``out``
    (default: the run directory's ``flent``).  A directory that cannot be made is a usage error naming it."""
    from appliance.netperf.report import flent

    base = Path(run) if Path(run).is_dir() else Path(run).parent
    target = Path(out) if out else base / "flent"
    if target.exists() and not target.is_dir():
        raise UsageError(f"--out {target}: is not a directory")
    ex = flent.export(doc)
    try:
        paths = flent.write(ex, target)
    except OSError as e:
        raise UsageError(f"--out {target}: cannot write there: {e.strerror or e}") from None
    except ValueError:  # json.dumps(allow_nan=False): a hand-edited results.json with NaN or Infinity in it
        raise UsageError(f"{run}: a figure in results.json is not a number (NaN or Infinity); nothing exported",
                         hint="flent's files are JSON, which has no NaN: correct or remove that figure",
                         ) from None  # fmt: skip
    return FlentExport([(p, flent.plot_of(d)) for p, (_, d) in zip(paths, ex.files)], ex.notes)


def compare(base: SuiteResult, new: SuiteResult, threshold_pct: float = 5.0) -> Result:
    """Two loaded runs step by step: what differs beyond the threshold and noise."""
    return compare_mod.compare(base, new, threshold_pct=threshold_pct)


def compare_runs(base: str, new: str, threshold_pct: float = 5.0) -> Result:
    """Two saved runs step by step: what differs beyond the threshold and noise."""
    return compare(results.load(base), results.load(new), threshold_pct)


def compare_text(result: Result) -> str:
    """A comparison as the terminal shows it: the verdict table and its closing lines."""
    return compare_mod.text(result)


def compare_junit(result: Result, new: SuiteResult) -> str:
    """A comparison as JUnit XML (``--junit``): a test case per compared step and figure; regressions fail,
    what could not be judged is skipped."""
    from appliance.netperf.report import junit

    return junit.document(result, new.meta.suite.name or "run")


def compare_page(result: Result, base: SuiteResult, new: SuiteResult, names: tuple[str, str]) -> str:
    """A comparison as one self-contained HTML page: both runs' metadata, the compare plot, the verdicts."""
    from appliance.netperf.report import html

    return html.compare_page(result, base, new, names)


# -- the operator's overrides ----------------------------------------------------------

# The bounds the suite loader holds a file's values to, so a suite run from either front end with
# overrides is one the loader would have taken as written.
OVERRIDE_BOUNDS = {"duration": (1, MAX_DURATION_S), "repetitions": (1, MAX_REPETITIONS)}


class OverrideError(ValueError):
    """An override the suite loader would refuse too; the message says what is allowed."""


@dataclass(frozen=True)
class Overrides:
    """What the operator changed (None: keep the suite's value)."""

    concurrency: Optional[tuple[int, ...]] = None
    duration: Optional[int] = None
    repetitions: Optional[int] = None


def parse_override(field: str, text: str, label: Optional[str] = None) -> Any:
    """One override as the operator typed it: ``concurrency`` (``1,4,8``), ``duration`` or ``repetitions``.

    ``label``: what the front end calls a bounded field in a refusal
    (``--duration``, ``duration (s)``); its name by default.
    """
    try:
        if field == "concurrency":
            return suite_mod.concurrency_list(text)
        lo, hi = OVERRIDE_BOUNDS[field]
        return suite_mod.bounded_int(text, lo, hi, label or field)
    except ValueError as exc:
        raise OverrideError(str(exc)) from None


def parse_overrides(concurrency: str, duration: str, repetitions: str) -> Overrides:
    """The three as a form holds them (the console's): a blank field keeps the suite's value, and all
    three are checked before anything is loaded or started."""

    def given(field: str, text: str, label: Optional[str] = None) -> Any:
        return parse_override(field, text, label) if text.strip() else None

    try:
        levels = given("concurrency", concurrency)
    except OverrideError as exc:  # "expected integers ..." does not say which field it is about
        raise OverrideError(f"concurrency: {exc}" if "expected" in str(exc) else str(exc)) from None
    return Overrides(levels, given("duration", duration, "duration (s)"), given("repetitions", repetitions))


# -- loading and running ----------------------------------------------------------------


def load_suite(
    file: str,
    *,
    concurrency: Optional[tuple[int, ...]] = None,
    duration: Optional[int] = None,
    repetitions: Optional[int] = None,
    topology: Optional[str] = None,
    client: Optional[str] = None,
    server: Optional[str] = None,
) -> Suite:
    """The suite in ``file`` (or a shipped suite's name), validated whole, with the operator's overrides."""
    s = suite_mod.load(file)
    if concurrency or duration or repetitions:
        try:
            s = s.with_overrides(concurrency=concurrency, duration=duration, repetitions=repetitions)
        except ValueError as exc:
            raise UsageError(str(exc), hint="lower --concurrency, or the test's flows in the suite file") from None
    if topology or client or server:
        topo = load_topology(topology) if topology else s.topology
        try:
            s = s.with_endpoints(topo, client, server)
        except ValueError as exc:
            raise UsageError(str(exc), hint="--client/--server name guests of --topology (or of the suite's)") from None
    return s


def run_dir(host: Host, name: str, out: Optional[Path] = None) -> Path:
    """Where a run of the suite ``name`` keeps its results.

    An operator's ``out`` must be new or empty (a run directory holds one run);
    the default, ``RUNS/SUITE-YYYYmmdd-HHMMSS``, takes a ``-2``, ``-3`` ...
    suffix when a run in the same second already has the name.
    """
    if out is not None:
        if out.exists() and any(out.iterdir()):
            raise UsageError(f"{out} exists and is not empty; a run directory holds one run",
                             hint="give a new --out directory")  # fmt: skip
        return out
    base = host.paths.runs_dir
    stamp = f"{name}-{datetime.now():%Y%m%d-%H%M%S}"
    path, n = base / stamp, 2
    while path.exists():
        path, n = base / f"{stamp}-{n}", n + 1
    return path


class SuiteRun:
    """One run of a suite, blocking in :meth:`run` (a worker thread), stoppable from any thread."""

    def __init__(
        self,
        host: Host,
        guests: GuestSource,
        suite: Suite,
        out_dir: Path,
        on_event: Callable[[Event], None],
        *,
        timeout: float = 5.0,
        release: Optional[Callable[[], None]] = None,
    ) -> None:
        self.host = host
        self.release = release  # what the run's guests hold (probes on the bridge): let go when it ends
        self.guests = guests
        self.suite = suite
        self.out_dir = out_dir
        self.on_event = on_event
        self.timeout = timeout
        self._lock = threading.Lock()
        self._runner: Optional[Runner] = None
        self._stop_reason: Optional[str] = None

    def check(self) -> None:
        """Refuse missing or different guests before connecting anywhere (the runner asks again)."""
        self.guests.require(self.suite.topology, self.suite.guest_names())  # every pair's, clients first

    def run(self) -> SuiteResult:
        """Connect, run, disconnect; the results (also saved in :attr:`out_dir`)."""
        try:
            return self._run()
        finally:
            if self.release is not None:
                self.release()

    def _run(self) -> SuiteResult:
        with self.host.connect(COLUMNS, timeout=self.timeout) as conn:
            runner = Runner(
                self.suite, host=self.host, guests=self.guests, conn=conn, out_dir=self.out_dir,
                on_event=self.on_event, listen=SuiteListener(self.host),
            )  # fmt: skip
            with self._lock:
                self._runner = runner
                if self._stop_reason is not None:  # stopped while connecting
                    runner.stop(self._stop_reason)
            return runner.run()

    def stop(self, reason: str = "stopped by the operator") -> None:
        """Non-blocking: the runner stops its instances, restores policy and saves a partial result."""
        with self._lock:
            self._stop_reason = reason
            if self._runner is not None:
                self._runner.stop(reason)


@dataclass(frozen=True)
class ShippedSuite:
    """A suite shipped with hvnet, as the suite lists show it (a broken one carries its error)."""

    name: str
    path: str
    steps: int = 0
    minutes: float = 0.0
    description: str = ""
    error: str = ""

    def to_json(self) -> dict[str, Any]:
        if self.error:
            return {"suite": self.name, "file": self.path, "error": self.error}
        return {"suite": self.name, "file": self.path, "steps": self.steps,
                "estimated_at_least_s": round(self.minutes * 60), "description": self.description}  # fmt: skip


def shipped_suites() -> list[ShippedSuite]:
    """Every shipped suite, loaded and validated."""
    out = []
    for p in suite_mod.shipped():
        try:
            s = suite_mod.load(p)
        except HvnetError as exc:
            out.append(ShippedSuite(p.stem, str(p), error=str(exc)))
            continue
        out.append(ShippedSuite(s.name, str(p), len(s.steps()), s.estimated_seconds() / 60, s.description))
    return out


def list_runs(host: Host, base: Optional[Path] = None) -> list[dict[str, Any]]:
    """Past runs under ``base`` (default: the host's runs directory), newest first."""
    base = base or host.paths.runs_dir
    return results.list_runs(base) if base.is_dir() else []
