"""Rates and sizes with units (appliance.core.units): what each spelling means, what is refused and why."""

from __future__ import annotations

from fractions import Fraction

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.core import units
from appliance.core.units import UnitError


@pytest.mark.parametrize(
    "text, kbit",
    [
        ("10240", 10240),  # a bare number is kbit/s, as it always was
        (10240, 10240),
        ("10mbit", 10000),
        ("10 Mbit/s", 10000),
        ("10240kbit", 10240),
        ("10240KBIT/S", 10240),
        ("1gbit", 1_000_000),
        ("512k", 512),  # policy files' old short form: bits
        ("2.5m", 2500),
        ("8000bit", 8),
        ("1250KB/s", 10000),  # bytes: 1250 * 8000 bit
        ("1250kB/s", 10000),
        ("1.25MB/s", 10000),
        ("1GB/s", 8_000_000),
        ("1220KiB/s", 9994),  # 9994.24, rounded
        ("1MiB/s", 8389),  # 8388.608
        ("1kibit", 1),  # 1.024
        ("0", 0),
    ],
)
def test_rates(text, kbit) -> None:
    assert units.parse_rate(text) == kbit


@pytest.mark.parametrize(
    "text, kbit", [("8000", 8000), ("1mbit", 1000), ("125KB", 1000), ("1KiB", 8), ("64 kbit", 64), ("1000B", 8)]
)
def test_sizes(text, kbit) -> None:
    assert units.parse_size(text) == kbit


@pytest.mark.parametrize("text", ["10kbps", "10Kbps", "10 KBPS", "2mbps", "1Gbps", "100bps", "10kb", "10Mb/s", "5b"])
def test_bps_and_lower_case_b_are_refused_naming_both_readings(text) -> None:
    with pytest.raises(UnitError, match="ambiguous") as exc:
        units.parse_rate(text, "--ingress-rate")
    message = str(exc.value)
    assert "--ingress-rate" in message and repr(text) in message
    assert "bytes/s to tc" in message and "bits/s to OVS" in message and "XenServer" in message


def test_the_ambiguity_message_suggests_both_spellings() -> None:
    with pytest.raises(UnitError) as exc:
        units.parse_rate("10kbps")
    assert "'kbit' for bits" in str(exc.value) and "'KB' for bytes" in str(exc.value)
    with pytest.raises(UnitError) as exc:
        units.parse_rate("10mibps")
    assert "'mibit' for bits" in str(exc.value) and "'MiB' for bytes" in str(exc.value)


@pytest.mark.parametrize(
    "value, fragment",
    [
        ("-1", "must not be negative"),
        ("-2mbit", "must not be negative"),
        (-5, "must not be negative"),
        (float("inf"), "finite"),
        (float("nan"), "finite"),
        ("inf", "not a rate/size"),
        ("nan", "not a rate/size"),
        ("1e3", "not a rate/size"),
        ("10 furlongs", "no unit hvnet knows"),
        ("10.5", "whole number"),  # a bare number is already the base unit
        (10.5, "whole number"),
        ("400bit", "rounds to 0"),
        ("3000gbit", "larger than OVS accepts"),
        (2**31 + 1, "larger than OVS accepts"),
        ("1" * 41, "characters long"),
        ("10/s", "names no unit"),
        (True, "not bool"),
        (None, "not NoneType"),
        ([1], "not list"),
        ("", "not a rate/size"),
        ("mbit", "not a rate/size"),
    ],
)
def test_refused(value, fragment) -> None:
    with pytest.raises(UnitError, match=fragment):
        units.parse_rate(value)


def test_a_size_is_not_a_rate() -> None:
    with pytest.raises(UnitError, match="a burst is a size"):
        units.parse_size("125KB/s")


def test_rounding_is_said() -> None:
    assert units.rounding_note("10mbit", "--egress-rate") is None
    assert units.rounding_note("10240", "--egress-rate") is None
    note = units.rounding_note("1220KiB/s", "--ingress-rate")
    assert note == "--ingress-rate 1220KiB/s is 9994.24 kbit/s; OVS takes whole kbit: 9994 kbit/s"
    assert "kbit:" in (units.rounding_note("1KiB", "--ingress-burst", rate=False) or "")


def test_other_tools_units() -> None:
    # XenServer's kbps and libvirt's average are kilobytes/s; libvirt's burst is KiB (8192 bit).
    assert units.xe_kbps(10000) == 1250
    assert units.libvirt_average(10000) == 1250
    assert units.libvirt_burst(8192) == 1000


_BITS = {"bit": 1, "kbit": 1000, "mbit": 10**6, "KB": 8000, "MB": 8 * 10**6, "KiB": 8192, "MiB": 8 * 1024**2}


@settings(max_examples=300, deadline=None)
@given(number=st.integers(min_value=1, max_value=10**6), unit=st.sampled_from(sorted(_BITS)), per_s=st.booleans())
def test_round_trip_is_the_nearest_whole_kbit(number, unit, per_s) -> None:
    text = f"{number}{unit}{'/s' if per_s else ''}"
    exact = Fraction(number * _BITS[unit], 1000)
    try:
        got = units.parse_rate(text)
    except UnitError as exc:  # only the documented refusals
        assert "larger than OVS" in str(exc) or "rounds to 0" in str(exc)
        assert exact > units.MAX_KBIT or exact < Fraction(1, 2)
        return
    assert abs(got - exact) <= Fraction(1, 2)
    assert units.parse_rate(str(got)) == got  # what hvnet shows reads back as itself


@settings(max_examples=500, deadline=None)
@given(st.one_of(st.text(max_size=30), st.integers(), st.floats(), st.none(), st.booleans()))
def test_never_raises_anything_but_the_unit_error(value) -> None:
    for parse in (units.parse_rate, units.parse_size):
        try:
            out = parse(value)
        except UnitError:
            continue
        assert isinstance(out, int) and 0 <= out <= units.MAX_KBIT
