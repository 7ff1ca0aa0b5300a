"""Whether a mirror's or TAP's GRE/ERSPAN destination is routed: which changes ask, and what the host's answer means.

The kernel datapath's answers are ``ip route get`` (iproute2 6.1) as it printed them here: a namespace with no
route to 192.0.2.77, and a host whose route leads out of eth0.  The userspace datapath's are ovs-appctl's for
``ovs/route/lookup`` (ovs-router.c replies the error "Not found"; ovs-appctl exits 2 and prints it on stderr).
"""

from __future__ import annotations

import pytest

from appliance.policy.plan import reach
from appliance.policy.plan.model import TunnelCols
from appliance.policy.plan.planner import Change
from appliance.policy.plan.state import MirrorCols

UNREACHABLE = (2, "", "RTNETLINK answers: Network is unreachable\n")
ROUTED = (0, "192.0.2.77 dev eth0 src 192.0.2.2 uid 0 \n    cache \n", "")
OVS_NOT_FOUND = (2, "", "Not found\novs-appctl: ovs-vswitchd: server returned an error\n")
OVS_ROUTED = (0, "src 10.93.0.1\ngateway 0.0.0.0\ndev br-phy\n", "")


def gre(ip: str, name: str = "mir00000001") -> MirrorCols:
    return MirrorCols(src=("vif1.0",), output_port=name, tunnel=TunnelCols(name, "gre", (("remote_ip", ip),)))


def test_a_new_or_moved_tunnel_destination_is_checked_and_one_kept_is_not() -> None:
    changes = [
        Change("mirror", "xenbr0", "new", None, gre("192.0.2.77")),
        Change("mirror", "xenbr0", "moved", gre("192.0.2.1"), gre("192.0.2.2")),
        Change(
            "mirror",
            "xenbr0",
            "kept",
            gre("192.0.2.3"),
            MirrorCols(src=("vif2.0",), output_port="mir00000001", tunnel=gre("192.0.2.3").tunnel),
        ),
        Change("mirror", "xenbr0", "gone", gre("192.0.2.4"), None),
        Change("mirror", "xenbr0", "port", None, MirrorCols(src=("vif1.0",), output_port="vif3.0")),
    ]
    outs = reach.new_destinations(changes)
    assert [(o.kind, o.name, o.type, o.remote_ip) for o in outs] == [
        ("mirror", "new", "gre", "192.0.2.77"),
        ("mirror", "moved", "gre", "192.0.2.2"),
    ]


@pytest.mark.parametrize(
    ("datapath", "answer", "expected"),
    [
        ("system", UNREACHABLE, False),
        ("", UNREACHABLE, False),  # no datapath_type: the kernel's
        ("system", ROUTED, True),
        ("system", (0, "unreachable 192.0.2.77 table main \n", ""), False),  # an unreachable route says so
        ("system", (1, "", 'Error: any valid prefix is expected rather than "x".\n'), None),
        ("system", (127, "", "sh: ip: not found\n"), None),
        ("netdev", OVS_NOT_FOUND, False),
        ("netdev", OVS_ROUTED, True),
        ("netdev", (1, "", 'ovs-appctl: cannot connect to "/run/openvswitch/ovs-vswitchd.1.ctl"\n'), None),
    ],
)
def test_the_hosts_answer(datapath: str, answer: tuple[int, str, str], expected: bool | None) -> None:
    assert reach.routed(datapath, *answer) is expected


def test_the_lookup_asks_the_router_that_routes_the_copies() -> None:
    assert reach.lookup_argv("system", "192.0.2.77") == ["ip", "route", "get", "192.0.2.77"]
    assert reach.lookup_argv("netdev", "2001:db8::1") == ["ovs/route/lookup", "2001:db8::1"]


def test_the_warning_says_where_the_copies_are_dropped_and_what_to_do() -> None:
    out = reach.TunnelOut("tap", "t1", "xenbr0", "erspan", "192.0.2.77")
    kernel = reach.warning(out, "system", "kvm1")
    assert kernel == ("tap t1: kvm1 has no route to 192.0.2.77 (the kernel routes the kernel datapath's tunnels): "
                      "every ERSPAN copy is dropped there, though the copies are counted as sent; add a route to "
                      "the collector on the host")  # fmt: skip
    assert "OVS's own router" in reach.warning(out, "netdev", "hv1") and "userspace" in reach.warning(
        out, "netdev", "x"
    )
