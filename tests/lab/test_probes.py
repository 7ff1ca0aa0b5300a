"""Probe ports on the 2010 study's lab bridge: a suite on probes, a SIGKILLed run's probes removed by the
next run, duplicate-address detection refusing a taken address, and status/verify/plan/the exporter
leaving probe ports alone.  ovs-vsctl and /run/netns are the witnesses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from appliance.core import documents
from appliance.core.errors import UsageError
from appliance.frontdoor.hosts import build_host
from appliance.lab import Lab
from appliance.probes.spec import ProbeSpec
from appliance.services import metrics
from appliance.services.probes import ProbeSource
from appliance.switch import inventory, reader
from tests import jsonschemas
from tests.conftest import HVNET, ROOT, links, netns_list, run_hvnet
from tests.lab.policy_helpers import vsctl

pytestmark = pytest.mark.lab

SUITE = """\
version: 1
name: probes-smoke
probes:
  - {{name: P1, like: vif1.0, ip: {ip1}}}
  - {{name: P2, like: vif2.0, ip: 192.168.0.202/24}}
endpoints: {{client: P1, server: P2}}
defaults: {{duration: {duration}, repetitions: 1, concurrency: [1]}}
tests:
  - {{name: tcp-rr, type: TCP_RR, request_size: 1, response_size: 1}}
"""


def suite_file(tmp_path: Path, ip1: str = "192.168.0.201/24", duration: int = 1) -> Path:
    f = tmp_path / "probes.yaml"
    f.write_text(SUITE.format(ip1=ip1, duration=duration))
    return f


def probe_ports(lab: Lab) -> list[str]:
    return [p for p in vsctl(lab, "list-ports", "xenbr0").split() if p.startswith("hvp-")]


def probe_leftovers() -> set[str]:
    return {n for n in netns_list() if n.startswith("hvnet-probe-")} | {n for n in links() if n.startswith("hvp-")}


def tool_pids() -> set[int]:
    out = set()
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if Path(f"/proc/{pid}/comm").read_text().strip() in ("netperf", "netserver"):
                out.add(int(pid))
        except OSError:
            continue
    return out


def test_suite_runs_on_probes_and_removes_them(lab: Lab, tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = run_hvnet("suite", "run", str(suite_file(tmp_path)), "--out", str(out), timeout=180)
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads((out / "results.json").read_text())
    rep = doc["steps"][0]["repetitions"][0]["aggregate"]
    assert rep["instances"] == 1 and rep["lost"] == 0 and rep["sum"] > 0
    assert doc["meta"]["client"]["runs_in"] == doc["meta"]["server"]["runs_in"] == "probe"
    assert probe_ports(lab) == [] and probe_leftovers() == set()


def test_a_real_target_never_falls_back_to_the_lab(lab: Lab, tmp_path: Path) -> None:
    res = run_hvnet("--db", lab.db, "suite", "run", "quick", "--out", str(tmp_path / "r"))
    assert res.returncode == 2 and "does not fall back to the lab" in res.stderr, res.stderr
    assert not (tmp_path / "r").exists()


def test_taken_address_is_refused_and_nothing_is_left(lab: Lab, tmp_path: Path) -> None:
    # VM2 answers for 192.168.0.151 on VLAN 1, where P1 (like vif1.0) would join
    res = run_hvnet("suite", "run", str(suite_file(tmp_path, ip1="192.168.0.151/24")), "--out", str(tmp_path / "r"))
    assert res.returncode == 2, res.stdout + res.stderr
    assert "192.168.0.151 is taken" in res.stderr
    assert probe_ports(lab) == [] and probe_leftovers() == set()


def test_sigkilled_run_leaves_probes_that_the_next_run_removes(lab: Lab, tmp_path: Path) -> None:
    before = tool_pids()
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    slow = suite_file(tmp_path, duration=30)
    proc = subprocess.Popen([*HVNET, "suite", "run", str(slow), "--out", str(tmp_path / "killed")], cwd=ROOT,
                            env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and not (tool_pids() - before and len(probe_ports(lab)) == 2):
            time.sleep(0.2)
        assert len(probe_ports(lab)) == 2, "the probes never came up"
        time.sleep(1.0)  # mid-suite: netperf runs in P1, netserver in P2
    finally:
        proc.send_signal(signal.SIGKILL)
        proc.wait()
    assert sorted(probe_ports(lab)) == ["hvp-P1", "hvp-P2"]  # a SIGKILL leaves them ...
    listing = json.loads(run_hvnet("probes", "list", "--json").stdout)
    jsonschemas.check(documents.PROBES_LIST, listing)
    listed = listing["probes"]
    assert {p["probe"] for p in listed if p["stale"] and "is gone" in p["reason"]} == {"P1", "P2"}
    # ... and the next run on this host removes them (and what ran in them) before adding its own
    short = tmp_path / "again"
    short.mkdir()
    res = run_hvnet("suite", "run", str(suite_file(short)), "--out", str(tmp_path / "next"), timeout=180)
    assert res.returncode == 0, res.stdout + res.stderr
    assert probe_ports(lab) == [] and probe_leftovers() == set()
    assert tool_pids() - before == set()


KEEP_PROBE = """
import sys, time
from appliance.frontdoor.hosts import build_host
from appliance.probes.spec import ProbeSpec
from appliance.services.probes import ProbeSource
src = ProbeSource(build_host(sys.argv[1], discover_lab=False), [ProbeSpec("P9", "192.168.0.209/24", vlan=1,
                  bridge="xenbr0")], tools=())
src.up()
print("up", flush=True)
time.sleep(600)
"""


def test_probes_clean_removes_a_killed_runs_probes(lab: Lab) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen([HVNET[0], "-c", KEEP_PROBE, lab.db], cwd=ROOT, env=env, stdout=subprocess.PIPE,
                             text=True)  # fmt: skip
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == "up"
        assert "nothing to remove" in run_hvnet("probes", "clean").stdout  # its owner is alive: kept
        assert probe_ports(lab) == ["hvp-P9"]
    finally:
        child.kill()
        child.wait()
    res = run_hvnet("probes", "clean")
    assert res.returncode == 0 and "removed probe P9" in res.stdout, res.stdout + res.stderr
    assert probe_ports(lab) == [] and probe_leftovers() == set()


def test_status_verify_plan_and_exporter_ignore_probes(lab: Lab, tmp_path: Path) -> None:
    policy = tmp_path / "all.yaml"
    policy.write_text("version: 1\nvifs:\n  - port: '*'\n    egress: {rate: 100000}\n")
    host = build_host(lab.db, discover_lab=False)
    assert run_hvnet("apply", str(policy)).returncode == 0
    try:
        with ProbeSource(host, [ProbeSpec("P1", "192.168.0.201/24", like="vif1.0")], tools=()):
            status = json.loads(run_hvnet("status", "--json").stdout)
            assert "hvp-P1" not in {v["port"] for v in status["vifs"]}
            every = json.loads(run_hvnet("status", "--json", "--all").stdout)
            assert "hvp-P1" in {v["port"] for v in every["vifs"]}  # shown when asked
            res = run_hvnet("verify", str(policy))
            assert res.returncode == 0, res.stdout + res.stderr  # no drift: the probe is not selected
            plan = run_hvnet("plan", str(policy))
            assert "hvp-P1" not in plan.stdout, plan.stdout
            out = metrics.Families()
            with host.connect(reader.COLUMNS) as conn:
                metrics.add_inventory(out, "lab", inventory.read(conn))
            # every VIF family's labels are (host, vif, ...): the port is the second
            ports = {labels[1] for fam in out if fam.name.startswith("hvnet_vif_") for labels, _ in fam.samples}
            assert "vif1.0" in ports and "hvp-P1" not in ports
    finally:
        run_hvnet("rollback")
    assert probe_ports(lab) == []


def test_a_hostile_probe_mark_is_shown_escaped_and_never_names_a_namespace(lab: Lab) -> None:
    hostile = "\x1b[31m../../run/netns/hvnet-VM1"
    vsctl(lab, "add-port", "xenbr0", "hvp-evil", "--", "set", "Interface", "hvp-evil",
          f'external_ids:hvnet-probe="{hostile}"', "external_ids:hvnet-probe-expires=1",
          "external_ids:hvnet-probe-netns=hvnet-VM1")  # fmt: skip
    listed = run_hvnet("probes", "list")
    assert "\x1b" not in listed.stdout and "\\x1b[31m" in listed.stdout, listed.stdout
    res = run_hvnet("probes", "clean")
    assert res.returncode == 0 and "\x1b" not in res.stdout, res.stdout + res.stderr
    assert "hvp-evil" not in vsctl(lab, "list-ports", "xenbr0")  # the expired row is removed ...
    assert "hvnet-VM1" in netns_list()  # ... and no namespace but one hvnet would have named is touched


SCENARIO = """\
name: probes-iso
probes:
  - {name: P1, like: vif1.0, ip: 192.168.0.201/24}
  - {name: P2, like: vif2.0, ip: 192.168.0.202/24}
  - {name: P3, like: vif3.0, ip: 192.168.0.203/24}
expect:
  matrix:
    P1: {P2: yes, P3: no}
    P2: {P1: yes, P3: no}
    P3: {P1: no, P2: no}
"""


def test_an_isolation_scenario_runs_on_probes(lab: Lab, tmp_path: Path) -> None:
    f = tmp_path / "probes-iso.yaml"
    f.write_text(SCENARIO)
    res = run_hvnet("isolation", "check", str(f), "--json", "--out", str(tmp_path / "caps"))
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    assert set(doc["methods"]) == {"traffic", "trace"}
    assert probe_ports(lab) == [] and probe_leftovers() == set()


def test_a_long_run_renews_its_probes_expiry(lab: Lab) -> None:
    host = build_host(lab.db, discover_lab=False)
    spec = ProbeSpec("P1", "192.168.0.201/24", like="vif1.0")
    with ProbeSource(host, [spec], tools=(), lease_s=4) as src:
        first = json.loads(run_hvnet("probes", "list", "--json").stdout)["probes"][0]["expires"]
        time.sleep(5)  # longer than the lease: only renewal keeps it
        now = json.loads(run_hvnet("probes", "list", "--json").stdout)["probes"][0]
        assert now["expires"] > first and not now["stale"], now
        assert src.require(None, ["P1"])["P1"].vif == "hvp-P1"  # type: ignore[arg-type]
    assert probe_ports(lab) == []


def test_ovn_controllers_bridge_is_refused(lab: Lab) -> None:
    host = build_host(lab.db, discover_lab=False)
    vsctl(lab, "set", "Open_vSwitch", ".", "external_ids:ovn-remote=tcp:192.0.2.1:6642",
          "external_ids:ovn-bridge=xenbr0")  # fmt: skip
    try:
        with pytest.raises(UsageError, match="ovn-controller's integration bridge"):
            ProbeSource(host, [ProbeSpec("P1", "192.168.0.201/24", like="vif1.0")], tools=()).up()
    finally:
        vsctl(lab, "remove", "Open_vSwitch", ".", "external_ids", "ovn-remote", "--", "remove", "Open_vSwitch", ".",
              "external_ids", "ovn-bridge")  # fmt: skip
    assert probe_ports(lab) == [] and probe_leftovers() == set()
