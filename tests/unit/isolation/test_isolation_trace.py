"""The trace method on real ``ofproto/trace`` output (tests/unit/data).

``trace-patch-*``, ``trace-of-clone``, ``trace-recirc``, ``trace-packet-out``
and ``dpif-show-patch`` come from Open vSwitch 3.1.0 (``--enable-dummy``,
two bridges br0/br1 joined by patch ports; p1 tag 10, p2 tag 20, p5 trunk on
br0; p3 tag 10, p4 tag 30 on br1).  ``trace-seed-three-vm*.json`` are the
``ovs-appctl`` answers the check got on the 2010 study's lab, as recorded:
once as set up, once with ``ovs-ofctl mod-port xenbr0 vif3.0 no-forward``.
"""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from appliance.isolation import check, model, scenario
from appliance.isolation import ofproto as trace
from tests.conftest import ROOT

DATA = Path(__file__).parents[1] / "data"


def odp(bridge: str) -> dict[int, str]:
    return trace.parse_dpif_show((DATA / "dpif-show-patch.txt").read_text(), bridge)


def delivered(name: str, bridge: str = "br0") -> list[tuple[str, int | None]]:
    passes = trace.passes((DATA / name).read_text())
    return [(d.port, d.vlan) for d in trace.deliveries(passes, odp(bridge))]


def test_ports_of_every_bridge_in_the_datapath_are_mapped() -> None:
    assert odp("br0") == odp("br1") == {100: "br0", 1: "p1", 2: "p2", 5: "p5", 101: "br1", 3: "p3", 4: "p4"}
    assert odp("nope") == {}


def test_a_broadcast_crossing_a_patch_port_reaches_the_other_bridge() -> None:
    """NORMAL on br0, then on br1 through the patch: p3 (VLAN 10 on br1) hears p1."""
    assert delivered("trace-patch-normal.txt") == [("br0", 10), ("br1", 10), ("p3", None), ("p5", 10)]


def test_outputs_inside_a_clone_are_deliveries() -> None:
    """A meter on br1 makes the patch crossing a datapath clone(): p3's copy is inside it."""
    passes = trace.passes((DATA / "trace-patch-clone.txt").read_text())
    assert passes[0].actions == "push_vlan(vid=10,pcp=0),100,clone(meter(0),101,pop_vlan,3),5"
    # the clone's pop_vlan stays in the clone: p5, after it, still gets the tagged frame
    assert delivered("trace-patch-clone.txt") == [("br0", 10), ("br1", 10), ("p3", None), ("p5", 10)]


def test_an_openflow_clone_action_with_a_truncation() -> None:
    assert delivered("trace-of-clone.txt", "br1") == [("p4", 30), ("br0", None), ("p5", None)]


def test_every_pass_counts_not_only_the_last() -> None:
    """output:p5 before ct(table=1); the recirculated pass outputs to p2 (tagged) and p5."""
    passes = trace.passes((DATA / "trace-recirc.txt").read_text())
    assert passes == [
        trace.Pass(None, "5,ct,recirc(0x1)"),
        trace.Pass("0x1", "push_vlan(vid=10,pcp=0),2,pop_vlan,5"),
    ]
    assert delivered("trace-recirc.txt") == [("p5", None), ("p2", 10), ("p5", None)]
    assert trace.describe(passes) == "5,ct,recirc(0x1); recirc(0x1): push_vlan(vid=10,pcp=0),2,pop_vlan,5"


def test_a_recirculated_pass_keeps_the_tags_the_frame_had() -> None:
    passes = [trace.Pass(None, "push_vlan(vid=7,pcp=0),recirc(0x2)"), trace.Pass("0x2", "1")]
    assert [(d.port, d.vlan) for d in trace.deliveries(passes, {1: "a"})] == [("a", 7)]


@pytest.mark.parametrize(
    "actions",
    # a trunk guest's frame tagged 1 on a kernel-datapath VM host (dp ports: 1 VM2's access port, 2 the trunk NIC,
    # 4 the bridge's internal port), in the two orders the flood took in runs there
    ["4,pop_vlan,1,push_vlan(vid=1,pcp=0),2", "2,4,pop_vlan,1"],
)
def test_a_frame_that_arrived_tagged_leaves_tagged_until_its_tag_is_popped(actions: str) -> None:
    out = {(d.port, d.vlan) for d in trace.deliveries(actions, {1: "vif2.0", 2: "eth0-hv1", 4: "xenbr0"}, vlan=1)}
    assert out == {("xenbr0", 1), ("vif2.0", None), ("eth0-hv1", 1)}
    assert ("eth0-hv1", None) in {(d.port, d.vlan) for d in trace.deliveries("2", {2: "eth0-hv1"})}  # untagged in


def test_sample_and_check_pkt_len_branches() -> None:
    actions = "sample(sample=100.0%,actions(push_vlan(vid=5,pcp=0),1)),check_pkt_len(size=200,gt(2),le(3)),4"
    out = trace.deliveries(actions, {1: "a", 2: "b", 3: "c", 4: "d"})
    assert [(d.port, d.vlan) for d in out] == [("a", 5), ("b", None), ("c", None), ("d", None)]


def test_a_failed_translation_drops_the_frame() -> None:
    text = "Datapath actions: 1,2\n\nTranslation failed (Recursion too deep), packet is dropped.\n"
    assert trace.passes(text) == [trace.Pass(None, "")]


@pytest.mark.parametrize(
    "actions, message",
    [
        ("clone(1,2", "unbalanced '\\('"),
        ("1),2", "unbalanced '\\)'"),
        ("push_vlan(pcp=0),1", "without a VLAN id"),
        ("push_vlan(vid=9999,pcp=0),1", "without a VLAN id"),
        ("clone(" * 40 + "1" + ")" * 40, "nested deeper"),
        ("clone(1)x", "malformed"),
    ],
)
def test_unreadable_actions_are_a_clear_error(actions: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        trace.deliveries(actions, {})


def test_the_control_trace_output_names_the_port() -> None:
    """``ofproto/trace-packet-out br1 in_port=controller,... output:3``."""
    assert delivered("trace-packet-out.txt", "br1") == [("p3", None)]


# -- the trace method end to end, on the lab's recorded answers ---------------------


class ReplayHost:
    """Answers ``ovs-appctl`` as the lab's switch did (recorded); anything else is an error."""

    def __init__(self, recording: str) -> None:
        calls = json.loads((DATA / recording).read_text())
        self.answers = {tuple(c["args"]): c["stdout"] for c in calls}

    def appctl(self, daemon: str, *args: str, check: bool = True, timeout: float = 30.0) -> str:
        assert daemon == "ovs-vswitchd"
        return self.answers[args]


OFPORTS = {"vif1.0": 3, "vif2.0": 2, "vif3.0": 1}  # as the lab numbered them


def run_trace(recording: str) -> check.MethodResult:
    sc = scenario.load(ROOT / "vlan-tests" / "seed-three-vm.yaml")
    inv: Any = SimpleNamespace(vif_by_port=lambda p: SimpleNamespace(bridge="xenbr0", port=p, ofport=OFPORTS[p]))
    vif_of = {g: sc.topology.guest(g).vif for g in sc.guests}
    return check.run_trace(ReplayHost(recording), sc, inv, vif_of)  # type: ignore[arg-type]


def test_trace_method_on_the_lab() -> None:
    res = run_trace("trace-seed-three-vm.json")
    assert res.cells == {
        ("VM2", "VM1"): model.YES, ("VM3", "VM1"): model.NO,
        ("VM1", "VM2"): model.YES, ("VM3", "VM2"): model.NO,
        ("VM1", "VM3"): model.NO, ("VM2", "VM3"): model.NO,
    }  # fmt: skip
    assert res.reasons == {}


def test_a_port_no_control_trace_reaches_has_unknown_cells_not_no() -> None:
    """vif3.0 forwards nothing (no-forward): the control trace to it shows 'drop', so the traces'
    silence about VM3 proves nothing about VLANs -- VM3's cells are unknown, the others unchanged."""
    res = run_trace("trace-seed-three-vm-vif3-no-forward.json")
    assert res.cells[("VM3", "VM1")] == res.cells[("VM3", "VM2")] == model.UNKNOWN
    assert "control trace straight to vif3.0" in res.reasons[("VM3", "VM1")]
    assert "datapath actions: drop" in res.reasons[("VM3", "VM2")]
    assert res.cells[("VM1", "VM3")] == res.cells[("VM2", "VM3")] == model.NO
    assert res.cells[("VM2", "VM1")] == model.YES
