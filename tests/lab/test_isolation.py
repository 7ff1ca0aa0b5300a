"""Isolation checks on the 2010 study's lab, both methods, real captures."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from appliance.core import documents
from appliance.lab import Lab
from tests import jsonschemas
from tests.conftest import ROOT, run_hvnet

VLAN_TESTS = ROOT / "vlan-tests"


def check(scenario: str, out: Path, *extra: str) -> tuple[int, dict]:
    res = run_hvnet("isolation", "check", str(VLAN_TESTS / scenario), "--json", "--out", str(out), *extra)
    assert res.returncode in (0, 1, 7), res.stderr  # 2 is invalid input, never a verdict
    assert "Traceback" not in res.stderr
    doc = json.loads(res.stdout)
    jsonschemas.check(documents.ISOLATION_RESULT, doc)  # the real result is what docs/reference/json.md publishes
    return res.returncode, doc


def cells(result: dict, method: str, key: str) -> dict[tuple[str, str], object]:
    return {(c["listener"], c["sender"]): c["value"] for c in result["methods"][method][key]}


def vsctl(lab: Lab, *args: str) -> str:
    return lab.switch.vsctl(*args).strip()


def test_seed_three_vm_both_methods(lab: Lab, tmp_path) -> None:
    code, out = check("seed-three-vm.yaml", tmp_path)
    assert code == 0
    for method in ("traffic", "trace"):
        obs = cells(out, method, "observed")
        assert obs[("VM2", "VM1")] == "yes" and obs[("VM1", "VM2")] == "yes"
        assert obs[("VM3", "VM1")] == "no" and obs[("VM1", "VM3")] == "no"
    assert {p.name for p in tmp_path.iterdir()} == {"VM1.pcap", "VM2.pcap", "VM3.pcap"}
    stats = out["methods"]["traffic"]["stats"]
    assert stats["controls_sent"] == stats["closing_controls_sent"] == 3
    assert stats["dropped"] == {"VM1": 0, "VM2": 0, "VM3": 0}  # every tcpdump's own counts were read
    human = run_hvnet("isolation", "check", str(VLAN_TESTS / "seed-three-vm.yaml"), "--out", str(tmp_path / "h"))
    assert "PASS" in human.stdout and "hears" in human.stdout
    # the pcaps hold what the guests sent: root's alone, whatever the umask (the test runs under 022)
    assert {oct(p.stat().st_mode & 0o777) for p in tmp_path.iterdir() if p.is_file()} == {"0o600"}
    assert (tmp_path / "h").stat().st_mode & 0o777 == 0o700


def test_a_leak_introduced_between_runs_is_caught_by_both_methods(lab: Lab, tmp_path) -> None:
    assert check("seed-three-vm.yaml", tmp_path / "before")[0] == 0
    vsctl(lab, "clear", "Port", "vif3.0", "tag")  # the misconfiguration, made by another tool
    try:
        code, out = check("seed-three-vm.yaml", tmp_path / "after")
    finally:
        vsctl(lab, "set", "Port", "vif3.0", "tag=2")
    assert code == 1
    for method in ("traffic", "trace"):
        verdicts = cells(out, method, "verdicts")
        assert verdicts[("VM3", "VM1")] == "leak" and verdicts[("VM3", "VM2")] == "leak"
        assert verdicts[("VM1", "VM2")] == "ok"
    (ev,) = [e for e in out["methods"]["traffic"]["evidence"] if (e["listener"], e["sender"]) == ("VM3", "VM1")]
    assert ev["vlan"] == 1 and ev["src_ip"] == "192.168.0.150" and ev["pcap"].endswith("VM3.pcap")
    assert Path(ev["pcap"]).exists()


def test_misconfigured_scenario_reports_the_leak_and_restores_the_tag(lab: Lab, tmp_path) -> None:
    code, out = check("misconfigured.yaml", tmp_path)
    assert code == 1
    assert cells(out, "traffic", "verdicts")[("VM3", "VM1")] == "leak"
    assert cells(out, "trace", "verdicts")[("VM3", "VM2")] == "leak"
    assert vsctl(lab, "get", "Port", "vif3.0", "tag") == "2"  # restored afterwards


def test_the_check_writes_its_matrices_and_evidence_as_one_html_page(lab: Lab, tmp_path) -> None:
    page = tmp_path / "report.html"
    res = run_hvnet("isolation", "check", str(VLAN_TESTS / "misconfigured.yaml"), "--out", str(tmp_path / "pcaps"),
                    "--html", str(page), "--junit", str(tmp_path / "junit.xml"))  # fmt: skip
    assert res.returncode == 1 and f"report: {page}" in res.stdout and "LEAK" in res.stdout
    suite = ET.parse(tmp_path / "junit.xml").getroot().find("testsuite")  # the same check, for CI
    assert suite is not None and suite.get("failures") == "4" and suite.get("tests") == "12"  # 6 pairs x 2 methods
    assert {c.get("name") for c in suite.iter("testcase") if c.find("failure") is not None} == {
        "VM3 hears VM1?", "VM3 hears VM2?"}  # fmt: skip
    html = page.read_text()
    assert "FAIL: isolation differs from expected" in html and html.count("Yes (LEAK)") == 4  # 2 cells x 2 methods
    assert "<td>VM3</td><td>unchanged</td><td>cleared</td>" in html  # the setting the check applied, shown
    assert f"<td>{tmp_path / 'pcaps' / 'VM3.pcap'}</td>" in html  # evidence: the capture that heard the leak
    assert "checked on the lab&#x27;s switch on this machine" in html


def test_mirror_exception_is_declared_and_the_mirror_removed(lab: Lab, tmp_path) -> None:
    code, out = check("mirror-exception.yaml", tmp_path)
    assert code == 0, out
    assert {(e["listener"], e["sender"]) for e in out["exceptions"]} == {("VM3", "VM1"), ("VM3", "VM2")}
    assert cells(out, "traffic", "observed")[("VM3", "VM1")] == "yes"
    assert vsctl(lab, "get", "Bridge", "xenbr0", "mirrors") == "[]"


def test_a_capture_that_heard_nothing_is_unknown_not_no(lab: Lab, tmp_path) -> None:
    """VM3's VIF is off the switch: its capture runs but hears no control and no peer."""
    g3_ids = vsctl(lab, "get", "Interface", "vif3.0", "external_ids")
    vsctl(lab, "del-port", "vif3.0")
    try:
        code, out = check("seed-three-vm.yaml", tmp_path, "--method", "traffic")
    finally:
        vsctl(
            lab, "add-port", "xenbr0", "vif3.0", "tag=2", "--", "set", "Interface", "vif3.0", f"external_ids={g3_ids}"
        )
    obs = cells(out, "traffic", "observed")
    reasons = cells(out, "traffic", "unknown_reasons")
    assert obs[("VM3", "VM1")] == "unknown" and obs[("VM3", "VM2")] == "unknown"
    assert "heard no positive control" in reasons[("VM3", "VM1")]
    assert obs[("VM2", "VM1")] == "yes"
    assert code == 7  # undecided: its own code, not 2 (invalid input)


def test_guest_down_traffic_unknown_trace_still_answers(lab: Lab, tmp_path) -> None:
    lab.guest_exec("VM2", ["ip", "link", "set", "eth0", "down"], check=True)
    try:
        code, out = check("seed-three-vm.yaml", tmp_path)
    finally:
        lab.guest_exec("VM2", ["ip", "link", "set", "eth0", "up"], check=True)
        lab.guest_exec("VM2", ["ethtool", "-K", "eth0", "tx", "off"])
    assert code == 7
    reasons = cells(out, "traffic", "unknown_reasons")
    assert reasons[("VM2", "VM1")] == "VM2 is down: eth0 is down"
    assert set(cells(out, "trace", "verdicts").values()) == {"ok"}


@pytest.mark.parametrize(
    "args, code, message",
    [
        (["/nonexistent.yaml"], 2, "/nonexistent.yaml: (file): cannot read"),
        ([str(VLAN_TESTS / "trunk-and-native.yaml")], 2, "has no guest a10"),
        ([str(VLAN_TESTS / "seed-three-vm.yaml"), "--method", "sideways"], 2, "invalid choice"),
    ],
)
def test_bad_invocations(lab: Lab, args, code, message) -> None:
    res = run_hvnet("isolation", "check", *args)
    assert res.returncode == code and message in res.stderr
    assert vsctl(lab, "get", "Port", "vif3.0", "tag") == "2"


def test_no_lab_is_a_clear_error(tmp_path) -> None:
    res = run_hvnet(
        "isolation", "check", str(VLAN_TESTS / "seed-three-vm.yaml"), env={"HVNET_LAB_DIR": str(tmp_path / "none")}
    )
    assert res.returncode == 2 and "no lab is up" in res.stderr and "hvnet lab up --topology" in res.stderr
