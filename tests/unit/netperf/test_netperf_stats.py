"""Known-value checks for the netperf statistics (no scipy on the appliance, so the
reference numbers are textbook t tables and hand computations)."""

from __future__ import annotations

import math

import pytest

from appliance.netperf.figures.stats import Comparison, Interval, ci, jain, mean, stdev, t_quantile, t_sf, welch

# (df, t_0.975, t_0.995) from standard Student t tables
T_TABLE = [
    (1, 12.706, 63.657),
    (2, 4.303, 9.925),
    (4, 2.776, 4.604),
    (10, 2.228, 3.169),
    (30, 2.042, 2.750),
    (1000, 1.962, 2.581),
]


@pytest.mark.parametrize(("df", "q975", "q995"), T_TABLE)
def test_t_quantile_matches_table(df: int, q975: float, q995: float) -> None:
    assert t_quantile(0.975, df) == pytest.approx(q975, abs=5e-4)
    assert t_quantile(0.995, df) == pytest.approx(q995, abs=5e-4)


def test_t_quantile_symmetry_and_limits() -> None:
    assert t_quantile(0.5, 7) == pytest.approx(0.0, abs=1e-9)
    assert t_quantile(0.025, 4) == pytest.approx(-t_quantile(0.975, 4))
    assert t_quantile(0.975, 1e7) == pytest.approx(1.960, abs=5e-4)
    # fractional df (Welch) falls between its integer neighbours
    assert t_quantile(0.975, 4) > t_quantile(0.975, 4.5) > t_quantile(0.975, 5)
    with pytest.raises(ValueError):
        t_quantile(1.0, 3)


@pytest.mark.parametrize("df", [1, 2, 3.7, 10, 30, 1000])
def test_t_sf_round_trip(df: float) -> None:
    assert t_sf(t_quantile(0.975, df), df) == pytest.approx(0.05, abs=1e-9)
    assert t_sf(-t_quantile(0.995, df), df) == pytest.approx(0.01, abs=1e-9)


def test_t_sf_known_values() -> None:
    assert t_sf(0.0, 5) == pytest.approx(1.0)
    # df=1 is Cauchy: P(|T| > 1) = 1/2 exactly
    assert t_sf(1.0, 1) == pytest.approx(0.5, abs=1e-12)


def test_mean_and_stdev() -> None:
    assert mean([]) is None
    assert mean([1.0, 2.0, 6.0]) == 3.0
    assert stdev([5.0]) is None
    assert stdev([2, 4, 4, 4, 5, 5, 7, 9]) == pytest.approx(math.sqrt(32 / 7))


def test_jain() -> None:
    assert jain([]) is None
    assert jain([0.0, 0.0]) is None  # undefined, not "perfectly fair"
    assert jain([3.0, 3.0, 3.0, 3.0]) == pytest.approx(1.0)
    assert jain([0.0, 0.0, 0.0, 0.0, 9.0]) == pytest.approx(1 / 5)
    assert jain([1.0, 3.0]) == pytest.approx(16 / 20)


def test_ci_three_samples() -> None:
    iv = ci([10.0, 12.0, 14.0])
    assert iv is not None
    # t_{0.975,2} = 4.302653, s = 2  ->  4.302653 * 2 / sqrt(3)
    assert iv.mean == 12.0
    assert iv.half_width == pytest.approx(4.9683, abs=1e-4)
    assert iv.low == pytest.approx(12.0 - 4.9683, abs=1e-4)
    assert iv.high == pytest.approx(12.0 + 4.9683, abs=1e-4)
    assert iv.n == 3
    assert iv.to_json()["level"] == 0.95


def test_ci_edge_cases() -> None:
    assert ci([]) is None
    one = ci([7.0])
    assert one == Interval(7.0, None, 1)
    assert one.low is None and one.high is None
    assert one.to_json() == {"mean": 7.0, "half_width": None, "low": None, "high": None, "n": 1, "level": 0.95}
    wider = ci([10.0, 12.0, 14.0], level=0.99)
    assert wider is not None and wider.half_width == pytest.approx(9.925 * 2 / math.sqrt(3), abs=2e-3)


def test_welch_clearly_separated() -> None:
    c = welch([100.0, 101.0, 99.0, 100.5, 99.5], [90.0, 91.0, 89.0, 90.5, 89.5])
    assert c.method == "welch t-test"
    assert c.significant is True
    assert c.p_value is not None and c.p_value < 0.01
    assert c.change_pct == pytest.approx(-10.0)


def test_welch_overlapping_not_significant() -> None:
    c = welch([10.0, 12.0, 14.0, 11.0], [11.0, 13.0, 12.0, 10.0])
    assert c.significant is False
    assert c.p_value is not None and c.p_value > 0.5
    same = welch([1.0, 2.0, 3.0], [3.0, 2.0, 1.0])
    assert same.p_value == pytest.approx(1.0)
    assert same.significant is False
    assert same.change_pct == 0.0


def test_welch_known_p_value() -> None:
    # By hand: means 20.05 / 19.125, variances 0.043333 / 0.049167, n = 4 each
    # t = -0.925 / sqrt(0.0108333 + 0.0122917) = -6.08276
    # df = 0.023125^2 / (0.0108333^2/3 + 0.0122917^2/3) = 5.97623
    # p = 0.00091087 (cross-checked by Simpson integration of the t density)
    c = welch([20.1, 19.8, 20.3, 20.0], [18.9, 19.2, 19.0, 19.4])
    assert c.base == pytest.approx(20.05)
    assert c.new == pytest.approx(19.125)
    assert c.change_pct == pytest.approx(-0.925 / 20.05 * 100)
    assert c.p_value == pytest.approx(0.00091087, rel=1e-4)
    assert c.significant is True
    # the verdict follows alpha
    assert welch([20.1, 19.8, 20.3, 20.0], [18.9, 19.2, 19.0, 19.4], alpha=1e-4).significant is False


def test_welch_single_sample_not_testable() -> None:
    c = welch([10.0], [12.0, 13.0])
    assert c == Comparison(10.0, 12.5, 25.0, None, None, "single sample: not testable")
    assert c.to_json()["significant"] is None
    with pytest.raises(ValueError):
        welch([], [1.0, 2.0])


def test_welch_zero_variance() -> None:
    differ = welch([5.0, 5.0, 5.0], [6.0, 6.0])
    assert (differ.method, differ.p_value, differ.significant) == ("no variance", 0.0, True)
    equal = welch([5.0, 5.0], [5.0, 5.0, 5.0])
    assert (equal.method, equal.p_value, equal.significant) == ("no variance", 1.0, False)
    # only one side constant: still a regular Welch test, df = n_new - 1 = 2 and
    # t = 1 / (0.5 / sqrt(3)) = 2*sqrt(3); for df=2, p = 1 - t / sqrt(2 + t^2) = 1 - sqrt(6/7)
    one_sided = welch([5.0, 5.0, 5.0], [5.5, 6.5, 6.0])
    assert one_sided.method == "welch t-test"
    assert one_sided.p_value == pytest.approx(1 - math.sqrt(6 / 7), rel=1e-9)
    assert one_sided.significant is False


def test_welch_zero_base_mean() -> None:
    c = welch([0.0, 0.0], [1.0, 2.0])
    assert c.change_pct is None
    assert c.to_json()["change_pct"] is None
