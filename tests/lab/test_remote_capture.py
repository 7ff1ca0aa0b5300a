"""``hvnet --host NAME capture``: tcpdump on a lab hypervisor over SSH (no Python there), pcaps in its data directory.

The host (an :class:`SshHost`, its own namespace, OVS and sshd) gets a guest:
a namespace joined to its bridge by a veth, pinging the host's ``vif2.0``.
A capture on ``vif2.0`` counts the pings live (tcpdump's SIGUSR1 counts, read
over SSH), stops with tcpdump's final counts and files, another ends by its
duration on the host's own timer with its completeness from the host's
counters, refusals start nothing, and no capture process outlives the test.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.core import documents
from appliance.lab.sshhost import SshHost
from tests import jsonschemas
from tests.conftest import run_hvnet
from tests.lab.remote_helpers import xen_ssh_host

pytestmark = pytest.mark.skipif(not os.path.exists("/usr/sbin/sshd"), reason="openssh-server (make setup installs it)")

GUEST_NS = "hvnet-tc1g"
HOST_IP, GUEST_IP = "10.93.0.2", "10.93.0.1"


def run(*argv: str) -> None:
    subprocess.run(argv, check=True, capture_output=True, timeout=30)


@pytest.fixture(scope="module")
def tc1(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshHost]:
    """Host tc1 with vif2.0 addressed, and a guest namespace on its bridge (removed afterwards)."""
    with xen_ssh_host("tc1", tmp_path_factory.mktemp("hosts"), 93, vifs=2) as host:
        try:
            run("ip", "netns", "add", GUEST_NS)
            run("ip", "link", "add", "tc1gv", "netns", GUEST_NS, "type", "veth", "peer", "name", "tc1gp",
                "netns", host.netns)  # fmt: skip
            host.switch.vsctl("add-port", "xenbr0", "tc1gp")
            for ns, argv in ((host.netns, ["ip", "link", "set", "tc1gp", "up"]),
                             (host.netns, ["ip", "addr", "add", f"{HOST_IP}/24", "dev", "vif2.0"]),
                             (host.netns, ["ip", "link", "set", "vif2.0", "up"]),
                             (GUEST_NS, ["ip", "addr", "add", f"{GUEST_IP}/24", "dev", "tc1gv"]),
                             (GUEST_NS, ["ip", "link", "set", "tc1gv", "up"])):  # fmt: skip
                run("ip", "netns", "exec", ns, *argv)
            yield host
        finally:
            subprocess.run(["ip", "netns", "del", GUEST_NS], capture_output=True, check=False)
    assert not Path(f"/run/netns/{GUEST_NS}").exists()


@pytest.fixture()
def env(tc1: SshHost, tmp_path: Path) -> Iterator[dict[str, str]]:
    """The client's settings; the pcap directory is the host's path (the lab shares this file system)."""
    pcaps = tmp_path / "remote-pcaps"
    try:
        yield {**tc1.client_env, "HVNET_PCAP_DIR": str(pcaps), "HVNET_STATE_DIR": str(tmp_path / "state"),
               "HVNET_AUDIT_LOG": str(tmp_path / "audit.jsonl")}  # fmt: skip
    finally:
        left = _processes_naming(pcaps)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        assert not left, f"capture processes left running: {left}"


def _processes_naming(path: Path) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        try:
            cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if entry.isdigit() and str(path) in cmdline:
            found.append(int(entry))
    return found


def hv(env: dict[str, str], *args: str, code: int = 0) -> dict:
    res = run_hvnet("--host", "tc1", "capture", *args, "--json", env=env)
    assert res.returncode == code, res.stdout + res.stderr
    return json.loads(res.stdout)


def ping(count: int) -> None:
    run("ip", "netns", "exec", GUEST_NS, "ping", "-q", "-c", str(count), "-i", "0.01", HOST_IP)


def test_remote_capture_counts_live_stops_and_ends_by_its_duration(tc1: SshHost, env: dict[str, str]) -> None:
    pcaps = Path(env["HVNET_PCAP_DIR"])
    started = time.monotonic()
    rec = hv(env, "start", "--port", "vif2.0", "--name", "r1", "--filter", "icmp")
    assert rec["state"] == "running" and rec["directory"] == str(pcaps / "r1"), rec
    assert rec["host"].startswith("ssh:tc1:")
    jsonschemas.check(documents.CAPTURE, rec)
    ping(1)  # the guest's ARP and the first exchange, then a known count
    ping(20)
    views = {c["spec"]["name"]: c for c in hv(env, "list")["captures"]}
    assert views["r1"]["state"] == "running" and views["r1"]["packets"] == 42, views  # tcpdump's own live count
    assert views["r1"]["rate_packets_per_s"] > 0

    stopped = hv(env, "stop", "r1")
    assert stopped["state"] == "stopped" and stopped["packets"] == 42 and stopped["dropped_packets"] == 0, stopped
    jsonschemas.check(documents.CAPTURE_SHOW, stopped)
    assert stopped["tcpdump"]["captured"] == 42 and stopped["files"] == ["r1.pcap0"], stopped  # the default ring's
    assert stopped["completeness"]["ratio"] is None and "filter" in stopped["completeness"]["reason"]
    out = subprocess.run(["tcpdump", "-nn", "-r", str(pcaps / "r1" / "r1.pcap0"), "icmp[icmptype] == icmp-echo"],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    assert len(out.splitlines()) == 21  # written on the host, where the capture ran
    assert {oct(d.stat().st_mode & 0o777) for d in (pcaps, pcaps / "r1")} == {"0o700"}  # made there, under umask 022
    modes = {f.name: oct(f.stat().st_mode & 0o777) for f in (pcaps / "r1").iterdir()}
    assert {"r1.pcap0", "capture.json", "tcpdump.log", "ended-by"} <= set(modes) and set(modes.values()) == {"0o600"}
    assert _processes_naming(pcaps) == []  # nothing of the capture left, here or there

    # ended by its duration, on the host's own timer; completeness from the host's counters
    hv(env, "start", "--port", "vif2.0", "--name", "r2", "--duration", "2")
    ping(50)
    time.sleep(2.5)
    done = {c["spec"]["name"]: c for c in hv(env, "list")["captures"]}["r2"]
    assert done["state"] == "finished" and "duration of 2 s" in done["reason"], done
    comp = done["completeness"]
    assert comp["offered"] >= 100 and comp["ratio"] is not None and 0.95 <= comp["ratio"] <= 1.0, comp
    assert [c["spec"]["name"] for c in hv(env, "list")["captures"]] == ["r1", "r2"]  # its record was completed once
    print(
        f"\nremote captures: r1 {views['r1']['packets']} live, {stopped['packets']} at stop; r2 "
        f"{comp['captured']} of {comp['offered']} ({comp['ratio']:.1%}); {time.monotonic() - started:.1f} s"
    )


def test_remote_refusals_start_nothing(tc1: SshHost, env: dict[str, str]) -> None:
    pcaps = Path(env["HVNET_PCAP_DIR"])
    res = run_hvnet("--host", "tc1", "capture", "start", "--port", "nosuch0", env=env)
    assert res.returncode == 2 and "the switch has no port 'nosuch0'" in res.stderr, res.stderr
    res = run_hvnet("--host", "tc1", "capture", "start", "--port", "vif2.0", "--name", "bad", "--filter",
                    "icmp and [", env=env)  # fmt: skip
    assert res.returncode == 2 and "tcpdump rejects the filter" in res.stderr and "Traceback" not in res.stderr
    assert not (pcaps / "bad").exists()
    hv(env, "start", "--port", "vif2.0", "--name", "r3", "--count", "5")
    res = run_hvnet("--host", "tc1", "capture", "start", "--port", "vif2.0", "--name", "r3", env=env)
    assert res.returncode == 2 and "a capture named 'r3' exists on tc1" in res.stderr, res.stderr
    res = run_hvnet("--host", "tc1", "capture", "delete", "r3", env=env)
    assert res.returncode == 2 and "is running" in res.stderr, res.stderr
    ping(5)  # tcpdump's own limit ends it
    time.sleep(0.5)
    view = hv(env, "show", "r3")
    assert view["state"] == "finished" and "limit of 5 packets" in view["reason"], view
    res = run_hvnet("--host", "tc1", "capture", "delete", "r3", env=env)
    assert res.returncode == 0 and not (pcaps / "r3").exists(), res.stdout + res.stderr


def test_a_capture_whose_shell_was_killed_is_dead_and_stop_ends_its_tcpdump(tc1: SshHost, env: dict[str, str]) -> None:
    rec = hv(env, "start", "--port", "vif2.0", "--name", "k1", "--filter", "icmp")
    os.kill(rec["supervisor_pid"], signal.SIGKILL)  # the shell on the host (the lab's host shares this pid space)
    ping(3)
    view = {c["spec"]["name"]: c for c in hv(env, "list")["captures"]}["k1"]
    assert view["state"] == "dead" and "tcpdump still runs there" in view["reason"], view
    res = run_hvnet("--host", "tc1", "capture", "stop", "k1", "--json", env=env)
    assert res.returncode == 1, res.stdout + res.stderr  # it had died: said, and its tcpdump ended
    done = json.loads(res.stdout)
    assert done["state"] == "dead" and done["tcpdump"]["captured"] == 6 and done["files"] == ["k1.pcap0"], done
    assert _processes_naming(Path(env["HVNET_PCAP_DIR"])) == []


def test_remote_commands_find_a_capture_by_its_name_never_by_its_records_word(tc1: SshHost, env: dict[str, str],
                                                                              tmp_path: Path) -> None:  # fmt: skip
    """A record saying its directory is elsewhere is not believed: delete removes the capture's own directory."""
    pcaps = Path(env["HVNET_PCAP_DIR"])
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "keep").write_text("not hvnet's")
    hv(env, "start", "--port", "vif2.0", "--name", "t1", "--count", "2")
    ping(2)
    meta_file = pcaps / "t1" / "capture.json"
    meta_file.write_text(json.dumps({**json.loads(meta_file.read_text()), "directory": str(victim)}))
    view = hv(env, "show", "t1")
    assert view["state"] == "finished" and view["directory"] == str(pcaps / "t1"), view
    assert not (victim / "capture.json").exists()  # the completed record was saved where the capture is
    res = run_hvnet("--host", "tc1", "capture", "delete", "t1", env=env)
    assert res.returncode == 0 and f"removed {pcaps / 't1'}" in res.stdout, res.stdout + res.stderr
    assert (victim / "keep").exists() and not (pcaps / "t1").exists()


@pytest.fixture()
def host_disk(tc1: SshHost, tmp_path: Path) -> Iterator[tuple[Path, list[str]]]:
    """A tmpfs of 8 MiB in the host's own mount namespace (its sshd's): a small root file system as a dom0's,
    seen by what runs there and not by this machine; the argv prefix that runs a program there."""
    mnt = tmp_path / "host-disk"
    mnt.mkdir(mode=0o700)
    there = ["nsenter", "-t", str(tc1.sshd_pid()), "-m", "--"]
    run(*there, "mount", "-t", "tmpfs", "-o", "size=8m,mode=0700", "hvnet-host-disk", str(mnt))
    try:
        yield mnt, there
    finally:
        left = _processes_naming(mnt)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
        run(*there, "umount", str(mnt))
        assert not left, f"capture processes left running: {left}"


def test_remote_capture_is_refused_above_the_hosts_floor_and_stopped_at_it(
    tc1: SshHost, env: dict[str, str], host_disk: tuple[Path, list[str]]
) -> None:
    mnt, there = host_disk
    env = {**env, "HVNET_PCAP_DIR": str(mnt / "captures")}
    res = run_hvnet("--host", "tc1", "capture", "start", "--port", "vif2.0", "--name", "big", env=env)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert (f"the capture could leave {mnt / 'captures'} on tc1 under its free-space floor: its worst case is 1.0 GB "
            "(a ring of 10 files of 100 MB), 8.4 MB is free and the floor is 838.9 kB (10% of 8.4 MB) "
            "(capture_free_floor)") in res.stderr, res.stderr  # fmt: skip
    listing = subprocess.run([*there, "ls", "-A", str(mnt / "captures")], capture_output=True, text=True, check=True)
    assert listing.stdout == ""  # nothing started, nothing made

    rec = hv(env, "start", "--port", "vif2.0", "--name", "r5", "--rotate-mb", "1", "--rotate-files", "2",
             "--free-floor", "4MB")  # fmt: skip
    assert rec["disk"]["floor_bytes"] == 4_000_000 and rec["disk"]["free_at_start_bytes"] > 8_000_000, rec["disk"]
    ping(5)
    run(*there, "sh", "-c", 'head -c 4500000 /dev/zero >"$1"', "sh", str(mnt / "filler"))  # another writer
    deadline = time.monotonic() + 6
    while (view := hv(env, "show", "r5"))["state"] == "running" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert view["state"] == "stopped" and view["reason"].startswith("stopped: free space fell to "), view
    assert (
        view["reason"].endswith(", under the floor of 4.0 MB (4MB)") and view["disk"]["free_at_stop_bytes"] < 4_000_000
    )
    assert view["tcpdump"]["captured"] >= 10, view


def test_a_remote_capture_rotated_by_time_stops_at_its_cap(tc1: SshHost, env: dict[str, str]) -> None:
    rec = hv(env, "start", "--port", "vif2.0", "--name", "g1", "--rotate-seconds", "1", "--max-mb", "1")
    assert rec["disk"]["bound"] == "at most 1 MB of files rotated every 1 s", rec["disk"]
    run("ip", "netns", "exec", GUEST_NS, "ping", "-q", "-c", "1000", "-i", "0.002", "-s", "1400", HOST_IP)
    deadline = time.monotonic() + 5
    while (view := hv(env, "show", "g1"))["state"] == "running" and time.monotonic() < deadline:
        time.sleep(0.2)
    assert view["state"] == "finished" and view["reason"] == "its files reached their cap of 1 MB", view
    assert 1_000_000 <= view["bytes"] < 3_000_000 and len(view["files"]) >= 1, view  # checked every second there
