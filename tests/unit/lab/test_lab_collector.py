"""The lab collector's pure parts: its pmacct configuration and the counting of what it wrote."""

from __future__ import annotations

from pathlib import Path

from appliance.lab.collector import Collector, Received, config_text, read_records, tally

LINES = [
    '{"event_type": "purge", "ip_src": "192.168.0.150", "ip_dst": "192.168.0.151", "ip_proto": "icmp", '
    '"packets": 58, "bytes": 5916}',
    '{"event_type": "purge", "ip_src": "::", "ip_dst": "ff02::16", "ip_proto": "ipv6-icmp", "packets": 1, "bytes": 94}',
    '{"event_type": "purge", "ip_src": "192.168.0.151", "ip_dst": "192.168.0.150", "ip_proto": "icmp", '
    '"packets": 62, "bytes": 6324}',
    '{"event_type": "purge", "ip_src": "192.168.0.150", "ip_dst": "192.16',  # cut short by a write in progress
]


def test_tally_sums_what_matches(tmp_path: Path) -> None:
    f = tmp_path / "out.jsonl"
    f.write_text("\n".join(LINES))
    records = read_records(f)
    assert len(records) == 3
    assert tally(records, ip_proto="icmp") == Received(2, 120, 12240)
    assert tally(records) == Received(3, 121, 12334)
    assert tally(records, ip_src="192.168.0.151", ip_proto="icmp") == Received(1, 62, 6324)
    assert read_records(tmp_path / "absent") == []


def test_config_and_target(tmp_path: Path) -> None:
    text = config_text("ipfix", "127.0.0.1", 4739, tmp_path / "o", tmp_path / "p", tmp_path / "l")
    assert "nfacctd_ip: 127.0.0.1\nnfacctd_port: 4739\n" in text
    assert "print_refresh_time[c]: 1" in text and "daemonize: false" in text
    assert Collector("sflow", "::1", 6343, tmp_path).target == "[::1]:6343"
    assert Collector("sflow", "127.0.0.1", 6343, tmp_path).target == "127.0.0.1:6343"
