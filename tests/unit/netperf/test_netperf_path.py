"""A suite across an OVN pool: the path line (chassis, tunnel, MTUs) from real ``ip`` outputs, and a pool suite
that would apply policy to ovn-controller's br-int is refused at its line."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.core.errors import ConfigError
from appliance.netperf.define import suite
from appliance.netperf.report import path as path_text
from appliance.netperf.run import path

ROOT = Path(__file__).resolve().parents[3]
DATA = Path(__file__).parents[1] / "data"


def test_the_underlay_device_and_its_mtu_are_read_from_ip() -> None:
    assert path.route_dev((DATA / "ip-route-get-underlay.txt").read_text()) == "brphy"
    assert path.link_mtu((DATA / "ip-link-brphy.txt").read_text()) == 9000
    assert path.link_mtu((DATA / "ip-link-guest-eth0.txt").read_text()) == 1500
    assert path.route_dev("RTNETLINK answers: Network is unreachable\n") is None
    assert path.link_mtu('Device "brphy" does not exist.\n') is None


def test_the_path_line_says_what_was_not_measured() -> None:
    full = {"client_chassis": "hv1", "server_chassis": "hv2", "encap": "geneve", "local_ip": "10.254.0.1",
            "remote_ip": "10.254.0.2", "underlay_dev": "brphy", "underlay_mtu": 9000, "client_mtu": 1500,
            "server_mtu": 1500}  # fmt: skip
    assert path_text.describe(full, "VM1", "VM2") == (
        "path: VM1 on chassis hv1 -> VM2 on chassis hv2, geneve 10.254.0.1 -> 10.254.0.2; "
        "MTU: guests 1500/1500, underlay 9000 (brphy)"
    )
    partial = {**full, "encap": None, "remote_ip": None, "underlay_dev": None, "underlay_mtu": None,
               "server_mtu": None}  # fmt: skip
    assert path_text.describe(partial, "VM1", "VM2") == (
        "path: VM1 on chassis hv1 -> VM2 on chassis hv2, tunnel not measured; "
        "MTU: guests 1500/not measured, underlay not measured"
    )
    same = {**partial, "server_chassis": "hv1"}
    assert "one chassis, no tunnel; MTU: guests 1500/not measured, no underlay" in path_text.describe(same, "a", "b")


def test_the_shipped_pool_suite_is_quick_and_a_pool_suite_applies_no_policy(tmp_path: Path) -> None:
    s = suite.load(ROOT / "netperf-suites" / "ovn-pool.yaml")
    assert s.topology.ovn and (s.client, s.server.guest) == ("VM1", "VM2")
    assert [t.type for t in s.tests] == ["TCP_STREAM", "TCP_RR"] and s.estimated_seconds() < 30
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        f"version: 1\ntopology: {ROOT / 'vlan-tests' / 'topologies' / 'ovn-pool.yaml'}\n"
        "endpoints: {client: VM1, server: VM2}\nsetup:\n  policy:\n    vifs:\n"
        "      - {vm: VM1, ingress: {rate: 10240}}\ntests:\n  - {type: TCP_RR}\n"
    )
    with pytest.raises(ConfigError) as exc:
        suite.load(bad)
    (problem,) = exc.value.problems
    assert str(problem).startswith(f"{bad}:4: setup: on an OVN pool")
    assert "hvnet --pool ovn-pool apply FILE" in str(problem)
