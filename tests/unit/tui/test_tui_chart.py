"""The terminal chart's scaling and drawing, and the figures the Suites screen plots (no terminal, no lab)."""

from __future__ import annotations

import pytest

from appliance.netperf.store.records import Aggregate
from tui.backend.suites import InputError, StepFigures, chart_points, parse_overrides
from tui.widgets.chart import GLYPHS, OVERLAP, Series, compact, draw, nice_ceiling, render_lines


@pytest.mark.parametrize(
    ("value", "top"),
    [(0.3, 0.5), (1.0, 1.0), (1.2, 2.0), (2.2, 2.5), (3.0, 5.0), (7.0, 10.0), (9500.0, 10000.0), (12000, 20000)],
)
def test_nice_ceiling(value: float, top: float) -> None:
    assert nice_ceiling(value) == pytest.approx(top)


def test_nice_ceiling_of_nothing_is_one() -> None:
    assert nice_ceiling(0) == 1.0 and nice_ceiling(float("nan")) == 1.0


@pytest.mark.parametrize(
    ("value", "text"),
    [(0, "0"), (0.25, "0.25"), (950, "950"), (2500, "2.5k"), (12000, "12k"), (1_200_000, "1.2M"), (3e9, "3G")],
)
def test_compact_tick_labels(value: float, text: str) -> None:
    assert compact(value) == text


def plot_rows(lines: list[str], rows: int) -> list[str]:
    return lines[1 : 1 + rows]


def test_points_land_on_the_scale_and_axes_are_labelled() -> None:
    s = [Series("tcp", ((1.0, 10000.0), (4.0, 5000.0)))]
    d = draw(s, 40, 12, y_label="Mbit/s")
    lines = d.lines
    assert len(lines) == 12 and all(len(line) <= 40 for line in lines)
    assert lines[0] == "Mbit/s"
    plot = plot_rows(lines, d.plot_rows)
    assert plot[0].split()[0] == "10k" and plot[-1].split()[0] == "0"  # top tick = the nice ceiling, bottom 0
    # 10000 is the top: first column on the top row; 5000 is half way up, last column
    top_row = plot[0]
    assert top_row.index("*") == 9  # label (7) + axis + space
    mid = plot[(d.plot_rows - 1) // 2]
    assert mid.rstrip().endswith("*")
    assert lines[1 + d.plot_rows].lstrip().startswith("└")
    ticks = lines[2 + d.plot_rows]
    assert ticks.split() == ["1", "4"]
    assert lines[3 + d.plot_rows].strip() == "concurrent instances"
    assert lines[4 + d.plot_rows] == "* tcp"


def test_each_series_has_its_own_glyph_and_legend_entry() -> None:
    series = [Series(f"test-{i}", ((1.0, 10.0 * (i + 1)), (8.0, 5.0 * (i + 1)))) for i in range(4)]
    lines = render_lines(series, 60, 20, y_label="trans/s")
    text = "\n".join(lines)
    for i in range(4):
        assert f"{GLYPHS[i]} test-{i}" in text
        assert sum(line.count(GLYPHS[i]) for line in lines[1:-2]) >= 2
    assert OVERLAP not in text


def test_overlapping_points_are_marked_and_explained() -> None:
    series = [Series("a", ((1.0, 100.0),)), Series("b", ((1.0, 100.0),))]
    lines = render_lines(series, 40, 12, y_label="Mbit/s")
    assert any(OVERLAP in line for line in lines[1:8])
    assert lines[-1].endswith(f"{OVERLAP} several") or any(f"{OVERLAP} several" in line for line in lines)


def test_legend_wraps_to_the_width() -> None:
    series = [Series(f"a-rather-long-series-name-{i}", ((1.0, 1.0),)) for i in range(5)]
    lines = render_lines(series, 40, 20, y_label="Mbit/s")
    assert all(len(line) <= 40 for line in lines)
    assert sum(1 for line in lines if "a-rather-long" in line) >= 3


def test_one_concurrency_is_centred() -> None:
    d = draw([Series("x", ((4.0, 2.0),))], 30, 10, y_label="Mbit/s")
    row = next(line for line in d.lines[1 : 1 + d.plot_rows] if "*" in line)
    cols = 30 - 9
    assert row.index("*") - 9 == cols // 2


def test_no_data_says_so_and_keeps_the_height() -> None:
    lines = render_lines([], 50, 6, y_label="Mbit/s")
    assert len(lines) == 6 and lines[0].startswith("no measured Mbit/s yet")


def test_non_finite_values_are_not_plotted() -> None:
    lines = render_lines([Series("x", ((1.0, float("nan")), (2.0, 3.0)))], 30, 10, y_label="Mbit/s")
    assert sum(line.count("*") for line in lines[1:-1]) == 1


def test_tiny_sizes_do_not_crash() -> None:
    lines = render_lines([Series("x", ((1.0, 1.0), (2.0, 2.0)))], 5, 2, y_label="Mbit/s")
    assert len(lines) == 2


def figures(test: str, type_: str, totals: dict[int, list[float]]) -> list[StepFigures]:
    out = []
    for conc, values in totals.items():
        f = StepFigures(f"{test}/default/m-/c{conc}", test, "default", type_, None, conc, len(values))
        for v in values:
            f.add(Aggregate(sum=v, lost=0, instances=conc))
        out.append(f)
    return out


def test_chart_points_are_means_per_test_split_by_metric() -> None:
    figs = figures("tcp-stream", "TCP_STREAM", {1: [100.0, 300.0], 4: [400.0]}) + figures(
        "tcp-rr", "TCP_RR", {1: [5000.0]}
    )
    streams = chart_points(figs, rr=False)
    assert streams == {"tcp-stream": ((1.0, 200.0), (4.0, 400.0))}
    assert chart_points(figs, rr=True) == {"tcp-rr": ((1.0, 5000.0),)}


def test_a_repetition_without_a_result_is_not_plotted() -> None:
    f = StepFigures("t/default/m-/c1", "t", "default", "TCP_STREAM", None, 1, 2)
    f.add(Aggregate(sum=None, lost=1, instances=1))
    assert f.done == 1 and f.mean_total is None and f.lost == 1
    assert chart_points([f], rr=False) == {}


def test_overrides_follow_the_cli_rules() -> None:
    assert parse_overrides("1, 4", "2", "") == parse_overrides("1,4", "2", " ")
    o = parse_overrides("1,4", "2", "3")
    assert (o.concurrency, o.duration, o.repetitions) == ((1, 4), 2, 3)
    assert parse_overrides("", "", "").concurrency is None
    for args, message in (
        (("0", "", ""), "concurrency values are 1..256"),
        (("257", "", ""), "concurrency values are 1..256"),
        (("a", "", ""), "expected integers"),
        (("", "0", ""), "duration (s) must be 1..3600, not 0"),
        (("", "1.5", ""), "duration (s) must be an integer"),
        (("", "", "101"), "repetitions must be 1..100, not 101"),
    ):
        with pytest.raises(InputError, match=message.replace("(", r"\(").replace(")", r"\)")):
            parse_overrides(*args)


def test_regressions_are_marked_in_text_not_only_colour() -> None:
    from appliance.netperf.figures.compare import Row
    from appliance.netperf.figures.stats import Interval
    from tui.screens.suites import REGRESSION_MARK, compare_cells

    base, new = Interval(1000.0, 10.0, 3), Interval(800.0, 12.0, 3)
    cells, style = compare_cells(Row("tcp-stream/default/m10000/c1", "sum", base, new, -20.0, 0.001, "regression"))
    assert cells[:4] == (REGRESSION_MARK, "REGRESSION", "tcp-stream/m10000/c1", "total")
    assert cells[4:] == ("-20.0%", "1,000.0", "800.0", "0.001") and "red" in style
    cells, _ = compare_cells(Row("tcp-rr/default/m-/c4", "latency_mean_us", base, None, None, None, "no result"))
    assert cells[:4] == (REGRESSION_MARK, "NO RESULT", "tcp-rr/c4", "latency µs") and cells[6] == "-"
    cells, style = compare_cells(Row("k/default/m-/c1", "sum", base, base, 0.0, 1.0, "within threshold"))
    assert cells[0] == "" and cells[1] == "within threshold" and style == ""
