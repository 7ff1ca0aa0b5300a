"""Traffic proof that applied policy is enforced: netperf through meters and htb, tcpdump on mirrors."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.lab import Lab
from tests.conftest import run_hvnet
from tests.lab.conftest import lab_up

TOPOLOGY = Path(__file__).parent / "data" / "policy-traffic.yaml"
IP = {"VM1": "10.80.0.1", "VM2": "10.80.0.2", "VM3": "10.80.0.3", "VM4": "10.80.0.4", "MON": "10.80.0.9"}
LIMIT_KBPS = 10240


@pytest.fixture(scope="module")
def tlab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with lab_up(TOPOLOGY, tmp_path_factory.mktemp("tlab") / "run") as the_lab:
        server = subprocess.Popen(
            ["ip", "netns", "exec", the_lab.ns_of("VM2"), "netserver", "-D", "-4", "-p", "12865"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
        try:
            time.sleep(0.3)
            yield the_lab
        finally:
            server.terminate()
            server.wait(timeout=10)


def hv(*args: str) -> dict:
    res = run_hvnet(*args, "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    return json.loads(res.stdout)


def netperf(lab: Lab, test: str, seconds: int = 3) -> float:
    """Mbit/s received by VM2 from VM1 (netperf's remote-receive figure)."""
    argv = ["ip", "netns", "exec", lab.ns_of("VM1"), "netperf", "-H", IP["VM2"], "-t", test, "-l", str(seconds),
            "-P", "0", "--", "-k", "REMOTE_RECV_THROUGHPUT,THROUGHPUT_UNITS"]  # fmt: skip
    if test == "UDP_STREAM":
        argv += ["-m", "1400"]
    out = subprocess.run(argv, capture_output=True, text=True, timeout=seconds + 30, check=True).stdout
    fields = dict(line.split("=", 1) for line in out.split() if "=" in line)
    assert fields["THROUGHPUT_UNITS"] == "10^6bits/s", out
    return float(fields["REMOTE_RECV_THROUGHPUT"])


def test_ingress_meter_limits_what_the_vm_sends(tlab: Lab) -> None:
    out = hv("qos", "set", "vm:VM1", "--ingress-rate", str(LIMIT_KBPS), "--ingress-burst", "1024")
    assert out["enforcement"][0]["mechanism"] == "meter" and out["enforcement"][0]["verified"] is True
    limit = LIMIT_KBPS / 1000
    tcp = netperf(tlab, "TCP_STREAM")
    assert 0.2 * limit < tcp <= 1.1 * limit, tcp
    udp = netperf(tlab, "UDP_STREAM")
    assert 0.7 * limit <= udp <= 1.1 * limit, udp
    hv("qos", "clear", "vm:VM1")
    free = netperf(tlab, "TCP_STREAM")
    print(
        f"ingress meter {LIMIT_KBPS} kbit/s: TCP {tcp:.2f} Mbit/s, UDP received {udp:.2f} Mbit/s, unlimited {free:.0f}"
    )
    assert free > 5 * limit, free


def test_egress_shaping_limits_what_the_vm_receives(tlab: Lab) -> None:
    out = hv("qos", "set", "vm:VM2", "--egress-rate", "20000")
    e = out["enforcement"][0]
    assert (e["port"], e["kind"], e["mechanism"], e["verified"]) == ("vif2.0", "egress", "htb", True), e
    assert re.fullmatch(r"htb qdisc 1: installed: \d+ packets sent, \d+ dropped, held back \d+ times; "
                        r"its rate \(20000 kbit/s configured\) not read back", e["detail"]), e  # fmt: skip
    tcp = netperf(tlab, "TCP_STREAM")
    assert 5 < tcp <= 22, tcp
    hv("qos", "clear", "vm:VM2")
    free = netperf(tlab, "TCP_STREAM")
    print(f"egress htb 20000 kbit/s: TCP {tcp:.2f} Mbit/s, unlimited {free:.0f} Mbit/s")
    assert free > 60, free


class Capture:
    """tcpdump in a guest, armed before traffic starts, stopped by PID."""

    def __init__(self, lab: Lab, guest: str, path: Path) -> None:
        self.path = path
        self.proc = subprocess.Popen(
            ["ip", "netns", "exec", lab.ns_of(guest), "tcpdump", "-i", "eth0", "-n", "-U", "-w", str(path), "icmp"],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.PIPE,
            text=True,
        )
        assert self.proc.stderr is not None
        line = self.proc.stderr.readline()
        assert "listening on" in line, line

    def stop(self) -> str:
        time.sleep(1.0)  # copies of the last packets are still on their way
        self.proc.send_signal(signal.SIGINT)
        self.proc.wait(timeout=10)
        return subprocess.run(["tcpdump", "-n", "-r", str(self.path)], capture_output=True, text=True).stdout


def ping(lab: Lab, src: str, dst: str, count: int) -> None:
    subprocess.run(["ip", "netns", "exec", lab.ns_of(src), "ping", "-c", str(count), "-i", "0.01", "-q", IP[dst]],
                   capture_output=True, timeout=60, check=True)  # fmt: skip


def requests(text: str, src: str, dst: str) -> int:
    return len(re.findall(rf"IP {re.escape(IP[src])} > {re.escape(IP[dst])}: ICMP echo request", text))


def test_mirror_delivers_selected_traffic_only(tlab: Lab, tmp_path: Path) -> None:
    # Port selection: everything VM1 sends reaches the monitor.
    hv("mirror", "add", "watch-vm1", "--bridge", "br-pol", "--src", "vm:VM1", "--output-port", "vm:MON",
       "--allow-isolation-exception")  # fmt: skip
    cap = Capture(tlab, "MON", tmp_path / "ports.pcap")
    ping(tlab, "VM1", "VM2", 200)
    text = cap.stop()
    print(f"mirror by port: {requests(text, 'VM1', 'VM2')} of 200 echo requests captured")
    assert requests(text, "VM1", "VM2") >= 198, text[-500:]
    hv("mirror", "del", "watch-vm1")

    # VLAN selection: VLAN 1 is copied, VLAN 2 is not.
    hv("mirror", "add", "vlan1", "--bridge", "br-pol", "--vlan", "1", "--output-port", "vm:MON",
       "--allow-isolation-exception")  # fmt: skip
    cap = Capture(tlab, "MON", tmp_path / "vlan.pcap")
    ping(tlab, "VM3", "VM4", 100)
    ping(tlab, "VM1", "VM2", 100)
    text = cap.stop()
    print(
        f"mirror by VLAN 1: {requests(text, 'VM1', 'VM2')}/100 from VLAN 1, {requests(text, 'VM3', 'VM4')}/100 VLAN 2"
    )
    assert requests(text, "VM1", "VM2") >= 99, text[-500:]
    assert requests(text, "VM3", "VM4") == 0
    stats = {m["name"]: m for m in hv("mirror", "list")["mirrors"]}
    assert stats["vlan1"]["owner"] == "hvnet"
    hv("mirror", "del", "vlan1")
