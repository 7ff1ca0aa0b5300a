"""services.suites without a run: the one parser of the operator's overrides, as each front end words it."""

from __future__ import annotations

import pytest

from appliance.services import suites


def test_an_override_is_refused_in_the_words_of_the_front_end_that_took_it() -> None:
    assert suites.parse_override("concurrency", "1, 4") == (1, 4)
    assert suites.parse_override("duration", "30", "--duration") == 30
    with pytest.raises(suites.OverrideError, match=r"^--duration must be 1\.\.3600, not 0$"):
        suites.parse_override("duration", "0", "--duration")
    with pytest.raises(suites.OverrideError, match=r"^repetitions must be 1\.\.100, not 101$"):
        suites.parse_override("repetitions", "101")
    with pytest.raises(suites.OverrideError, match=r"^expected integers like 1,4,8"):
        suites.parse_override("concurrency", "a")


def test_a_blank_option_is_refused_but_a_blank_field_keeps_the_suites_value() -> None:
    """``--duration ''`` is a mistake on a command line; an empty field on the screen means "as the suite says"."""
    with pytest.raises(suites.OverrideError, match="--duration must be an integer, not ''"):
        suites.parse_override("duration", "", "--duration")
    assert suites.parse_overrides(" ", "", "") == suites.Overrides()
    with pytest.raises(suites.OverrideError, match=r"^concurrency: expected integers"):
        suites.parse_overrides("a", "", "")
