"""An Open vSwitch as old as XCP-ng 8.2's (2.5.3), on the real lab: what it lacks is refused, nothing changes.

The lab's ``Open_vSwitch`` row says ``ovs_version=2.5.3`` for the module (ovs-vsctl, as a dom0's
``ovs-ctl`` would have written it), and each request that needs a newer switch -- an ERSPAN
mirror, meter policing, a TAP, the isolation check's and the audit's traces -- must exit 2 with
both versions named, no traceback, and the switch (OVSDB and OpenFlow, read with ovs-vsctl and
ovs-ofctl) exactly as before.  The lab's real version is put back after the module.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.lab import Lab
from tests.conftest import ROOT, run_hvnet
from tests.lab.policy_helpers import config, reset, vsctl, write

TAGS = {"vif1.0": 1, "vif2.0": 1, "vif3.0": 2}
OLD = "2.5.3"


@pytest.fixture(scope="module")
def old_lab(lab: Lab) -> Iterator[Lab]:
    real = vsctl(lab, "get", "Open_vSwitch", ".", "ovs_version").strip('"')
    vsctl(lab, "set", "Open_vSwitch", ".", f"ovs_version={OLD}")
    try:
        yield lab
    finally:
        vsctl(lab, "set", "Open_vSwitch", ".", f"ovs_version={real}")


@pytest.fixture
def before(old_lab: Lab) -> dict:
    reset(old_lab, TAGS)
    return config(old_lab)


def refused(res, needed: str) -> None:
    assert "Traceback" not in res.stderr, res.stderr
    assert res.returncode == 2, res.stdout + res.stderr
    assert f"Open vSwitch {OLD} has no" in res.stderr and f"it needs {needed} or later" in res.stderr, res.stderr


def test_the_lab_says_it_is_old(old_lab: Lab) -> None:
    assert vsctl(old_lab, "get", "Open_vSwitch", ".", "ovs_version") == f'"{OLD}"'
    res = run_hvnet("--db", old_lab.db, "status", "--json")
    assert res.returncode == 0, res.stderr


def test_an_erspan_mirror_is_refused(old_lab: Lab, before: dict) -> None:
    res = run_hvnet("mirror", "add", "m1", "--bridge", "xenbr0", "--all", "--output-erspan", "192.0.2.9")
    refused(res, "2.10")
    assert "ERSPAN" in res.stderr
    assert config(old_lab) == before


def test_meter_policing_is_refused(old_lab: Lab, before: dict, tmp_path: Path) -> None:
    f = write(tmp_path / "p.yaml", "version: 1\nvifs:\n  - vm: VM1\n    ingress: {rate: 10240, mechanism: meter}\n")
    res = run_hvnet("apply", f, env={"HVNET_STATE_DIR": str(tmp_path / "state")})
    refused(res, "2.8")  # the lab's bridge is userspace (netdev): its meters need the --no-names read-back first
    assert "use mechanism: tc" in res.stderr
    assert config(old_lab) == before


def test_a_tap_is_refused(old_lab: Lab, before: dict, tmp_path: Path) -> None:
    text = "version: 1\nbridges:\n  xenbr0:\n    taps:\n      t1:\n        vifs: [vm:VM1]\n        output: {gre: 192.0.2.9}\n"
    res = run_hvnet("apply", write(tmp_path / "t.yaml", text), env={"HVNET_STATE_DIR": str(tmp_path / "state")})
    refused(res, "2.8")
    assert config(old_lab) == before


def test_the_isolation_trace_is_refused(old_lab: Lab, before: dict, tmp_path: Path) -> None:
    scenario = ROOT / "vlan-tests" / "seed-three-vm.yaml"
    res = run_hvnet("isolation", "check", str(scenario), "--method", "trace", "--out", str(tmp_path / "o"))
    refused(res, "2.8")
    assert "check with --method traffic" in res.stderr
    assert config(old_lab) == before
    res = run_hvnet("--db", old_lab.db, "isolation", "audit", "vif1.0", "vif2.0", "--method", "trace")
    refused(res, "2.8")
    assert config(old_lab) == before


def test_what_2_5_can_do_still_works(old_lab: Lab, before: dict, tmp_path: Path) -> None:
    """A VLAN and tc policing: no OpenFlow read of a pipeline hvnet never installed (2.5 has no --no-names)."""
    text = "version: 1\nvifs:\n  - vm: VM1\n    vlan: {tag: 7}\n    ingress: {rate: 10240, mechanism: tc}\n"
    res = run_hvnet("apply", write(tmp_path / "v.yaml", text), env={"HVNET_STATE_DIR": str(tmp_path / "state")})
    assert "Traceback" not in res.stderr, res.stderr
    # applied; a kernel without tc's police action (this lab's) is said as such, with exit 1, and nothing else
    problems = [line for line in res.stdout.splitlines() if line.startswith("problem:")]
    if res.returncode == 1:
        assert problems and all("not enforced by tc" in line for line in problems), res.stdout + res.stderr
    else:
        assert res.returncode == 0 and not problems, res.stdout + res.stderr
    assert "has no" not in res.stdout + res.stderr  # nothing refused for the switch's age
    assert vsctl(old_lab, "get", "port", "vif1.0", "tag") == "7"
    assert vsctl(old_lab, "get", "interface", "vif1.0", "ingress_policing_rate") == "10240"
    reset(old_lab, TAGS)
    assert config(old_lab) == before
