"""Trace and pcap parsers on real captured output (tests/unit/data)."""

from pathlib import Path

import pytest

from appliance.isolation import ofproto as trace
from appliance.isolation import pcap, traffic

DATA = Path(__file__).parents[1] / "data"


def test_dpif_show() -> None:
    ports = trace.parse_dpif_show((DATA / "dpif-show-many-vlans.txt").read_text(), "xenbr1")
    assert ports[13] == "vif1.0" and ports[5] == "vif10.0" and ports[1] == "vif11.0"
    assert ports[1] != "xenbr1" and "xenbr1" in ports.values()
    assert trace.parse_dpif_show((DATA / "dpif-show-many-vlans.txt").read_text(), "nope") == {}


def test_trace_datapath_actions_and_vlans() -> None:
    text = (DATA / "trace-many-vlans-g01.txt").read_text()
    passes = trace.passes(text)
    assert passes == [trace.Pass(None, "6,push_vlan(vid=100,pcp=0),3,pop_vlan,9")]
    odp = trace.parse_dpif_show((DATA / "dpif-show-many-vlans.txt").read_text(), "xenbr1")
    out = trace.deliveries(passes, odp)
    assert [(d.port, d.vlan) for d in out] == [(odp[6], None), (odp[3], 100), (odp[9], None)]
    assert odp[3] == "xenbr1"  # the bridge's internal port trunks every VLAN: it gets the tagged copy


def test_trace_drop_and_missing() -> None:
    assert trace.passes("Final flow: unchanged\nDatapath actions: drop\n") == [trace.Pass(None, "")]
    with pytest.raises(ValueError):
        trace.passes("garbage")


def test_nested_actions_split() -> None:
    actions = "push_vlan(vid=1,pcp=0),2,pop_vlan,set(eth(src=02:00:00:00:00:01)),3"
    assert [(d.port, d.vlan) for d in trace.deliveries(actions, {2: "a", 3: "b"})] == [("a", 1), ("b", None)]


def test_pcap_of_a_real_leak() -> None:
    """VM3's capture from the misconfigured scenario: VLAN 1 broadcasts reached it."""
    frames = pcap.read_arp(DATA / "misconfigured-VM3.pcap")
    leaked = [f for f in frames if f.is_request and f.sender_ip == "192.168.0.150"]
    assert leaked and all(f.vlan == 1 for f in leaked)
    assert {f.target_ip for f in leaked} == {"192.168.0.151", "192.168.0.152", "192.168.0.254"}
    control = [f for f in frames if f.sender_mac == traffic.CONTROL_MAC]
    assert control and control[0].vlan is None and control[0].target_ip == "192.168.0.152"
    own = [f for f in frames if f.sender_ip == "192.168.0.152" and f.is_request]
    assert len(own) == 3 and all(f.vlan is None for f in own)
    assert frames == sorted(frames, key=lambda f: f.time)


def test_pcap_empty_and_bad(tmp_path) -> None:
    (tmp_path / "empty.pcap").write_bytes(b"")
    assert pcap.read_arp(tmp_path / "empty.pcap") == []
    (tmp_path / "bad.pcap").write_bytes(b"x" * 40)
    with pytest.raises(ValueError, match="not a pcap"):
        pcap.read_arp(tmp_path / "bad.pcap")


def test_arp_request_round_trips_through_the_parser() -> None:
    raw = traffic.arp_request("02:00:00:00:00:01", "10.0.0.1", "10.0.0.2")
    assert len(raw) == 60
    f = pcap.parse_frame(1.5, raw)
    assert f is not None and f.is_request and f.eth_dst == "ff:ff:ff:ff:ff:ff"
    assert (f.sender_mac, f.sender_ip, f.target_ip, f.vlan) == ("02:00:00:00:00:01", "10.0.0.1", "10.0.0.2", None)
    tagged = raw[:12] + b"\x81\x00\x00\x0a" + raw[12:]
    assert pcap.parse_frame(0.0, tagged).vlan == 10
    assert pcap.parse_frame(0.0, raw[:20]) is None
