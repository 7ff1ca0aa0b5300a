"""Export round trips (state -> YAML -> policy -> empty plan) and rollback-record serialisation."""

from __future__ import annotations

import json

import pytest
import yaml

from appliance.core.vlan import DEAD_VLAN, VlanCols
from appliance.policy.apply import journal
from appliance.policy.plan import document, export, planner
from appliance.policy.plan.model import Egress
from appliance.policy.plan.monitoring import tunnel_port_name
from appliance.policy.plan.planner import Change, PlanOptions, owned_qos
from appliance.policy.plan.state import (
    BridgeState,
    MirrorCols,
    MirrorState,
    PoliceCols,
    PortState,
    QosCols,
    QueueCols,
    State,
    TunnelCols,
)
from tests.unit.policy_states import OWNED, vif


def port(name: str, bridge: str = "xenbr0", **kw) -> PortState:
    fields = {
        "name": name,
        "bridge": bridge,
        "interface": name,
        "iface_type": "system",
        "vlan": VlanCols(),
        "police": PoliceCols(),
        "qos": None,
        "ofport": 10,
        "error": None,
        "mac": None,
        "vm_uuid": None,
    }
    fields.update(kw)
    return PortState(**fields)


def lab_state(**kw) -> State:
    ports = [vif("vif1.0", "VM1", 1, 1), vif("vif2.0", "VM2", 2, 1), vif("vif3.0", "VM3", 3, 2), port("eth1")]
    return State(
        ports={p.name: p for p in ports},
        bridges={"xenbr0": BridgeState("xenbr0", (), "system", tuple(sorted(p.name for p in ports)), ())},
        **kw,
    )


def add_port(state: State, p: PortState) -> None:
    state.ports[p.name] = p
    b = state.bridges[p.bridge]
    b.ports = tuple(sorted({*b.ports, p.name}))


def add_mirror(state: State, name: str, cols: MirrorCols, bridge: str = "xenbr0") -> None:
    state.mirrors[(bridge, name)] = MirrorState(bridge, name, cols)
    b = state.bridges[bridge]
    b.mirrors = tuple(sorted({*b.mirrors, name}))


def round_trip(state: State, *, by: str = "mac", **opts) -> planner.Plan:
    text = export.to_yaml(state, by=by)
    policy = document.parse(text, "export.yaml")
    result = planner.plan(policy, state, PlanOptions(**opts))
    assert result.changes == [], text
    return result


# -- round trips ------------------------------------------------------------------


def test_lab_round_trips() -> None:
    state = lab_state()
    result = round_trip(state)
    # every VIF, and only the VIFs, is selected exactly once
    assert sorted(n for names in result.matched.values() for n in names) == ["vif1.0", "vif2.0", "vif3.0"]
    assert all(len(names) == 1 for names in result.matched.values())
    round_trip(state, by="port")


def test_vlan_modes_round_trip() -> None:
    state = lab_state()
    state.ports["vif1.0"].vlan = VlanCols("native-untagged", 5, (10, 1, 2, 3))
    state.ports["vif2.0"].vlan = VlanCols(None, None, ())  # trunk, every VLAN
    state.ports["vif3.0"].vlan = VlanCols("native-tagged", 0, (7,))
    add_port(state, vif("vif4.0", "VM4", 4, None, vlan=VlanCols("trunk", 9, (100, 200, 201))))
    add_port(state, vif("vif5.0", "VM5", 5, None, vlan=VlanCols("access", 30, (5,))))
    doc = export.to_policy(state)
    vlans = {r["mac"]: r["vlan"] for r in doc["vifs"]}
    assert vlans == {
        "52:54:00:00:00:01": {"mode": "native-untagged", "tag": 5, "trunks": "1-3,10"},
        "52:54:00:00:00:02": {"mode": "trunk", "trunks": "all"},
        "52:54:00:00:00:03": {"mode": "native-tagged", "tag": 0, "trunks": "7"},
        "52:54:00:00:00:04": {"mode": "trunk", "trunks": "100,200-201"},
        "52:54:00:00:00:05": {"mode": "access", "tag": 30},
    }
    round_trip(state)


def test_isolated_vif_round_trips() -> None:
    state = lab_state()
    state.ports["vif3.0"].vlan = VlanCols("trunk", None, (DEAD_VLAN,))
    result = round_trip(state)
    assert list(result.dead) == ["vif3.0"]


def test_meter_and_tc_policing_round_trip() -> None:
    state = lab_state()
    state.ports["vif1.0"].police = PoliceCols(0, 0, 10000, 8000)
    state.ports["vif2.0"].police = PoliceCols(2000, 1600)
    state.ports["vif3.0"].police = PoliceCols(0, 0, 500, 20)
    rules = {r["mac"]: r.get("ingress") for r in export.to_policy(state)["vifs"]}
    assert rules == {
        "52:54:00:00:00:01": {"rate": 10000, "burst": 8000, "mechanism": "meter"},
        "52:54:00:00:00:02": {"rate": 2000, "burst": 1600, "mechanism": "tc"},
        "52:54:00:00:00:03": {"rate": 500, "burst": 20, "mechanism": "meter"},
    }
    # whatever the host's probe says, the exported mechanism is kept
    round_trip(state, tc_police=True)
    round_trip(state, tc_police=False)


def test_tc_policing_with_the_default_burst_round_trips() -> None:
    state = lab_state()
    state.ports["vif1.0"].police = PoliceCols(1000, 0)
    round_trip(state, tc_police=True)


def test_egress_round_trips() -> None:
    state = lab_state()
    state.ports["vif1.0"].qos = owned_qos(Egress(10000))
    state.ports["vif2.0"].qos = owned_qos(Egress(5000, 100))
    # a QoS hvnet did not make, that it can express: kept as it is
    state.ports["vif3.0"].qos = QosCols("linux-htb", (("max-rate", "3000000"),), (), (), uuid="u-1")
    rules = {r["mac"]: r.get("egress") for r in export.to_policy(state)["vifs"]}
    assert rules == {
        "52:54:00:00:00:01": {"rate": 10000},
        "52:54:00:00:00:02": {"rate": 5000, "burst": 100},
        "52:54:00:00:00:03": {"rate": 3000},
    }
    round_trip(state)


def test_qos_hvnet_cannot_express_is_left_out() -> None:
    state = lab_state()
    state.ports["vif1.0"].qos = QosCols("linux-hfsc", (("max-rate", "3000000"),))
    state.ports["vif2.0"].qos = QosCols("linux-htb", (), OWNED)  # no max-rate
    rules = export.to_policy(state)["vifs"]
    assert all("egress" not in r for r in rules)
    round_trip(state)


def test_mirrors_round_trip() -> None:
    state = lab_state(has_mirror_filter=True)
    # port output to a VIF: an isolation exception, which the export must allow
    add_mirror(state, "to-vm3", MirrorCols(src=("vif1.0",), dst=("vif1.0", "vif2.0"), output_port="vif3.0"))
    # port output to the uplink
    add_mirror(state, "to-uplink", MirrorCols(src=("vif2.0",), output_port="eth1", external_ids=OWNED))
    # RSPAN, narrowed to some VLANs, with snaplen and filter
    add_mirror(
        state,
        "rspan",
        MirrorCols(
            dst=("vif2.0",), vlans=(1, 2, 3, 7), output_vlan=100, snaplen=128, filter="icmp", external_ids=OWNED
        ),
    )
    # everything to a VLAN
    add_mirror(state, "all", MirrorCols(select_all=True, output_vlan=200))
    # GRE tunnel with a key, ERSPAN with an index
    for name, kind, options in (
        ("gre", "gre", (("key", "42"), ("remote_ip", "192.0.2.7"))),
        ("ers", "erspan", (("erspan_idx", "9"), ("erspan_ver", "1"), ("remote_ip", "192.0.2.8"))),
        ("ers1", "erspan", (("erspan_idx", "1"), ("erspan_ver", "1"), ("remote_ip", "192.0.2.9"))),
    ):
        tname = tunnel_port_name("xenbr0", name)
        add_port(state, port(tname, iface_type=kind, owner_mirror=name))
        tunnel = TunnelCols(tname, kind, options)
        add_mirror(state, name, MirrorCols(src=("vif3.0",), output_port=tname, external_ids=OWNED, tunnel=tunnel))

    mirrors = export.to_policy(state)["bridges"]["xenbr0"]["mirrors"]
    assert mirrors == {
        "all": {"select": "all", "output": {"vlan": 200}},
        "ers": {"select": {"src": ["vif3.0"]}, "output": {"erspan": "192.0.2.8", "idx": 9}},
        "ers1": {"select": {"src": ["vif3.0"]}, "output": {"erspan": "192.0.2.9"}},
        "gre": {"select": {"src": ["vif3.0"]}, "output": {"gre": "192.0.2.7", "key": 42}},
        "rspan": {
            "select": {"dst": ["vif2.0"], "vlans": "1-3,7"},
            "output": {"vlan": 100},
            "snaplen": 128,
            "filter": "icmp",
        },
        "to-uplink": {"select": {"src": ["vif2.0"]}, "output": {"port": "eth1"}},
        "to-vm3": {
            "select": {"src": ["vif1.0"], "dst": ["vif1.0", "vif2.0"]},
            "output": {"port": "vif3.0"},
            "allow_isolation_exception": True,
        },
    }
    result = round_trip(state)
    assert any("RSPAN VLAN 100" in w for w in result.warnings)
    # the tunnel ports are not VIFs and are not exported as rules
    assert len(export.to_policy(state)["vifs"]) == 3


def test_select_all_mirror_to_a_port_round_trips() -> None:
    state = lab_state()
    add_mirror(state, "span", MirrorCols(select_all=True, output_port="eth1"))
    assert export.to_policy(state)["bridges"]["xenbr0"]["mirrors"] == {
        "span": {"select": "all", "output": {"port": "eth1"}}
    }
    round_trip(state)


def test_vlan_only_mirror_round_trips() -> None:
    state = lab_state()
    add_mirror(state, "rspan", MirrorCols(select_all=True, vlans=(10, 20), output_vlan=100, external_ids=OWNED))
    round_trip(state)


def test_access_port_without_a_tag_round_trips() -> None:
    state = lab_state()
    state.ports["vif1.0"].vlan = VlanCols("access", None, ())
    round_trip(state)


def test_mirror_selecting_nothing_or_without_output_is_not_exported() -> None:
    state = lab_state()
    add_mirror(state, "empty", MirrorCols(output_port="eth1"))
    add_mirror(state, "nowhere", MirrorCols(src=("vif1.0",)))
    assert "bridges" not in export.to_policy(state)
    round_trip(state)


def test_everything_at_once_round_trips() -> None:
    state = lab_state(has_mirror_filter=True)
    state.bridges["xenbr0"].protocols = ("OpenFlow10", "OpenFlow13")
    state.ports["vif1.0"].vlan = VlanCols("trunk", None, (10, 20))
    state.ports["vif1.0"].police = PoliceCols(0, 0, 1000, 800)
    state.ports["vif1.0"].qos = owned_qos(Egress(2000, 50))
    state.ports["vif2.0"].police = PoliceCols(3000, 2400)
    state.ports["vif3.0"].vlan = VlanCols("native-tagged", 2, (30,))
    add_mirror(state, "m", MirrorCols(src=("vif1.0",), output_port="vif2.0", filter="tcp", external_ids=OWNED))
    round_trip(state)
    round_trip(state, by="port")


# -- export details ---------------------------------------------------------------


def test_selectors_prefer_a_unique_mac() -> None:
    state = lab_state()
    state.ports["vif2.0"].mac = state.ports["vif1.0"].mac  # duplicated MAC: not a usable selector
    state.ports["vif3.0"].mac = "fe:ff:ff:ff:ff:ff"  # Xen's placeholder MAC
    add_port(state, vif("vif4.0", "VM4", 4, 1, mac=None))
    sels = [{k: v for k, v in r.items() if k in ("mac", "port")} for r in export.to_policy(state)["vifs"]]
    assert sels == [{"port": "vif1.0"}, {"port": "vif2.0"}, {"port": "vif3.0"}, {"port": "vif4.0"}]
    round_trip(state)


def test_by_port() -> None:
    rules = export.to_policy(lab_state(), by="port")["vifs"]
    assert [r["port"] for r in rules] == ["vif1.0", "vif2.0", "vif3.0"]
    assert all("mac" not in r for r in rules)


def test_uplink_is_not_exported() -> None:
    state = lab_state()
    state.ports["eth1"].vlan = VlanCols("trunk", None, (1, 2))
    text = export.to_yaml(state, by="port")
    assert "eth1" not in text


def test_yaml_layout() -> None:
    text = export.to_yaml(lab_state(), header="# exported from test\n")
    lines = text.splitlines()
    assert lines[:5] == [
        "# exported from test",
        "# VMs on this switch:",
        "#   vif1.0: VM1",
        "#   vif2.0: VM2",
        "#   vif3.0: VM3",
    ]
    doc = yaml.safe_load(text)
    assert doc == {
        "version": 1,
        "vifs": [
            {"mac": "52:54:00:00:00:01", "vlan": {"mode": "access", "tag": 1}},
            {"mac": "52:54:00:00:00:02", "vlan": {"mode": "access", "tag": 1}},
            {"mac": "52:54:00:00:00:03", "vlan": {"mode": "access", "tag": 2}},
        ],
    }
    assert text.endswith("\n")


def test_exported_policy_applied_to_a_changed_switch_puts_it_back() -> None:
    before = lab_state()
    before.ports["vif1.0"].police = PoliceCols(0, 0, 1000, 800)
    text = export.to_yaml(before)
    after = lab_state()
    after.ports["vif1.0"].vlan = VlanCols(None, 7, ())
    after.ports["vif3.0"].qos = owned_qos(Egress(100))  # not in the export: left alone
    result = planner.plan(document.parse(text, "e.yaml"), after, PlanOptions())
    assert [(c.kind, c.name, c.after) for c in result.changes] == [
        ("vlan", "vif1.0", VlanCols("access", 1, ())),
        ("ingress", "vif1.0", PoliceCols(0, 0, 1000, 800)),
    ]


# -- journal: rollback records ---------------------------------------------------------


TUNNEL = TunnelCols("mir12345678", "erspan", (("erspan_idx", "3"), ("erspan_ver", "1"), ("remote_ip", "192.0.2.1")))

CHANGES = [
    Change("vlan", "xenbr0", "vif1.0", VlanCols(None, 1, ()), VlanCols("trunk", None, (10, 20, 21)), "VM1", "note"),
    Change("vlan", "xenbr0", "vif3.0", VlanCols("native-untagged", 0, (5,)), VlanCols("trunk", None, (DEAD_VLAN,))),
    Change("ingress", "xenbr0", "vif1.0", PoliceCols(1000, 800), PoliceCols(0, 0, 2000, 1600), "VM1"),
    Change("ingress", "xenbr0", "vif2.0", PoliceCols(0, 0, 2000, 1600), PoliceCols()),
    Change("egress", "xenbr0", "vif1.0", None, owned_qos(Egress(5000, 100)), "VM1"),
    Change(
        "egress",
        "xenbr0",
        "vif2.0",
        QosCols(
            "linux-htb",
            (("max-rate", "3000000"),),
            (("made-by", "admin"),),
            (
                QueueCols(0, (("max-rate", "1000000"),), (), 10),
                QueueCols(1, (("min-rate", "5000"),), (("q", "1"),), None),
            ),
            uuid="5c1e7c5a-0000-4000-8000-000000000001",
        ),
        None,
        note="detached",
    ),
    Change(
        "mirror",
        "xenbr0",
        "m1",
        None,
        MirrorCols(
            src=("vif1.0",),
            dst=("vif1.0", "vif2.0"),
            vlans=(1, 2),
            output_port="mir12345678",
            snaplen=128,
            filter="icmp",
            external_ids=OWNED,
            tunnel=TUNNEL,
        ),
    ),
    Change(
        "mirror",
        "xenbr0",
        "m2",
        MirrorCols(select_all=True, output_vlan=100),
        MirrorCols(select_all=True, output_port="eth1", external_ids=OWNED),
    ),
    Change("mirror", "xenbr0", "m3", MirrorCols(src=("vif3.0",), output_port="eth1"), None),
    Change("protocols", "xenbr0", "xenbr0", (), ("OpenFlow10", "OpenFlow13")),
    Change("protocols", "xenbr0", "xenbr0", ("OpenFlow10",), ("OpenFlow10", "OpenFlow13"), note="meters"),
]


@pytest.mark.parametrize("change", CHANGES, ids=lambda c: f"{c.kind}-{c.name}")
def test_change_json_round_trip(change) -> None:
    data = json.loads(json.dumps(journal.change_to_json(change)))
    assert data["kind"] == change.kind
    back = journal.change_from_json(data)
    assert back == change
    assert back.inverse() == change.inverse()
    # the values come back as the same types (tuples, not lists), so they compare and hash
    for value in (back.before, back.after):
        if value is not None:
            hash(value)


def test_qos_uuid_and_queues_survive_the_round_trip() -> None:
    change = CHANGES[5]
    back = journal.change_from_json(json.loads(json.dumps(journal.change_to_json(change))))
    assert back.before.uuid == "5c1e7c5a-0000-4000-8000-000000000001"  # not part of equality
    assert back.before.queues[0].dscp == 10
    assert back.before.queues[1].external_ids == (("q", "1"),)
    assert back.note == "detached"


def test_change_json_shape() -> None:
    data = journal.change_to_json(CHANGES[0])
    assert data == {
        "kind": "vlan",
        "bridge": "xenbr0",
        "name": "vif1.0",
        "vm": "VM1",
        "note": "note",
        "before": {"vlan_mode": None, "tag": 1, "trunks": ()},
        "after": {"vlan_mode": "trunk", "tag": None, "trunks": (10, 20, 21)},
    }
    assert journal.change_to_json(CHANGES[-1])["after"] == ["OpenFlow10", "OpenFlow13"]


def test_record_round_trip() -> None:
    record = journal.new_record("unix:/run/openvswitch/db.sock", "hvnet apply p.yaml", CHANGES)
    assert record["target"] == "unix:/run/openvswitch/db.sock"
    assert len(record["id"]) == 12
    back = json.loads(json.dumps(record))
    assert journal.record_changes(back) == CHANGES


def test_old_record_without_vm_or_note() -> None:
    data = journal.change_to_json(CHANGES[2])
    del data["vm"], data["note"]
    back = journal.change_from_json(data)
    assert (back.vm, back.note) == (None, "")
    assert back.after == PoliceCols(0, 0, 2000, 1600)


def test_unknown_kind_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown change kind 'bond'"):
        journal.value_from_json("bond", {"x": 1})
    assert journal.value_from_json("bond", None) is None


def test_planned_changes_survive_the_journal() -> None:
    state = lab_state()
    state.bridges["xenbr0"].protocols = ("OpenFlow10",)
    text = (
        "vifs:\n  - vm: VM1\n    vlan: remove\n    ingress: 1000\n    egress: {rate: 2000, burst: 20}\n"
        "bridges:\n  xenbr0:\n    mirrors:\n      m:\n        select: {src: vif2.0}\n"
        "        output: {gre: 192.0.2.5, key: 1}\n"
    )
    changes = planner.plan(document.parse(text, "p.yaml"), state, PlanOptions()).changes
    assert sorted(c.kind for c in changes) == ["egress", "ingress", "mirror", "protocols", "vlan"]
    back = [journal.change_from_json(json.loads(json.dumps(journal.change_to_json(c)))) for c in changes]
    assert back == changes


def test_audit_log_lines(tmp_path) -> None:
    log = tmp_path / "audit" / "audit.jsonl"
    j = journal.Journal("unix:/x.sock", tmp_path / "state", log)
    path = j.audit("hvnet apply", CHANGES[:2], "ok", plan_id="abc")
    assert path == log
    j.audit("hvnet rollback", [CHANGES[0].inverse()], "failed")
    entries = j.read_audit()
    assert [e["result"] for e in entries] == ["ok", "failed"]
    first = entries[0]
    assert first["command"] == "hvnet apply" and first["target"] == "unix:/x.sock" and first["plan_id"] == "abc"
    assert first["before"][0] == {"kind": "vlan", "bridge": "xenbr0", "name": "vif1.0", "value": "access tag 1"}
    assert first["after"][1]["value"] == "dead VLAN 4095 (isolated)"
    assert entries[1]["after"][0]["value"] == "access tag 1"
    assert j.read_audit(last=1) == entries[1:]


def test_journal_paths_come_from_the_front_door(tmp_path) -> None:
    """HVNET_AUDIT_LOG and HVNET_STATE_DIR are read once, by the front door, into the Host's paths."""
    from appliance.frontdoor.hosts import build_host

    env = {"HVNET_AUDIT_LOG": str(tmp_path / "a.jsonl"), "HVNET_STATE_DIR": str(tmp_path / "s"),
           "HVNET_LAB_DIR": str(tmp_path / "no-lab")}  # fmt: skip
    j = journal.Journal.for_host(build_host("unix:/x.sock", environ=env))
    assert (j.audit_path, j.state_dir, j.remote) == (tmp_path / "a.jsonl", tmp_path / "s", "unix:/x.sock")


def test_last_apply_and_pending_records(tmp_path) -> None:
    remote = "unix:/x.sock"
    j = journal.Journal(remote, tmp_path, tmp_path / "audit.jsonl")
    record = j.new_record("hvnet apply", CHANGES[:3])
    j.save_last(record)
    assert journal.record_changes(j.load_last()) == CHANGES[:3]
    assert journal.Journal("tcp:10.0.0.1:6640", tmp_path, tmp_path / "a").load_last() is None  # another switch's
    j.mark_rolled_back(record)
    assert j.load_last() is None
    assert (tmp_path / "last-apply.rolled-back.json").exists()

    j.save_pending(record, deadline=123.0, watcher_pid=None)
    pending = j.load_pending()
    assert pending["deadline"] == 123.0 and pending["id"] == record["id"]
    assert j.clear_pending("someone-else") is False
    assert j.clear_pending(record["id"]) is True
    assert j.load_pending() is None
