"""The OVS feature table: versions as the switches write them, and the refusal's words."""

from __future__ import annotations

import pytest

from appliance.core import ovsfeatures
from appliance.core.ovsfeatures import FEATURES, first_missing, meter_feature, missing, parse_version


@pytest.mark.parametrize(
    ("text", "version"),
    [
        ("2.5.3", (2, 5, 3)),  # XCP-ng 8.2's ovs_version
        ("2.17.7", (2, 17, 7)),  # XenServer 8 / XCP-ng 8.3
        ("3.3.0", (3, 3, 0)),  # this machine's lab
        ("2.17.7-1.xcpng8.3", (2, 17, 7)),
        ("2.10", (2, 10, 0)),
        ("", None),
        (None, None),
        ("unknown", None),
        ("2", None),
    ],
)
def test_versions_are_read_as_the_switches_write_them(text, version) -> None:
    assert parse_version(text) == version


def test_xcp_ng_8_2_is_refused_what_its_2_5_lacks() -> None:
    assert missing("erspan", "2.5.3") == "Open vSwitch 2.5.3 has no ERSPAN tunnels: it needs 2.10 or later"
    for key in ("ofctl-bundle", "ofctl-names", "packet-out", "trace", "meter-kernel", "meter-userspace"):
        assert missing(key, "2.5.3") is not None, key


def test_minor_versions_compare_as_numbers_not_text() -> None:
    assert missing("meter-kernel", "2.9.9") is not None
    assert missing("meter-kernel", "2.10.0") is None
    assert missing("erspan", "2.17.7") is None  # XenServer 8 has everything hvnet uses
    assert all(missing(k, "2.17.7") is None for k in FEATURES)


def test_a_switch_that_does_not_say_its_version_is_not_refused() -> None:
    assert all(missing(k, None) is None and missing(k, "") is None for k in FEATURES)


def test_the_newest_floor_is_named_first() -> None:
    why = first_missing(["ofctl-bundle", "meter-kernel", "ofctl-names"], "2.5.3")
    assert why is not None and "meters on the kernel datapath" in why and "2.10" in why
    assert first_missing(["ofctl-bundle", "ofctl-names"], "2.7.0") == (
        "Open vSwitch 2.7.0 has no ovs-ofctl --names/--no-names (the form hvnet reads flows and ports in): "
        "it needs 2.8 or later"
    )
    assert first_missing(["ofctl-bundle"], "2.6.0") is None


def test_meters_on_the_userspace_datapath_came_earlier() -> None:
    assert meter_feature("netdev") == "meter-userspace" and meter_feature("system") == "meter-kernel"
    assert meter_feature("") == "meter-kernel"  # OVS's default datapath is the kernel's
    assert missing("meter-userspace", "2.7.0") is None and missing("meter-kernel", "2.7.0") is not None


def test_an_unknown_feature_is_a_bug_in_hvnet() -> None:
    with pytest.raises(KeyError):
        missing("warp-drive", "2.5.3")


def test_every_feature_says_where_its_version_comes_from() -> None:
    for f in ovsfeatures.FEATURES.values():
        assert f.key and f.what and f.source, f
        assert (2, 0) < f.since < (3, 0), f
