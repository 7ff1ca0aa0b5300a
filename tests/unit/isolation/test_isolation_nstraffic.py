"""The traffic method's part in namespaces on another host (a VM host's guests), the pure parts: its probe
jobs and how it reads a namespace's interfaces."""

from __future__ import annotations

import subprocess
from types import SimpleNamespace

from appliance.isolation import nstraffic

# `ip -n hvnet-trunk -o link show` in a VM host's trunk guest, as its iproute2 prints it
TRUNK_LINKS = """\
1: lo: <LOOPBACK,UP,LOWER_UP> mtu 65536 qdisc noqueue state UNKNOWN mode DEFAULT group default qlen 1000\\    link/loopback 00:00:00:00:00:00 brd 00:00:00:00:00:00
2: eth0@if13: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue state UP mode DEFAULT group default qlen 1000\\    link/ether 02:82:7a:42:bd:c3 brd ff:ff:ff:ff:ff:ff link-netnsid 0
3: eth0.10@eth0: <BROADCAST,MULTICAST,UP,LOWER_UP> mtu 1500 qdisc noqueue state UP mode DEFAULT group default qlen 1000\\    link/ether 02:82:7a:42:bd:c3 brd ff:ff:ff:ff:ff:ff
4: eth0.20@eth0: <BROADCAST,MULTICAST> mtu 1500 qdisc noop state DOWN mode DEFAULT group default qlen 1000\\    link/ether 02:82:7a:42:bd:c3 brd ff:ff:ff:ff:ff:ff
"""


class Answers:
    """A host whose runner answers every command with ``stdout`` (and ``returncode``)."""

    def __init__(self, stdout: str, returncode: int = 0) -> None:
        self.label = "kvm1"
        self.runner = SimpleNamespace(run=lambda argv, **kw: subprocess.CompletedProcess(argv, returncode, stdout, ""))


def test_a_guest_sends_untagged_from_eth0_and_tagged_from_each_sub_interface() -> None:
    assert nstraffic.interfaces(()) == ["eth0"]
    assert nstraffic.interfaces((10, 20)) == ["eth0", "eth0.10", "eth0.20"]
    jobs = nstraffic.send_jobs(3, "hvnet-trunk", ["eth0", "eth0.10"], "10.30.0.5", ["10.30.0.1", "10.30.0.254"], 2)
    assert [(j.name, j.netns) for j in jobs] == [("probe3-0", "hvnet-trunk"), ("probe3-1", "hvnet-trunk")]
    # the values are the script's arguments, never its text
    assert jobs[1].argv == ("sh", "-c", nstraffic.SEND, "sh", "2", nstraffic.DEADLINE_S, "eth0.10", "10.30.0.5",
                            "10.30.0.1", "10.30.0.254")  # fmt: skip


def test_a_namespace_whose_sub_interface_is_down_cannot_send_tagged() -> None:
    host = Answers(TRUNK_LINKS)
    assert nstraffic.down_reason(host, "hvnet-trunk", ["eth0", "eth0.10"]) is None  # type: ignore[arg-type]
    assert nstraffic.down_reason(host, "hvnet-trunk", ["eth0", "eth0.20"]) == "eth0.20 is down"  # type: ignore[arg-type]
    assert nstraffic.down_reason(host, "hvnet-trunk", ["eth0.30"]) == "eth0.30 is missing"  # type: ignore[arg-type]
    gone = Answers("", returncode=1)
    assert nstraffic.down_reason(gone, "hvnet-x", ["eth0"]) == "namespace hvnet-x does not exist on kvm1"  # type: ignore[arg-type]
