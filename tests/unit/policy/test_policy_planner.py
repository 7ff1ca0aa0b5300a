"""The planner against hand-built switch states shaped like the lab (xenbr0, VM1..VM3, an uplink)."""

from __future__ import annotations

import textwrap

import pytest

from appliance.core import validate
from appliance.core.errors import ConfigError, Problem
from appliance.core.vlan import DEAD_VLAN, VlanCols
from appliance.policy.plan import document, planner
from appliance.policy.plan.model import OWNER, OWNER_KEY, Egress, Policy
from appliance.policy.plan.monitoring import tunnel_port_name
from appliance.policy.plan.planner import Change, Plan, PlanOptions, describe, owned_qos
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

FILE = "p.yaml"


def uplink(name: str = "eth1", bridge: str = "xenbr0") -> PortState:
    return PortState(name, bridge, name, "system", VlanCols(), PoliceCols(), None, 4, None, "02:00:00:00:00:99", None)


def lab_state(**kw) -> State:
    ports = [vif("vif1.0", "VM1", 1, 1), vif("vif2.0", "VM2", 2, 1), vif("vif3.0", "VM3", 3, 2), uplink()]
    state = State(
        ports={p.name: p for p in ports},
        bridges={"xenbr0": BridgeState("xenbr0", (), "system", tuple(sorted(p.name for p in ports)), ())},
        **kw,
    )
    return state


def add_mirror(state: State, name: str, cols: MirrorCols, bridge: str = "xenbr0") -> None:
    state.mirrors[(bridge, name)] = MirrorState(bridge, name, cols)
    b = state.bridges[bridge]
    b.mirrors = tuple(sorted({*b.mirrors, name}))


def add_port(state: State, port: PortState) -> None:
    state.ports[port.name] = port
    b = state.bridges[port.bridge]
    b.ports = tuple(sorted({*b.ports, port.name}))


def policy(text: str) -> Policy:
    return document.parse(textwrap.dedent(text), FILE)


def plan(text: str, state: State | None = None, **opts) -> Plan:
    return planner.plan(policy(text), state if state is not None else lab_state(), PlanOptions(**opts))


def refused(text: str, state: State | None = None, **opts) -> list[Problem]:
    with pytest.raises(ConfigError) as exc:
        plan(text, state, **opts)
    for p in exc.value.problems:
        assert p.file == FILE
    return exc.value.problems


def only(changes: list[Change]) -> Change:
    assert len(changes) == 1, changes
    return changes[0]


def mirror_text(body: str, name: str = "m", bridge: str = "xenbr0") -> str:
    body = textwrap.indent(textwrap.dedent(body), " " * 8)
    return f"bridges:\n  {bridge}:\n    mirrors:\n      {name}:\n{body}"


# -- no-op plans ----------------------------------------------------------------


def test_empty_policy_plans_nothing() -> None:
    p = planner.plan(Policy(), lab_state())
    assert p.empty and p.changes == [] and p.warnings == [] and p.dead == {}
    assert p.bridges() == set()


def test_policy_matching_the_switch_plans_nothing() -> None:
    p = plan(
        """\
        vifs:
          - vm: VM1
            vlan: {mode: access, tag: 1}
          - vm: VM2
            vlan: 1
          - port: vif3.0
            vlan: {tag: 2}
        """
    )
    assert p.empty
    assert p.matched == {"vifs[0].vm": ["vif1.0"], "vifs[1].vm": ["vif2.0"], "vifs[2].port": ["vif3.0"]}


@pytest.mark.parametrize(
    "stored, wanted",
    [
        (VlanCols(None, 1, ()), "{mode: access, tag: 1}"),
        (VlanCols("access", 1, ()), "1"),
        (VlanCols("access", 1, (5, 6)), "1"),  # OVS ignores the trunks of an access port
        (VlanCols(None, None, (20, 10)), '{trunks: "10,20"}'),
        (VlanCols("trunk", 7, (10, 20)), '{mode: trunk, trunks: "10,20"}'),  # ... and the tag of a trunk port
        (VlanCols(None, None, ()), "{mode: trunk, trunks: all}"),
        (VlanCols("native-untagged", 5, (1, 2, 3)), '{mode: native-untagged, tag: 5, trunks: "1-3"}'),
        (VlanCols("trunk", None, (DEAD_VLAN,)), "remove"),
    ],
)
def test_effective_vlan_comparison(stored, wanted) -> None:
    state = lab_state()
    state.ports["vif1.0"].vlan = stored
    assert plan(f"vifs:\n  - port: vif1.0\n    vlan: {wanted}\n", state).empty


def test_settings_a_rule_leaves_out_are_not_touched() -> None:
    state = lab_state()
    state.ports["vif1.0"].police = PoliceCols(1000, 800)
    state.ports["vif1.0"].qos = QosCols("linux-hfsc", (("max-rate", "1"),))
    assert plan("vifs:\n  - vm: VM1\n    vlan: 1\n", state).empty


# -- VLANs ----------------------------------------------------------------------


def test_vlan_change() -> None:
    p = plan("vifs:\n  - vm: VM1\n    vlan: 5\n")
    c = only(p.changes)
    assert (c.kind, c.bridge, c.name, c.vm) == ("vlan", "xenbr0", "vif1.0", "VM1")
    assert c.before == VlanCols(None, 1, ())
    assert c.after == VlanCols("access", 5, ())
    assert p.dead == {} and p.bridges() == {"xenbr0"}
    assert describe("vlan", c.before) == "access tag 1"
    assert describe("vlan", c.after) == "access tag 5"


def test_vlan_to_trunk_and_native() -> None:
    p = plan(
        """\
        vifs:
          - vm: VM1
            vlan: {trunks: "10,20-22"}
          - vm: VM2
            vlan: {mode: native-tagged, tag: 1, trunks: [30]}
        """
    )
    assert [(c.name, c.after) for c in p.changes] == [
        ("vif1.0", VlanCols("trunk", None, (10, 20, 21, 22))),
        ("vif2.0", VlanCols("native-tagged", 1, (30,))),
    ]


def test_glob_selector_changes_only_what_differs() -> None:
    p = plan("vifs:\n  - vm: 'VM*'\n    vlan: 2\n")
    assert [c.name for c in p.changes] == ["vif1.0", "vif2.0"]  # vif3.0 is already on VLAN 2
    assert p.matched == {"vifs[0].vm": ["vif1.0", "vif2.0", "vif3.0"]}


@pytest.mark.parametrize(
    "selector, port",
    [
        ("vm_uuid: 00000000-0000-0000-0000-000000000002", "vif2.0"),
        ("mac: '52:54:00:00:00:03'", "vif3.0"),
        ("mac: '52:54:00:00:00:0?'", None),
        ("port: vif2.0", "vif2.0"),
    ],
)
def test_selector_kinds(selector, port) -> None:
    p = plan(f"vifs:\n  - {selector}\n    vlan: 3\n")
    names = [c.name for c in p.changes]
    assert names == ([port] if port else ["vif1.0", "vif2.0", "vif3.0"])


def test_mac_selector_ignores_case() -> None:
    state = lab_state()
    state.ports["vif2.0"].mac = "52:54:00:00:00:0a"
    state.ports["vif3.0"].mac = "52:54:00:00:00:0B"
    p = plan("vifs:\n  - mac: '52:54:00:00:00:0A'\n    vlan: 3\n  - mac: '52:54:00:00:00:0b'\n    vlan: 4\n", state)
    assert [(c.name, c.after.tag) for c in p.changes] == [("vif2.0", 3), ("vif3.0", 4)]


def test_vm_selector_does_not_match_the_uplink_by_name() -> None:
    # eth1 is not a VIF; a vm/mac selector can never reach it.
    state = lab_state()
    state.ports["eth1"].vm_name = "VM1"
    c = only(plan("vifs:\n  - vm: VM1\n    vlan: 7\n", state).changes)
    assert c.name == "vif1.0"


def test_vlan_remove_isolates_in_the_dead_vlan() -> None:
    p = plan("vifs:\n  - vm: VM3\n    vlan: remove\n")
    c = only(p.changes)
    assert c.name == "vif3.0"
    assert c.before == VlanCols(None, 2, ())
    assert c.after == VlanCols("trunk", None, (DEAD_VLAN,))
    assert c.after.effective().is_dead
    assert "4095" in c.note
    assert list(p.dead) == ["vif3.0"]
    assert "dead VLAN 4095" in p.dead["vif3.0"]
    assert describe("vlan", c.after) == "dead VLAN 4095 (isolated)"


def test_vlan_remove_of_an_isolated_vif_plans_nothing_but_reports_it() -> None:
    state = lab_state()
    state.ports["vif3.0"].vlan = VlanCols("trunk", None, (DEAD_VLAN,))
    p = plan("vifs:\n  - vm: VM3\n    vlan: null\n", state)
    assert p.empty
    assert list(p.dead) == ["vif3.0"]


# -- ingress policing -------------------------------------------------------------


def test_auto_ingress_uses_tc_when_tc_police_works() -> None:
    c = only(plan("vifs:\n  - vm: VM1\n    ingress: 10mbit\n", tc_police=True).changes)
    assert c.kind == "ingress" and c.name == "vif1.0"
    assert c.before == PoliceCols()
    assert c.after == PoliceCols(10000, 8000, None, None)
    assert c.after.effective().mechanism == "tc"


def test_auto_ingress_uses_a_meter_otherwise() -> None:
    p = plan("vifs:\n  - vm: VM1\n    ingress: 10mbit\n", tc_police=False)
    c = only(p.changes)  # the bridge's protocols are the default: no protocols change
    assert c.after == PoliceCols(0, 0, 10000, 8000)
    assert c.after.effective().mechanism == "meter"
    assert describe("ingress", c.after) == "10000 kbit/s burst 8000 kbit (meter)"


def test_explicit_mechanism_wins_over_the_probe() -> None:
    p = plan(
        """\
        vifs:
          - vm: VM1
            ingress: {rate: 1000, mechanism: tc}
          - vm: VM2
            ingress: {rate: 1000, mechanism: meter}
        """,
        tc_police=True,
    )
    assert [(c.name, c.after) for c in p.changes] == [
        ("vif1.0", PoliceCols(1000, 800)),
        ("vif2.0", PoliceCols(0, 0, 1000, 800)),
    ]


def test_top_level_policing_sets_the_mechanism() -> None:
    c = only(plan("policing: tc\nvifs:\n  - vm: VM1\n    ingress: 1000\n", tc_police=False).changes)
    assert c.after == PoliceCols(1000, 800)


def test_switching_from_tc_to_meter_clears_the_tc_columns() -> None:
    state = lab_state()
    state.ports["vif1.0"].police = PoliceCols(1000, 800)
    c = only(plan("vifs:\n  - vm: VM1\n    ingress: {rate: 1000, mechanism: meter}\n", state).changes)
    assert c.before == PoliceCols(1000, 800)
    assert c.after == PoliceCols(0, 0, 1000, 800)


def test_ingress_already_in_place_plans_nothing() -> None:
    state = lab_state()
    state.ports["vif1.0"].police = PoliceCols(0, 0, 1000, 800)
    state.ports["vif2.0"].police = PoliceCols(2000, 1600)
    text = "vifs:\n  - vm: VM1\n    ingress: 1000\n  - vm: VM2\n    ingress: {rate: 2000, mechanism: tc}\n"
    assert plan(text, state, tc_police=False).empty


def test_ingress_remove() -> None:
    state = lab_state()
    state.ports["vif1.0"].police = PoliceCols(0, 0, 1000, 800)
    state.ports["vif2.0"].police = PoliceCols(1000, 800)
    p = plan("vifs:\n  - vm: 'VM*'\n    ingress: remove\n", state)
    assert [(c.name, c.before, c.after) for c in p.changes] == [
        ("vif1.0", PoliceCols(0, 0, 1000, 800), PoliceCols()),
        ("vif2.0", PoliceCols(1000, 800), PoliceCols()),
    ]
    assert describe("ingress", PoliceCols()) == "none"


def test_meter_without_openflow_is_refused() -> None:
    text = "vifs:\n  - vm: VM1\n    ingress:\n      rate: 1000\n      mechanism: meter\n"
    (p,) = refused(text, openflow=False)
    assert (p.line, p.field) == (3, "vifs[0].ingress")
    assert "OpenFlow" in p.message and "mechanism: tc" in p.message


def test_auto_without_tc_and_without_openflow_is_refused() -> None:
    problems = refused("vifs:\n  - vm: VM1\n    ingress: 1000\n", openflow=False, tc_police=False)
    assert [(p.line, p.field) for p in problems] == [(3, "vifs[0].ingress")]


def test_tc_without_openflow_is_fine() -> None:
    c = only(plan("vifs:\n  - vm: VM1\n    ingress: 1000\n", openflow=False, tc_police=True).changes)
    assert c.after == PoliceCols(1000, 800)


def test_meter_without_openflow_is_reported_once_per_rule() -> None:
    problems = refused("vifs:\n  - vm: 'VM*'\n    ingress: 1000\n", openflow=False)
    assert len(problems) == 1


def test_meter_on_a_bridge_without_openflow13_adds_it() -> None:
    state = lab_state()
    state.bridges["xenbr0"].protocols = ("OpenFlow10",)
    p = plan("vifs:\n  - vm: VM1\n    ingress: 1000\n  - vm: VM2\n    ingress: 2000\n", state)
    assert [c.kind for c in p.changes] == ["ingress", "ingress", "protocols"]
    proto = p.changes[-1]
    assert (proto.bridge, proto.name) == ("xenbr0", "xenbr0")
    assert proto.before == ("OpenFlow10",)
    assert proto.after == ("OpenFlow10", "OpenFlow13")
    assert "OpenFlow 1.3" in proto.note
    assert proto.target == "bridge xenbr0"
    assert describe("protocols", proto.after) == "OpenFlow10,OpenFlow13"


@pytest.mark.parametrize("protocols", [(), ("OpenFlow13",), ("OpenFlow10", "OpenFlow13", "OpenFlow14")])
def test_meter_on_a_bridge_that_speaks_openflow13_needs_no_protocols_change(protocols) -> None:
    state = lab_state()
    state.bridges["xenbr0"].protocols = protocols
    p = plan("vifs:\n  - vm: VM1\n    ingress: 1000\n", state)
    assert [c.kind for c in p.changes] == ["ingress"]


def test_tc_policing_needs_no_protocols_change() -> None:
    state = lab_state()
    state.bridges["xenbr0"].protocols = ("OpenFlow10",)
    p = plan("vifs:\n  - vm: VM1\n    ingress: 1000\n", state, tc_police=True)
    assert [c.kind for c in p.changes] == ["ingress"]


def test_meter_already_in_place_still_gets_openflow13() -> None:
    state = lab_state()
    state.bridges["xenbr0"].protocols = ("OpenFlow10", "OpenFlow12")
    state.ports["vif1.0"].police = PoliceCols(0, 0, 1000, 800)
    c = only(plan("vifs:\n  - vm: VM1\n    ingress: 1000\n", state).changes)
    assert c.kind == "protocols"
    assert c.after == ("OpenFlow10", "OpenFlow12", "OpenFlow13")


def test_meter_on_an_unusual_interface_type_warns() -> None:
    state = lab_state()
    state.ports["vif1.0"].iface_type = "patch"
    p = plan("vifs:\n  - vm: VM1\n    ingress: {rate: 1000, mechanism: meter}\n", state)
    assert p.warnings == ["vif1.0: meter on a patch interface"]
    assert plan("vifs:\n  - vm: VM2\n    ingress: {rate: 1000, mechanism: meter}\n", state).warnings == []


# -- egress shaping ---------------------------------------------------------------


def test_egress_creates_an_owned_htb_qos_in_bits_per_second() -> None:
    c = only(plan("vifs:\n  - vm: VM2\n    egress: 10mbit\n").changes)
    assert (c.kind, c.name, c.before) == ("egress", "vif2.0", None)
    qos = c.after
    assert qos.type == "linux-htb"
    assert dict(qos.other_config) == {"max-rate": "10000000"}
    assert qos.owned
    assert len(qos.queues) == 1
    q = qos.queues[0]
    assert q.number == 0
    assert dict(q.other_config) == {"max-rate": "10000000"}
    assert dict(q.external_ids) == {OWNER_KEY: OWNER}
    assert qos.effective() == Egress(10000, None)
    assert c.note == ""


def test_egress_burst_goes_on_the_queue() -> None:
    c = only(plan("vifs:\n  - vm: VM2\n    egress: {rate: 5000, burst: 100}\n").changes)
    assert dict(c.after.other_config) == {"max-rate": "5000000"}
    assert dict(c.after.queues[0].other_config) == {"burst": "100000", "max-rate": "5000000"}
    assert c.after.effective() == Egress(5000, 100)
    assert describe("egress", c.after) == "max 5000 kbit/s burst 100 kbit"


def test_egress_already_in_place_plans_nothing() -> None:
    state = lab_state()
    state.ports["vif2.0"].qos = owned_qos(Egress(5000, 100))
    assert plan("vifs:\n  - vm: VM2\n    egress: {rate: 5000, burst: 100}\n", state).empty
    # dropping the burst is a change
    c = only(plan("vifs:\n  - vm: VM2\n    egress: 5000\n", state).changes)
    assert c.after == owned_qos(Egress(5000))


def test_egress_remove_of_an_owned_qos() -> None:
    state = lab_state()
    state.ports["vif2.0"].qos = owned_qos(Egress(5000))
    c = only(plan("vifs:\n  - vm: VM2\n    egress: remove\n", state).changes)
    assert (c.before, c.after, c.note) == (owned_qos(Egress(5000)), None, "")


def test_egress_remove_of_a_foreign_qos_detaches_it_with_a_note() -> None:
    state = lab_state()
    foreign = QosCols("linux-hfsc", (("max-rate", "3000000"),), (), (), uuid="1234")
    state.ports["vif2.0"].qos = foreign
    c = only(plan("vifs:\n  - vm: VM2\n    egress: remove\n", state).changes)
    assert c.before == foreign and c.after is None
    assert "not created by hvnet" in c.note and "detached" in c.note
    assert describe("egress", c.before) == "QoS linux-hfsc, not hvnet's"


def test_egress_replacing_a_foreign_qos_says_so() -> None:
    state = lab_state()
    state.ports["vif2.0"].qos = QosCols("linux-hfsc", (("max-rate", "3000000"),))
    c = only(plan("vifs:\n  - vm: VM2\n    egress: 3000\n", state).changes)
    assert c.after == owned_qos(Egress(3000))
    assert "replaces a QoS (linux-hfsc)" in c.note


def test_egress_remove_without_qos_plans_nothing() -> None:
    assert plan("vifs:\n  - vm: VM2\n    egress: remove\n").empty


def test_foreign_htb_qos_with_the_same_cap_is_accepted() -> None:
    state = lab_state()
    state.ports["vif2.0"].qos = QosCols(
        "linux-htb", (("max-rate", "3000000"),), (), (QueueCols(0, (("burst", "64000"),)),)
    )
    assert plan("vifs:\n  - vm: VM2\n    egress: {rate: 3000, burst: 64}\n", state).empty


# -- selectors that match nothing, conflicts, bridges --------------------------------


def test_selector_matching_nothing_is_an_error_with_its_line() -> None:
    text = """\
        vifs:
          - vm: VM1
            vlan: 1
          - vm: VM9
            vlan: 3
        """
    (p,) = refused(text)
    assert (p.line, p.field) == (4, "vifs[1].vm")
    assert str(p).startswith("p.yaml:4: vifs[1].vm: vm VM9 matches no VIF")
    assert "known: VM1, VM2, VM3" in p.message
    assert "optional: true" in p.message


def test_port_selector_matching_nothing_lists_the_vifs() -> None:
    (p,) = refused("vifs:\n  - port: vif9.0\n    vlan: 3\n")
    assert (p.line, p.field) == (2, "vifs[0].port")
    assert "known: vif1.0, vif2.0, vif3.0" in p.message


def test_optional_selector_matching_nothing_is_fine() -> None:
    p = plan("vifs:\n  - vm: VM9\n    optional: true\n    vlan: 3\n")
    assert p.empty
    assert p.matched == {"vifs[0].vm": []}


def test_two_rules_disagreeing_about_a_vif_conflict() -> None:
    text = """\
        vifs:
          - vm: 'VM*'
            vlan: 1
          - port: vif3.0
            vlan: 3
        """
    (p,) = refused(text)
    assert (p.line, p.field) == (5, "vifs[1].vlan")
    assert "conflicts with vifs[0].vlan (line 3) for vif3.0" in p.message


def test_ingress_conflict_includes_the_mechanism() -> None:
    text = "vifs:\n  - vm: VM1\n    ingress: 1000\n  - port: vif1.0\n    ingress: {rate: 1000, mechanism: tc}\n"
    (p,) = refused(text)
    assert (p.line, p.field) == (5, "vifs[1].ingress")


def test_remove_and_set_conflict() -> None:
    (p,) = refused("vifs:\n  - vm: VM1\n    egress: remove\n  - port: vif1.0\n    egress: 100\n")
    assert p.field == "vifs[1].egress" and "for vif1.0" in p.message


def test_rules_that_agree_or_touch_different_settings_merge() -> None:
    p = plan(
        """\
        vifs:
          - vm: 'VM*'
            vlan: 4
          - port: vif1.0
            vlan: {mode: access, tag: 4}
            egress: 1000
        """
    )
    assert [(c.kind, c.name) for c in p.changes] == [
        ("vlan", "vif1.0"),
        ("egress", "vif1.0"),
        ("vlan", "vif2.0"),
        ("vlan", "vif3.0"),
    ]


def test_unknown_bridge_is_an_error() -> None:
    text = mirror_text("select: {src: vif1.0}\noutput: {vlan: 10}\n", bridge="xenbr9")
    (p,) = refused(text)
    assert (p.line, p.field) == (2, "bridges.xenbr9")
    assert "bridge xenbr9 does not exist (bridges: xenbr0)" in p.message


def test_unknown_bridge_without_mirrors_is_an_error_too() -> None:
    (p,) = refused("bridges:\n  xenbr9: {}\n")
    assert p.field == "bridges.xenbr9"


def test_all_problems_together() -> None:
    text = """\
        vifs:
          - vm: VM9
            vlan: 1
          - vm: VM1
            vlan: 2
          - vm: VM1
            vlan: 3
        bridges:
          br9: {}
        """
    problems = refused(text)
    assert sorted((p.line, p.field) for p in problems) == [(2, "vifs[0].vm"), (7, "vifs[2].vlan"), (9, "bridges.br9")]


# -- lenient planning (the agent) -------------------------------------------------


def test_lenient_ignores_missing_vifs_and_bridges() -> None:
    text = "vifs:\n  - vm: VM9\n    vlan: 3\nbridges:\n  br9: {}\n"
    assert plan(text, lenient=True).empty


def test_lenient_isolates_a_vif_two_rules_disagree_about() -> None:
    p = plan("vifs:\n  - vm: VM1\n    vlan: 5\n  - port: vif1.0\n    vlan: 6\n  - vm: VM2\n    vlan: 7\n", lenient=True)
    by_name = {c.name: c for c in p.changes}
    assert by_name["vif1.0"].after == VlanCols("trunk", None, (DEAD_VLAN,))
    assert "different VLANs" in by_name["vif1.0"].note
    assert by_name["vif2.0"].after == VlanCols("access", 7, ())
    assert list(p.dead) == ["vif1.0"]


# -- mirrors ----------------------------------------------------------------------


def test_new_mirror_to_the_uplink() -> None:
    p = plan(mirror_text("select: {src: vm:VM1, dst: [vif2.0]}\noutput: {port: eth1}\n"))
    c = only(p.changes)
    assert (c.kind, c.bridge, c.name, c.before) == ("mirror", "xenbr0", "m", None)
    assert c.after == MirrorCols(src=("vif1.0",), dst=("vif2.0",), output_port="eth1", external_ids=OWNED)
    assert c.after.owned
    assert c.target == "mirror m on xenbr0"
    assert describe("mirror", c.after) == "src vif1.0 dst vif2.0 -> port eth1"
    assert describe("mirror", None) == "absent"


def test_mirror_selecting_vlans_by_glob() -> None:
    c = only(plan(mirror_text("select: {src: 'vm:VM*', vlans: '1-2'}\noutput: {port: eth1}\n")).changes)
    assert c.after.src == ("vif1.0", "vif2.0", "vif3.0")
    assert c.after.vlans == (1, 2)


def test_existing_identical_mirror_plans_nothing() -> None:
    state = lab_state()
    add_mirror(state, "m", MirrorCols(src=("vif1.0",), output_port="eth1", external_ids=OWNED))
    assert plan(mirror_text("select: {src: vif1.0}\noutput: {port: eth1}\n"), state).empty


def test_existing_mirror_changed_keeps_its_external_ids() -> None:
    state = lab_state()
    foreign_ids = (("made-by", "someone"),)
    add_mirror(state, "m", MirrorCols(src=("vif1.0",), output_port="eth1", external_ids=foreign_ids))
    c = only(plan(mirror_text("select: {src: [vif1.0, vif2.0]}\noutput: {port: eth1}\n"), state).changes)
    assert c.before.src == ("vif1.0",)
    assert c.after.src == ("vif1.0", "vif2.0")
    assert c.after.external_ids == foreign_ids


def test_mirror_remove() -> None:
    state = lab_state()
    cols = MirrorCols(src=("vif1.0",), output_port="eth1", external_ids=OWNED)
    add_mirror(state, "m", cols)
    c = only(plan("bridges:\n  xenbr0:\n    mirrors:\n      m: remove\n      absent: null\n", state).changes)
    assert (c.kind, c.name, c.before, c.after) == ("mirror", "m", cols, None)


def test_mirror_output_to_a_tenant_vif_is_refused() -> None:
    (p,) = refused(mirror_text("select: {src: vm:VM1}\noutput: {port: vif2.0}\n"))
    assert (p.line, p.field) == (6, "bridges.xenbr0.mirrors.m.output.port")
    assert "VM VM2's interface" in p.message
    assert "every VLAN" in p.message
    assert "allow_isolation_exception: true" in p.message


def test_mirror_output_to_a_vif_mentions_the_selected_vlans() -> None:
    (p,) = refused(mirror_text("select: {vlans: 1}\noutput: {port: vif2.0}\n"))
    assert "the selected VLANs" in p.message


def test_mirror_output_to_a_vif_allowed_by_the_rule_or_the_option() -> None:
    text = mirror_text("select: {src: vm:VM1}\noutput: {port: vm:VM2}\nallow_isolation_exception: true\n")
    assert only(plan(text).changes).after.output_port == "vif2.0"
    text = mirror_text("select: {src: vm:VM1}\noutput: {port: vif2.0}\n")
    assert only(plan(text, allow_isolation_exception=True).changes).after.output_port == "vif2.0"


@pytest.mark.parametrize("select", ["{src: vif3.0}", "{dst: vm:VM3}", "{src: vif1.0, dst: [vif2.0, vif3.0]}"])
def test_mirror_output_equal_to_a_selected_port_is_refused(select) -> None:
    text = mirror_text(f"select: {select}\noutput: {{port: vif3.0}}\nallow_isolation_exception: true\n")
    (p,) = refused(text)
    assert p.field == "bridges.xenbr0.mirrors.m.output.port"
    assert "output port vif3.0 is also a selected port" in p.message


def test_mirror_output_port_must_exist_on_the_bridge() -> None:
    state = lab_state()
    state.bridges["xenbr1"] = BridgeState("xenbr1", (), "system", ("eth2",), ())
    state.ports["eth2"] = uplink("eth2", "xenbr1")
    (p,) = refused(mirror_text("select: {src: vif1.0}\noutput: {port: eth2}\n"), state)
    assert (p.line, p.field) == (6, "bridges.xenbr0.mirrors.m.output.port")
    assert "must name exactly one port on bridge xenbr0 (matches 0)" in p.message


def test_mirror_selector_matching_nothing() -> None:
    (p,) = refused(mirror_text("select:\n  src: [vif1.0, vm:VM9]\noutput: {port: eth1}\n"))
    assert (p.line, p.field) == (6, "bridges.xenbr0.mirrors.m.select.src[1]")
    assert "vm VM9 matches no port on bridge xenbr0" in p.message


def _full_bridge(n: int = 32) -> State:
    state = lab_state()
    for i in range(n):
        add_mirror(state, f"e{i:02d}", MirrorCols(src=("vif1.0",), output_vlan=10, external_ids=OWNED))
    return state


def test_33rd_mirror_on_a_bridge_is_refused() -> None:
    text = mirror_text("select: {src: vif1.0}\noutput: {port: eth1}\n", name="new")
    (p,) = refused(text, _full_bridge())
    assert (p.line, p.field) == (4, "bridges.xenbr0.mirrors.new")
    assert "mirror number 33 on bridge xenbr0" in p.message and "at most 32" in p.message


def test_32nd_mirror_and_changes_to_existing_ones_are_fine() -> None:
    text = mirror_text("select: {src: vif1.0}\noutput: {port: eth1}\n", name="new")
    assert only(plan(text, _full_bridge(31)).changes).name == "new"
    text = mirror_text("select: {src: vif2.0}\noutput: {vlan: 10}\n", name="e05")
    c = only(plan(text, _full_bridge(32)).changes)
    assert c.name == "e05" and c.before is not None


def test_removing_a_mirror_first_makes_room() -> None:
    text = (
        "bridges:\n  xenbr0:\n    mirrors:\n      e00: remove\n"
        "      new:\n        select: {src: vif1.0}\n        output: {port: eth1}\n"
    )
    p = plan(text, _full_bridge())
    assert [(c.name, c.after is None) for c in p.changes] == [("e00", True), ("new", False)]


def test_removing_a_mirror_later_in_the_file_makes_room_too() -> None:
    text = (
        "bridges:\n  xenbr0:\n    mirrors:\n"
        "      new:\n        select: {src: vif1.0}\n        output: {port: eth1}\n      e00: remove\n"
    )
    p = plan(text, _full_bridge())
    assert sorted(c.name for c in p.changes) == ["e00", "new"]


def test_rspan_output_warns_about_flood_vlans() -> None:
    p = plan(mirror_text("select: {src: vm:VM1}\noutput: {vlan: 99}\n"))
    c = only(p.changes)
    assert c.after.output_vlan == 99 and c.after.output_port is None
    assert len(p.warnings) == 1
    assert "RSPAN VLAN 99" in p.warnings[0] and "flood_vlans" in p.warnings[0]
    assert describe("mirror", c.after) == "src vif1.0 -> RSPAN VLAN 99"


def test_tunnel_port_name() -> None:
    name = tunnel_port_name("xenbr0", "m")
    assert name.startswith("mir") and len(name) == 11
    int(name[3:], 16)
    assert validate.ifname(name) == name
    assert tunnel_port_name("xenbr0", "m") == name
    assert tunnel_port_name("xenbr0", "n") != name
    assert tunnel_port_name("xenbr1", "m") != name


def test_gre_output_gets_a_tunnel_port() -> None:
    c = only(plan(mirror_text("select: {src: vm:VM1}\noutput: {gre: 192.0.2.7, key: 42}\n")).changes)
    name = tunnel_port_name("xenbr0", "m")
    assert c.after.output_port == name
    assert c.after.tunnel == TunnelCols(name, "gre", (("key", "42"), ("remote_ip", "192.0.2.7")))
    assert describe("mirror", c.after) == f"src vif1.0 -> GRE to 192.0.2.7 via {name}"


def test_erspan_output_gets_a_tunnel_port() -> None:
    c = only(plan(mirror_text("select: all\noutput: {erspan: 192.0.2.8, idx: 9}\n", name="col")).changes)
    name = tunnel_port_name("xenbr0", "col")
    assert c.after.select_all
    assert c.after.tunnel == TunnelCols(
        name, "erspan", (("erspan_idx", "9"), ("erspan_ver", "1"), ("remote_ip", "192.0.2.8"))
    )


def test_existing_tunnel_mirror_plans_nothing() -> None:
    state = lab_state()
    name = tunnel_port_name("xenbr0", "m")
    add_port(
        state,
        PortState(name, "xenbr0", name, "gre", VlanCols(), PoliceCols(), None, 9, None, None, None, owner_mirror="m"),
    )
    tunnel = TunnelCols(name, "gre", (("remote_ip", "192.0.2.7"),))
    add_mirror(state, "m", MirrorCols(src=("vif1.0",), output_port=name, external_ids=OWNED, tunnel=tunnel))
    assert plan(mirror_text("select: {src: vif1.0}\noutput: {gre: 192.0.2.7}\n"), state).empty
    # a new remote is a change of the mirror (the tunnel port is rewritten)
    c = only(plan(mirror_text("select: {src: vif1.0}\noutput: {gre: 192.0.2.99}\n"), state).changes)
    assert dict(c.after.tunnel.options)["remote_ip"] == "192.0.2.99"


def test_tunnel_port_name_taken_by_another_port_is_refused() -> None:
    state = lab_state()
    name = tunnel_port_name("xenbr0", "m")
    add_port(state, uplink(name))
    (p,) = refused(mirror_text("select: {src: vif1.0}\noutput: {gre: 192.0.2.7}\n"), state)
    assert p.field == "bridges.xenbr0.mirrors.m.output"
    assert f"port {name} exists and is not this mirror's tunnel" in p.message


def test_filter_refused_without_the_filter_column() -> None:
    state = lab_state(has_mirror_filter=False, ovs_version="2.17.9")
    text = mirror_text("select: {src: vif1.0}\noutput: {port: eth1}\nfilter: icmp\n")
    (p,) = refused(text, state)
    assert (p.line, p.field) == (7, "bridges.xenbr0.mirrors.m.filter")
    assert "this OVS (2.17.9) has no Mirror filter column" in p.message


def test_filter_accepted_with_the_filter_column() -> None:
    state = lab_state(has_mirror_filter=True)
    text = mirror_text("select: {src: vif1.0}\noutput: {port: eth1}\nfilter: icmp\nsnaplen: 96\n")
    c = only(plan(text, state).changes)
    assert (c.after.filter, c.after.snaplen) == ("icmp", 96)
    assert describe("mirror", c.after) == "src vif1.0 -> port eth1 snaplen 96 B filter icmp"


def test_snaplen_refused_without_the_snaplen_column() -> None:
    state = lab_state(has_mirror_snaplen=False)
    (p,) = refused(mirror_text("select: {src: vif1.0}\noutput: {port: eth1}\nsnaplen: 96\n"), state)
    assert (p.line, p.field) == (7, "bridges.xenbr0.mirrors.m.snaplen")


def test_select_all_to_the_uplink() -> None:
    # OVS never mirrors the output port's own traffic, so "everything to eth1" is fine.
    c = only(plan(mirror_text("select: all\noutput: {port: eth1}\n")).changes)
    assert c.after == MirrorCols(select_all=True, output_port="eth1", external_ids=OWNED)
    assert describe("mirror", c.after) == "all ports -> port eth1"


def test_vlan_only_mirror_selects_every_port_on_those_vlans() -> None:
    c = only(plan(mirror_text("select: {vlans: '10,20'}\noutput: {port: eth1}\n")).changes)
    assert c.after == MirrorCols(select_all=True, vlans=(10, 20), output_port="eth1", external_ids=OWNED)
    # with ports given, the VLANs narrow the port selection instead
    c = only(plan(mirror_text("select: {src: vif1.0, vlans: 10}\noutput: {port: eth1}\n")).changes)
    assert (c.after.select_all, c.after.src, c.after.vlans) == (False, ("vif1.0",), (10,))


def test_port_glob_does_not_reach_the_uplink() -> None:
    p = plan("vifs:\n  - port: '*'\n    vlan: 7\n")
    assert [c.name for c in p.changes] == ["vif1.0", "vif2.0", "vif3.0"]


# -- Change ---------------------------------------------------------------------


def test_change_inverse_swaps_before_and_after() -> None:
    c = Change("vlan", "xenbr0", "vif1.0", VlanCols(None, 1, ()), VlanCols("access", 5, ()), "VM1", "why")
    inv = c.inverse()
    assert (inv.kind, inv.bridge, inv.name, inv.vm) == ("vlan", "xenbr0", "vif1.0", "VM1")
    assert inv.before == VlanCols("access", 5, ())
    assert inv.after == VlanCols(None, 1, ())
    assert inv.inverse().before == c.before and inv.inverse().after == c.after


def test_inverse_of_a_planned_plan_restores_the_stored_columns() -> None:
    state = lab_state()
    p = plan("vifs:\n  - vm: VM1\n    vlan: remove\n    ingress: 1000\n    egress: 2000\n", state)
    undo = [c.inverse() for c in reversed(p.changes)]
    assert [(c.kind, c.after) for c in undo] == [
        ("egress", None),
        ("ingress", PoliceCols()),
        ("vlan", VlanCols(None, 1, ())),  # the raw columns, not the effective access/1
    ]


def test_change_target() -> None:
    assert Change("vlan", "xenbr0", "vif1.0", None, None, "VM1").target == "vif1.0 (VM1)"
    assert Change("egress", "xenbr0", "eth1", None, None).target == "eth1"


# An old Open vSwitch (XCP-ng 8.2's 2.5.3): refused at the rule, naming both versions, nothing planned.


def test_erspan_mirror_refused_on_ovs_2_5() -> None:
    text = mirror_text("select: all\noutput: {erspan: 192.0.2.8}\n")
    (p,) = refused(text, lab_state(ovs_version="2.5.3"))
    assert p.field == "bridges.xenbr0.mirrors.m.output"
    assert p.message == (
        "Open vSwitch 2.5.3 has no ERSPAN tunnels: it needs 2.10 or later; use gre, or a port or an RSPAN VLAN"
    )
    assert only(plan(mirror_text("select: all\noutput: {gre: 192.0.2.8}\n"), lab_state(ovs_version="2.5.3")).changes)
    assert only(plan(text, lab_state(ovs_version="2.10.0")).changes)


def test_snaplen_refusal_names_the_version_when_it_explains_it() -> None:
    text = mirror_text("select: all\noutput: {port: eth1}\nsnaplen: 128\n")
    (p,) = refused(text, lab_state(has_mirror_snaplen=False, ovs_version="2.5.3"))
    assert p.message == "Open vSwitch 2.5.3 has no Mirror snaplen column: it needs 2.6 or later; remove snaplen"
    (p,) = refused(text, lab_state(has_mirror_snaplen=False, ovs_version="2.17.7"))
    assert p.message == "this OVS has no Mirror snaplen column; remove snaplen"


@pytest.mark.parametrize("mechanism", ["meter", "auto"])
def test_meter_refused_on_ovs_2_5(mechanism) -> None:
    text = f"vifs:\n  - vm: VM1\n    ingress: {{rate: 1000, mechanism: {mechanism}}}\n"
    (p,) = refused(text, lab_state(ovs_version="2.5.3"), openflow=True)
    assert p.field == "vifs[0].ingress"
    assert p.message == (
        "Open vSwitch 2.5.3 has no OpenFlow meters on the kernel datapath: it needs 2.10 or later; use mechanism: tc"
    )
    c = only(plan(text.replace(mechanism, "tc"), lab_state(ovs_version="2.5.3"), openflow=True).changes)
    assert c.after.effective().mechanism == "tc"


def test_meter_on_the_userspace_datapath_needs_2_8_for_hvnets_pipeline() -> None:
    state = lab_state(ovs_version="2.7.0")
    state.bridges["xenbr0"].datapath_type = "netdev"
    text = "vifs:\n  - vm: VM1\n    ingress: {rate: 1000, mechanism: meter}\n"
    (p,) = refused(text, state, openflow=True)
    assert "Open vSwitch 2.7.0 has no ovs-ofctl --names/--no-names" in p.message
    state.ovs_version = "2.8.0"
    assert plan(text, state, openflow=True).changes
