"""Every policy shipped in policies/ loads, and the seed one says what the 2010 study did."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.core.vlan import Vlan
from appliance.policy import Ingress, load

POLICIES = sorted((Path(__file__).resolve().parents[3] / "policies").glob("*.yaml"))


def test_there_are_shipped_policies() -> None:
    assert POLICIES


@pytest.mark.parametrize("path", POLICIES, ids=lambda p: p.name)
def test_shipped_policy_loads(path: Path) -> None:
    assert load(path).vifs


def test_seed_policy_is_the_study_configuration() -> None:
    policy = load(next(p for p in POLICIES if p.name == "seed-2010.yaml"))
    by_vm = {r.selector.pattern: r for r in policy.vifs}
    assert by_vm["VM1"].vlan == Vlan("access", 1) and by_vm["VM3"].vlan == Vlan("access", 2)
    assert by_vm["VM1"].ingress == Ingress(10240, 1024, "auto")
