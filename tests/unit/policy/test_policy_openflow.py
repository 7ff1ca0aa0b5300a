"""OpenFlow meter bookkeeping: ovs-ofctl output parsers (on real captures) and the wanted meters."""

from __future__ import annotations

import subprocess
from pathlib import Path

from appliance.core.target import DbTarget
from appliance.core.vlan import VlanCols
from appliance.policy.apply import openflow
from appliance.policy.apply.openflow import COOKIE, Installed, OpenFlow, SyncResult, Wanted
from appliance.policy.plan.state import BridgeState, PoliceCols, PortState, State
from appliance.switch.host import Host

DATA = Path(__file__).parents[1] / "data"


def data(name: str) -> str:
    return (DATA / name).read_text()


# -- dump-flows ---------------------------------------------------------------------


def test_cookie_spells_hvnet() -> None:
    assert COOKIE.to_bytes(5, "big") == b"hvnet"
    assert f"{COOKIE:#x}" == "0x68766e6574"


def test_dump_flows_hvnet_meter_flow_and_default_normal() -> None:
    ours, foreign = openflow.parse_flows(data("ofctl-dump-flows.txt"))
    assert ours == {3: 3}
    assert foreign == []


def test_dump_flows_foreign() -> None:
    ours, foreign = openflow.parse_flows(data("ofctl-dump-flows-foreign.txt"))
    assert ours == {}
    assert foreign == [
        "reset_counts in_port=2 actions=NORMAL",
        "cookie=0x5, table=1, reset_counts ip,nw_dst=10.0.0.1 actions=drop",
    ]


def test_parse_flow_fields_of_the_captured_lines() -> None:
    hv, normal = data("ofctl-dump-flows.txt").splitlines()
    assert openflow.parse_flow(hv) == (COOKIE, 0, 100, ["in_port=3"], "meter:3,NORMAL")
    assert openflow.parse_flow(normal) == (0, 0, 0, [], "NORMAL")
    a, _, c = data("ofctl-dump-flows-foreign.txt").splitlines()
    # no priority printed means OpenFlow's default, 32768; flags are not match fields
    assert openflow.parse_flow(a) == (0, 0, 32768, ["in_port=2"], "NORMAL")
    assert openflow.parse_flow(c) == (5, 1, 32768, ["ip", "nw_dst=10.0.0.1"], "drop")


def test_parse_flow_with_statistics() -> None:
    line = (
        " cookie=0x68766e6574, duration=3.2s, table=0, n_packets=10, n_bytes=1000, idle_age=1, "
        "hard_age=2, priority=100,in_port=7 actions=meter:12,NORMAL"
    )
    assert openflow.parse_flow(line) == (COOKIE, 0, 100, ["in_port=7"], "meter:12,NORMAL")
    assert openflow.parse_flows(line) == ({7: 12}, [])


def test_header_and_blank_lines_are_not_flows() -> None:
    assert openflow.parse_flow("OFPST_FLOW reply (OF1.3) (xid=0x2):") is None
    assert openflow.parse_flow("") is None
    text = "NXST_FLOW reply (xid=0x4):\n\n" + data("ofctl-dump-flows.txt")
    assert openflow.parse_flows(text) == ({3: 3}, [])


def test_normal_flow_outside_table_0_or_with_a_match_is_foreign() -> None:
    text = " table=1, priority=0 actions=NORMAL\n priority=0,arp actions=NORMAL\n priority=0 actions=drop\n"
    ours, foreign = openflow.parse_flows(text)
    assert ours == {}
    assert foreign == ["table=1, priority=0 actions=NORMAL", "priority=0,arp actions=NORMAL", "priority=0 actions=drop"]


def test_several_hvnet_flows() -> None:
    text = "".join(
        f" cookie=0x68766e6574, priority=100,in_port={p} actions=meter:{m},NORMAL\n"
        for p, m in ((1, 1), (2, 5), (10, 3))
    )
    assert openflow.parse_flows(text + " priority=0 actions=NORMAL\n") == ({1: 1, 2: 5, 10: 3}, [])


def test_hvnet_cookie_without_a_meter_is_neither_ours_nor_foreign() -> None:
    text = " cookie=0x68766e6574, priority=100,in_port=4 actions=NORMAL\n"
    assert openflow.parse_flows(text) == ({}, [])


# -- dump-meters / meter-stats -----------------------------------------------------------


def test_dump_meters() -> None:
    assert openflow.parse_meters(data("ofctl-dump-meters.txt")) == {3: (10240, 1024)}


def test_meter_stats() -> None:
    assert openflow.parse_meter_stats(data("ofctl-meter-stats.txt")) == {3: 0}


def test_several_meters_and_a_meter_without_burst() -> None:
    text = (
        "OFPST_METER_CONFIG reply (OF1.3) (xid=0x2):\n"
        "meter=1 kbps burst stats bands=\ntype=drop rate=1000 burst_size=800\n"
        "meter=4 kbps stats bands=\ntype=drop rate=2000\n"
        "meter=12 kbps burst stats bands=\ntype=drop rate=10240 burst_size=1024\n"
    )
    assert openflow.parse_meters(text) == {1: (1000, 800), 4: (2000, 0), 12: (10240, 1024)}


def test_meter_stats_with_drops() -> None:
    text = (
        "OFPST_METER reply (OF1.3) (xid=0x2):\n"
        "meter:3 flow_count:1 packet_in_count:21 byte_in_count:28966 duration:0.373s bands:\n"
        "0: packet_count:0 byte_count:0\n"
        "meter:5 flow_count:1 packet_in_count:9000 byte_in_count:13000000 duration:12.0s bands:\n"
        "0: packet_count:4512 byte_count:6768000\n"
    )
    assert openflow.parse_meter_stats(text) == {3: 0, 5: 4512}


def test_empty_meter_replies() -> None:
    assert openflow.parse_meters("OFPST_METER_CONFIG reply (OF1.3) (xid=0x2):\n") == {}
    assert openflow.parse_meter_stats("OFPST_METER reply (OF1.3) (xid=0x2):\n") == {}


def test_meter_with_a_non_drop_band_does_not_swallow_the_next_one() -> None:
    text = (
        "OFPST_METER_CONFIG reply (OF1.3) (xid=0x2):\n"
        "meter=1 kbps bands=\ntype=dscp_remark rate=100 prec_level=1\n"
        "meter=2 kbps burst stats bands=\ntype=drop rate=500 burst_size=50\n"
    )
    # meter 1 is kept as "in use" (so no meter is ever added over it) with no drop band
    assert openflow.parse_meters(text) == {1: (0, 0), 2: (500, 50)}


# -- wanted -----------------------------------------------------------------------------


def port(name: str, bridge: str, ofport: int | None, police: PoliceCols) -> PortState:
    return PortState(
        name, bridge, name, "system", VlanCols(None, 1, ()), police, None, ofport, None, None, None, is_vif=True
    )


def test_wanted_meters_from_the_ovsdb_record() -> None:
    ports = [
        port("vif1.0", "xenbr0", 1, PoliceCols(0, 0, 10240, 1024)),
        port("vif2.0", "xenbr0", 2, PoliceCols(1000, 800)),  # tc policing: no meter
        port("vif3.0", "xenbr0", 3, PoliceCols(0, 0, 500, None)),  # no burst recorded
        port("vif4.0", "xenbr0", None, PoliceCols(0, 0, 500, 400)),  # no OpenFlow port yet
        port("vif5.0", "xenbr0", -1, PoliceCols(0, 0, 500, 400)),  # failed interface
        port("vif6.0", "xenbr1", 6, PoliceCols(0, 0, 700, 560)),  # other bridge
        port("vif7.0", "xenbr0", 7, PoliceCols()),
    ]
    state = State(
        ports={p.name: p for p in ports},
        bridges={
            "xenbr0": BridgeState("xenbr0", (), "system", (), ()),
            "xenbr1": BridgeState("xenbr1", (), "system", (), ()),
        },
    )
    assert openflow.wanted(state, "xenbr0") == {
        1: Wanted("vif1.0", 1, 10240, 1024),
        3: Wanted("vif3.0", 3, 500, 0),
    }
    assert openflow.wanted(state, "xenbr1") == {6: Wanted("vif6.0", 6, 700, 560)}
    assert openflow.wanted(state, "xenbr9") == {}


def test_wanted_matches_what_the_captures_show_installed() -> None:
    # The captures were taken with vif3.0 (ofport 3) policed at 10240 kbit/s, burst 1024 kbit.
    state = State(ports={"vif3.0": port("vif3.0", "xenbr0", 3, PoliceCols(0, 0, 10240, 1024))})
    want = openflow.wanted(state, "xenbr0")
    flows, foreign = openflow.parse_flows(data("ofctl-dump-flows.txt"))
    meters = openflow.parse_meters(data("ofctl-dump-meters.txt"))
    installed = Installed(flows=flows, meters=meters, foreign_flows=foreign)
    for ofport, w in want.items():
        meter = installed.flows[ofport]
        assert installed.meters[meter] == (w.rate_kbps, w.burst_kbit)
    assert set(installed.flows) == set(want)


# -- small pieces ---------------------------------------------------------------------------


def test_sync_result_changed() -> None:
    assert not SyncResult().changed
    assert SyncResult(added=["vif1.0"]).changed
    assert SyncResult(modified=["vif1.0"]).changed
    assert SyncResult(removed=[3]).changed


def test_lowest_free_meter_id() -> None:
    assert openflow._lowest_free(set()) == 1
    assert openflow._lowest_free({1, 2, 4}) == 3
    assert openflow._lowest_free({2, 3}) == 1


def test_openflow_for_host_and_sockets(tmp_path) -> None:
    assert OpenFlow.for_host(Host(DbTarget("tcp:10.0.0.1:6640", "--db"))) is None
    assert OpenFlow.for_host(Host(DbTarget("ssl:10.0.0.1:6640", "--db"))) is None
    of = OpenFlow.for_host(Host(DbTarget(f"unix:{tmp_path}/db.sock", "lab")))
    assert of is not None and of.rundir == tmp_path
    assert not of.available("xenbr0")
    (tmp_path / "xenbr0.mgmt").touch()
    assert of.available("xenbr0")
    assert of._switch("xenbr0") == f"unix:{tmp_path}/xenbr0.mgmt"


def test_meter_features_say_how_many_meters_the_datapath_runs() -> None:
    """The lab's kernel-datapath VM host (OVS 3.1, Linux 6.1) offers meters; a datapath without them says 0."""
    assert openflow.parse_meter_features(data("ofctl-meter-features-kernel.txt")) == 200000
    assert openflow.parse_meter_features("OFPST_METER_FEATURES reply (OF1.3) (xid=0x2):\nmax_meter:0 max_bands:0") == 0
    assert openflow.parse_meter_features("") is None


class FeaturesRunner:
    """A host whose switch answers meter-features with ``text``."""

    local = True

    def __init__(self, text: str) -> None:
        self.text = text

    def run(self, argv: list[str], **_: object) -> object:
        assert argv[:4] == ["ovs-ofctl", "-O", "OpenFlow13", "meter-features"], argv
        return subprocess.CompletedProcess(argv, 0, self.text, "")


def test_a_refused_meter_says_when_the_datapath_has_none() -> None:
    none = OpenFlow("/run/openvswitch", FeaturesRunner("max_meter:0 max_bands:0\nband_types:\n"))  # type: ignore[arg-type]
    assert none._no_meters("xenbr0") == (
        "; xenbr0's datapath has no meters (ovs-ofctl meter-features: max_meter 0): use mechanism tc where its "
        "kernel polices"
    )
    kernel = OpenFlow("/run/openvswitch", FeaturesRunner(data("ofctl-meter-features-kernel.txt")))  # type: ignore[arg-type]
    assert kernel._no_meters("xenbr0") == ""  # it has meters: the refusal was something else, said as it was


class NoRunner:
    """A switch nothing may be asked of: OVS 2.5's ovs-ofctl would refuse --no-names."""

    local = True

    def exists(self, path: str) -> bool:
        return True

    def run(self, argv: list[str], **_: object) -> object:
        raise AssertionError(f"asked the switch: {argv}")


def _old_state(police: PoliceCols) -> State:
    port = PortState("vif1.0", "xenbr0", "vif1.0", "system", VlanCols(), police, None, 1, None, None, None)
    return State(ports={"vif1.0": port}, bridges={"xenbr0": BridgeState("xenbr0", (), "system", ("vif1.0",), ())},
                 ovs_version="2.5.3")  # fmt: skip


def test_a_switch_too_old_for_the_pipeline_is_not_read_when_nothing_is_asked_of_it() -> None:
    of = OpenFlow("/run/openvswitch", NoRunner())  # type: ignore[arg-type]
    state = _old_state(PoliceCols())
    assert of.sync_bridges(state) == {}
    assert of.drifted_any(state) is False


def test_a_meter_recorded_on_a_switch_too_old_for_it_is_refused_by_name() -> None:
    of = OpenFlow("/run/openvswitch", NoRunner())  # type: ignore[arg-type]
    state = _old_state(PoliceCols(0, 0, 1000, 100))
    assert of.drifted_any(state) is True
    try:
        of.sync_bridges(state)
    except openflow.HvnetError as exc:
        assert str(exc).startswith("cannot install meters or TAPs on xenbr0: Open vSwitch 2.5.3 has no ovs-ofctl")
        assert exc.hint == "police with mechanism: tc and mirror instead of TAPs on this switch"
    else:
        raise AssertionError("a meter on OVS 2.5 was not refused")
