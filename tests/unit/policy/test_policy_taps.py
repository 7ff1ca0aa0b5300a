"""TAPs: the match grammar and its refusals, the planner's rules, the pipeline's flows, the bundle text."""

from __future__ import annotations

import pytest

from appliance.core.errors import ConfigError
from appliance.policy.apply import journal, openflow
from appliance.policy.plan import document, export, pipeline, planner
from appliance.policy.plan.planner import Change, PlanOptions
from appliance.policy.plan.state import BridgeState, PortState, State
from appliance.policy.plan.taps import TapCols
from tests.unit.policy.test_policy_export import port
from tests.unit.policy_states import vif

BASE = """\
version: 1
bridges:
  xenbr0:
    taps:
      t1:
{body}"""


def lab_state() -> State:
    ports = [vif("vif1.0", "VM1", 1, 1), vif("vif2.0", "VM2", 2, 1), vif("vif3.0", "VM3", 3, 2), port("mon0", ofport=9)]
    return State(
        ports={p.name: p for p in ports},
        bridges={"xenbr0": BridgeState("xenbr0", (), "netdev", tuple(sorted(p.name for p in ports)), ())},
    )


def parse(body: str):
    text = BASE.format(body="".join(f"        {line}\n" for line in body.strip().splitlines()))
    return document.parse(text, "p.yaml")


def refused(body: str) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        planner.plan(parse(body), lab_state())
    return [str(p) for p in exc.value.problems]


ICMP_TAP = """
match: {protocol: icmp, src_ip: 192.168.0.150, dst_ip: 192.168.0.0/24}
vifs: [vm:VM1]
direction: in
output: {port: mon0}
"""


def test_a_tap_is_planned_as_one_change_with_its_record() -> None:
    plan = planner.plan(parse(ICMP_TAP), lab_state())
    [change] = plan.changes
    assert (change.kind, change.bridge, change.name, change.before) == ("tap", "xenbr0", "t1", None)
    tap = change.after
    assert tap.vifs == ("vif1.0",) and tap.output_port == "mon0" and tap.direction == "in"
    assert tap.match.items() == (("src_ip", "192.168.0.150"), ("dst_ip", "192.168.0.0/24"), ("protocol", "icmp"))
    assert TapCols.from_text(tap.to_text()) == tap
    assert change.target == "TAP t1 on xenbr0"
    assert "src_ip=192.168.0.150" in change.describe(tap) and "-> port mon0 (flows)" in change.describe(tap)


@pytest.mark.parametrize(
    ("body", "field", "words"),
    [
        ("match: {dst_port: 80}\nvifs: [vif1.0]\noutput: {port: mon0}", "match.dst_port", "needs protocol tcp or udp"),
        ("match: {protocol: icmp, src_port: 1}\nvifs: [vif1.0]\noutput: {port: mon0}", "match.src_port", "tcp or udp"),
        ("match: {src_ip: 10.0.0.1/24}\nvifs: [vif1.0]\noutput: {port: mon0}", "match.src_ip", "host bits set"),
        ("match: {protocol: gre}\nvifs: [vif1.0]\noutput: {port: mon0}", "match.protocol", "allowed: tcp, udp"),
        ("match: {vlan: 4095}\nvifs: [vif1.0]\noutput: {port: mon0}", "match.vlan", "0..4094"),
        ("match: {src_ip: '::1', dst_ip: 10.0.0.1}\nvifs: [vif1.0]\noutput: {port: mon0}", "match", "IPv4 and IPv6"),
        ("match: {ttl: 3}\nvifs: [vif1.0]\noutput: {port: mon0}", "match.ttl", "unknown key"),
        ("vifs: [vif1.0]\noutput: {port: mon0}\nsampling: 100", "sampling", "sample at the capture"),
        ("vifs: [vif1.0]\noutput: {vlan: 999}", "output.vlan", "mirror"),
        ("vifs: [vif1.0]\noutput: {port: mon0}\nmethod: select", "method", "allowed: flows, group"),
        ("vifs: [vif1.0]\noutput: {port: mon0}\ndirection: up", "direction", "allowed: in, out, both"),
        ("output: {port: mon0}", "vifs", "required"),
    ],
)
def test_what_ovs_cannot_express_is_refused_at_its_line(body: str, field: str, words: str) -> None:
    with pytest.raises(ConfigError) as exc:
        parse(body)
    [problem] = exc.value.problems
    assert problem.field == f"bridges.xenbr0.taps.t1.{field}" and words in problem.message, problem
    assert problem.line is not None


def test_output_equal_to_a_selected_vif_is_refused() -> None:
    [p] = refused("vifs: [vif1.0]\noutput: {port: vif1.0}\nallow_isolation_exception: true")
    assert "output.port" in p and "also a selected VIF" in p


def test_a_vms_interface_as_output_needs_the_isolation_exception() -> None:
    [p] = refused("vifs: [vif1.0]\noutput: {port: vif2.0}")
    assert "VM VM2's interface" in p and "allow_isolation_exception" in p
    plan = planner.plan(parse("vifs: [vif1.0]\noutput: {port: vif2.0}\nallow_isolation_exception: true"), lab_state())
    assert plan.changes[0].after.output_port == "vif2.0"


def test_selectors_matching_nothing_and_unknown_outputs_are_refused() -> None:
    problems = refused("vifs: [vm:VM9]\noutput: {port: nope}")
    assert any("vm VM9 matches no VIF" in p for p in problems)


def test_a_gre_output_gets_a_tunnel_port_and_removal_takes_it_away() -> None:
    plan = planner.plan(parse("vifs: [vif1.0]\noutput: {gre: 10.9.9.9, key: 7}"), lab_state())
    tap = plan.changes[0].after
    assert tap.tunnel.type == "gre" and dict(tap.tunnel.options) == {"remote_ip": "10.9.9.9", "key": "7"}
    assert tap.output_port == tap.tunnel.name and tap.tunnel.name.startswith("tap")
    state = lab_state()
    state.bridges["xenbr0"].taps["t1"] = tap
    assert planner.plan(parse("vifs: [vif1.0]\noutput: {gre: 10.9.9.9, key: 7}"), state).changes == []
    removal = document.parse("bridges:\n  xenbr0:\n    taps:\n      t1: remove\n", "p.yaml")
    [change] = planner.plan(removal, state).changes
    assert change.after is None and change.before == tap


def test_export_round_trips_and_the_journal_keeps_a_tap() -> None:
    state = lab_state()
    tap = planner.plan(parse(ICMP_TAP), state).changes[0].after
    state.bridges["xenbr0"].taps["t1"] = tap
    policy = document.parse(export.to_yaml(state), "export.yaml")
    assert planner.plan(policy, state).changes == []
    change = Change("tap", "xenbr0", "t1", None, tap)
    assert journal.change_from_json(journal.change_to_json(change)) == change


def test_bridge_protocols_without_openflow13_get_it_for_a_tap() -> None:
    state = lab_state()
    state.bridges["xenbr0"].protocols = ("OpenFlow10",)
    kinds = [c.kind for c in planner.plan(parse(ICMP_TAP), state).changes]
    assert kinds == ["tap", "protocols"]


# -- the pipeline -----------------------------------------------------------------------------


def tapped(state: State, name: str, body: str) -> State:
    text = BASE.replace("t1", name).format(body="".join(f"        {x}\n" for x in body.strip().splitlines()))
    tap = planner.plan(document.parse(text, "p.yaml"), state).changes[0].after
    state.bridges["xenbr0"].taps[name] = tap
    return state


def test_empty_pipeline_when_nothing_is_wanted() -> None:
    assert pipeline.build(lab_state(), "xenbr0", {}).empty


def test_meters_then_a_table_per_tap_then_normal() -> None:
    state = tapped(lab_state(), "a", ICMP_TAP)
    state = tapped(state, "b", "vifs: [vif2.0]\noutput: {port: mon0}\nmethod: group\ndirection: out")
    pipe = pipeline.build(state, "xenbr0", {1: 1})
    flows = {(f.table, f.priority, tuple(sorted(f.match)), f.actions) for f in pipe.flows}
    assert flows == {
        (0, 100, ("in_port=1",), "meter:1,goto_table:10"),
        (0, 0, (), "goto_table:10"),
        (10, 0, (), "goto_table:11"),
        (10, 200, ("icmp", "in_port=1", "nw_dst=192.168.0.0/24", "nw_src=192.168.0.150"), "output:9,goto_table:11"),
        (11, 0, (), "goto_table:60"),
        (11, 100, ("dl_dst=52:54:00:00:00:02",), f"group:{pipeline.GROUP_BASE + 1}"),
        (60, 0, (), "NORMAL"),
    }
    assert pipe.groups == {
        pipeline.GROUP_BASE + 1: f"group_id={pipeline.GROUP_BASE + 1},type=all,"
        "bucket=actions=output:9,bucket=actions=resubmit(,60)"
    }


def test_both_directions_and_vlan_matches_per_port() -> None:
    state = lab_state()
    state.ports["vif3.0"].vlan = state.ports["vif3.0"].vlan.__class__("trunk", None, (5, 6))
    state = tapped(state, "a", "match: {vlan: 1, protocol: 17, dst_port: 53}\nvifs: [vif1.0, vif2.0, vif3.0]\n"
                   "output: {port: mon0}")  # fmt: skip
    flows = {(f.priority, tuple(sorted(f.match))) for f in pipeline.build(state, "xenbr0", {}).flows if f.table == 10}
    assert (200, ("in_port=1", "tp_dst=53", "udp")) in flows  # access port of VLAN 1: untagged here
    assert (100, ("dl_dst=52:54:00:00:00:01", "tp_dst=53", "udp")) in flows
    assert (200, ("dl_vlan=1", "in_port=3", "tp_dst=53", "udp")) in flows  # a trunk: the tag is on the frame
    assert len(flows) == 1 + 2 * 3  # the pass-on flow and two per VIF


def test_match_tokens_spell_what_ovs_prints() -> None:
    def tokens(**kw: object) -> list[str]:
        from appliance.policy.plan.taps import match_from_fields

        return sorted(pipeline.match_tokens(match_from_fields(kw)))

    assert tokens(protocol=47) == ["ip", "nw_proto=47"]
    assert tokens(src_ip="2001:db8::/64", protocol="tcp", dst_port=22) == [
        "ipv6_src=2001:db8::/64",
        "tcp6",
        "tp_dst=22",
    ]
    assert tokens(src_mac="02:AA:00:00:00:01") == ["dl_src=02:aa:00:00:00:01"]
    assert tokens(dst_ip="10.1.2.3/32") == ["ip", "nw_dst=10.1.2.3"]


# -- reading the switch and the bundle (captured ovs-ofctl 3.1 output) -------------------------------

DUMP = """\
 cookie=0x68766e6574, duration=0.793s, table=0, n_packets=7, n_bytes=686, priority=100,in_port=3 actions=meter:3,goto_table:10
 cookie=0x68766e6574, duration=0.793s, table=0, n_packets=2, n_bytes=84, priority=0 actions=goto_table:10
 cookie=0x68766e6574, duration=0.793s, table=10, n_packets=5, n_bytes=490, priority=200,icmp,in_port=1,nw_src=10.0.0.0/24 actions=group:1752563712
 cookie=0x68766e6574, duration=0.793s, table=10, n_packets=4, n_bytes=196, priority=0 actions=goto_table:60
 cookie=0x68766e6574, duration=0.793s, table=60, n_packets=9, n_bytes=686, priority=0 actions=NORMAL
"""
GROUPS = """\
OFPST_GROUP_DESC reply (OF1.4) (xid=0x2):
 group_id=1752563712,type=all,bucket=actions=output:2,bucket=actions=resubmit(,60)
 group_id=7,type=all,bucket=actions=output:1
"""


def test_tap_counts_leave_out_the_pass_on_flow() -> None:
    assert openflow.parse_tap_counts(DUMP) == {10: (5, 490)}


def test_only_hvnets_groups_are_read() -> None:
    assert openflow.parse_groups(GROUPS) == {
        1752563712: "group_id=1752563712,type=all,bucket=actions=output:2,bucket=actions=resubmit(,60)"
    }


def test_the_bundle_is_skipped_when_the_switch_already_has_the_pipeline() -> None:
    flows, default = openflow.parse_pipeline(DUMP)
    assert not default
    pipe = pipeline.Pipeline(flows=set(flows), groups=openflow.parse_groups(GROUPS))
    inst = openflow.Installed(pipeline=flows, groups=openflow.parse_groups(GROUPS))
    assert openflow._bundle(inst, pipe) is None


def test_the_bundle_replaces_hvnets_flows_and_groups_and_restores_the_default_flow() -> None:
    flows, _ = openflow.parse_pipeline(DUMP)
    inst = openflow.Installed(pipeline=flows, groups=openflow.parse_groups(GROUPS))
    text = openflow._bundle(inst, pipeline.Pipeline())
    assert text.splitlines() == [
        "group delete group_id=1752563712",
        "flow delete cookie=0x68766e6574/-1",
        "flow add table=0,priority=0,actions=NORMAL",
    ]
    new = pipeline.build(tapped(lab_state(), "a", ICMP_TAP), "xenbr0", {})
    lines = openflow._bundle(openflow.Installed(default_flow=True), new).splitlines()
    assert lines[0] == "flow delete cookie=0x68766e6574/-1"
    assert "flow add cookie=0x68766e6574,table=0,priority=0,actions=goto_table:10" in lines
    assert (
        "flow add cookie=0x68766e6574,table=10,priority=200,icmp,in_port=1,nw_dst=192.168.0.0/24,"
        "nw_src=192.168.0.150,actions=output:9,goto_table:60"
    ) in lines


def test_ports_without_an_openflow_number_get_no_flows() -> None:
    state = tapped(lab_state(), "a", ICMP_TAP)
    state.ports["mon0"] = PortState(**{**state.ports["mon0"].__dict__, "ofport": -1})
    flows = pipeline.build(state, "xenbr0", {}).flows
    assert {f.table for f in flows} == {0, 10, 60} and all(f.priority == 0 for f in flows)


def test_plan_options_lenient_keeps_a_tap_whose_vifs_are_gone() -> None:
    plan = planner.plan(parse("vifs: [vm:VM9]\noutput: {port: mon0}"), lab_state(), PlanOptions(lenient=True))
    assert plan.changes == [] and any("none of its VIFs" in w for w in plan.warnings)


def test_a_tap_is_refused_on_ovs_2_5_and_erspan_below_2_10() -> None:
    state = lab_state()
    state.ovs_version = "2.5.3"
    with pytest.raises(ConfigError) as exc:
        planner.plan(parse(ICMP_TAP), state)
    [p] = exc.value.problems
    assert p.field == "bridges.xenbr0.taps.t1"
    assert p.message.startswith("TAP t1: Open vSwitch 2.5.3 has no ovs-ofctl --names/--no-names")
    state.ovs_version = "2.8.0"
    assert planner.plan(parse(ICMP_TAP), state).changes
    with pytest.raises(ConfigError) as exc:
        planner.plan(parse("vifs: [vif1.0]\noutput: {erspan: 10.9.9.9}"), state)
    assert "has no ERSPAN tunnels: it needs 2.10 or later" in exc.value.problems[0].message
