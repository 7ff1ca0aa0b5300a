"""The Suites screen's calls into the netperf engine, made from worker threads.

The screen never loads YAML, opens connections or reads run directories
itself: it calls these from ``@work(thread=True)`` workers.  A run goes
exactly as ``hvnet suite run`` does it (same suite loading and overrides,
same lab checks, its own policy-column connection, same run directory
naming), so a run started here and one started from the CLI are
interchangeable for ``report`` and ``compare``.

The figures the screen shows (:class:`StepFigures`) are built from the
runner's events during a run and from ``results.json`` afterwards by the
same code, so a live table and a reopened run agree.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional

from appliance.services import suites
from appliance.services.suites import (
    PPS_TYPES,
    RR_TYPES,
    Aggregate,
    Event,
    Overrides,
    Result,
    Row,
    Step,
    StepResult,
    Suite,
    SuiteResult,
    SuiteRun,
)
from appliance.services.suites import ShippedSuite as SuiteChoice
from appliance.switch.host import Host

# What the Suites screen shows, named here so that it depends on the console's backend.
__all__ = ["Aggregate", "Event", "Result", "Row", "Suite", "SuiteChoice", "SuiteResult", "SuiteRun"]


# The operator's adjustments are parsed by the service, for this screen and ``hvnet suite run``'s options alike.
InputError = suites.OverrideError  # an adjustment the CLI would refuse too; the message says what is allowed
parse_overrides = suites.parse_overrides  # (concurrency, duration, repetitions) as typed -> Overrides


def shipped_suites() -> list[SuiteChoice]:
    """Every shipped suite, loaded and validated (a broken one is listed with its error)."""
    return suites.shipped_suites()


def prepare(path: str, overrides: Overrides) -> Suite:
    """Load and validate the suite, then apply the overrides the way ``hvnet suite run`` does."""
    return suites.load_suite(
        path, concurrency=overrides.concurrency, duration=overrides.duration, repetitions=overrides.repetitions
    )


def new_run(host: Host, s: Suite, on_event: Callable[[Event], None]) -> SuiteRun:
    """A run of ``s`` where the front door's guest source puts it (the lab's switch, probes on the
    console's switch, or the real VMs of the VM inventory its settings name, ``[measure] vms``; see
    :mod:`appliance.frontdoor.guests`), in a new run directory (named as the CLI names it).  The guests
    are held until the run ends."""
    from contextlib import ExitStack

    from appliance.frontdoor.guests import console_target, suite_measurement

    args, real = console_target(host)
    stack = ExitStack()
    try:
        m = stack.enter_context(suite_measurement(s.guest_needs, args, reuse=host, real=real))
        run = SuiteRun(m.host, m.guests, s, suites.run_dir(m.host, s.name), on_event, release=stack.close)
        run.check()
    except BaseException:
        stack.close()
        raise
    return run


# -- figures shown on the screen ------------------------------------------------


@dataclass
class StepFigures:
    """One step's measured figures so far: one total per finished repetition."""

    key: str
    test: str
    case: str
    type: str
    message_size: Optional[int]
    concurrency: int
    repetitions_planned: int
    totals: list[float] = field(default_factory=list)  # aggregate "sum" of each repetition that had one
    done: int = 0  # repetitions finished (with or without a result)
    lost: int = 0
    instances: int = 0
    latency_us: list[float] = field(default_factory=list)
    bottleneck: Optional[str] = (
        None  # the step's verdict so far (policer, switch, ...; see appliance.netperf.figures.verdict)
    )

    @property
    def units(self) -> str:
        return "trans/s" if self.type in RR_TYPES else "pkt/s" if self.type in PPS_TYPES else "Mbit/s"

    @property
    def mean_total(self) -> Optional[float]:
        return sum(self.totals) / len(self.totals) if self.totals else None

    @property
    def mean_latency(self) -> Optional[float]:
        return sum(self.latency_us) / len(self.latency_us) if self.latency_us else None

    @property
    def label(self) -> str:
        """The series a step belongs to: test, plus case and message size when they vary."""
        parts = [self.test]
        if self.case != "default":
            parts.append(self.case)
        if self.message_size:
            parts.append(f"m{self.message_size}")
        return "/".join(parts)

    def add(self, agg: Aggregate, bottleneck: Optional[str] = None) -> None:
        self.done += 1
        self.bottleneck = bottleneck or self.bottleneck
        if agg.sum is not None:
            self.totals.append(float(agg.sum))
        if agg.latency_mean_us is not None:
            self.latency_us.append(float(agg.latency_mean_us))
        self.lost += int(agg.lost)
        self.instances += int(agg.instances)

    @classmethod
    def from_step(cls, step: Step) -> StepFigures:
        t = step.test
        return cls(step.key, t.name, step.case.name, t.type, step.message_size, step.concurrency, t.repetitions)

    @classmethod
    def from_record(cls, rec: StepResult, planned: Optional[int] = None) -> StepFigures:
        f = cls(
            rec.key,
            rec.test,
            rec.case,
            rec.type,
            rec.message_size,
            rec.concurrency,
            planned or len(rec.repetitions),
        )
        for rep in rec.repetitions:
            f.add(rep.aggregate)
        f.bottleneck = (rec.verdict or {}).get("verdict")
        return f


def figures_of(doc: SuiteResult) -> list[StepFigures]:
    """A saved run's steps, in run order."""
    return [StepFigures.from_record(s) for s in doc.steps]


def chart_points(figures: list[StepFigures], rr: bool) -> dict[str, tuple[tuple[float, float], ...]]:
    """Mean total against concurrency, the points of one line per test (RR tests: transactions/s; else
    Mbit/s), in the order the tests first appear.  Plain data: how it is drawn is the screen's business."""
    by_label: dict[str, list[tuple[float, float]]] = {}
    for f in figures:
        if (f.type in RR_TYPES) != rr or f.mean_total is None:
            continue
        by_label.setdefault(f.label, []).append((float(f.concurrency), f.mean_total))
    return {name: tuple(sorted(points)) for name, points in by_label.items()}


# -- past runs --------------------------------------------------------------------


def list_runs(host: Host) -> list[dict[str, Any]]:
    """Runs under the host's runs directory (``$HVNET_RUNS_DIR``), newest first."""
    return suites.list_runs(host)


def load_run(path: str) -> SuiteResult:
    return suites.load_run(path)


def report_text(doc: SuiteResult) -> str:
    return suites.report_text(doc)


def compare_runs(base: str, new: str, threshold_pct: float = 5.0) -> Result:
    """``hvnet suite compare BASE NEW``: rows with verdicts, regressions counted the same way."""
    return suites.compare_runs(base, new, threshold_pct)
