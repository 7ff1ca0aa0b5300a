"""Planning sFlow and IPFIX against hand-built states; the rollback record and the export round-trip."""

from __future__ import annotations

import json

import pytest

from appliance.core.errors import ConfigError
from appliance.policy.apply import journal
from appliance.policy.apply.recovery import current_value, inverse
from appliance.policy.plan import document, export
from appliance.policy.plan.planner import plan
from appliance.policy.plan.state import BridgeState, State
from appliance.switch.sampling import IpfixCols, SflowCols
from tests.unit.policy_states import OWNED

POLICY = """\
bridges:
  xenbr0:
    sflow: {targets: ["192.0.2.9:6343"], sampling: 64, polling: 10}
    ipfix: {targets: ["192.0.2.9:4739"], sampling: 400, cache_max_flows: 0}
"""


def state(**bridge: object) -> State:
    s = State()
    s.bridges["xenbr0"] = BridgeState("xenbr0", (), "netdev", (), (), **bridge)  # type: ignore[arg-type]
    return s


def test_new_rows_are_hvnets_and_undone_by_removal() -> None:
    p = plan(document.parse(POLICY, "p.yaml"), state())
    assert [(c.kind, c.target, c.before) for c in p.changes] == [
        ("sflow", "bridge xenbr0", None),
        ("ipfix", "bridge xenbr0", None),
    ]
    assert p.changes[0].after == SflowCols(("192.0.2.9:6343",), 64, 10, external_ids=OWNED)
    assert p.changes[1].after.external_ids == OWNED
    assert [c.after for c in inverse(p.changes)] == [None, None]


def test_same_settings_plan_nothing_whoever_made_them() -> None:
    foreign = SflowCols(("192.0.2.9:6343",), 64, 10, external_ids=(("made-by", "someone"),))
    ipfix = IpfixCols(("192.0.2.9:4739",), 400, cache_max_flows=0, other_config=(("enable-tunnel-sampling", "true"),))
    assert plan(document.parse(POLICY, "p.yaml"), state(sflow=foreign, ipfix=ipfix)).changes == []


def test_a_row_someone_else_made_is_changed_in_place_keeping_its_marks() -> None:
    foreign = IpfixCols(("192.0.2.1:4739",), 1, other_config=(("enable-tunnel-sampling", "true"),))
    p = plan(document.parse(POLICY, "p.yaml"), state(sflow=None, ipfix=foreign))
    ch = next(c for c in p.changes if c.kind == "ipfix")
    assert ch.after.other_config == foreign.other_config and ch.after.external_ids == ()
    assert ch.after.targets == ("192.0.2.9:4739",) and "not made by hvnet" in ch.note


def test_remove_only_what_is_there() -> None:
    text = "bridges:\n  xenbr0:\n    sflow: remove\n    ipfix: remove\n"
    owned = SflowCols(("a:1",), external_ids=OWNED)
    p = plan(document.parse(text, "p.yaml"), state(sflow=owned))
    assert [(c.kind, c.before, c.after) for c in p.changes] == [("sflow", owned, None)]


def test_an_unknown_bridge_is_named_with_the_bridges_that_exist() -> None:
    text = POLICY.replace("xenbr0", "xenbr9")
    with pytest.raises(ConfigError) as exc:
        plan(document.parse(text, "p.yaml"), state())
    (p,) = exc.value.problems
    assert (p.file, p.line, p.field) == ("p.yaml", 2, "bridges.xenbr9")
    assert "bridge xenbr9 does not exist (bridges: xenbr0)" in p.message


def test_rollback_record_round_trips_and_current_value_reads_it_back() -> None:
    before = IpfixCols(("a:1",), 7, other_config=(("x", "y"),), external_ids=(("k", "v"),))
    p = plan(document.parse(POLICY, "p.yaml"), state(ipfix=before))
    for c in p.changes:
        back = journal.change_from_json(json.loads(json.dumps(journal.change_to_json(c))))
        assert back == c
    ipfix = next(c for c in p.changes if c.kind == "ipfix")
    assert current_value(state(ipfix=before), ipfix) == before


def test_export_round_trips() -> None:
    s = state(
        sflow=SflowCols(("192.0.2.9:6343",), 64, 10, 256, "eth0", OWNED),
        ipfix=IpfixCols(("[2001:db8::9]:4739",), 1, 2, 3, 0, 0, (), OWNED),
    )
    doc = export.to_policy(s)
    assert doc["bridges"]["xenbr0"]["sflow"] == {
        "targets": ["192.0.2.9:6343"], "sampling": 64, "polling": 10, "header": 256, "agent": "eth0",
    }  # fmt: skip
    text = export.to_yaml(s)
    assert plan(document.parse(text, "exported.yaml"), s).changes == []
