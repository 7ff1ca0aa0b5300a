"""trunk-and-native and many-vlans, each on its own lab."""

from __future__ import annotations

import json

from tests.conftest import ROOT, run_hvnet
from tests.lab.conftest import lab_up

VLAN_TESTS = ROOT / "vlan-tests"


def run_check(name: str, out) -> tuple[int, dict]:
    res = run_hvnet("isolation", "check", str(VLAN_TESTS / f"{name}.yaml"), "--json", "--out", str(out))
    return res.returncode, json.loads(res.stdout) if res.stdout else {"stderr": res.stderr}


def test_trunk_and_native(tmp_path) -> None:
    with lab_up(VLAN_TESTS / "topologies" / "trunk-and-native.yaml", tmp_path / "lab"):
        code, out = run_check("trunk-and-native", tmp_path / "out")
    assert code == 0, out
    exp = {(c["listener"], c["sender"]): c["value"] for c in out["expected"]}
    assert exp[("trunk", "c20")] == "yes" and exp[("c20", "trunk")] == "no"  # trunk's untagged frames: VLAN 0
    assert exp[("nu10", "c20")] == "yes" and exp[("a10", "nu10")] == "yes"
    assert exp[("nt20", "d30")] == "yes" and exp[("d30", "nt20")] == "no"


def test_many_vlans(tmp_path) -> None:
    with lab_up(VLAN_TESTS / "topologies" / "many-vlans.yaml", tmp_path / "lab"):
        code, out = run_check("many-vlans", tmp_path / "out")
    assert code == 0, out
    traffic = out["methods"]["traffic"]
    assert traffic["stats"]["probes_sent"] >= 1000
    verdicts = [c["value"] for c in traffic["verdicts"]]
    assert verdicts.count("leak") == 0 and verdicts.count("unknown") == 0
    assert len(verdicts) == 12 * 11
