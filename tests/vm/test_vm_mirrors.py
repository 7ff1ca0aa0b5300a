"""Mirrors, TAPs, sFlow and captures on a kernel-datapath VM host, proven by traffic through ``hvnet --host``.

The lab (the real ``hvnet lab up``) is the one the modules on the VM host's guests share (tests/vm/vmlab.py): each
test deletes the mirror, TAP, sFlow or capture it made.  Guests VM1 and VM2
(VLAN 10) exchange pings inside the VM; MON (VLAN 30, where nobody else is) is the monitor: tcpdump in its
namespace sees only what a mirror or a TAP copies to it.  The collector of the GRE/ERSPAN mirrors and of
sFlow is this machine's end of the VM's management link (the kernel in the VM routes the tunnels' and
sFlow's datagrams there): tcpdump on the tap, pmacct's sfacctd on its address.  Needs root: run it under
``flock /tmp/hvnet-lab.lock``.
"""

from __future__ import annotations

import json
import re
import shlex
import signal
import struct
import subprocess
import time
from pathlib import Path

import pytest

from appliance.endpoints.topology import load as load_topology
from appliance.lab import Lab
from appliance.lab.collector import Collector, free_udp_port
from appliance.lab.vmhost.boot import VmHost
from tests.conftest import run_hvnet
from tests.vm import vmlab

pytestmark = [pytest.mark.vm, pytest.mark.shared_lab("guests")]

HOST = vmlab.HOST
BRIDGE = "xenbr0"
IP = {"VM1": "10.77.0.1", "VM2": "10.77.0.2", "MON": "10.77.0.9"}  # vmlab.GUESTS_TOPOLOGY's
MON_VLAN = 30
PINGS = 30
GRE_TEB, ERSPAN_II = 0x6558, 0x88BE
SETTLE_SIZE = 24  # the settling bursts' pings: not the 56-byte ones counted


@pytest.fixture(scope="module")
def vm_lab(vm_labs: vmlab.Labs) -> Lab:
    return vm_labs.get(vmlab.GUESTS_TOPOLOGY, HOST)


def vm(run_dir: Path) -> VmHost:
    return vmlab.vm(run_dir, HOST)


def in_vm(lab: Lab, command: str, check: bool = True, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return vmlab.in_vm(lab, HOST, command, timeout=timeout, check=check)


def hv(lab: Lab, *args: str, code: int | None = 0, timeout: float = 120, env: dict[str, str] | None = None) -> dict:
    """``hvnet --host kvm1 ARGS --json``: its exit code checked (unless ``code`` is None), its JSON read."""
    res = run_hvnet("--host", HOST, *args, "--json", env={"HVNET_LAB_DIR": str(lab.run_dir), **(env or {})},
                    timeout=timeout)  # fmt: skip
    assert "Traceback" not in res.stderr, res.stderr
    assert code is None or res.returncode == code, res.stdout + res.stderr
    return json.loads(res.stdout) if res.stdout.strip().startswith("{") else {}


def q(*argv: str) -> str:
    return " ".join(map(shlex.quote, argv))


def ping(lab: Lab, src: str, dst: str, count: int = PINGS, size: int = 56) -> tuple[int, int]:
    """(transmitted, received) of ``count`` pings from ``src`` to ``dst``; duplicates fail the test."""
    argv = ["ip", "netns", "exec", lab.ns_of(src), "ping", "-q", "-c", str(count), "-i", "0.02", "-W", "2",
            "-s", str(size), IP[dst]]  # fmt: skip
    res = in_vm(lab, q(*argv), check=False)
    m = re.search(r"(\d+) packets transmitted, (\d+) received", res.stdout)
    assert m, res.stdout + res.stderr
    assert "duplicates" not in res.stdout, res.stdout  # a copy delivered where the original went
    return int(m.group(1)), int(m.group(2))


def assert_unbroken(sent: int, back: int) -> None:
    """Every ping went out and (almost) every reply came back: the copy took nothing from the original path.

    One or two replies lost is an emulated host under load (QEMU TCG on a shared machine), not the mirror's doing;
    duplicates (a copy delivered where the original went) already failed :func:`ping`."""
    assert sent == PINGS and back >= PINGS - 2, (sent, back)


class VmTcpdump:
    """tcpdump in a guest's namespace inside the VM (what its eth0 receives), writing a pcap there; armed before
    traffic, stopped by pid."""

    def __init__(self, lab: Lab, guest: str, bpf: str = "") -> None:
        self.lab, self.pcap = lab, f"/tmp/hvnet-test-{guest}.pcap"
        argv = ["ip", "netns", "exec", lab.ns_of(guest), "tcpdump", "-i", "eth0", "-Q", "in", "-n", "-U", "-w", self.pcap,
                *bpf.split()]  # fmt: skip
        log = q(self.pcap + ".log")
        out = in_vm(lab, f"setsid {q(*argv)} </dev/null >/dev/null 2>{log} & echo $!").stdout.strip()
        assert out.isdigit(), out
        self.pid = int(out)
        deadline = time.monotonic() + 20
        while "listening on" not in in_vm(lab, f"cat {log}", check=False).stdout:
            assert time.monotonic() < deadline, in_vm(lab, f"cat {log}", check=False).stdout
            time.sleep(0.2)

    def stop(self) -> list[str]:
        """The frames it captured, one ``tcpdump -nn -e`` line each (the pcap is removed in the VM)."""
        time.sleep(0.5)  # the last copies are on their way
        in_vm(self.lab, f"kill -INT {self.pid}; n=0; while [ -e /proc/{self.pid} ] && [ $n -lt 50 ]; do "
                        f"sleep 0.1; n=$((n + 1)); done", check=False)  # fmt: skip
        out = in_vm(self.lab, f"tcpdump -nn -e -r {q(self.pcap)}; rm -f {q(self.pcap)} {q(self.pcap + '.log')}")
        return out.stdout.splitlines()


def requests(lines: list[str], src: str, dst: str) -> int:
    return len([x for x in lines if f"{IP[src]} > {IP[dst]}: ICMP echo request" in x])


def guests(lab: Lab) -> dict[str, object]:
    return {g.name: g for g in load_topology(lab.state["topology_file"]).guests}


def ovs(lab: Lab, *args: str) -> str:
    return in_vm(lab, q("ovs-vsctl", *args)).stdout.strip()


# -- SPAN and RSPAN ----------------------------------------------------------------------------------------------


def test_a_span_mirror_copies_what_va_sends_to_the_monitor_and_nothing_else_breaks(vm_lab: Lab) -> None:
    out = hv(vm_lab, "mirror", "add", "span", "--bridge", BRIDGE, "--src", "vm:VM1", "--output-port", "vm:MON",
             "--allow-isolation-exception")  # fmt: skip
    try:
        assert out["status"] == "applied", out
        assert ovs(vm_lab, "get", "mirror", "span", "output_port") == ovs(vm_lab, "get", "port", "vif3.0", "_uuid")
        mon = VmTcpdump(vm_lab, "MON", "icmp")
        try:
            sent, back = ping(vm_lab, "VM1", "VM2")
        finally:
            lines = mon.stop()
        copied = requests(lines, "VM1", "VM2")
        print(f"\nSPAN to MON: {copied} of {sent} echo requests VM1 sent copied, {back}/{sent} replies reached VM1; "
              f"{len(lines)} frames at MON")  # fmt: skip
        assert_unbroken(sent, back)
        assert copied == PINGS and requests(lines, "VM2", "VM1") == 0, lines  # --src: what VM1 sends, not VM2's replies
        assert not [x for x in lines if "echo reply" in x], lines
        # the Mirror row's statistics are ovs-vswitchd's, written every 5 s (stats-update-interval)
        deadline = time.monotonic() + 12
        while ((listed := hv(vm_lab, "mirror", "list")["mirrors"][0])["tx_packets"] or 0) < PINGS:  # None: none yet
            assert time.monotonic() < deadline, listed
            time.sleep(1)
        assert (listed["name"], listed["owner"], listed["config"]) == ("span", "hvnet", "src vif1.0 -> port vif3.0")
    finally:
        hv(vm_lab, "mirror", "del", "span")
    assert ovs(vm_lab, "list", "mirror") == ""
    mon = VmTcpdump(vm_lab, "MON", "icmp")
    try:
        ping(vm_lab, "VM1", "VM2", 5)
    finally:
        assert requests(mon.stop(), "VM1", "VM2") == 0  # gone with the mirror: MON's VLAN hears nothing of VLAN 10


def test_a_mirrors_snaplen_truncates_the_copies_in_the_kernel_datapath(vm_lab: Lab) -> None:
    """snaplen 64: the kernel datapath's trunc action cuts each copy to 64 bytes; VM2 still gets whole pings."""
    out = hv(vm_lab, "mirror", "add", "short", "--bridge", BRIDGE, "--src", "vm:VM1", "--output-port", "vm:MON",
             "--allow-isolation-exception", "--snaplen", "64")  # fmt: skip
    try:
        assert out["status"] == "applied", out
        mon = VmTcpdump(vm_lab, "MON", "icmp")
        try:
            sent, back = ping(vm_lab, "VM1", "VM2", 10, size=1000)
        finally:
            lines = mon.stop()
        lengths = sorted({int(m.group(1)) for x in lines if (m := re.search(r", length (\d+): ", x))})
        print(f"\nsnaplen 64: {len(lines)} copies at MON of {sent} pings in 1042-byte frames, their lengths {lengths}")
        assert (sent, back) == (10, 10)
        assert len(lines) == 10 and lengths == [64], lines[:2]
    finally:
        hv(vm_lab, "mirror", "del", "short")


def test_an_rspan_mirror_floods_the_copies_on_its_vlan_to_the_monitor(vm_lab: Lab) -> None:
    """Output VLAN 30: the copies go to every port of VLAN 30 (MON's access port, untagged), never to VM2 twice."""
    out = hv(vm_lab, "mirror", "add", "rspan", "--bridge", BRIDGE, "--src", "vm:VM1", "--dst", "vm:VM1",
             "--output-vlan", str(MON_VLAN))  # fmt: skip
    try:
        assert out["status"] == "applied" and any("flood_vlans" in w for w in out.get("warnings", [])), out
        assert ovs(vm_lab, "get", "mirror", "rspan", "output_vlan") == str(MON_VLAN)
        mon = VmTcpdump(vm_lab, "MON", "icmp")
        try:
            sent, back = ping(vm_lab, "VM1", "VM2")
        finally:
            lines = mon.stop()
        there, reply = (
            requests(lines, "VM1", "VM2"),
            len([x for x in lines if f"{IP['VM2']} > {IP['VM1']}: ICMP echo reply" in x]),
        )
        print(
            f"\nRSPAN VLAN {MON_VLAN}: MON saw {there}/{sent} requests and {reply}/{back} replies; VM1 got {back}/{sent}"
        )
        assert_unbroken(sent, back)
        assert there == PINGS and back <= reply <= PINGS, lines  # what the monitor saw of the replies VM1 got
        assert not [x for x in lines if "802.1Q" in x], lines  # an access port: the copies arrive untagged
    finally:
        hv(vm_lab, "mirror", "del", "rspan")
    assert ovs(vm_lab, "list", "mirror") == ""


# -- GRE and ERSPAN to a collector ---------------------------------------------------------------------------------


def read_pcap(path: Path) -> list[bytes]:
    """The frames of a pcap file (Ethernet link type), as bytes."""
    data = path.read_bytes()
    magic = struct.unpack("<I", data[:4])[0]
    end = "<" if magic in (0xA1B2C3D4, 0xA1B23C4D) else ">"
    assert struct.unpack(end + "I", data[20:24])[0] == 1, "not Ethernet"
    frames, off = [], 24
    while off + 16 <= len(data):
        _, _, incl, _ = struct.unpack(end + "IIII", data[off : off + 16])
        if off + 16 + incl > len(data):  # tcpdump is still writing it
            break
        frames.append(data[off + 16 : off + 16 + incl])
        off += 16 + incl
    return frames


def decap(frame: bytes) -> tuple[int, int | None, int | None, bytes] | None:
    """A GRE frame's (protocol, key, ERSPAN session id, inner Ethernet frame); None for anything else.

    GRE (RFC 2890): flags and version, protocol, then checksum, key and sequence number when flagged.
    ERSPAN type II (GRE protocol 0x88be, sequence number present): 8 bytes, version 1 in the top four bits,
    the session id in the low ten bits of the second 16-bit word."""
    if len(frame) < 34 or frame[12:14] != b"\x08\x00" or frame[23] != 47:
        return None
    ihl = (frame[14] & 0x0F) * 4
    gre = frame[14 + ihl :]
    flags, proto = struct.unpack("!HH", gre[:4])
    off, key = 4, None
    if flags & 0x8000:
        off += 4
    if flags & 0x2000:
        key = struct.unpack("!I", gre[off : off + 4])[0]
        off += 4
    if flags & 0x1000:
        off += 4
    session = None
    if proto == ERSPAN_II:
        ver_vlan, cos_session = struct.unpack("!HH", gre[off : off + 4])
        assert ver_vlan >> 12 == 1, f"ERSPAN version {ver_vlan >> 12}"
        session = cos_session & 0x3FF
        off += 8
    return proto, key, session, gre[off:]


def inner_icmp_requests(frames: list[bytes], src_mac: str, src: str, dst: str, size: int = 56) -> dict[int | None, int]:
    """Inner frames that are ``src``'s echo requests of ``size`` bytes to ``dst`` from ``src_mac``, counted by their
    802.1Q VLAN (None: untagged).  The size tells the pings counted from a settling burst's late copies."""
    mac = bytes.fromhex(src_mac.replace(":", ""))
    want = bytes(map(int, IP[src].split("."))) + bytes(map(int, IP[dst].split(".")))
    found: dict[int | None, int] = {}
    for inner in frames:
        vlan, ip = None, inner[14:]
        if inner[12:14] == b"\x81\x00":
            vlan, ip = struct.unpack("!H", inner[14:16])[0] & 0xFFF, inner[18:]
        ethertype = inner[16:18] if vlan is not None else inner[12:14]
        sized = len(ip) >= 4 and struct.unpack("!H", ip[2:4])[0] == 28 + size
        if (
            inner[6:12] == mac
            and ethertype == b"\x08\x00"
            and ip[12:20] == want
            and ip[9] == 1
            and ip[20] == 8
            and sized
        ):
            found[vlan] = found.get(vlan, 0) + 1  # an ICMP echo request
    return found


class LocalTcpdump:
    """tcpdump on this machine's end of the VM's management link: the tunnels' collector."""

    def __init__(self, iface: str, pcap: Path, bpf: list[str]) -> None:
        self.pcap = pcap
        self.proc = subprocess.Popen(["tcpdump", "-i", iface, "-n", "-U", "-w", str(pcap), *bpf],
                                     stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
        assert self.proc.stderr is not None
        line = self.proc.stderr.readline()
        assert "listening on" in line, line

    def stop(self, expect: int = 0, within: float = 10) -> list[bytes]:
        """The frames captured, once ``expect`` of them are in (or ``within`` seconds passed): copies leave the VM
        by its management link's queue, where the SSH session that ran the pings can overtake them."""
        deadline = time.monotonic() + within
        time.sleep(0.5)
        while len(read_pcap(self.pcap)) < expect and time.monotonic() < deadline:
            time.sleep(0.2)
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=10)
        return read_pcap(self.pcap)


def settled(lab: Lab, tap: str, pcap: Path, within: float = 30, burst: int = 5) -> float:
    """Seconds until the tunnel carried a whole burst of VM1's pings to the collector (a burst a try).

    ovs-vswitchd sets a new mirror up after its commit (the tunnel vport, then the flows that output to it) and the
    VM's kernel resolves the collector's address; on an emulated VM that is busy, copies of a burst sent meanwhile
    can still go missing after the first one arrives.  What is counted afterwards is the mirror at work, not its
    start: a mirror that never carries a whole burst fails here."""
    started = time.monotonic()
    while True:
        cap = LocalTcpdump(tap, pcap, ["ip", "proto", "47"])
        try:
            ping(lab, "VM1", "VM2", burst, size=SETTLE_SIZE)
        finally:
            frames = cap.stop(expect=burst, within=3)
        if len(frames) >= burst:
            return time.monotonic() - started
        assert time.monotonic() - started < within, f"no whole burst of {burst} tunnelled copies within {within:.0f} s"
        time.sleep(0.5)


def tunnel_counters(lab: Lab) -> str:
    """Where a copy can be lost, for a failure's message: the tunnel devices' and the management link's statistics
    and queue, the datapath's counters and ovs-vswitchd's last words."""
    cmd = (
        "ip -s link show gre_sys; ip -s link show erspan_sys; tc -s qdisc show dev mgmt0; ovs-appctl dpctl/show -s; "
        "tail -n 12 /var/log/openvswitch/ovs-vswitchd.log"
    )
    return in_vm(lab, cmd, check=False).stdout[-5000:]


@pytest.mark.parametrize("kind", ["gre", "erspan"])
def test_a_tunnel_mirror_reaches_the_collector_encapsulated(vm_lab: Lab, tmp_path: Path, kind: str) -> None:
    """The kernel's GRE/ERSPAN vport carries the copies (OVS made the ``gre_sys``/``erspan_sys`` device), routed
    by the VM's own kernel out of its management link to the collector here."""
    link = vm(vm_lab.run_dir).link
    key = 7 if kind == "gre" else 42
    out = hv(vm_lab, "mirror", "add", f"to-{kind}", "--bridge", BRIDGE, "--src", "vm:VM1", f"--output-{kind}",
             link.peer, "--key", str(key))  # fmt: skip
    try:
        assert out["status"] == "applied", out
        tunnel = ovs(vm_lab, "get", "mirror", f"to-{kind}", "output_port")
        name = ovs(vm_lab, "get", "port", tunnel, "name").strip('"')
        assert ovs(vm_lab, "get", "interface", name, "type") == kind
        dp = in_vm(vm_lab, "ovs-appctl dpif/show").stdout
        assert re.search(rf"{name} \d+/\d+: \({kind}", dp), dp
        # the tunnel port is no network device of the VM's kernel (its copies leave by the shared one): said
        res = run_hvnet("--host", HOST, "capture", "start", "--port", name, env={"HVNET_LAB_DIR": str(vm_lab.run_dir)})
        assert res.returncode == 2 and "has no network device on the hypervisor" in res.stderr, res.stderr
        waited = settled(vm_lab, link.tap, tmp_path / f"{kind}-first.pcap")
        cap = LocalTcpdump(link.tap, tmp_path / f"{kind}.pcap", ["ip", "proto", "47"])
        try:
            sent, back = ping(vm_lab, "VM1", "VM2")
        finally:
            frames = cap.stop(expect=PINGS)
        decoded = [d for d in map(decap, frames) if d is not None]
        va_mac = guests(vm_lab)["VM1"].mac  # type: ignore[attr-defined]
        arrived = inner_icmp_requests([d[3] for d in decoded], va_mac, "VM1", "VM2")
        protos = {d[0] for d in decoded}
        print(f"\n{kind.upper()} mirror to {link.peer}: settled after {waited:.1f} s; {len(frames)} GRE frames at "
              f"the collector, echo requests inside by VLAN {arrived} of {sent} sent; protocols "
              f"{sorted(map(hex, protos))}")  # fmt: skip
        assert_unbroken(sent, back)
        # a tunnel port is no access port: each copy keeps VM1's VLAN as an 802.1Q tag (the collector sees it)
        assert arrived == {10: PINGS}, (decoded[:3], tunnel_counters(vm_lab))
        if kind == "gre":
            assert protos == {GRE_TEB} and {d[1] for d in decoded} == {key}, decoded[:3]
        else:
            assert protos == {ERSPAN_II} and {d[2] for d in decoded} == {key}, decoded[:3]
    finally:
        hv(vm_lab, "mirror", "del", f"to-{kind}")
    assert ovs(vm_lab, "list", "mirror") == "" and not [
        p for p in ovs(vm_lab, "list-ports", BRIDGE).split() if p.startswith("mir")
    ]
    assert not [w for w in out["warnings"] if "no route" in w], out["warnings"]  # the collector is routed


def test_a_tunnel_to_an_address_the_vm_cannot_route_is_applied_with_a_warning(vm_lab: Lab) -> None:
    """The VM has no default route: copies to 192.0.2.77 would be dropped by its kernel, counted as sent."""
    out = hv(vm_lab, "mirror", "add", "nowhere", "--bridge", BRIDGE, "--src", "vm:VM1", "--output-gre", "192.0.2.77")
    try:
        assert out["status"] == "applied", out
        (said,) = [w for w in out["warnings"] if "no route" in w]
        print(f"\n{said}")
        assert said.startswith("mirror nowhere: kvm1 has no route to 192.0.2.77 (the kernel routes the kernel "
                               "datapath's tunnels): every GRE copy is dropped there"), said  # fmt: skip
        sent, _ = ping(vm_lab, "VM1", "VM2", 10)
        deadline = time.monotonic() + 12  # the Mirror row's statistics: written every 5 s
        while ((listed := hv(vm_lab, "mirror", "list")["mirrors"][0])["tx_packets"] or 0) < sent:
            assert time.monotonic() < deadline, listed  # OVS counts the copies it hands the kernel as sent
            time.sleep(1)
        print(f"  ({sent} pings: the mirror counts {listed['tx_packets']} copies sent)")
    finally:
        hv(vm_lab, "mirror", "del", "nowhere")


def test_a_tap_to_an_erspan_collector_sends_only_its_match_untagged(vm_lab: Lab, tmp_path: Path) -> None:
    """A TAP's copies leave by an OpenFlow output to its tunnel port: the frame as VM1 sent it (no VLAN tag, unlike
    a mirror's), and only what the TAP matches (ICMP, not VM2's replies)."""
    link = vm(vm_lab.run_dir).link
    out = hv(vm_lab, "tap", "add", "to-col", "--bridge", BRIDGE, "--vif", "vm:VM1", "--direction", "in",
             "--protocol", "icmp", "--output-erspan", link.peer, "--key", "9")  # fmt: skip
    try:
        assert out["status"] == "applied" and not [w for w in out["warnings"] if "no route" in w], out
        settled(vm_lab, link.tap, tmp_path / "tap-first.pcap")
        cap = LocalTcpdump(link.tap, tmp_path / "tap.pcap", ["ip", "proto", "47"])
        try:
            sent, back = ping(vm_lab, "VM1", "VM2")
        finally:
            frames = cap.stop(expect=PINGS)
        decoded = [d for d in map(decap, frames) if d is not None]
        arrived = inner_icmp_requests([d[3] for d in decoded], guests(vm_lab)["VM1"].mac, "VM1", "VM2")  # type: ignore[attr-defined]
        print(f"\nERSPAN TAP to {link.peer}: {len(frames)} frames, echo requests inside by VLAN {arrived} of {sent}")
        assert_unbroken(sent, back)
        counted = [d for d in decoded if d[3][16:18] == (84).to_bytes(2, "big")]  # 56-byte pings' (not settling)
        assert arrived == {None: PINGS} and len(counted) == PINGS, (decoded[:2], tunnel_counters(vm_lab))  # no reply
        assert {(d[0], d[2]) for d in decoded} == {(ERSPAN_II, 9)}
    finally:
        hv(vm_lab, "tap", "del", "to-col")
    assert not [p for p in ovs(vm_lab, "list-ports", BRIDGE).split() if p.startswith("tap")]


# -- flow TAPs ----------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("method", ["flows", "group"])
def test_a_flow_tap_copies_exactly_its_match_to_the_monitor(vm_lab: Lab, method: str) -> None:
    """A TAP on VM1's ICMP it sends (direction in): MON gets VM1's echo requests, none of VM2's replies, none of VM1's
    UDP; hvnet's own flow counters say as many."""
    out = hv(vm_lab, "tap", "add", "icmp-va", "--bridge", BRIDGE, "--vif", "vm:VM1", "--direction", "in",
             "--protocol", "icmp", "--output-port", "vm:MON", "--allow-isolation-exception", "--method", method)  # fmt: skip
    try:
        assert out["status"] == "applied", out
        mon = VmTcpdump(vm_lab, "MON")
        try:
            sent, back = ping(vm_lab, "VM1", "VM2")
            udp = f"for i in 1 2 3; do echo x > /dev/udp/{IP['VM2']}/9; done"  # VM1's, not ICMP: not tapped
            in_vm(vm_lab, q("ip", "netns", "exec", vm_lab.ns_of("VM1"), "bash", "-c", udp), check=False)
        finally:
            lines = mon.stop()
        copied = requests(lines, "VM1", "VM2")
        (tap,) = hv(vm_lab, "tap", "list")["taps"]
        print(f"\nTAP ({method}) to MON: {copied} of {sent} echo requests, {len(lines)} frames; "
              f"the TAP's flows counted {tap['packets']}")  # fmt: skip
        assert_unbroken(sent, back)
        assert copied == PINGS and len(lines) == PINGS, lines  # nothing but VM1's echo requests
        assert (tap["name"], tap["method"], tap["packets"]) == ("icmp-va", method, PINGS), tap
    finally:
        hv(vm_lab, "tap", "del", "icmp-va")
    flows = in_vm(vm_lab, q("ovs-ofctl", "dump-flows", BRIDGE)).stdout
    assert "goto_table" not in flows and "group" not in flows, flows


# -- sFlow ----------------------------------------------------------------------------------------------------------


def test_sflow_samples_reach_a_collector_beside_the_vm(vm_lab: Lab, tmp_path: Path) -> None:
    """1-in-1 sampling: each ICMP packet entering the bridge (VM1's requests at vif1.0, VM2's replies at vif2.0) is
    one sample at pmacct's sfacctd, listening on this machine's end of the management link."""
    link = vm(vm_lab.run_dir).link
    with Collector("sflow", link.peer, free_udp_port(), tmp_path) as collector:
        out = hv(vm_lab, "sflow", "set", BRIDGE, "--target", collector.target, "--sampling", "1", "--polling", "5")
        try:
            assert out["status"] == "applied", out
            row = ovs(vm_lab, "get", "bridge", BRIDGE, "sflow")
            assert collector.target in ovs(vm_lab, "get", "sflow", row, "targets")
            sent, back = ping(vm_lab, "VM1", "VM2")
            packets = sent + back
            deadline = time.monotonic() + 10
            while collector.received(ip_proto="icmp").packets < packets and time.monotonic() < deadline:
                time.sleep(0.3)
        finally:
            hv(vm_lab, "sflow", "clear", BRIDGE)
    got = collector.received(ip_proto="icmp")
    print(f"\nsFlow 1-in-1 to {collector.target}: {packets} ICMP packets through the bridge, {got.packets} samples")
    assert got.packets == packets and got.bytes >= 98 * packets, got
    assert ovs(vm_lab, "get", "bridge", BRIDGE, "sflow") == "[]"


# -- captures -------------------------------------------------------------------------------------------------------


def test_a_capture_on_a_vif_runs_in_the_vm_and_its_pcap_comes_back_with_the_traffic(
    vm_lab: Lab, tmp_path: Path
) -> None:
    """``hvnet --host kvm1 capture`` on VM2's VIF: tcpdump in the VM (a small ring: its disk is small), its counts
    from there; ``capture fetch`` brings the pcap here over the same SSH connection, byte for byte, and it holds
    each exchange."""
    env = {"HVNET_PCAP_DIR": "/var/lib/hvnet/captures"}
    rec = hv(vm_lab, "capture", "start", "--port", "vif2.0", "--name", "vb", "--filter", "icmp", "--rotate-mb", "1",
             "--rotate-files", "2", env=env)  # fmt: skip
    try:
        assert rec["state"] == "running" and rec["host"].startswith(f"ssh:{HOST}"), rec
        refused = run_hvnet("--host", HOST, "capture", "fetch", "vb", "--out", str(tmp_path / "early"),
                            env={"HVNET_LAB_DIR": str(vm_lab.run_dir), **env})  # fmt: skip
        assert refused.returncode == 2 and "is running on kvm1: its files still change" in refused.stderr, refused
        sent, back = ping(vm_lab, "VM1", "VM2")
        stopped = hv(vm_lab, "capture", "stop", "vb", env=env)
        assert stopped["state"] == "stopped" and stopped["packets"] == sent + back, stopped
        assert stopped["files"] == ["vb.pcap0"], stopped
        got = hv(vm_lab, "capture", "fetch", "vb", "--out", str(tmp_path / "vb"), env=env)
        pcap = tmp_path / "vb" / "vb.pcap0"
        there = in_vm(vm_lab, q("stat", "-c", "%s", f"{stopped['directory']}/vb.pcap0")).stdout.strip()
        assert got["files"] == [{"name": "vb.pcap0", "bytes": pcap.stat().st_size}] and there == str(got["bytes"])
        text = subprocess.run(["tcpdump", "-nn", "-r", str(pcap)], capture_output=True, text=True, check=True)
        lines = text.stdout.splitlines()
        print(f"\ncapture on vif2.0 in the VM: {stopped['packets']} packets for {sent} pings; fetched {got['bytes']} B "
              f"holding {requests(lines, 'VM1', 'VM2')} requests and {len(lines) - requests(lines, 'VM1', 'VM2')} others")  # fmt: skip
        assert requests(lines, "VM1", "VM2") == sent and len(lines) == sent + back, lines[:4]
        assert len([x for x in lines if f"{IP['VM2']} > {IP['VM1']}: ICMP echo reply" in x]) == back
    finally:
        hv(vm_lab, "capture", "stop", "vb", env=env, code=None)
        run_hvnet("--host", HOST, "capture", "delete", "vb", env={"HVNET_LAB_DIR": str(vm_lab.run_dir), **env})
