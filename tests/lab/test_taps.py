"""TAPs and hvnet's OpenFlow pipeline on the 2010 study's lab, tcpdump and ovs-ofctl as the witnesses.

A monitor port ``mon0`` (an internal port in the dead VLAN, so the switch's
own forwarding never floods anything to it) receives only what a TAP copies.
VM1 pings VM2 after its ARP entry is flushed (so it ARPs first), and VM3
sends ICMP into the switch too (a static neighbour entry: no ARP needed):
the monitor must hold VM1's echo requests, and none of the ARP, none of
VM2's replies (direction in) and nothing of VM3's.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.core import documents
from appliance.core.errors import HvnetError
from appliance.lab import Lab
from appliance.policy.apply.openflow import COOKIE, OpenFlow
from tests import jsonschemas
from tests.conftest import run_hvnet
from tests.lab.policy_helpers import ofctl, reset, vsctl, write

TAGS = {"vif1.0": 1, "vif2.0": 1, "vif3.0": 2}
IP = {"VM1": "192.168.0.150", "VM2": "192.168.0.151", "VM3": "192.168.0.152"}
PINGS = 5

POLICY = """\
version: 1
bridges:
  xenbr0:
    taps:
      icmp12:
        match: {{protocol: icmp, src_ip: 192.168.0.150, dst_ip: 192.168.0.0/24}}
        vifs: [vm:VM1, vm:VM3]
        direction: in
        output: {{port: mon0}}
        method: {method}
{extra}"""


def _clean(lab: Lab) -> None:
    reset(lab, TAGS)
    data = json.loads(vsctl(lab, "--format=json", "--columns=external_ids", "list", "bridge", "xenbr0"))["data"]
    for key, _ in data[0][0][1]:
        if key.startswith("hvnet-tap-"):
            vsctl(lab, "remove", "bridge", "xenbr0", "external_ids", key)
    vsctl(lab, "--if-exists", "del-port", "mon0")


@pytest.fixture()
def mon(lab: Lab) -> Iterator[str]:
    """The monitor port, in the dead VLAN, gone afterwards with every TAP and meter."""
    _clean(lab)
    vsctl(lab, "add-port", "xenbr0", "mon0", "--", "set", "interface", "mon0", "type=internal",
          "--", "set", "port", "mon0", "vlan_mode=trunk", "trunks=4095")  # fmt: skip
    for _ in range(50):
        if Path("/sys/class/net/mon0").exists():
            break
        time.sleep(0.1)
    subprocess.run(["sysctl", "-qw", "net.ipv6.conf.mon0.disable_ipv6=1"], check=True)
    subprocess.run(["ip", "link", "set", "mon0", "up"], check=True)
    try:
        yield "mon0"
    finally:
        _clean(lab)


def hv(*args: str, code: int = 0) -> dict:
    res = run_hvnet(*args, "--json", timeout=90)
    assert "Traceback" not in res.stderr, res.stderr
    assert res.returncode == code, res.stdout + res.stderr
    return json.loads(res.stdout) if res.stdout.strip() else {}


def in_guest(lab: Lab, guest: str, *argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["ip", "netns", "exec", lab.ns_of(guest), *argv], capture_output=True, text=True,
                          check=check, timeout=60)  # fmt: skip


def capture(lab: Lab, tmp: Path, traffic) -> list[str]:
    """What mon0 received while ``traffic()`` ran, one line per frame (MACs, addresses)."""
    pcap = tmp / "mon0.pcap"
    proc = subprocess.Popen(["tcpdump", "-i", "mon0", "-Q", "in", "-U", "-n", "-w", str(pcap)],
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stderr is not None and "listening" in proc.stderr.readline()
        traffic()
        time.sleep(0.5)
    finally:
        proc.terminate()
        proc.wait(timeout=10)
    out = subprocess.run(["tcpdump", "-nn", "-e", "-r", str(pcap)], capture_output=True, text=True, check=True)
    return out.stdout.splitlines()


def vm1_vm3_traffic(lab: Lab) -> None:
    """VM1 ARPs then pings VM2; VM3 sends echo requests towards VM1 without ARP (other VLAN: never answered)."""
    in_guest(lab, "VM1", "ip", "neigh", "flush", "all")
    vm1_mac = vsctl(lab, "get", "interface", "vif1.0", "external_ids:attached-mac").strip('"')
    dev = in_guest(lab, "VM3", "ip", "-o", "route", "get", IP["VM1"]).stdout.split(" dev ")[1].split()[0]
    in_guest(lab, "VM3", "ip", "neigh", "replace", IP["VM1"], "lladdr", vm1_mac, "dev", dev)
    in_guest(lab, "VM1", "ping", "-q", "-c", str(PINGS), "-i", "0.05", IP["VM2"])
    in_guest(lab, "VM3", "ping", "-q", "-c", "3", "-i", "0.05", "-W", "1", IP["VM1"], check=False)


@pytest.mark.parametrize("method", ["flows", "group"])
def test_a_tap_copies_exactly_its_match(lab: Lab, mon: str, tmp_path: Path, method: str) -> None:
    f = write(tmp_path / "p.yaml", POLICY.format(method=method, extra=""))
    out = hv("apply", f)
    assert out["status"] == "applied", out
    flows = ofctl(lab, "dump-flows", opts=("--no-stats",))
    assert "table=60, priority=0 actions=NORMAL" in flows and "cookie=0x0" not in flows
    if method == "group":
        assert "type=all" in ofctl(lab, "dump-groups") and "actions=group:" in flows

    lines = capture(lab, tmp_path, lambda: vm1_vm3_traffic(lab))
    vm3_mac = vsctl(lab, "get", "interface", "vif3.0", "external_ids:attached-mac").strip('"')
    requests = [x for x in lines if f"{IP['VM1']} > {IP['VM2']}: ICMP echo request" in x]
    assert len(requests) == PINGS, lines
    assert not [x for x in lines if "ARP" in x], lines
    assert not [x for x in lines if "echo reply" in x], lines  # direction in: VM2's replies are not VM1's
    assert not [x for x in lines if vm3_mac in x or IP["VM3"] in x], lines
    assert len(lines) == PINGS, lines

    listed = hv("tap", "list")
    jsonschemas.check(documents.TAP_LIST, listed)  # the real output is what docs/reference/json.md publishes
    [tap] = listed["taps"]
    assert (tap["name"], tap["method"], tap["packets"]) == ("icmp12", method, PINGS)
    assert tap["bytes"] == PINGS * 98  # 84-byte ICMP datagrams in 14-byte Ethernet headers
    assert run_hvnet("verify", f).returncode == 0
    exported = tmp_path / "export.yaml"
    assert run_hvnet("export", "--out", str(exported)).returncode == 0
    assert hv("plan", str(exported))["changes"] == []

    assert hv("tap", "del", "icmp12")["status"] == "applied"
    flows = ofctl(lab, "dump-flows", opts=("--no-stats",))
    assert f"cookie={COOKIE:#x}" not in flows and "priority=0 actions=NORMAL" in flows
    assert "group_id" not in ofctl(lab, "dump-groups")


def test_policing_is_enforced_while_a_tap_copies(lab: Lab, mon: str, tmp_path: Path) -> None:
    """A meter on VM1 and a TAP on one bridge: the meter drops, the monitor gets only what the meter let by.

    The TAP's flow counts every echo request (OVS credits each OpenFlow flow on
    a packet's path, and the meter drops later, in the datapath): the copies
    that reached the monitor are fewer.
    """
    extra = "vifs:\n  - vm: VM1\n    ingress: {rate: 800, burst: 100, mechanism: meter}\n"
    f = write(tmp_path / "p.yaml", POLICY.format(method="flows", extra=extra))
    out = hv("apply", f)
    assert out["status"] == "applied" and out["ok"], out
    sent = 300
    ping = ["ping", "-q", "-c", str(sent), "-i", "0.002", "-s", "1400", IP["VM2"]]
    lines = capture(lab, tmp_path, lambda: in_guest(lab, "VM1", *ping, check=False))
    copied = len([x for x in lines if "ICMP echo request" in x])
    stats = ofctl(lab, "meter-stats")
    dropped = int(stats.split("packet_count:")[-1].split()[0])
    [tap] = hv("tap", "list")["taps"]
    assert dropped > 0, stats
    assert 0 < copied < sent, (copied, dropped)
    assert copied + dropped >= sent  # every echo request was either policed away or copied
    assert tap["packets"] >= copied


def test_a_bundle_the_switch_refuses_leaves_the_previous_pipeline(lab: Lab, mon: str, tmp_path: Path) -> None:
    f = write(tmp_path / "p.yaml", POLICY.format(method="group", extra=""))
    assert hv("apply", f)["status"] == "applied"
    before = ofctl(lab, "dump-flows", opts=("--no-stats",)), ofctl(lab, "dump-groups")
    of = OpenFlow(lab.switch.run_dir)
    bundle = "\n".join(
        [
            f"flow delete cookie={COOKIE:#x}/-1",
            f"flow add cookie={COOKIE:#x},table=0,priority=0,actions=NORMAL",
            f"flow add cookie={COOKIE:#x},table=0,priority=50,in_port=1,actions=meter:4242,goto_table:60",
        ]
    )  # fmt: skip  (meter 4242 does not exist: the switch refuses the last mod, so all of them)
    with pytest.raises(HvnetError, match="OFPMMFC_INVALID_METER"):
        of.apply_bundle("xenbr0", bundle + "\n")
    assert (ofctl(lab, "dump-flows", opts=("--no-stats",)), ofctl(lab, "dump-groups")) == before
    assert run_hvnet("verify", f).returncode == 0


def test_a_gre_tap_gets_its_tunnel_port_and_takes_it_away(lab: Lab, mon: str, tmp_path: Path) -> None:
    policy = POLICY.format(method="flows", extra="").replace("{port: mon0}", "{gre: 192.0.2.9, key: 5}")
    f = write(tmp_path / "p.yaml", policy)
    assert hv("apply", f)["status"] == "applied"
    [tunnel] = [p for p in vsctl(lab, "list-ports", "xenbr0").split() if p.startswith("tap")]
    assert vsctl(lab, "get", "interface", tunnel, "type") == "gre"
    assert vsctl(lab, "get", "interface", tunnel, "options:key") == '"5"'
    ofport = vsctl(lab, "get", "interface", tunnel, "ofport")
    assert f"actions=output:{ofport},goto_table:60" in ofctl(lab, "dump-flows", opts=("--no-stats",))
    assert run_hvnet("verify", f).returncode == 0
    assert hv("tap", "del", "icmp12")["status"] == "applied"
    assert tunnel not in vsctl(lab, "list-ports", "xenbr0").split()
