"""The probe image booted for real: plain QEMU under TCG, its tools, the channel, and its network.

One guest per module, with its NIC's tap on a Linux bridge shared with a
veth whose peer sits in a network namespace, so that traffic really crosses
the guest's virtio NIC (Open vSwitch tests are the lab's).  Needs root; runs
in about a minute.  Other suites create namespaces and guests on the same
host: run it under ``flock /tmp/hvnet-lab.lock``.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.lab.vm import channel
from appliance.lab.vm.gexec import gexec_argv
from appliance.lab.vm.image import build_image, default_cache_root
from appliance.lab.vm.protocol import EXIT_LOST
from tests.vm import plainqemu

pytestmark = pytest.mark.vm

NS, BRIDGE, TAP, VETH, PEER = "hvi-ns", "hvi-br", "hvi-t0", "hvi-v0", "hvi-v0p"
GUEST_IP, NS_IP = "192.168.77.160", "192.168.77.1"
MAC = "52:54:00:77:00:a0"


def sh(*argv: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, check=check, timeout=60)


def cleanup_network() -> None:
    sh("ip", "netns", "del", NS, check=False)
    for dev in (TAP, VETH, BRIDGE):
        if Path(f"/sys/class/net/{dev}").exists():
            sh("ip", "link", "del", dev, check=False)


def setup_network() -> None:
    cleanup_network()  # what a crashed run may have left
    sh("ip", "link", "add", BRIDGE, "type", "bridge")
    sh("ip", "tuntap", "add", "dev", TAP, "mode", "tap")
    sh("ip", "netns", "add", NS)
    sh("ip", "link", "add", VETH, "type", "veth", "peer", "name", PEER)
    sh("ip", "link", "set", PEER, "netns", NS)
    for dev in (TAP, VETH):
        sh("ip", "link", "set", dev, "master", BRIDGE)
        sh("ip", "link", "set", dev, "up")
    sh("ip", "link", "set", BRIDGE, "up")
    sh("ip", "netns", "exec", NS, "ip", "addr", "add", f"{NS_IP}/24", "dev", PEER)
    sh("ip", "netns", "exec", NS, "ip", "link", "set", PEER, "up")
    sh("ip", "netns", "exec", NS, "ip", "link", "set", "lo", "up")
    sh("ip", "netns", "exec", NS, "ethtool", "-K", PEER, "tx", "off")


@pytest.fixture(scope="module")
def image():
    if shutil.which("qemu-system-x86_64") is None:
        pytest.skip("qemu-system-x86_64 is not installed (package qemu-system-x86; .ci/setup-host installs it)")
    if os.geteuid() != 0:
        pytest.fail("probe guest tests need root (tap, bridge, namespace)")
    return build_image(default_cache_root())


@pytest.fixture(scope="module")
def guest(image, tmp_path_factory: pytest.TempPathFactory) -> Iterator[plainqemu.PlainGuest]:
    run_dir = tmp_path_factory.mktemp("probe")
    g = None
    try:
        setup_network()
        g = plainqemu.boot(image, run_dir, ip=f"{GUEST_IP}/24", tap=TAP, mac=MAC)
        print(f"\nprobe guest: QEMU start -> agent hello {g.ready_s:.2f} s (guest uptime {g.boot_s:.2f} s)")
        yield g
    finally:
        if g is not None:
            if os.environ.get("HVNET_VM_CONSOLE"):
                print(g.console_text())
            plainqemu.stop(g)
        cleanup_network()


@pytest.fixture()
def client(guest: plainqemu.PlainGuest) -> Iterator[channel.GuestClient]:
    with channel.GuestClient(guest.sock) as c:
        c.wait_ready(10)
        yield c


def test_image_is_cached_and_small(image) -> None:
    again = build_image(default_cache_root())
    assert not again.built and again.digest == image.digest and again.seconds < 10
    assert again.manifest["modules"][-2:] == ["virtio_net", "virtio_console"]
    print(f"\nprobe image {image.digest[:12]}: kernel {image.kernel.stat().st_size / 1e6:.1f} MB, "
          f"initrd {image.initrd.stat().st_size / 1e6:.1f} MB; lookup {again.seconds:.2f} s")  # fmt: skip
    assert image.initrd.stat().st_size < 64e6


def test_boots_quickly(guest: plainqemu.PlainGuest) -> None:
    assert guest.ready_s < 60, guest.console_text()
    assert "hvnet-probe: ip 192.168.77.160/24 port /dev/vport" in guest.console_text()


def test_tools_run(client: channel.GuestClient) -> None:
    link = client.run(["ip", "-o", "link", "show", "eth0"])
    assert link.returncode == 0 and MAC in link.stdout and "UP" in link.stdout
    assert "2.7.0" in client.run(["netperf", "-V"]).stdout
    assert "tcpdump version" in client.run(["tcpdump", "--version"]).stdout
    assert "ARPing" in client.run(["arping", "--help"]).stdout
    features = client.run(["ethtool", "-k", "eth0"]).stdout
    assert "tx-checksumming: off" in features  # init turned TX checksum offload off
    assert client.run(["netserver", "-h"]).returncode in (0, 1)


def test_no_output_lost(client: channel.GuestClient) -> None:
    start = time.monotonic()
    r = client.run(["seq", "1", "200000"], timeout=120)
    assert r.returncode == 0
    assert r.stdout == "".join(f"{i}\n" for i in range(1, 200001))
    print(f"\n1.3 MB of output from the guest in {time.monotonic() - start:.2f} s")


def test_concurrent_processes(client: channel.GuestClient) -> None:
    start = time.monotonic()
    procs = [client.spawn(["sh", "-c", f"sleep 2; echo {i}"]) for i in range(20)]
    assert [p.wait(60) for p in procs] == [0] * 20
    assert [p.stdout for p in procs] == [f"{i}\n".encode() for i in range(20)]
    assert time.monotonic() - start < 15, "20 concurrent 2 s sleeps did not overlap"


def test_exit_codes_signals_stdin(client: channel.GuestClient) -> None:
    assert client.run(["sh", "-c", "exit 5"]).returncode == 5
    assert client.run(["no-such-program"]).returncode == 127
    assert client.run(["tr", "a-z", "A-Z"], input="probe").stdout == "PROBE"
    p = client.spawn(["sleep", "100"])
    time.sleep(0.3)
    p.terminate()
    assert p.wait(10) == -signal.SIGTERM
    assert p.cpu_s >= 0


def test_gexec(guest: plainqemu.PlainGuest) -> None:
    sock = str(guest.sock)
    env = {**os.environ, "HVNET_GEXEC_CPU": "1"}
    r = subprocess.run(gexec_argv(sock, ["sh", "-c", "echo out; echo err >&2; exit 3"]),
                       capture_output=True, text=True, env=env, timeout=60, stdin=subprocess.DEVNULL)  # fmt: skip
    assert r.returncode == 3 and r.stdout == "out\n"
    assert r.stderr.splitlines()[0] == "err" and r.stderr.splitlines()[-1].startswith("hvnet-guest-cpu ")
    # Output streams: the first line arrives while the process still runs.
    p = subprocess.Popen(gexec_argv(sock, ["sh", "-c", "echo first; sleep 3; echo second"]),
                         stdout=subprocess.PIPE, stdin=subprocess.DEVNULL, text=True)  # fmt: skip
    start = time.monotonic()
    assert p.stdout is not None and p.stdout.readline() == "first\n"
    assert time.monotonic() - start < 2.5
    assert p.stdout.read() == "second\n" and p.wait(10) == 0
    # SIGTERM to gexec reaches the guest process: 128 + 15.
    p = subprocess.Popen(gexec_argv(sock, ["sleep", "100"]), stdin=subprocess.DEVNULL)
    time.sleep(1)
    p.send_signal(signal.SIGTERM)
    assert p.wait(20) == 143
    r = subprocess.run(gexec_argv(sock, ["wc", "-c"]), input="x" * 100000, capture_output=True, text=True)
    assert r.stdout.strip() == "100000"


def test_network_through_the_guest_nic(guest: plainqemu.PlainGuest, client: channel.GuestClient) -> None:
    sock = str(guest.sock)
    ping = client.run(["ping", "-c", "2", "-W", "5", NS_IP], timeout=30)
    assert ping.returncode == 0, ping.stdout + ping.stderr
    # pcap streamed out of the guest through gexec while the namespace pings it.
    cap = subprocess.Popen(gexec_argv(sock, ["tcpdump", "-i", "eth0", "-n", "-U", "-w", "-", "-c", "4", "icmp"]),
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, stdin=subprocess.DEVNULL)  # fmt: skip
    time.sleep(2)
    sh("ip", "netns", "exec", NS, "ping", "-c", "3", "-i", "0.3", "-W", "5", GUEST_IP)
    out, err = cap.communicate(timeout=30)
    assert cap.returncode == 0, err
    assert out[:4] in (b"\xd4\xc3\xb2\xa1", b"\xa1\xb2\xc3\xd4") and len(out) > 24 + 4 * 16, err
    # netserver in the guest (through gexec, as the netperf runner will start it), netperf from the namespace.
    server = subprocess.Popen(gexec_argv(sock, ["netserver", "-D", "-4"]), stdin=subprocess.DEVNULL,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)  # fmt: skip
    try:
        time.sleep(1.5)
        for test in ("TCP_RR", "TCP_STREAM"):
            r = sh("ip", "netns", "exec", NS, "netperf", "-H", GUEST_IP, "-t", test, "-l", "2", "-P", "0",
                   "--", "-k", "THROUGHPUT,THROUGHPUT_UNITS", check=False)  # fmt: skip
            assert r.returncode == 0, r.stdout + r.stderr
            value = float(r.stdout.split("THROUGHPUT=")[1].split()[0])
            print(
                f"\n{test} namespace -> probe guest (TCG): {value:g} {r.stdout.split('THROUGHPUT_UNITS=')[1].split()[0]}"
            )
            assert value > 0
    finally:
        server.send_signal(signal.SIGTERM)
        server.wait(20)
    assert server.returncode == 143


def test_mux_restart_reaches_the_same_guest(guest: plainqemu.PlainGuest) -> None:
    """A new multiplexer on a running guest: the agent saw its host end close and open again."""
    with channel.GuestClient(guest.sock) as c:
        c.wait_ready(10)
        before = c.guest["instance"]
        survivor = c.spawn(["sleep", "100"])
        assert channel.stop_mux(guest.mux_pidfile)
        assert survivor.wait(10) == EXIT_LOST  # its client connection went with the old multiplexer
    channel.start_mux(guest.chan, guest.sock, guest.mux_pidfile, guest.run_dir / f"{guest.name}.mux.log")
    with channel.GuestClient(guest.sock) as c:
        assert c.wait_ready(30) < 30
        assert c.guest["instance"] == before, "the agent restarted instead of waiting for the host"
        assert c.run(["echo", "again"]).stdout == "again\n"
        # The new multiplexer's reset killed what ran for the old one.
        assert c.run(["sh", "-c", "ps | grep -c '[s]leep 100'"]).stdout.strip() == "0"
