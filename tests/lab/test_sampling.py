"""sFlow and IPFIX on the 2010 study's lab: policy verbs with ovs-vsctl as the witness, a real
collector counting the samples of real traffic, and the agent putting back a deleted sFlow row."""

from __future__ import annotations

import json
import math
import re
import socket
import subprocess
from pathlib import Path

import pytest

from appliance.core import documents
from appliance.lab import Lab
from appliance.lab.collector import Collector
from tests import jsonschemas
from tests.conftest import run_hvnet
from tests.lab.policy_helpers import vsctl, write
from tests.lab.test_policy_agent import AgentProc, wait_until

POLICY = """\
version: 1
bridges:
  xenbr0:
    sflow: {targets: ["192.0.2.9:6343"], sampling: 64, polling: 10, header: 128}
    ipfix: {targets: ["192.0.2.9:4739"], sampling: 400, obs_domain_id: 1, obs_point_id: 1,
            cache_active_timeout: 60, cache_max_flows: 1000}
"""


@pytest.fixture(autouse=True)
def clean(lab: Lab):
    vsctl(lab, "clear", "bridge", "xenbr0", "sflow", "ipfix")
    yield
    vsctl(lab, "clear", "bridge", "xenbr0", "sflow", "ipfix")


def hv(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    res = run_hvnet(*args, timeout=timeout)
    assert "Traceback" not in res.stderr, res.stderr
    return res


def listed(lab: Lab, table: str) -> list[dict[str, object]]:
    data = json.loads(vsctl(lab, "--format=json", "list", table))
    return [dict(zip(data["headings"], r)) for r in data["data"]]


def free_udp_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_apply_verify_export_rollback(lab: Lab, tmp_path: Path) -> None:
    f = write(tmp_path / "p.yaml", POLICY)
    plan = json.loads(hv("plan", f, "--json").stdout)
    jsonschemas.check(documents.POLICY_PLAN, plan)  # the real output is what docs/reference/json.md publishes
    assert plan["changes"][0]["after"]["polling_s"] == 10
    assert [(c["kind"], c["name"]) for c in plan["changes"]] == [("sflow", "xenbr0"), ("ipfix", "xenbr0")]
    assert listed(lab, "sflow") == [] and listed(lab, "ipfix") == []  # plan touched nothing

    res = hv("apply", f, "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    jsonschemas.check(documents.POLICY_APPLY, json.loads(res.stdout))
    (sflow,) = listed(lab, "sflow")
    assert (sflow["targets"], sflow["sampling"], sflow["polling"], sflow["header"]) == ("192.0.2.9:6343", 64, 10, 128)
    assert sflow["external_ids"] == ["map", [["hvnet-owner", "hvnet"]]]
    (ipfix,) = listed(lab, "ipfix")
    assert (ipfix["sampling"], ipfix["cache_active_timeout"], ipfix["cache_max_flows"]) == (400, 60, 1000)
    status = hv("status").stdout
    assert "xenbr0: sFlow to 192.0.2.9:6343 1-in-64 polling 10 s header 128 B" in status
    assert "xenbr0: IPFIX to 192.0.2.9:4739 1-in-400" in status

    assert hv("verify", f).returncode == 0
    vsctl(lab, "set", "sflow", sflow["_uuid"][1], "sampling=5")  # drift made behind hvnet's back
    drift = hv("verify", f, "--json")
    assert drift.returncode == 1
    assert [d["setting"] for d in json.loads(drift.stdout)["drift"]] == ["sflow"]
    assert hv("apply", f).returncode == 0

    exported = hv("export").stdout
    again = write(tmp_path / "exported.yaml", exported)
    assert "sflow:" in exported and "ipfix:" in exported
    assert json.loads(hv("plan", again, "--json").stdout)["changes"] == []  # the export round-trips

    assert hv("rollback").returncode == 0  # the last apply (the re-apply of sampling 64): back to 5
    assert listed(lab, "sflow")[0]["sampling"] == 5
    vsctl(lab, "clear", "bridge", "xenbr0", "sflow", "ipfix")


def test_imperative_verbs_and_bad_input(lab: Lab) -> None:
    res = hv("sflow", "set", "xenbr9", "--target", "192.0.2.9:6343")
    assert res.returncode == 2 and "bridge xenbr9 does not exist (bridges: xenbr0)" in res.stderr, res.stderr
    res = hv("sflow", "set", "xenbr0", "--target", "192.0.2.9:0", "--sampling", "0", "--header", "9000")
    assert res.returncode == 2
    for flag in ("--target", "--sampling", "--header"):
        assert f"command line: {flag}:" in res.stderr, res.stderr
    res = hv("ipfix", "set", "xenbr0", "--target", "192.0.2.9:4739", "--cache-active-timeout", "-1")
    assert res.returncode == 2 and "--cache-active-timeout" in res.stderr, res.stderr
    assert listed(lab, "sflow") == [] and listed(lab, "ipfix") == []  # nothing changed

    res = hv("ipfix", "set", "xenbr0", "--target", "192.0.2.9:4739", "--sampling", "1", "--cache-max-flows", "0")
    assert res.returncode == 0, res.stdout + res.stderr
    assert listed(lab, "ipfix")[0]["cache_max_flows"] == 0
    assert hv("ipfix", "clear", "xenbr0").returncode == 0
    assert listed(lab, "ipfix") == []
    assert "nothing to apply" in hv("ipfix", "clear", "xenbr0").stdout


def ping(lab: Lab, *args: str) -> int:
    """Packets ping's echo requests and replies put through the bridge (each enters it once)."""
    res = lab.guest_exec("VM1", ["ping", "-q", *args, "192.168.0.151"], timeout=30, check=True)
    m = re.search(r"(\d+) packets transmitted, (\d+) received", res.stdout)
    assert m, res.stdout
    return int(m.group(1)) + int(m.group(2))


def test_collector_receives_the_samples_of_the_traffic(lab: Lab, tmp_path: Path) -> None:
    """sFlow samples at 1-in-N on ingress; pmacct's sfacctd counts each sample as one packet.

    At 1-in-1 every ICMP packet is a sample, so the count is exact unless a
    datagram was lost on loopback.  At 1-in-N the number of samples is
    binomial(packets, 1/N) (OVS draws each packet's fate at random): we allow
    five standard deviations either side, far wider than chance needs, so a
    failure means samples were lost or sampling is not 1-in-N.
    """
    for rate, args in ((1, ("-c", "300", "-i", "0.005")), (10, ("-f", "-c", "4000"))):
        with Collector("sflow", "127.0.0.1", free_udp_port(), tmp_path / f"rate{rate}") as collector:
            res = hv("sflow", "set", "xenbr0", "--target", collector.target, "--sampling", str(rate))
            assert res.returncode == 0, res.stdout + res.stderr
            packets = ping(lab, *args)
            expected = packets / rate
            sd = math.sqrt(packets * (1 / rate) * (1 - 1 / rate))
            low = expected - max(5 * sd, 0.01 * expected)

            def arrived(low: float = low) -> bool:
                return collector.received(ip_proto="icmp").packets >= low

            wait_until(arrived, 5)
        got = collector.received(ip_proto="icmp")  # all of it: written once more when stopped
        assert low <= got.packets <= expected + 5 * sd, (rate, packets, got)
        assert got.bytes >= got.packets * 98  # each sample is at least the ICMP packet's frame
        print(f"1-in-{rate}: {packets} packets, {got.packets} samples (expected {expected:.0f} +- {5 * sd:.0f})")


def test_the_largest_header_allowed_still_reaches_the_collector(lab: Lab, tmp_path: Path) -> None:
    """hvnet's bound on header bytes is what ovs-vswitchd still sends: the samples of
    full-size frames with a 600-byte header (a larger one is dropped inside OVS)."""
    with Collector("sflow", "127.0.0.1", free_udp_port(), tmp_path) as collector:
        res = hv("sflow", "set", "xenbr0", "--target", collector.target, "--sampling", "1", "--header", "600")
        assert res.returncode == 0, res.stdout + res.stderr
        packets = ping(lab, "-c", "50", "-i", "0.01", "-s", "1400")
        wait_until(lambda: collector.received(ip_proto="icmp").packets >= packets, 5)
    assert collector.received(ip_proto="icmp").packets == packets
    assert "too big" not in (lab.switch.run_dir / "ovs-vswitchd.log").read_text()


def test_agent_restores_a_deleted_sflow_row(lab: Lab, tmp_path: Path) -> None:
    policy = tmp_path / "policy.yaml"
    policy.write_text(POLICY)
    agent = AgentProc(policy, tmp_path / "agent.log")
    try:
        assert wait_until(lambda: len(listed(lab, "sflow")) == 1, 10) is not None, agent.text()
        first = listed(lab, "sflow")[0]["_uuid"]
        vsctl(lab, "clear", "bridge", "xenbr0", "sflow")  # the row goes with its reference
        assert listed(lab, "sflow") == []
        took = wait_until(lambda: len(listed(lab, "sflow")) == 1, 5)
        assert took is not None, agent.text()
        (back,) = listed(lab, "sflow")
        assert back["_uuid"] != first and back["sampling"] == 64
        assert back["external_ids"] == ["map", [["hvnet-owner", "hvnet"]]]
        assert "re-applied bridge xenbr0 sflow" in agent.text()
    finally:
        assert agent.stop() == 0, agent.text()
    assert "Traceback" not in agent.text()


def test_ipfix_collector_accounts_each_packet_at_ingress_and_egress(lab: Lab, tmp_path: Path) -> None:
    """Bridge IPFIX in OVS samples a packet where it enters and where it leaves the bridge
    (other_config enable-input-sampling and enable-output-sampling, both on by default), so at
    1-in-1 the flow records nfacctd receives account for every ICMP packet twice.  OVS exports a
    flow when it has been in its cache for cache_active_timeout (1 s here): we wait for it."""
    with Collector("ipfix", "127.0.0.1", free_udp_port(), tmp_path) as collector:
        res = hv("ipfix", "set", "xenbr0", "--target", collector.target, "--sampling", "1",
                 "--cache-active-timeout", "1", "--cache-max-flows", "100")  # fmt: skip
        assert res.returncode == 0, res.stdout + res.stderr
        packets = ping(lab, "-c", "200", "-i", "0.005")
        wait_until(lambda: collector.received(ip_proto="icmp").packets >= 2 * packets, 8)
    got = collector.received(ip_proto="icmp")
    assert got.packets == 2 * packets, (packets, got)
    assert got.bytes == got.packets * 84  # the IPv4 length of a default ping (84 bytes), as IPFIX counts it
