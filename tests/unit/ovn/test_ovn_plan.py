"""The pool planner on a real pool's NB and SB (captured from the lab's ovn-pool): VLAN intents as logical
switch membership, mirrors as NB Mirror rows, what a pool refuses, the one transaction, rollback records."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from appliance.core.errors import ConfigError
from appliance.core.target import DbTarget
from appliance.ovn import plan as ovn_plan
from appliance.ovn import write
from appliance.ovn.model import Desired
from appliance.ovn.read import mirror_types
from appliance.ovn.view import PortView, build
from appliance.policy.plan import document
from appliance.switch import snapshot

DATA = Path(__file__).parents[1] / "data"


def _snap(db: str) -> snapshot.Snapshot:
    doc = json.loads((DATA / f"ovn-pool-{db}.json").read_text())
    return snapshot.build(DbTarget(f"unix:/{db}.sock", "test"), doc["tables"], doc["present"], doc["raw"])


def _view(marked: bool = True):
    v = build("ovn-pool", _snap("nb"), _snap("sb"), "unix:/nb.sock", "unix:/sb.sock", "7.0.0")
    v.mirror_types = mirror_types({"tables": json.loads((DATA / "ovn-pool-nb.json").read_text())["tables"]})
    for _, p in v.ports():
        p.vm = p.external_ids["hvnet-vm"]  # what the chassis say (the status reads them over SSH)
    if marked:  # as the lab marks vlan1 and vlan2 now (external_ids:hvnet-vlan)
        for s in v.switches:
            s.external_ids["hvnet-vlan"] = s.name.removeprefix("vlan")
    return v


def _policy(text: str):
    return document.parse(text, "pool.yaml")


def _refusals(view, text: str) -> str:
    with pytest.raises(ConfigError) as exc:
        ovn_plan.plan(view, _policy(text))
    return "\n".join(str(p) for p in exc.value.problems)


def _port(view, vm: str) -> PortView:
    return next(p for _, p in view.ports() if p.vm == vm)


def test_a_vlan_tag_moves_the_port_to_the_logical_switch_standing_for_it_in_one_transaction() -> None:
    v = _view()
    p = ovn_plan.plan(v, _policy("version: 1\nvifs:\n  - vm: VM3\n    vlan: {tag: 1}\n  - vm: VM1\n    vlan: 1\n"))
    assert [(m.vm, m.src, m.dst, m.vlan) for m in p.moves] == [("VM3", "vlan2", "vlan1", 1)]  # VM1 is there
    assert p.lines() == ["~ VM3: logical switch vlan2 -> vlan1 (VLAN 1)"]
    ops = write.operations(v, p, "test")
    vm3 = _port(v, "VM3").uuid
    sw = {s.name: s.uuid for s in v.switches}
    wait, leave, join = ops[:3]
    assert wait["op"] == "wait" and ["ports", "includes", ["set", [["uuid", vm3]]]] in wait["where"]
    assert leave["where"] == [["_uuid", "==", ["uuid", sw["vlan2"]]]]
    assert leave["mutations"] == [["ports", "delete", ["set", [["uuid", vm3]]]]]
    assert join["where"] == [["_uuid", "==", ["uuid", sw["vlan1"]]]]
    assert join["mutations"] == [["ports", "insert", ["set", [["uuid", vm3]]]]]
    assert not any(o.get("table") == "Logical_Switch_Port" for o in ops)  # the row itself is not rewritten
    assert ops[-3]["mutations"] == [["nb_cfg", "+=", 1]]


def test_a_localnet_ports_tag_says_which_vlan_a_switch_stands_for() -> None:
    v = _view(marked=False)
    vlan2 = next(s for s in v.switches if s.name == "vlan2")
    vlan2.ports.append(PortView("physnet-vlan2", "localnet", ["unknown"], 20, None, None, None, None, True, []))
    p = ovn_plan.plan(v, _policy("version: 1\nvifs:\n  - vm: VM1\n    vlan: {tag: 20}\n"))
    assert [(m.vm, m.dst, m.vlan) for m in p.moves] == [("VM1", "vlan2", 20)]
    text = _refusals(v, "version: 1\nvifs:\n  - vm: VM1\n    vlan: {tag: 1}\n")
    assert "pool.yaml:4: vifs[0].vlan: VLAN 1: no logical switch of pool ovn-pool stands for it; the pool's " in text
    assert "VLANs: 20 (vlan2)" in text


def test_vlan_intents_a_pool_cannot_take_are_refused_with_file_line_and_why() -> None:
    v = _view()
    text = _refusals(
        v,
        """\
version: 1
vifs:
  - vm: VM1
    vlan: {tag: 7}
  - vm: VM2
    vlan: {mode: trunk, trunks: "1,2"}
  - vm: VM3
    vlan: {mode: native-untagged, tag: 1, trunks: "2"}
  - port: "*"
    vlan: {tag: 2}
""",
    )
    assert "pool.yaml:4: vifs[0].vlan: VLAN 7: no logical switch of pool ovn-pool stands for it; the pool's VLANs: " \
           "1 (vlan1), 2 (vlan2)" in text  # fmt: skip
    assert "pool.yaml:6: vifs[1].vlan: trunk has no meaning on an OVN pool" in text
    assert "pool.yaml:8: vifs[2].vlan: native-untagged has no meaning on an OVN pool" in text
    assert (
        "pool.yaml:9: vifs[3]: port * selects ports of several logical switches (vlan1: VM1, VM2; vlan2: VM3)" in text
    )
    removed = _refusals(v, "version: 1\nvifs:\n  - vm: VM1\n    vlan: remove\n")
    assert "vifs[0].vlan: a logical port is always on some logical switch" in removed


def test_two_switches_standing_for_one_vlan_are_named() -> None:
    v = _view()
    for s in v.switches:
        s.external_ids["hvnet-vlan"] = "5"
    text = _refusals(v, "version: 1\nvifs:\n  - vm: VM3\n    vlan: {tag: 5}\n")
    assert "VLAN 5: several logical switches (vlan1, vlan2) of pool ovn-pool stands for it" in text


def test_a_moved_port_takes_its_qos_rules_along() -> None:
    v = _view()
    p1 = ovn_plan.plan(v, _policy("version: 1\nvifs:\n  - vm: VM1\n    ingress: {rate: 10000, burst: 1000}\n"))
    (lim,) = p1.add
    assert (lim.switch, lim.direction, lim.rate_kbps, lim.burst_kbit) == ("vlan1", "from-lport", 10000, 1000)
    # the rule as it is once applied (owned, on vlan1), then VM1 moves to vlan2 without a word about limits
    vlan1 = next(s for s in v.switches if s.name == "vlan1")
    rule = vlan1.qos[0]
    rule.external_ids.update({"hvnet-owner": "hvnet", "hvnet-port": lim.port, "hvnet-direction": "from-lport"})
    rule.match, rule.rate_kbps, rule.burst_kbit = lim.match, 10000, 1000
    p2 = ovn_plan.plan(v, _policy("version: 1\nvifs:\n  - vm: VM1\n    vlan: {tag: 2}\n"))
    assert [(m.src, m.dst) for m in p2.moves] == [("vlan1", "vlan2")]
    assert [(sw, q.uuid) for _, sw, q in p2.delete] == [("vlan1", rule.uuid)]
    assert [(a.switch, a.rate_kbps, a.burst_kbit) for a in p2.add] == [("vlan2", 10000, 1000)]
    undo = ovn_plan.undo(v, p2)
    assert undo.switches == {lim.port: "vlan1"} and undo.limits == {(lim.port, "from-lport"): (10000, 1000)}
    assert Desired.from_json(json.loads(json.dumps(undo.to_json()))) == undo


MIRROR = """\
version: 1
bridges:
  br-int:
    mirrors:
      span1:
        select: {src: [vm:VM1], dst: [vm:VM1, vm:VM2]}
        output: {gre: 10.254.0.9, key: 7}
"""


def test_a_mirror_becomes_a_from_lport_and_a_to_lport_row_attached_to_the_ports() -> None:
    v = _view()
    p = ovn_plan.plan(v, _policy(MIRROR))
    rows = {c.wanted.row: c for c in p.mirrors if c.wanted}
    vm1, vm2 = _port(v, "VM1").name, _port(v, "VM2").name
    assert set(rows) == {"span1-from", "span1-to"}
    assert (rows["span1-from"].wanted.filter, rows["span1-from"].attach) == ("from-lport", (vm1,))
    assert (rows["span1-to"].wanted.filter, set(rows["span1-to"].attach)) == ("to-lport", {vm1, vm2})
    assert {(c.wanted.type, c.wanted.sink, c.wanted.index) for c in rows.values()} == {("gre", "10.254.0.9", 7)}
    ops = write.operations(v, p, "test")
    inserts = [o for o in ops if o["op"] == "insert" and o["table"] == "Mirror"]
    assert sorted(o["row"]["name"] for o in inserts) == ["span1-from", "span1-to"]
    assert all(["hvnet-mirror", "span1"] in o["row"]["external_ids"][1] for o in inserts)
    links = [o for o in ops if o.get("table") == "Logical_Switch_Port"]
    assert len(links) == 3 and all(o["mutations"][0][:2] == ["mirror_rules", "insert"] for o in links)


def test_mirrors_ovn_cannot_express_are_refused_naming_the_pools_ovn() -> None:
    v = _view()
    text = _refusals(
        v,
        """\
version: 1
bridges:
  br-int:
    mirrors:
      local:
        select: {src: [vm:VM1]}
        output: {port: eth9}
      rspan:
        select: {src: [vm:VM1]}
        output: {vlan: 99}
      everything:
        select: all
        output: {erspan: 10.0.0.9, idx: 3, key: 4}
        snaplen: 128
  xenbr0:
    mirrors:
      elsewhere:
        select: {src: [vm:VM1]}
        output: {gre: 10.0.0.9}
""",
    )
    assert ("pool.yaml:7: bridges.br-int.mirrors.local.output: port eth9: the pool's OVN (NB schema 7.0.0) "
            "mirrors to erspan, gre only; a port output needs OVN's 'local' mirrors") in text  # fmt: skip
    assert "bridges.br-int.mirrors.rspan.output: RSPAN VLAN 99: the pool's OVN (NB schema 7.0.0)" in text
    assert "mirrors.everything.select: on an OVN pool a mirror copies logical ports" in text
    assert "mirrors.everything.snaplen: OVN's Mirror has no snaplen" in text
    assert "mirrors.everything.output.key: OVN uses one number as the ERSPAN session index and key" in text
    assert "bridges.xenbr0.mirrors.elsewhere: an OVN pool's mirrors are ovn-controller's, on br-int" in text
    v.mirror_types = []  # an OVN before 22.12: no Mirror table in its NB
    old = _refusals(v, MIRROR)
    assert old == "pool.yaml:5: bridges.br-int.mirrors.span1: the pool's OVN (NB schema 7.0.0) has no Mirror " \
                  "table: port mirroring came with OVN 22.12"  # fmt: skip


def test_removing_a_mirror_detaches_and_deletes_only_hvnets_rows() -> None:
    from appliance.ovn.view import MirrorView

    v = _view()
    v.mirrors = [MirrorView("span1-from", "gre", "from-lport", "10.254.0.9", 7,
                            {"hvnet-owner": "hvnet", "hvnet-mirror": "span1"}, "11111111-1111-1111-1111-111111111111"),
                 MirrorView("theirs", "gre", "from-lport", "10.0.0.1", 0, {}, "22222222-2222-2222-2222-222222222222")]  # fmt: skip
    _port(v, "VM1").mirrors = ["span1-from", "theirs"]
    p = ovn_plan.plan(v, _policy("version: 1\nbridges:\n  br-int:\n    mirrors:\n      span1: remove\n"))
    (c,) = p.mirrors
    assert (c.name, c.wanted, c.detach) == ("span1-from", None, (_port(v, "VM1").name,))
    ops = write.operations(v, p, "test")
    assert [o["op"] for o in ops if o.get("table") in ("Mirror", "Logical_Switch_Port")] == ["mutate", "delete"]
    undo = ovn_plan.undo(v, p)
    assert undo.mirrors["span1-from"].ports == (_port(v, "VM1").name,)
    v.mirrors[0].external_ids.clear()  # a row of that name hvnet did not make: never taken over
    clash = _refusals(v, MIRROR)
    assert "bridges.br-int.mirrors.span1: the pool's NB has a Mirror 'span1-from' that hvnet did not make" in clash


# -- after an apply: captured from the lab's pool after 'hvnet --pool ovn-pool apply' of this policy --------

APPLIED = """\
version: 1
vifs:
  - vm: VM1
    ingress: {rate: 10000, burst: 1000}
  - vm: VM3
    vlan: {tag: 1}
    egress: {rate: 20000, burst: 16000}
bridges:
  br-int:
    mirrors:
      span2:
        select: {src: [vm:VM2], dst: [vm:VM1, vm:VM2]}
        output: {erspan: 10.254.0.2, idx: 5}
"""


def _applied():
    doc = {db: json.loads((DATA / f"ovn-pool-applied-{db}.json").read_text()) for db in ("nb", "sb")}
    snaps = {db: snapshot.build(DbTarget(f"unix:/{db}.sock", "test"), d["tables"], d["present"], d["raw"])
             for db, d in doc.items()}  # fmt: skip
    v = build("ovn-pool", snaps["nb"], snaps["sb"], "unix:/nb.sock", "unix:/sb.sock", "7.0.0")
    v.mirror_types = mirror_types({"tables": doc["nb"]["tables"]})
    for _, p in v.ports():
        p.vm = p.external_ids["hvnet-vm"]
    return v


def test_the_applied_pool_plans_no_change_and_its_export_round_trips() -> None:
    from appliance.ovn import export

    v = _applied()
    assert {s.name: s.vlan for s in v.switches} == {"vlan1": 1, "vlan2": 2}  # the lab's marks
    assert not ovn_plan.plan(v, _policy(APPLIED)).changed
    for by in ("mac", "port"):
        text = export.to_yaml(v, by=by)
        p = ovn_plan.plan(v, document.parse(text, "exported.yaml"))
        assert not p.changed, p.lines()
        assert len(p.unchanged) == 2 and len(p.mirrors_unchanged) == 2
    doc = export.to_policy(v, by="port")
    assert doc["bridges"]["br-int"]["mirrors"]["span2"]["output"] == {"erspan": "10.254.0.2", "idx": 5}
    assert all(r["vlan"] == {"tag": 1} for r in doc["vifs"])


def test_undoing_the_apply_from_its_record_plans_the_pool_back() -> None:
    before, after = _view(), _applied()
    applied = ovn_plan.plan(before, _policy(APPLIED))
    record = Desired.from_json(json.loads(json.dumps(ovn_plan.undo(before, applied).to_json())))
    back = ovn_plan.diff(after, record)
    vm3 = _port(after, "VM3").name
    assert [(m.port, m.src, m.dst) for m in back.moves] == [(vm3, "vlan1", "vlan2")]
    assert sorted(q.direction for _, _, q in back.delete) == ["from-lport", "to-lport"] and not back.add
    assert sorted((c.name, c.wanted) for c in back.mirrors) == [("span2-from", None), ("span2-to", None)]
    ops = write.operations(after, back, "rollback")
    assert [o["table"] for o in ops if o["op"] == "delete"] == ["Mirror", "Mirror"]


def test_a_mirror_of_another_kind_or_with_other_ports_is_changed_in_place() -> None:
    v = _applied()
    p = ovn_plan.plan(v, _policy(APPLIED.replace("dst: [vm:VM1, vm:VM2]", "dst: [vm:VM1]")
                                 .replace("erspan: 10.254.0.2, idx: 5", "gre: 10.254.0.3")))  # fmt: skip
    changes = {c.name: c for c in p.mirrors}
    assert changes["span2-to"].detach == (_port(v, "VM2").name,) and changes["span2-to"].uuid
    assert {(c.wanted.type, c.wanted.sink, c.wanted.index) for c in changes.values()} == {("gre", "10.254.0.3", 0)}
    ops = write.operations(v, p, "test")
    assert sorted(o["op"] for o in ops if o.get("table") == "Mirror") == ["update", "update"]


def test_the_commit_marks_the_nb_with_the_records_id() -> None:
    v = _applied()
    assert v.commit_marker is None  # captured before hvnet marked its commits
    p = ovn_plan.plan(v, _policy("version: 1\nvifs:\n  - vm: VM1\n    ingress: {rate: 5000}\n"))
    (bump,) = [o for o in write.operations(v, p, "test", marker="abc123") if o.get("table") == "NB_Global"
               and o["op"] == "mutate"]  # fmt: skip
    assert bump["mutations"] == [["nb_cfg", "+=", 1], ["external_ids", "delete", ["set", ["hvnet-last-commit"]]],
                                 ["external_ids", "insert", ["map", [["hvnet-last-commit", "abc123"]]]]]  # fmt: skip
