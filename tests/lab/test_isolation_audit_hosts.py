"""One ``hvnet isolation audit --hosts`` across the two-hosts lab: hv1 and hv2 over SSH, joined by a trunk."""

from __future__ import annotations

import json

import pytest

from tests.conftest import ROOT, run_hvnet
from tests.lab.conftest import lab_up

TOPOLOGY = ROOT / "vlan-tests" / "topologies" / "two-hosts.yaml"


@pytest.fixture(scope="module")
def two(tmp_path_factory: pytest.TempPathFactory):
    with lab_up(TOPOLOGY, tmp_path_factory.mktemp("audit-hosts") / "lab") as lab:
        yield lab


def audit(*args: str) -> tuple[int, dict, str]:
    res = run_hvnet("isolation", "audit", "--hosts", "hv1,hv2", *args, "--json")
    return res.returncode, json.loads(res.stdout) if res.stdout.strip() else {}, res.stderr


@pytest.mark.parametrize("method", ["trace", "traffic"])
def test_one_audit_across_the_trunk(two, method: str) -> None:
    code, out, err = audit("--method", method)
    assert code == 0, (out, err)
    assert out["guests"] == ["VM1", "VM3", "VM2"]  # hv1's VIFs, then hv2's
    assert "read from the switches: hv1 xenbr0: eth0-hv2; hv2 xenbr0: eth0-hv1" in out["scenario"]
    observed = {(c["listener"], c["sender"]): c["value"] for c in out["methods"][method]["observed"]}
    # VM1 (hv1) and VM2 (hv2) share VLAN 1 across the trunk; VM3 (VLAN 2) hears no one.
    assert observed[("VM2", "VM1")] == "yes" and observed[("VM1", "VM2")] == "yes"
    assert observed[("VM3", "VM2")] == "no" and observed[("VM2", "VM3")] == "no"
    if method == "traffic":  # each host's frames were bounded on the trunk before its peer's closing controls
        assert out["methods"]["traffic"]["stats"]["links_closed"] == ["hv1 -> hv2", "hv2 -> hv1"]


def test_hosts_with_host_is_refused() -> None:
    res = run_hvnet("--host", "hv1", "isolation", "audit", "--hosts", "hv1,hv2")
    assert res.returncode == 2 and "--hosts names several hosts" in res.stderr
    res = run_hvnet("isolation", "audit", "--hosts", "hv1")
    assert res.returncode == 2 and "two or more different hosts" in res.stderr
