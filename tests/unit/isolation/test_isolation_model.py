"""VLAN forwarding rules and derived expectations (pure)."""

import pytest

from appliance.isolation import model
from appliance.isolation.model import MirrorSpec, PortVlan


def access(tag, bridge="br0"):
    return PortVlan(bridge, None, tag)


@pytest.mark.parametrize(
    "port, vlan",
    [
        (access(10), 10),
        (PortVlan("br0", "trunk", None, (10, 20)), None),  # untagged = VLAN 0, not trunked
        (PortVlan("br0", "trunk", None, (0, 10)), 0),
        (PortVlan("br0", None, None, ()), 0),  # cleared tag: trunk of everything
        (PortVlan("br0", "native-untagged", 10, (20,)), 10),
        (PortVlan("br0", "native-tagged", 20, (30,)), 20),
    ],
)
def test_ingress_vlan(port, vlan) -> None:
    assert model.ingress_vlan(port) == vlan


@pytest.mark.parametrize(
    "port, vlan, out",
    [
        (access(10), 10, "untagged"),
        (access(10), 20, None),
        (PortVlan("br0", "trunk", None, (10, 20)), 20, "tagged"),
        (PortVlan("br0", "trunk", None, (10, 20)), 30, None),
        (PortVlan("br0", None, None, ()), 4094, "tagged"),
        (PortVlan("br0", "native-untagged", 10, (20,)), 10, "untagged"),
        (PortVlan("br0", "native-untagged", 10, (20,)), 20, "tagged"),
        (PortVlan("br0", "native-untagged", 10, (20,)), 30, None),
        (PortVlan("br0", "native-tagged", 20, (30,)), 20, "tagged"),
        (PortVlan("br0", "native-tagged", 20, ()), 99, "tagged"),  # empty trunks: all VLANs
    ],
)
def test_egress(port, vlan, out) -> None:
    assert model.egress(port, vlan) == out


def test_study_table_is_derived() -> None:
    ports = {"VM1": access(1), "VM2": access(1), "VM3": access(2)}
    exp = model.derive(ports, [], ["VM1", "VM2", "VM3"])
    assert exp.cells == {
        ("VM1", "VM2"): "yes", ("VM2", "VM1"): "yes",
        ("VM1", "VM3"): "no", ("VM3", "VM1"): "no", ("VM2", "VM3"): "no", ("VM3", "VM2"): "no",
    }  # fmt: skip


def test_cleared_tag_hears_every_vlan_but_is_not_heard() -> None:
    ports = {"VM1": access(1), "VM3": PortVlan("br0", None, None, ())}
    exp = model.derive(ports, [], ["VM1", "VM3"])
    assert exp.cells[("VM3", "VM1")] == "yes"
    assert exp.cells[("VM1", "VM3")] == "no"  # VM3's untagged frames are VLAN 0


def test_other_bridge_never_hears() -> None:
    ports = {"a": access(1, "br0"), "b": access(1, "br1")}
    assert model.derive(ports, [], ["a", "b"]).cells == {("a", "b"): "no", ("b", "a"): "no"}


def test_mirror_copies_are_exceptions_and_output_port_is_cut_off() -> None:
    ports = {"VM1": access(1), "VM2": access(1), "VM3": access(2)}
    span = MirrorSpec("span", "br0", "VM3", select_src=frozenset({"VM1"}), select_dst=frozenset({"VM1"}))
    exp = model.derive(ports, [span], ["VM1", "VM2", "VM3"])
    assert exp.cells[("VM3", "VM1")] == "exception"  # VM1 sends: src selected
    assert exp.cells[("VM3", "VM2")] == "exception"  # VM2's broadcast leaves through VM1: dst selected
    assert exp.exceptions[("VM3", "VM1")] == ["span"]
    assert exp.cells[("VM1", "VM3")] == "no"  # an output port does not forward what it receives


def test_mirror_select_vlan_restricts() -> None:
    ports = {"a": access(1), "b": access(2), "mon": access(3)}
    m = MirrorSpec("m", "br0", "mon", select_all=True, select_vlans=frozenset({2}))
    exp = model.derive(ports, [m], ["a", "b", "mon"])
    assert exp.cells[("mon", "a")] == "no" and exp.cells[("mon", "b")] == "exception"


@pytest.mark.parametrize(
    "expected, observed, verdict",
    [
        ("yes", "yes", "ok"), ("no", "no", "ok"), ("no", "yes", "leak"), ("yes", "no", "blocked"),
        ("exception", "yes", "ok"), ("exception", "no", "blocked"), ("no", "unknown", "unknown"),
    ],
)  # fmt: skip
def test_compare(expected, observed, verdict) -> None:
    assert model.compare(expected, observed) == verdict


# -- senders that send tagged (a VM host's trunk guests, from eth0.V) ------------------------------


@pytest.mark.parametrize(
    "port, vlan, into",
    [
        (access(10), 10, None),  # an access port drops a tagged frame, even of its own VLAN
        (PortVlan("br0", "trunk", None, (10, 20)), 10, 10),
        (PortVlan("br0", "trunk", None, (10, 20)), 30, None),
        (PortVlan("br0", "trunk", None, ()), 30, 30),  # no trunks: every VLAN
        (PortVlan("br0", "native-untagged", 10, (20,)), 10, 10),  # OVS trunks a native port's own VLAN
        (PortVlan("br0", "native-tagged", 20, (30,)), 30, 30),
        (PortVlan("br0", "native-tagged", 20, (30,)), 10, None),
        (PortVlan("br0", "trunk", None, (0, 10)), 0, None),  # VLAN 0 is a priority tag, never sent tagged
    ],
)
def test_tagged_ingress_follows_the_trunk_list(port, vlan, into) -> None:
    assert model.tagged_ingress_vlan(port, vlan) == into


# trunk-and-native.yaml's ports, with the VLANs the VM host's lab gives each trunk guest a sub-interface for
TN = {
    "a10": access(10),
    "b10": access(10),
    "c20": access(20),
    "d30": access(30),
    "trunk": PortVlan("br0", "trunk", None, (10, 20)),
    "nu10": PortVlan("br0", "native-untagged", 10, (20,)),
    "nt20": PortVlan("br0", "native-tagged", 20, (30,)),
}
TN_TAGGED = {"trunk": (10, 20), "nu10": (20,), "nt20": (30,)}


def test_tagged_senders_reach_the_vlans_their_trunk_lists_carry_and_no_others() -> None:
    guests = list(TN)
    untagged = model.derive(TN, [], guests).cells
    tagged = model.derive(TN, [], guests, TN_TAGGED).cells
    newly = sorted(cell for cell, v in tagged.items() if v == "yes" and untagged[cell] == "no")
    # what only tagged frames reach: the trunk's VLANs 10 and 20, nu10's 20, nt20's 30
    assert newly == [("a10", "trunk"), ("b10", "trunk"), ("c20", "nu10"), ("c20", "trunk"), ("d30", "nt20"),
                     ("nt20", "nu10"), ("nt20", "trunk"), ("nu10", "trunk")]  # fmt: skip
    assert tagged[("d30", "trunk")] == "no" and tagged[("a10", "nt20")] == "no"
    # listening never changes: a cell only an untagged sender could make stays as it was
    assert {c: v for c, v in tagged.items() if c[1] not in TN_TAGGED} == {
        c: v for c, v in untagged.items() if c[1] not in TN_TAGGED
    }


def test_a_tagged_vlan_the_port_no_longer_trunks_is_expected_dropped() -> None:
    narrowed = {**TN, "trunk": PortVlan("br0", "trunk", None, (20,))}
    cells = model.derive(narrowed, [], list(TN), TN_TAGGED).cells
    assert (cells[("a10", "trunk")], cells[("b10", "trunk")], cells[("c20", "trunk")]) == ("no", "no", "yes")


def test_a_mirror_selecting_a_vlan_copies_a_tagged_senders_frames_of_it() -> None:
    ports = {"t": PortVlan("br0", "trunk", None, (10, 20)), "a": access(30), "mon": access(99)}
    m = MirrorSpec("m", "br0", "mon", select_src=frozenset({"t"}), select_vlans=frozenset({20}))
    assert model.mirrored_to(ports, "mon", "t", [m]) == []  # untagged only: VLAN 0 is not trunked, nothing enters
    assert model.mirrored_to(ports, "mon", "t", [m], {"t": (10, 20)}) == ["m"]
    assert model.mirrored_to(ports, "mon", "t", [m], {"t": (10,)}) == []
