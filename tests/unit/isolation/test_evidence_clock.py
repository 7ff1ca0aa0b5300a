"""A leak's first frame is shown by its time of day, whatever time a hand-edited result gives it."""

from __future__ import annotations

import re

from appliance.isolation.model import Evidence


def test_a_frame_time_is_a_time_of_day() -> None:
    ev = Evidence(time=1_700_000_000.25, src_mac="02:00:00:00:00:01", src_ip="10.0.0.1", vlan=10, pcap="a.pcap")
    assert re.fullmatch(r"\d\d:\d\d:\d\d\.250000", ev.clock), ev.clock


def test_a_time_no_clock_can_show_is_shown_as_written() -> None:
    for t in (1e20, -1e20, float("nan"), float("inf")):
        ev = Evidence(time=t, src_mac="02:00:00:00:00:01", src_ip="10.0.0.1", vlan=None, pcap="a.pcap")
        assert ev.clock == str(t)
