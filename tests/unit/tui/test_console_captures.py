"""The console's Captures screen logic: limits typed in the form, the live rate, completeness as shown."""

from __future__ import annotations

import pytest

from tui.backend.captures import LiveRates, complete_text


def test_the_rate_is_measured_between_two_reads_of_a_running_capture() -> None:
    rates = LiveRates()
    assert rates.update("c", 100, True, now=10.0) is None  # first read: no rate yet
    assert rates.update("c", 300, True, now=12.0) == pytest.approx(100.0)
    assert rates.update("c", 300, True, now=14.0) == 0.0  # measured idle
    assert rates.update("c", 300, False, now=16.0) is None  # ended: the table shows the average instead
    assert rates.update("c", None, True, now=18.0) is None  # no count read: no rate


def test_completeness_is_shown_only_when_known() -> None:
    assert complete_text(None) == "-"
    known = {"captured": 99, "offered": 100, "dropped": 0, "ratio": 0.99, "reason": None}
    assert complete_text(known) == "99.0%"
    unknown = {"captured": 5, "offered": None, "dropped": 0, "ratio": None, "reason": "a filter"}
    assert complete_text(unknown) == "unknown"
