"""The isolation check on an OVN pool, its pure parts: the pool scenario's validation, each guest's port found
in a real pool's NB/SB snapshots (captured from the lab's ovn-pool), the expectation a logical network implies."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pytest

from appliance.core.errors import ConfigError, UsageError
from appliance.core.target import DbTarget
from appliance.isolation import model, ovntrace
from appliance.isolation import scenario as scenario_mod
from appliance.ovn.view import PoolView, build
from appliance.services.ovn import isolation as isolation_pool
from appliance.services.ovn import tunnels as pool_tunnels
from appliance.switch import snapshot

ROOT = Path(__file__).resolve().parents[3]
DATA = Path(__file__).parents[1] / "data"
SCENARIO = ROOT / "vlan-tests" / "ovn-pool.yaml"


def _snap(db: str) -> snapshot.Snapshot:
    doc = json.loads((DATA / f"ovn-pool-{db}.json").read_text())
    return snapshot.build(DbTarget(f"unix:/{db}.sock", "test"), doc["tables"], doc["present"], doc["raw"])


def view() -> PoolView:
    return build("ovn-pool", _snap("nb"), _snap("sb"), "unix:/nb.sock", "unix:/sb.sock", "7.0.0")


def _scenario(tmp_path: Path, body: str) -> Path:
    f = tmp_path / "sc.yaml"
    f.write_text(f"topology: {ROOT / 'vlan-tests' / 'topologies' / 'ovn-pool.yaml'}\n{body}")
    return f


def test_the_shipped_pool_scenario_expects_the_studys_matrix() -> None:
    sc = scenario_mod.load(SCENARIO)
    assert sc.topology.ovn and sc.guests == ["VM1", "VM2", "VM3"]
    assert sc.matrix == {("VM1", "VM2"): "yes", ("VM2", "VM1"): "yes", ("VM1", "VM3"): "no",
                         ("VM3", "VM1"): "no", ("VM2", "VM3"): "no", ("VM3", "VM2"): "no"}  # fmt: skip
    assert set(sc.guest_lines) == {"VM1", "VM2", "VM3"}


def test_each_guest_is_found_as_its_port_on_the_pool() -> None:
    sc = scenario_mod.load(SCENARIO)
    ports = isolation_pool.resolve(sc, view())
    assert {g: (p.switch, p.chassis) for g, p in ports.items()} == {
        "VM1": ("vlan1", "hv1"), "VM2": ("vlan1", "hv2"), "VM3": ("vlan2", "hv3")}  # fmt: skip
    assert ports["VM1"].port == sc.topology.guest("VM1").vif_uuid("ovn-pool")
    assert (ports["VM2"].mac, ports["VM2"].ip) == (sc.topology.guest("VM2").mac, "192.168.0.151")


def test_the_vm_a_chassis_names_wins_over_the_labs_labels() -> None:
    sc = scenario_mod.load(SCENARIO)
    v = view()
    by_vm = {p.external_ids["hvnet-vm"]: p for _, p in v.ports()}
    # an operator's pool: ports named by uuid, the VM behind each known only from its chassis
    for p in by_vm.values():
        p.external_ids.pop("hvnet-vm")
        p.name = "renamed-" + p.name[:8]
    by_vm["VM1"].vm, by_vm["VM2"].vm, by_vm["VM3"].vm = "VM1", "VM2", "VM3"
    ports = isolation_pool.resolve(sc, v)
    assert ports["VM3"].port == by_vm["VM3"].name and ports["VM3"].switch == "vlan2"


def test_a_guest_the_pool_lacks_is_refused_at_its_line(tmp_path: Path) -> None:
    f = _scenario(tmp_path, "guests:\n  - VM1\n  - VM2\nexpect: derive\n")
    sc = scenario_mod.load(f)
    v = view()
    v.switches[0].ports = [p for p in v.switches[0].ports if p.external_ids.get("hvnet-vm") != "VM2"]
    with pytest.raises(UsageError) as exc:
        isolation_pool.resolve(sc, v)
    assert exc.value.args[0] == f"{f}:4: guests: pool ovn-pool has no port for VM2"
    assert exc.value.exit_code == 2 and "VM1, VM3" in (exc.value.hint or "")


def test_a_pool_scenario_takes_no_vlan_settings_or_mirrors(tmp_path: Path) -> None:
    f = _scenario(tmp_path, "vlans:\n  VM1: {tag: 5}\nmirrors:\n  - {name: m, output: VM3, select_all: true}\n"
                            "expect: derive\n")  # fmt: skip
    with pytest.raises(ConfigError) as exc:
        scenario_mod.load(f)
    text = "\n".join(str(p) for p in exc.value.problems)
    assert f"{f}:2: vlans: on an OVN pool" in text and "a port's network is its logical switch" in text
    assert f"{f}:4: mirrors: on an OVN pool" in text


def test_derive_on_a_pool_is_logical_switch_membership(tmp_path: Path) -> None:
    sc = scenario_mod.load(_scenario(tmp_path, "expect: derive\n"))
    exp = isolation_pool.expected(sc, isolation_pool.resolve(sc, view()))
    assert exp.cells == scenario_mod.load(SCENARIO).matrix
    assert all(v in (model.YES, model.NO) for v in exp.cells.values())


# -- ovn-trace, read (outputs captured from the lab's pool: VM1 8cf87d, VM2 6bcabc on vlan1, VM3 91194d on vlan2) --


def _trace(name: str) -> str:
    return (DATA / f"ovn-trace-{name}.txt").read_text()


def test_a_broadcast_flooded_on_a_logical_switch_is_delivered_to_the_other_ports_only() -> None:
    t = ovntrace.parse(_trace("VM1-broadcast"))
    assert (t.datapath, t.inport, t.delivered, t.skipped) == ("vlan1", "8cf87d", ["6bcabc"], ["8cf87d"])
    assert t.fate("6bcabc").delivered and not t.fate("91194d").delivered and not t.fate("91194d").dropped
    assert t.ingress_drop is None and t.egress_drops == {}
    assert t.flow.startswith("arp,reg14=0x1,") and "arp_tpa=192.168.0.254" in t.flow
    assert t.summary() == "vlan1: from 8cf87d: delivered to 6bcabc"


def test_a_guest_alone_on_its_switch_reaches_no_port() -> None:
    t = ovntrace.parse(_trace("VM3-broadcast"))
    assert (t.datapath, t.inport, t.delivered, t.skipped) == ("vlan2", "91194d", [], ["91194d"])
    assert t.summary() == "vlan2: from 91194d: delivered to no port"


def test_drops_name_the_stage_and_the_flow_that_matched() -> None:
    acl = ovntrace.parse(_trace("acl-drop"))
    assert acl.ingress_drop == 'at ls_in_acl (match: inport == "8cf87d" && arp)' and acl.delivered == []
    sec = ovntrace.parse(_trace("port-security-drop"))
    assert sec.ingress_drop == "at ls_in_apply_port_sec (match: reg0[15] == 1)"
    assert sec.summary() == "vlan1: from 8cf87d: dropped at ls_in_apply_port_sec (match: reg0[15] == 1)"


def test_an_arp_for_a_known_address_is_answered_by_ovn_and_never_reaches_the_peer() -> None:
    t = ovntrace.parse(_trace("arp-responder"))
    assert t.delivered == ["8cf87d"]  # back to the asker, from the ls_in_arp_rsp stage: why probes ask for no one


def test_what_is_not_a_trace_is_refused() -> None:
    for text in (_trace("unknown-datapath"), "", "ovn-trace: unix:/x.sock: database connection failed\n"):
        with pytest.raises(ValueError, match="no ingress pipeline"):
            ovntrace.parse(text)


def _ports(view_: PoolView) -> dict[str, isolation_pool.PoolPort]:
    """The lab's ports under the short names ovn-trace printed in these captures (its 'friendly' names)."""
    sc = scenario_mod.load(SCENARIO)
    ports = isolation_pool.resolve(sc, view_)
    return {g: dataclasses.replace(p, port=p.port[:6]) for g, p in ports.items()}


def test_the_trace_method_gives_the_studys_matrix_and_says_why_for_each_pair() -> None:
    sc = scenario_mod.load(SCENARIO)
    calls: list[tuple[str, str]] = []
    outputs = {p.port: _trace(f"{g}-broadcast") for g, p in _ports(view()).items()}
    res = isolation_pool.trace_method(sc, _ports(view()), "192.168.0.254",
                                      lambda sw, expr: (calls.append((sw, expr)), outputs[expr.split('"')[1]])[1])  # fmt: skip
    assert res.cells == sc.matrix and res.reasons == {}
    assert [c[0] for c in calls] == ["vlan1", "vlan1", "vlan2"]
    assert "arp.tpa == 192.168.0.254" in calls[0][1] and "arp.op == 1" in calls[0][1]
    why = res.stats["logical"]
    assert why["VM1"]["VM2"] == "delivered to VM2's port 6bcabc on vlan1"
    assert why["VM1"]["VM3"] == "VM3's port is on vlan2, VM1's broadcast stays on vlan1 (delivered to VM2 only)"
    assert why["VM3"]["VM1"] == "VM1's port is on vlan1, VM3's broadcast stays on vlan2 (delivered to no one)"


def test_a_drop_is_a_reasoned_no_and_an_unreadable_trace_leaves_its_cells_unknown() -> None:
    sc = scenario_mod.load(SCENARIO)
    ports = _ports(view())
    outputs = {"VM1": _trace("acl-drop"), "VM2": _trace("VM2-broadcast"), "VM3": 'unknown datapath "vlan2"\n'}
    by_port = {p.port: g for g, p in ports.items()}
    res = isolation_pool.trace_method(sc, ports, "192.168.0.254", lambda sw, expr: outputs[by_port[expr.split('"')[1]]])
    assert res.cells[("VM2", "VM1")] == model.NO
    assert res.stats["logical"]["VM1"]["VM2"] == 'dropped at ls_in_acl (match: inport == "8cf87d" && arp)'
    assert res.cells[("VM1", "VM2")] == model.YES
    # VM3's own trace could not be read: no "No" about it stands, and its broadcast's cells are unknown
    assert res.cells[("VM3", "VM1")] == res.cells[("VM1", "VM3")] == model.UNKNOWN
    assert "ovn-trace of VM3's broadcast could not be read" in res.reasons[("VM3", "VM1")]


def test_the_tunnels_a_check_needs_are_those_between_chassis_sharing_a_logical_switch() -> None:
    sc = scenario_mod.load(SCENARIO)
    ports = isolation_pool.resolve(sc, view())
    assert pool_tunnels.needed(ports, view()) == {"hv1": {"10.254.0.2"}, "hv2": {"10.254.0.1"}}


def test_a_no_across_a_tunnel_that_never_resolved_is_unknown() -> None:
    sc = scenario_mod.load(SCENARIO)
    ports = isolation_pool.resolve(sc, view())
    res = model.MethodResult("traffic", cells={("VM1", "VM2"): model.NO, ("VM2", "VM1"): model.YES,
                                               ("VM3", "VM1"): model.NO})  # fmt: skip
    pool_tunnels.doubt(res, ports, view(), {"hv2": {"10.254.0.1"}})
    assert res.cells == {("VM1", "VM2"): model.UNKNOWN, ("VM2", "VM1"): model.YES, ("VM3", "VM1"): model.NO}
    assert "chassis hv2 never resolved the underlay address of hv1" in res.reasons[("VM1", "VM2")]
    assert res.stats["tunnels_unresolved"] == {"hv2": ["10.254.0.1"]}


def test_the_underlay_neighbours_a_chassis_knows_are_read_from_tnl_neigh_show() -> None:
    text = (DATA / "ovs-appctl-tnl-neigh-show.txt").read_text()  # hv1's, after a check
    assert pool_tunnels.neighbours(text) == {"10.254.0.2"}
    assert pool_tunnels.neighbours("IP   MAC   Bridge\n=====\n") == set()


def test_the_report_puts_each_logical_verdict_beside_the_traffic_methods_and_flags_disagreement() -> None:
    from appliance.isolation import html, report
    from appliance.isolation.check import CheckResult

    sc = scenario_mod.load(SCENARIO)
    ports = _ports(view())
    outputs = {p.port: _trace(f"{g}-broadcast") for g, p in ports.items()}
    trace = isolation_pool.trace_method(sc, ports, "192.168.0.254", lambda sw, expr: outputs[expr.split('"')[1]])
    traffic = model.MethodResult("traffic", cells=dict(sc.matrix or {}))
    traffic.cells[("VM1", "VM2")] = model.NO  # as a dropped first frame once made it read
    result = CheckResult("ovn-pool", sc.guests, isolation_pool.expected(sc, ports), {"traffic": traffic, "trace": trace},
                         None)  # fmt: skip
    text = report.format_result(result)
    assert "  VM2 -> VM1: delivered to VM1's port 8cf87d on vlan1 [traffic: No]" in text
    assert "METHODS DISAGREE: does VM1 hear VM2? traffic: No, trace: Yes" in text
    assert result.exit_code == 1
    page = html.page(result, source="test")
    assert "logical verdict per pair" in page and "delivered to VM1&#x27;s port 8cf87d on vlan1" in page
