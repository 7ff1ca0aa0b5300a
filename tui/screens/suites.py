"""Suites screen: run a netperf suite, watch it, open past runs, compare two.

A run goes through :mod:`tui.backend.suites` in a thread worker, as
``hvnet suite run`` would run it; the runner's events come back as messages,
so the screen stays responsive and Stop is honoured at once (the runner
stops its instances, restores policy and saves a partial result).  Loading
suites, listing and reading run directories and comparing also run in
workers: nothing here blocks the UI thread on files or the network.

Regressions in a comparison carry a text marker as well as colour, because
over SSH with NO_COLOR the colour is gone.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Optional

from rich.text import Text
from textual import on, work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, ScrollableContainer
from textual.message import Message
from textual.screen import Screen
from textual.widgets import (
    Button,
    DataTable,
    Header,
    Input,
    Label,
    ProgressBar,
    Select,
    Static,
    TabbedContent,
    TabPane,
    Tabs,
)

from appliance.core.errors import HvnetError
from appliance.core.render import terminal
from tui.backend import suites as engine
from tui.backend.suites import (
    Aggregate,
    Event,
    InputError,
    Overrides,
    Result,
    Row,
    StepFigures,
    Suite,
    SuiteChoice,
    SuiteResult,
    SuiteRun,
)
from tui.widgets.banner import ConnectionBanner
from tui.widgets.chart import Chart, Series
from tui.widgets.footer import Footer
from tui.widgets.literal import Literal, literal

TABS = ("tab-run", "tab-chart", "tab-runs", "tab-compare")
REGRESSION_MARK = "!!"
IMPROVEMENT_MARK = "+"
FIGURE_NAMES = {"sum": "total", "latency_mean_us": "latency µs"}
WARNINGS_SHOWN = 1  # the rest would push the comparison off an 80x24 screen


def _short_key(key: str) -> str:
    """A step key without the parts that say nothing (default case, default message size)."""
    test, case, size, conc = [*key.split("/"), "", "", "", ""][:4]
    return "/".join(p for p in (test, "" if case == "default" else case, "" if size == "m-" else size, conc) if p)


class SuitesLoaded(Message):
    def __init__(self, choices: list[SuiteChoice]) -> None:
        super().__init__()
        self.choices = choices


class RunStarted(Message):
    def __init__(self, suite: Suite, out_dir: Path) -> None:
        super().__init__()
        self.suite = suite
        self.out_dir = out_dir


class RunRefused(Message):
    """The suite did not load or validate: nothing was started."""

    def __init__(self, error: str) -> None:
        super().__init__()
        self.error = error


class RunEvent(Message):
    def __init__(self, event: Event) -> None:
        super().__init__()
        self.event = event


class RunFinished(Message):
    def __init__(self, out_dir: Path, doc: Optional[SuiteResult], error: Optional[str]) -> None:
        super().__init__()
        self.out_dir = out_dir
        self.doc = doc
        self.error = error


class RunsListed(Message):
    def __init__(self, runs: list[dict[str, Any]]) -> None:
        super().__init__()
        self.runs = runs


class RunOpened(Message):
    def __init__(self, path: str, doc: Optional[SuiteResult], report: str, error: Optional[str]) -> None:
        super().__init__()
        self.path = path
        self.doc = doc
        self.report = report
        self.error = error


class Compared(Message):
    def __init__(self, base: str, new: str, result: Optional[Result], error: Optional[str]) -> None:
        super().__init__()
        self.base = base
        self.new = new
        self.result = result
        self.error = error


def compare_cells(row: Row) -> tuple[tuple[str, ...], str]:
    """A comparison row as table cells and a style; the marker and the capitals say it without colour."""
    bad = row.verdict in ("regression", "no result")
    good = row.verdict == "improvement"
    mark = REGRESSION_MARK if bad else IMPROVEMENT_MARK if good else ""
    cells = (
        mark,
        row.verdict.upper() if bad else row.verdict,
        _short_key(row.key),
        FIGURE_NAMES.get(row.figure, row.figure),
        "-" if row.change_pct is None else f"{row.change_pct:+.1f}%",
        _num(row.base.mean if row.base else None),
        _num(row.new.mean if row.new else None),
        "-" if row.p_value is None else f"{row.p_value:.3f}",
    )
    return cells, "bold red" if bad else "green" if good else ""


def _num(x: Optional[float]) -> str:
    return "-" if x is None else f"{x:,.1f}"


RESULT_COLUMNS = ("Test", "Conc", "Reps", "Total", "Units", "Lost", "Lat µs", "Bottleneck")


def _row(f: StepFigures) -> tuple[str | Text, ...]:
    return (
        f.label,
        str(f.concurrency),
        f"{f.done}/{f.repetitions_planned}",
        _num(f.mean_total),
        f.units,
        f"{f.lost}/{f.instances}",
        _num(f.mean_latency),
        Text(f.bottleneck or "-"),  # read from a results file: shown literally, never as markup
    )


class SuitesScreen(Screen[None]):
    """Run suites with live progress, results and chart; past runs; comparisons."""

    CSS_PATH = "suites.tcss"
    BINDINGS = [
        Binding("r", "run", "Run"),
        Binding("x", "stop", "Stop"),
        Binding("v", "next_view", "View"),
        Binding("t", "toggle_metric", "Metric"),
        Binding("o", "open_run", "Open"),
        Binding("b", "mark_base", "Base"),
        Binding("c", "compare", "Compare"),
        Binding("l", "list_runs", "Reload runs", show=False),
        Binding("escape", "leave_input", "Leave input", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.choices: list[SuiteChoice] = []
        self.figures: dict[str, StepFigures] = {}
        self.showing = ""  # what the results table and chart hold
        self.rr_chart = False
        self.active_run: Optional[SuiteRun] = None
        self.running = False
        self.reps_done = 0
        self.reps_total = 0
        self.runs: list[dict[str, Any]] = []
        self.base_run: Optional[str] = None
        self.last_run_dir: Optional[Path] = None
        self.compare_result: Optional[Result] = None

    # -- layout ----------------------------------------------------------------------

    def compose(self) -> ComposeResult:
        yield Header()
        yield ConnectionBanner()
        with TabbedContent(id="views"):
            with TabPane("Run", id="tab-run"):
                with Horizontal(classes="row"):
                    yield Label("Suite", classes="field")
                    yield Select[str]([], prompt="choose a suite", id="suite", compact=True)
                    yield Input(placeholder="or a suite file path", id="path", compact=True)
                with Horizontal(classes="row"):
                    yield Label("Conc.", classes="field")
                    yield Input(placeholder="suite's", id="concurrency", compact=True)
                    yield Label("Dur. s", classes="field")
                    yield Input(placeholder="suite's", id="duration", compact=True)
                    yield Label("Reps", classes="field")
                    yield Input(placeholder="suite's", id="repetitions", compact=True)
                    yield Button("Run", id="run", variant="primary", compact=True)
                    yield Button("Stop", id="stop", variant="error", compact=True, disabled=True)
                yield Literal("loading suites...", id="status")
                with Horizontal(classes="row"):
                    yield Label("overall", id="overall-label", classes="bar-label")
                    yield ProgressBar(total=1, id="overall", show_eta=False)
                with Horizontal(classes="row"):
                    yield Label("step", id="step-label", classes="bar-label")
                    yield ProgressBar(total=1, id="step", show_eta=False)
                yield Literal("results of the running (or opened) suite appear here", id="showing")
                yield DataTable(id="results", cursor_type="row", zebra_stripes=True)
            with TabPane("Chart", id="tab-chart"):
                yield Chart(id="chart")
            with TabPane("Past runs", id="tab-runs"):
                yield DataTable(id="runs", cursor_type="row", zebra_stripes=True)
                with ScrollableContainer(id="report-box"):  # wide report tables scroll sideways
                    yield Literal("o: open the highlighted run · b: mark it as base · c: compare it", id="report")
            with TabPane("Compare", id="tab-compare"):
                yield Literal("mark a base run (b) in Past runs, highlight another and press c", id="compare-summary")
                yield DataTable(id="compare", cursor_type="row", zebra_stripes=True)
        yield Footer(compact=True)  # every binding fits in 80 columns

    def on_mount(self) -> None:
        results = self.query_one("#results", DataTable)
        for name in RESULT_COLUMNS:
            results.add_column(name, key=name)
        runs = self.query_one("#runs", DataTable)
        for name in ("Base", "Run", "Suite", "State", "Steps", "Lost", "Started"):
            runs.add_column(name, key=name)
        cmp_table = self.query_one("#compare", DataTable)
        for name in ("!", "Verdict", "Step", "Figure", "Change", "Base", "New", "p"):
            cmp_table.add_column(name, key=name)
        self._update_chart()
        self._load_suites()
        self.action_list_runs()

    def on_unmount(self) -> None:
        if self.active_run is not None:
            self.active_run.stop("the console closed")

    # -- suites ------------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="suites-list")
    def _load_suites(self) -> None:
        self.post_message(SuitesLoaded(engine.shipped_suites()))

    def on_suites_loaded(self, message: SuitesLoaded) -> None:
        self.choices = message.choices
        options = [(c.name if not c.error else f"{c.name} (invalid)", c.path) for c in message.choices]
        self.query_one("#suite", Select).set_options(options)
        self._status(f"{len(options)} shipped suites; choose one (or give a file), adjust, then Run (r)")

    @on(Select.Changed, "#suite")
    def _suite_chosen(self, event: Select.Changed) -> None:
        choice = next((c for c in self.choices if c.path == event.value), None)
        if choice is None:
            return
        if choice.error:
            self._status(f"{choice.name}: {choice.error}", error=True)
        else:
            what = f"{choice.name}: {choice.steps} steps, at least {choice.minutes:.1f} min"
            self._status(f"{what}; {choice.description}")

    def _chosen_path(self) -> str:
        typed = self.query_one("#path", Input).value.strip()
        if typed:
            return typed
        value = self.query_one("#suite", Select).value
        return value if isinstance(value, str) else ""

    # -- running -------------------------------------------------------------------------

    def action_run(self) -> None:
        if self.running:
            self._status("a run is in progress: stop it (x) first", error=True)
            return
        path = self._chosen_path()
        if not path:
            self._status("choose a suite or give a suite file path", error=True)
            return
        try:
            overrides = engine.parse_overrides(
                self.query_one("#concurrency", Input).value,
                self.query_one("#duration", Input).value,
                self.query_one("#repetitions", Input).value,
            )
        except InputError as exc:
            self._status(f"not started: {exc}", error=True)
            return
        self.running = True
        self._buttons()
        self._status(f"loading {path}...")
        self._run_worker(path, overrides)

    @work(thread=True, exclusive=True, group="suite")
    def _run_worker(self, path: str, overrides: Overrides) -> None:
        try:
            s = engine.prepare(path, overrides)
        except HvnetError as exc:
            self.post_message(RunRefused(str(exc)))
            return
        try:
            run = engine.new_run(self.app.backend.host, s, lambda e: self.post_message(RunEvent(e)))
        except HvnetError as exc:
            self.post_message(RunRefused(str(exc)))
            return
        out = run.out_dir
        self.active_run = run  # Stop works from here on, even before the first event
        self.post_message(RunStarted(s, out))
        try:
            doc = run.run()
        except HvnetError as exc:
            self.post_message(RunFinished(out, None, str(exc)))
        except Exception as exc:  # a bug: say so on the screen instead of dying silently
            self.post_message(RunFinished(out, None, f"{type(exc).__name__}: {exc}"))
        else:
            self.post_message(RunFinished(out, doc, None))

    def on_run_refused(self, message: RunRefused) -> None:
        self.running = False
        self._buttons()
        self._status(f"not started: {message.error}", error=True)

    def on_run_started(self, message: RunStarted) -> None:
        s = message.suite
        steps = s.steps()
        self.reps_done = 0
        self.reps_total = sum(st.test.repetitions for st in steps)
        self.figures = {}
        self.query_one("#results", DataTable).clear()
        self.showing = f"live: {message.out_dir.name}"
        self.query_one("#showing", Static).update(f"showing {self.showing}")
        self.query_one("#overall", ProgressBar).update(total=self.reps_total, progress=0)
        self.query_one("#step", ProgressBar).update(total=1, progress=0)
        self.query_one("#overall-label", Label).update(f"0/{self.reps_total} reps")
        self._update_chart()
        self._status(f"running {s.name}: {len(steps)} steps, at least {s.estimated_seconds() / 60:.1f} min")
        self.app.backend.note(f"suite {s.name} started from the console: {message.out_dir}")

    def on_run_event(self, message: RunEvent) -> None:
        e = message.event
        if e.kind == "step" and e.step is not None:
            f = StepFigures.from_step(e.step)
            self.figures[f.key] = f
            self.query_one("#results", DataTable).add_row(*map(literal, _row(f)), key=f.key)
            self.query_one("#step", ProgressBar).update(total=f.repetitions_planned, progress=0)
            self.query_one("#step-label", Label).update(f"step {e.step.index + 1}/{e.steps_total}")
            self._status(e.message)
        elif e.kind == "repetition" and e.step is not None:
            f = self.figures.get(e.step.key) or StepFigures.from_step(e.step)
            f.add(e.aggregate or Aggregate(), e.verdict)
            table = self.query_one("#results", DataTable)
            for column, value in zip(RESULT_COLUMNS, _row(f)):
                table.update_cell(f.key, column, literal(value))
            self.reps_done += 1
            self.query_one("#step", ProgressBar).update(progress=f.done)
            self.query_one("#overall", ProgressBar).update(progress=self.reps_done)
            left = "" if e.eta_s is None else f", ≥{e.eta_s:.0f} s left"
            self.query_one("#overall-label", Label).update(f"{self.reps_done}/{self.reps_total} reps{left}")
            self._update_chart()
            self._status(e.message)
        elif e.kind == "warning":
            self._status(f"warning: {e.message}", error=True)
            self.app.backend.note(f"suite: {e.message}", logging.WARNING)
        else:
            self._status(e.message)

    def on_run_finished(self, message: RunFinished) -> None:
        self.active_run = None
        self.running = False
        self.last_run_dir = message.out_dir
        self._buttons()
        if message.error is not None:
            self._status(f"run failed: {message.error}", error=True)
            self.app.backend.note(f"suite run {message.out_dir.name} failed: {message.error}", logging.WARNING)
        else:
            doc = message.doc
            state = doc.state if doc is not None else "?"
            reason = f" ({doc.partial_reason})" if doc is not None and doc.partial_reason else ""
            steps = len(doc.steps) if doc is not None else 0
            self._status(f"{state}{reason}: {steps} steps saved in {message.out_dir}")
            self.app.backend.note(f"suite run {message.out_dir.name}: {state}{reason}")
        self.action_list_runs()

    def action_stop(self) -> None:
        if self.active_run is None:
            self._status("no run to stop")
            return
        self.active_run.stop()
        self._status("stopping: instances stopped, policy restored, partial results saved...")
        self.app.backend.note("suite run: stop requested from the console")

    def _buttons(self) -> None:
        focused = self.focused
        if isinstance(focused, Button) and focused.id == ("run" if self.running else "stop"):
            # a button about to be disabled would pass the focus to an input, which hides the screen's keys
            self.query_one("#results", DataTable).focus()
        self.query_one("#run", Button).disabled = self.running
        self.query_one("#stop", Button).disabled = not self.running
        self.refresh_bindings()

    def check_action(self, action: str, parameters: tuple[object, ...]) -> bool | None:
        """Run or Stop, whichever applies, is in the footer (both would not fit at 80 columns)."""
        if action == "run":
            return not self.running
        if action == "stop":
            return self.running
        return True

    @on(Button.Pressed, "#run")
    def _run_pressed(self) -> None:
        self.action_run()

    @on(Button.Pressed, "#stop")
    def _stop_pressed(self) -> None:
        self.action_stop()

    @on(Input.Submitted)
    def _submitted(self) -> None:
        self.action_run()

    # -- results and chart -------------------------------------------------------------------

    def _show_figures(self, figures: list[StepFigures], what: str) -> None:
        self.figures = {f.key: f for f in figures}
        table = self.query_one("#results", DataTable)
        table.clear()
        for f in figures:
            table.add_row(*map(literal, _row(f)), key=f.key)
        self.showing = what
        self.query_one("#showing", Static).update(f"showing {what}")
        self._update_chart()

    def _series(self, rr: bool) -> list[Series]:
        points = engine.chart_points(list(self.figures.values()), rr)
        return [Series(name, line) for name, line in points.items()]

    def _draw_chart(self, series: list[Series]) -> None:
        what = "transactions/s (total, mean of reps)" if self.rr_chart else "Mbit/s (total, mean of reps)"
        self.query_one(Chart).set_data(series, f"{what}{' · ' + self.showing if self.showing else ''}")

    def _update_chart(self) -> None:
        series = self._series(self.rr_chart)
        if not series and self.figures:  # nothing of the current kind: show the kind there is
            other = self._series(not self.rr_chart)
            if other:
                self.rr_chart = not self.rr_chart
                series = other
        self._draw_chart(series)

    def action_toggle_metric(self) -> None:
        self.rr_chart = not self.rr_chart
        self._draw_chart(self._series(self.rr_chart))
        self._show_tab("tab-chart")

    def action_next_view(self) -> None:
        active = self.query_one(TabbedContent).active
        self._show_tab(TABS[(TABS.index(active) + 1) % len(TABS)] if active in TABS else TABS[0])

    def _show_tab(self, tab: str) -> None:
        """Switch views and move the focus along: focus left in a hidden pane would switch straight back."""
        self.query_one(TabbedContent).active = tab
        target = {"tab-run": "#results", "tab-runs": "#runs", "tab-compare": "#compare"}.get(tab)
        if target is not None:
            self.query_one(target).focus()
        else:
            self.query_one(Tabs).focus()

    def action_leave_input(self) -> None:
        self.query_one(TabbedContent).focus()

    # -- past runs ------------------------------------------------------------------------------

    @work(thread=True, exclusive=True, group="runs")
    def action_list_runs(self) -> None:
        self.post_message(RunsListed(engine.list_runs(self.app.backend.host)))

    def on_runs_listed(self, message: RunsListed) -> None:
        self.runs = message.runs
        table = self.query_one("#runs", DataTable)
        table.clear()
        for r in message.runs:
            table.add_row(*map(literal, self._run_row(r)), key=r["run"])
        if not message.runs:
            self.query_one("#report", Static).update("no past runs in the runs directory yet")

    def _run_row(self, r: dict[str, Any]) -> tuple[str, ...]:
        mark = "base" if r["run"] == self.base_run else ""
        return (mark, Path(r["run"]).name, r["suite"], r["state"], str(r["steps"]), str(r["lost"]), r["started"] or "-")

    def _highlighted_run(self) -> Optional[str]:
        table = self.query_one("#runs", DataTable)
        if not self.runs or table.row_count == 0:
            return None
        row = max(0, min(table.cursor_row, len(self.runs) - 1))
        return str(table.coordinate_to_cell_key((row, 0)).row_key.value)

    def action_open_run(self) -> None:
        path = self._highlighted_run()
        if path is None:
            self._status("no past run to open", error=True)
            return
        self.query_one("#report", Static).update(f"opening {path}...")
        self._open_worker(path)

    @work(thread=True, exclusive=True, group="open")
    def _open_worker(self, path: str) -> None:
        try:
            doc = engine.load_run(path)
            self.post_message(RunOpened(path, doc, engine.report_text(doc), None))
        except HvnetError as exc:
            self.post_message(RunOpened(path, None, "", str(exc)))

    def on_run_opened(self, message: RunOpened) -> None:
        if message.error is not None or message.doc is None:
            self.query_one("#report", Static).update(f"cannot open: {message.error}")
            return
        self.query_one("#report", Static).update(message.report)
        self._show_figures(engine.figures_of(message.doc), f"past run {Path(message.path).name}")

    @on(DataTable.RowSelected, "#runs")
    def _run_selected(self) -> None:
        self.action_open_run()

    def action_mark_base(self) -> None:
        path = self._highlighted_run()
        if path is None:
            self._status("no past run to mark", error=True)
            return
        self.base_run = path
        table = self.query_one("#runs", DataTable)
        for r in self.runs:
            table.update_cell(r["run"], "Base", "base" if r["run"] == path else "")
        self.query_one("#report", Static).update(f"base: {Path(path).name}; highlight another run and press c")

    def action_compare(self) -> None:
        new = self._highlighted_run()
        if new is None:
            self._status("no past runs to compare", error=True)
            return
        base = self.base_run
        if base is None or base == new:
            paths = [r["run"] for r in self.runs]
            older = paths[paths.index(new) + 1 :] if new in paths else []
            base = older[0] if older else None
        if base is None or base == new:
            self.query_one("#compare-summary", Static).update("mark a base run (b), then highlight another: c")
            self._show_tab("tab-compare")
            return
        self.query_one("#compare-summary", Static).update(f"comparing {Path(base).name} -> {Path(new).name}...")
        self._show_tab("tab-compare")
        self._compare_worker(base, new)

    @work(thread=True, exclusive=True, group="compare")
    def _compare_worker(self, base: str, new: str) -> None:
        try:
            self.post_message(Compared(base, new, engine.compare_runs(base, new), None))
        except HvnetError as exc:
            self.post_message(Compared(base, new, None, str(exc)))

    def on_compared(self, message: Compared) -> None:
        summary = self.query_one("#compare-summary", Static)
        table = self.query_one("#compare", DataTable)
        table.clear()
        self.compare_result = message.result
        r = message.result
        if r is None:
            summary.update(f"cannot compare: {message.error}")
            return
        n = len(r.regressions)
        head = f"base {Path(message.base).name} -> new {Path(message.new).name}: "
        head += (
            f"{REGRESSION_MARK} {n} significant regression(s) beyond {r.threshold_pct:g}%"
            if n
            else f"no significant regression beyond {r.threshold_pct:g}%"
        )
        lines = [head]
        only = [f"only in {side}: {len(keys)} step(s)" for side, keys in (("base", r.only_base), ("new", r.only_new))]
        if r.only_base or r.only_new:
            lines.append("; ".join(o for o, keys in zip(only, (r.only_base, r.only_new)) if keys))
        lines += [f"warning: {w}" for w in r.warnings[:WARNINGS_SHOWN]]
        if len(r.warnings) > WARNINGS_SHOWN:
            lines.append(f"... and {len(r.warnings) - WARNINGS_SHOWN} more warning(s) (hvnet suite compare lists all)")
        summary.update(Text(terminal("\n".join(lines), keep="\n"), style="bold red" if n else ""))
        for row in r.rows:
            cells, style = compare_cells(row)
            table.add_row(*(Text(terminal(c), style=style) for c in cells))

    # -- helpers ------------------------------------------------------------------------------------

    def _status(self, text: str, error: bool = False) -> None:
        status = self.query_one("#status", Static)
        status.update(text)
        status.set_class(error, "error")
