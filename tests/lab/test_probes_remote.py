"""Probe ports on a hypervisor over SSH (vlan-tests/topologies/two-hosts.yaml's hv2, a namespace whose sshd
PATH holds a dom0's tools): a suite measured between two probes there, what is refused before anything is
added (netperf missing on that host: exit 4; the lab for a real target), and nothing left behind."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.lab import Lab
from tests.conftest import ROOT, netns_list, run_hvnet
from tests.lab.conftest import lab_up

pytestmark = pytest.mark.skipif(not os.path.exists("/usr/sbin/sshd"), reason="openssh-server (make setup installs it)")
TOPOLOGY = ROOT / "vlan-tests" / "topologies" / "two-hosts.yaml"

SUITE = """\
version: 1
name: probes-remote
probes:
  - {name: P1, like: vif2.0, ip: 192.168.0.201/24}
  - {name: P2, vlan: 1, bridge: xenbr0, ip: 192.168.0.202/24}
endpoints: {client: P1, server: P2}
defaults: {duration: 1, repetitions: 1, concurrency: [2]}
tests:
  - {name: tcp-rr, type: TCP_RR, request_size: 1, response_size: 1}
"""


@pytest.fixture(scope="module")
def two_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with lab_up(TOPOLOGY, tmp_path_factory.mktemp("two-hosts") / "run") as lab:
        yield lab


def hv2(lab: Lab, *args: str) -> object:
    return run_hvnet("--host", "hv2", *args, env={"HVNET_LAB_DIR": str(lab.run_dir)}, timeout=180)


def no_probes(lab: Lab) -> bool:
    listed = json.loads(hv2(lab, "probes", "list", "--json").stdout)["probes"]  # type: ignore[attr-defined]
    return listed == [] and not any(n.startswith("hvnet-probe-") for n in netns_list())


def test_a_suite_runs_between_probes_on_a_host_over_ssh(two_hosts: Lab, tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text(SUITE)
    res = hv2(two_hosts, "suite", "run", str(f), "--out", str(tmp_path / "run"))
    assert res.returncode == 0, res.stdout + res.stderr  # type: ignore[attr-defined]
    agg = json.loads((tmp_path / "run" / "results.json").read_text())["steps"][0]["repetitions"][0]["aggregate"]
    assert agg["instances"] == 2 and agg["lost"] == 0 and agg["sum"] > 0
    # started on hv2 by the endpoint interface's shell there, not as local children of hvnet
    assert "netperf ran on hv2" in (tmp_path / "run" / "results.json").read_text()
    assert no_probes(two_hosts)


def test_netperf_missing_on_the_probes_host_exits_4_naming_host_and_tool(two_hosts: Lab, tmp_path: Path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text(SUITE)
    tool = two_hosts.run_dir / "hosts" / "hv2" / "bin" / "netperf"  # the lab host's PATH: as if not installed
    target = os.readlink(tool)
    tool.unlink()
    try:
        res = hv2(two_hosts, "suite", "run", str(f), "--out", str(tmp_path / "run"))
    finally:
        tool.symlink_to(target)
    out = res.stderr  # type: ignore[attr-defined]
    assert res.returncode == 4, out  # type: ignore[attr-defined]
    assert "netperf is not installed on hv2" in out and "install on hv2" in out and "netperf (Debian" in out
    assert not (tmp_path / "run").exists() and no_probes(two_hosts)


def test_a_real_target_is_not_measured_on_the_lab_unless_asked(two_hosts: Lab, tmp_path: Path) -> None:
    res = hv2(two_hosts, "isolation", "check", str(ROOT / "vlan-tests" / "seed-three-vm.yaml"))
    assert res.returncode == 2 and "does not fall back to the lab" in res.stderr  # type: ignore[attr-defined]


SCENARIO = """\
name: probes-remote-iso
probes:
  - {name: P1, like: vif2.0, ip: 192.168.0.201/24}
  - {name: P2, vlan: 1, bridge: xenbr0, ip: 192.168.0.202/24}
  - {name: P3, vlan: 2, bridge: xenbr0, ip: 192.168.0.203/24}
expect:
  matrix:
    P1: {P2: yes, P3: no}
    P2: {P1: yes, P3: no}
    P3: {P1: no, P2: no}
"""


def test_an_isolation_scenario_on_probes_over_ssh(two_hosts: Lab, tmp_path: Path) -> None:
    f = tmp_path / "iso.yaml"
    f.write_text(SCENARIO)
    res = hv2(two_hosts, "isolation", "check", str(f), "--method", "trace")
    assert res.returncode == 0, res.stdout + res.stderr  # type: ignore[attr-defined]
    assert "PASS" in res.stdout  # type: ignore[attr-defined]
    res = hv2(two_hosts, "isolation", "check", str(f))  # the traffic method's senders and captures are local
    assert res.returncode == 2 and "--method trace" in res.stderr  # type: ignore[attr-defined]
    assert no_probes(two_hosts)
