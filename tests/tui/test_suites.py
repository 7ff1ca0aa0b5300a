"""The Suites screen against the real lab: quick.yaml run from the screen, past runs, compare, bad input.

Everything is driven through the Pilot (keys and clicks) as an operator
would; runs land in a per-test runs directory (HVNET_RUNS_DIR).
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from textual.widgets import DataTable, Input, Select, Static

from appliance.frontdoor.hosts import build_host
from appliance.switch import api
from tests.tui.harness import assert_snapshot, screen_text, wait_until
from tui.app import HvnetApp
from tui.screens.suites import REGRESSION_MARK, SuitesScreen
from tui.widgets.chart import Chart

pytestmark = pytest.mark.lab

RUN_TIMEOUT_S = 150


def status(screen: SuitesScreen) -> str:
    return str(screen.query_one("#status", Static).render())


async def open_suites(pilot, app: HvnetApp) -> SuitesScreen:
    assert await wait_until(pilot, lambda: isinstance(app.screen, SuitesScreen), 10)
    screen = app.screen
    assert isinstance(screen, SuitesScreen)
    assert await wait_until(pilot, lambda: bool(screen.choices), 10)
    return screen


async def type_into(pilot, selector: str, text: str) -> None:
    """Click the input (its text is selected on focus) and type over it."""
    await pilot.click(selector)
    box = pilot.app.screen.query_one(selector, Input)
    box.focus()
    await pilot.pause()
    await pilot.press("end", *["backspace"] * len(box.value), *list(text))


async def choose_quick(pilot, screen: SuitesScreen) -> None:
    await pilot.click("#suite")
    await pilot.pause(0.2)
    await pilot.press("q", "u", "i", "c", "k", "enter")
    select = screen.query_one("#suite", Select)
    assert await wait_until(pilot, lambda: str(select.value).endswith("quick.yaml"), 3), select.value


async def run_and_wait(pilot, screen: SuitesScreen) -> Path:
    before = screen.last_run_dir
    await pilot.click("#run")
    assert await wait_until(pilot, lambda: screen.running, 5), status(screen)
    assert await wait_until(pilot, lambda: not screen.running, RUN_TIMEOUT_S), status(screen)
    assert screen.last_run_dir is not None and screen.last_run_dir != before, status(screen)
    return screen.last_run_dir


async def test_bad_adjustments_start_nothing(lab, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HVNET_RUNS_DIR", str(tmp_path))
    conn = api.connect(build_host())
    app = HvnetApp(conn, start="suites")
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            screen = await open_suites(pilot, app)
            await pilot.click("#run")  # nothing chosen yet
            assert "choose a suite" in status(screen)

            await choose_quick(pilot, screen)
            for field, value, error in (
                ("#concurrency", "0", "concurrency values are 1..256"),
                ("#concurrency", "1,x", "concurrency: expected integers like 1,4,8, not '1,x'"),
                ("#duration", "abc", "duration (s) must be an integer, not 'abc'"),
                ("#duration", "3601", "duration (s) must be 1..3600, not 3601"),
                ("#repetitions", "0", "repetitions must be 1..100, not 0"),
            ):
                await type_into(pilot, field, value)
                await pilot.press("enter")  # Enter in an input runs, like the Run button
                assert await wait_until(pilot, lambda e=error: e in status(screen), 2), status(screen)
                assert "not started" in status(screen) and screen.query_one("#status").has_class("error")
                assert not screen.running and screen.active_run is None
                await type_into(pilot, field, "")
            await pilot.pause(0.3)
            assert not screen.running
            assert list(tmp_path.iterdir()) == []  # no run directory was created
    finally:
        conn.close()


async def test_run_quick_open_and_compare(lab, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HVNET_RUNS_DIR", str(tmp_path))
    conn = api.connect(build_host())
    app = HvnetApp(conn, start="suites")
    started = time.monotonic()
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            screen = await open_suites(pilot, app)
            await choose_quick(pilot, screen)

            # the whole quick suite, run from the screen, at 1 s an instance and two repetitions (every step;
            # the screen's figures, not their values, are under test); the table and the bars follow the events
            await type_into(pilot, "#duration", "1")
            await type_into(pilot, "#repetitions", "2")  # two: per-repetition progress, and enough for compare
            seen_live = []

            def live() -> bool:
                t = screen.query_one("#results", DataTable)
                if screen.running and t.row_count:
                    seen_live.append(t.row_count)
                return not screen.running

            await pilot.click("#run")
            assert await wait_until(pilot, lambda: screen.running, 5), status(screen)
            assert await wait_until(pilot, live, RUN_TIMEOUT_S), status(screen)
            run1 = screen.last_run_dir
            print(f"quick from the screen: {time.monotonic() - started:.0f} s")
            assert run1 is not None and run1.parent == tmp_path
            assert seen_live, "the results table stayed empty while the suite ran"
            assert "complete" in status(screen), status(screen)
            assert (run1 / "results.json").is_file()

            results = screen.query_one("#results", DataTable)
            assert results.row_count == 10  # 5 tests x concurrency 1 and 4
            totals = [str(results.get_cell(k, "Total")) for k in screen.figures]
            assert all(t != "-" for t in totals), totals
            bottlenecks = [str(results.get_cell(k, "Bottleneck")) for k in screen.figures]
            assert all(
                b in ("policer", "switch", "sender-cpu", "receiver-cpu", "ports", "unknown") for b in bottlenecks
            )
            assert all(f.done == 2 for f in screen.figures.values())
            assert screen.reps_done == screen.reps_total == 20

            chart = screen.query_one(Chart)
            assert chart.point_count > 0
            await pilot.click("#--content-tab-tab-chart")
            await pilot.pause(0.2)
            assert "concurrent instances" in screen_text(app)
            await pilot.press("t")  # the other metric: transactions/s of the RR tests
            await pilot.pause(0.2)
            assert "transactions/s" in screen_text(app) and chart.point_count > 0

            # open the past run: the list, then its report and figures
            await pilot.click("#--content-tab-tab-runs")
            runs = screen.query_one("#runs", DataTable)
            assert await wait_until(pilot, lambda: runs.row_count == 1, 5)
            runs.focus()
            await pilot.press("o")
            report = screen.query_one("#report", Static)
            assert await wait_until(pilot, lambda: "suite quick: complete" in str(report.render()), 5)
            assert "bottleneck at 1: " in str(report.render())  # the evidence, in the opened run's report
            assert screen.showing == f"past run {run1.name}"
            assert results.row_count == 10

            # a second, shorter run through the screen's own inputs (at the suite's 2 s: not the first's 1 s)
            await pilot.click("#--content-tab-tab-run")
            await type_into(pilot, "#concurrency", "1")
            await type_into(pilot, "#duration", "2")
            await type_into(pilot, "#repetitions", "1")  # compare says what one repetition cannot test
            t2 = time.monotonic()
            run2 = await run_and_wait(pilot, screen)
            print(f"short run from the screen: {time.monotonic() - t2:.0f} s")
            assert (run2 / "results.json").is_file()
            assert results.row_count == 5

            # compare: mark the first run as base, highlight the second, c
            await pilot.click("#--content-tab-tab-runs")
            assert await wait_until(pilot, lambda: runs.row_count == 2, 5)
            runs.focus()
            runs.move_cursor(row=1)  # newest first: row 1 is the first run
            await pilot.press("b")
            assert screen.base_run == str(run1)
            runs.move_cursor(row=0)
            await pilot.press("c")
            cmp_table = screen.query_one("#compare", DataTable)
            assert await wait_until(pilot, lambda: screen.compare_result is not None, 10)
            assert cmp_table.row_count > 0
            summary = str(screen.query_one("#compare-summary", Static).render())
            assert f"base {run1.name} -> new {run2.name}" in summary
            assert "only in base: 5 step(s)" in summary  # the c4 steps were not run the second time
            assert "different durations" in summary
            assert await wait_until(pilot, lambda: "Verdict" in screen_text(app), 3), screen_text(app)
            regressions = screen.compare_result.regressions
            marks = [str(cmp_table.get_row_at(i)[0]) for i in range(cmp_table.row_count)]
            assert marks.count(REGRESSION_MARK) == len(
                [r for r in screen.compare_result.rows if r.verdict in ("regression", "no result")]
            )
            if regressions:
                assert REGRESSION_MARK in summary
    finally:
        conn.close()
    assert time.monotonic() - started < RUN_TIMEOUT_S + 60


async def test_stop_saves_a_partial_run(lab, tmp_path: Path, monkeypatch) -> None:
    monkeypatch.setenv("HVNET_RUNS_DIR", str(tmp_path))
    conn = api.connect(build_host())
    app = HvnetApp(conn, start="suites")
    try:
        async with app.run_test(size=(80, 24)) as pilot:
            screen = await open_suites(pilot, app)
            await choose_quick(pilot, screen)
            await type_into(pilot, "#concurrency", "1")
            await type_into(pilot, "#duration", "1")
            await type_into(pilot, "#repetitions", "1")
            await pilot.click("#run")
            assert await wait_until(pilot, lambda: screen.reps_done >= 1, 30), status(screen)
            await pilot.press("x")  # the footer's Stop: the focus left the disabled Run button for the table
            assert await wait_until(pilot, lambda: not screen.running, 30), status(screen)
            assert "partial (stopped by the operator)" in status(screen), status(screen)
            assert screen.reps_done < screen.reps_total
            run = screen.last_run_dir
            assert run is not None and (run / "results.json").is_file()
            assert await wait_until(pilot, lambda: screen.query_one("#runs", DataTable).row_count == 1, 5)
    finally:
        conn.close()


@pytest.mark.parametrize("size", [(80, 24), (120, 40)])
async def test_snapshot(lab, tmp_path: Path, monkeypatch, size: tuple[int, int]) -> None:
    monkeypatch.setenv("HVNET_RUNS_DIR", str(tmp_path))
    conn = api.connect(build_host())
    app = HvnetApp(conn, start="suites")
    try:
        async with app.run_test(size=size) as pilot:
            screen = await open_suites(pilot, app)
            assert await wait_until(pilot, lambda: "shipped suites" in status(screen), 5)
            await pilot.pause(0.2)
            await assert_snapshot(pilot, app, "suites")
    finally:
        conn.close()
