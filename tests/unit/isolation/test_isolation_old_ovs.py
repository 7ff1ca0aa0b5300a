"""The trace method on a switch older than the ofproto/trace output hvnet parses: refused before any setting."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from appliance.core.errors import EXIT_USAGE, UsageError
from appliance.isolation import check


class Conn:
    """The root row alone: anything else the check would do to the switch fails the test."""

    def __init__(self, version: str | None) -> None:
        self.row = SimpleNamespace(_data=None, ovs_version=[version] if version else [])

    def root(self) -> SimpleNamespace:
        return self.row

    def __getattr__(self, name: str):
        raise AssertionError(f"the check touched the switch ({name}) before refusing")


def sites(*versions: str | None) -> list[check.Site]:
    return [check.Site(Conn(v), None, (), f"h{i}") for i, v in enumerate(versions)]  # type: ignore[arg-type]


def test_trace_is_refused_on_ovs_2_5_naming_both_versions() -> None:
    with pytest.raises(UsageError) as exc:
        check.run_sites(sites("3.3.0", "2.5.3"), {}, None, ("trace", "traffic"))  # type: ignore[arg-type]
    assert exc.value.exit_code == EXIT_USAGE
    assert str(exc.value).startswith("h1: Open vSwitch 2.5.3 has no ofproto/trace output in the form hvnet parses")
    assert "it needs 2.8 or later; the trace method cannot run there" in str(exc.value)
    assert exc.value.hint == "check with --method traffic, or on a host with Open vSwitch 2.8 or later"


def test_new_enough_or_unknown_versions_pass_the_check() -> None:
    check._check_trace(sites("2.8.0", "2.17.7", None))
