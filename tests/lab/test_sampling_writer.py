"""sFlow/IPFIX rows written by the policy engine on a real ovsdb-server; ovs-vsctl as the witness."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.core import ovsdb
from appliance.core.target import DbTarget
from appliance.lab.switch import Switch
from appliance.policy import COLUMNS, PolicyEngine
from appliance.policy.plan import document
from appliance.switch.host import DataPaths, Host

SET = """\
bridges:
  br0:
    sflow: {targets: ["192.0.2.9:6343", "[2001:db8::9]:6343"], sampling: 64, polling: 10, header: 256, agent: eth0}
    ipfix: {targets: ["192.0.2.9:4739"], sampling: 400, obs_domain_id: 1, obs_point_id: 2,
            cache_active_timeout: 60, cache_max_flows: 1000}
"""


def rows(switch: Switch, table: str) -> list[dict[str, object]]:
    data = json.loads(switch.vsctl("--format=json", "list", table))
    return [dict(zip(data["headings"], r)) for r in data["data"]]


@pytest.fixture()
def engine(switch: Switch, tmp_path: Path) -> Iterator[PolicyEngine]:
    switch.vsctl("--no-wait", "add-br", "br0")
    host = Host(DbTarget(switch.remote, "test"), paths=DataPaths.for_lab(tmp_path / "state"))
    conn = ovsdb.Connection.open(host.target, COLUMNS, timeout=10)
    with PolicyEngine(conn, host, command="test") as eng:
        eng.force_policing = "tc"  # no ovs-vswitchd here: nothing to probe
        yield eng


def test_set_update_remove_and_undo(switch: Switch, engine: PolicyEngine) -> None:
    res = engine.apply(document.parse(SET, "p.yaml"), wait=False, verify=False)
    assert res.status == "applied" and len(res.plan.changes) == 2
    (sflow,) = rows(switch, "sflow")
    assert sflow["targets"] == ["set", ["192.0.2.9:6343", "[2001:db8::9]:6343"]]
    assert (sflow["sampling"], sflow["polling"], sflow["header"], sflow["agent"]) == (64, 10, 256, "eth0")
    assert sflow["external_ids"] == ["map", [["hvnet-owner", "hvnet"]]]
    (ipfix,) = rows(switch, "ipfix")
    assert (ipfix["targets"], ipfix["obs_point_id"], ipfix["cache_max_flows"]) == ("192.0.2.9:4739", 2, 1000)
    assert switch.vsctl("get", "bridge", "br0", "sflow").strip() == sflow["_uuid"][1]

    # Applied again: nothing to do.  Changed: the same row, updated in place, other_config kept.
    assert engine.apply(document.parse(SET, "p.yaml"), wait=False, verify=False).status == "unchanged"
    switch.vsctl("--no-wait", "set", "ipfix", ipfix["_uuid"][1], "other_config:enable-tunnel-sampling=false")
    changed = SET.replace("sampling: 64", "sampling: 1").replace("sampling: 400", "sampling: 2")
    res = engine.apply(document.parse(changed, "p.yaml"), wait=False, verify=False)
    assert [c.kind for c in res.plan.changes] == ["sflow", "ipfix"]
    assert [r["_uuid"] for r in rows(switch, "sflow")] == [sflow["_uuid"]]
    (ipfix2,) = rows(switch, "ipfix")
    assert ipfix2["_uuid"] == ipfix["_uuid"] and ipfix2["sampling"] == 2
    assert ipfix2["other_config"] == ["map", [["enable-tunnel-sampling", "false"]]]

    # Removed: the bridge lets go and ovsdb-server deletes the rows (non-root tables): nothing is left.
    removed = "bridges:\n  br0:\n    sflow: remove\n    ipfix: remove\n"
    res = engine.apply(document.parse(removed, "p.yaml"), wait=False, verify=False)
    assert len(res.plan.changes) == 2
    assert rows(switch, "sflow") == [] and rows(switch, "ipfix") == []

    # Undone: as it was before the removal (a new row with the same settings and marks).
    engine.undo(res.plan.changes, label="test undo", wait=False, record=False)
    (back,) = rows(switch, "sflow")
    assert back["sampling"] == 1 and back["external_ids"] == ["map", [["hvnet-owner", "hvnet"]]]
    assert rows(switch, "ipfix")[0]["other_config"] == ["map", [["enable-tunnel-sampling", "false"]]]


def test_an_unknown_bridge_changes_nothing(switch: Switch, engine: PolicyEngine) -> None:
    from appliance.core.errors import ConfigError

    with pytest.raises(ConfigError) as exc:
        engine.apply(document.parse(SET.replace("br0", "br9"), "p.yaml"), wait=False, verify=False)
    assert "bridge br9 does not exist (bridges: br0)" in str(exc.value)
    assert rows(switch, "sflow") == [] and rows(switch, "ipfix") == []
