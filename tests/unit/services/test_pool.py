"""One policy for several hosts: a VIF rule must match on some host; the hosts' plans meet at a gate."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from appliance.core.errors import ConfigError, HvnetError
from appliance.policy import load
from appliance.services.fleet_policy import PlanGate, unmatched

POLICY = """\
version: 1
vifs:
  - vm: VM1
    vlan: {tag: 1}
  - vm: VM2
    vlan: {tag: 1}
  - vm: VM9
    optional: true
    vlan: {tag: 9}
"""


@pytest.fixture
def policy(tmp_path: Path):
    f = tmp_path / "pool.yaml"
    f.write_text(POLICY)
    return load(f)


def test_a_rule_must_match_on_some_host_not_on_every_host(policy) -> None:
    hv1 = {"vifs[0].vm": ["vif1.0"], "vifs[1].vm": [], "vifs[2].vm": []}
    hv2 = {"vifs[0].vm": [], "vifs[1].vm": ["vif2.0"], "vifs[2].vm": []}
    assert unmatched(policy, [hv1, hv2]) == []  # VM9 is optional
    (problem,) = unmatched(policy, [hv1])
    assert str(problem).endswith("pool.yaml:5: vifs[1].vm: matches no VIF on any of the hosts; mark the rule "
                                 "'optional: true' if that is expected")  # fmt: skip


def _arrive_all(gate: PlanGate, plans: dict[str, dict[str, list[str]]]) -> dict[str, object]:
    out: dict[str, object] = {}

    def one(name: str) -> None:
        try:
            out[name] = gate.arrive(name, plans[name])
        except HvnetError as exc:
            out[name] = exc

    threads = [threading.Thread(target=one, args=(n,)) for n in plans]
    for t in threads:
        t.start()
    for t in threads:
        t.join(10)
    return out


def test_the_gate_lets_every_host_go_once_all_planned(policy) -> None:
    gate = PlanGate(policy, timeout=5)
    gate.expect(["hv1", "hv2"])
    out = _arrive_all(gate, {"hv1": {"vifs[0].vm": ["vif1.0"]}, "hv2": {"vifs[1].vm": ["vif2.0"]}})
    assert out == {"hv1": [], "hv2": []}


def test_the_gate_stops_every_host_when_a_rule_matched_nowhere(policy) -> None:
    gate = PlanGate(policy, timeout=5)
    gate.expect(["hv1", "hv2"])
    out = _arrive_all(gate, {"hv1": {"vifs[0].vm": ["vif1.0"]}, "hv2": {}})
    assert all(isinstance(v, ConfigError) and "vifs[1].vm: matches no VIF" in str(v) for v in out.values()), out


def test_a_host_that_dropped_out_turns_the_refusal_into_a_warning(policy) -> None:
    gate = PlanGate(policy, timeout=5)
    gate.expect(["hv1", "hv2", "hv3"])
    gate.leave("hv3")  # unreachable: VM2 may be there
    out = _arrive_all(gate, {"hv1": {"vifs[0].vm": ["vif1.0"]}, "hv2": {}})
    assert out["hv1"] == out["hv2"] == ["vifs[1].vm matches no VIF on the hosts reached (not checked on hv3)"]


def test_a_host_that_never_plans_times_the_others_out(policy) -> None:
    gate = PlanGate(policy, timeout=0.2)
    gate.expect(["hv1", "hv2"])
    with pytest.raises(HvnetError, match=r"hv2 did not finish planning within 0\.2 s; nothing changed here"):
        gate.arrive("hv1", {"vifs[0].vm": ["vif1.0"], "vifs[1].vm": ["vif2.0"]})
