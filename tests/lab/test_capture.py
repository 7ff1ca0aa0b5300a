"""``hvnet capture`` on the lab: a known number of pings captured, completeness from the switch's
counters, rotation, limits, a capture killed behind hvnet's back, refusals that start nothing.

Completeness slack: the port's counters are read just before tcpdump starts
and just after it stops, so the few frames the port carries in those margins
are offered and not captured (the ratio errs low).  ARP and the guests' own
IPv6 frames (neighbour solicitations, listener reports, router solicitations
of interfaces just up) are on both sides (no filter): they add no slack.  The lab is quiet
between tests, so the ratio is 1 or a hair below it; 0.95 leaves room for a
neighbour solicitation or two.
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
from appliance.lab import Lab
from tests import jsonschemas
from tests.conftest import run_hvnet

VM2_IP = "192.168.0.151"
VM2_VIF = "vif2.0"


@pytest.fixture()
def pcaps(tmp_path: Path) -> Iterator[dict[str, str]]:
    """HVNET_PCAP_DIR for one test; every capture process it started is gone afterwards (killed by pid if not)."""
    env = {"HVNET_PCAP_DIR": str(tmp_path / "captures")}
    try:
        yield env
    finally:
        leftovers = _processes_under(tmp_path)
        for pid in leftovers:
            os.kill(pid, signal.SIGKILL)
        assert not leftovers, f"capture processes left running: {leftovers}"


def _processes_under(path: Path) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit() and int(entry) != os.getpid():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().decode(errors="replace")
                state = Path(f"/proc/{entry}/stat").read_text().rpartition(")")[2].split()[0]
            except (OSError, IndexError):
                continue
            if str(path) in cmdline and state != "Z":
                found.append(int(entry))
    return found


def hv(env: dict[str, str], *args: str, code: int = 0) -> dict:
    res = run_hvnet(*args, "--json", env=env)
    assert res.returncode == code, res.stdout + res.stderr
    return json.loads(res.stdout)


def ping(lab: Lab, count: int, *extra: str) -> None:
    argv = ["ip", "netns", "exec", lab.ns_of("VM1"), "ping", "-q", "-c", str(count), "-i", "0.01", *extra, VM2_IP]
    subprocess.run(argv, check=True, capture_output=True, timeout=60)


def icmp_requests(pcap_dir: Path) -> int:
    total = 0
    for f in sorted(pcap_dir.glob("*.pcap*")):
        out = subprocess.run(["tcpdump", "-nn", "-r", str(f), "icmp[icmptype] == icmp-echo"],
                             capture_output=True, text=True, check=True).stdout  # fmt: skip
        total += len(out.splitlines())
    return total


def test_pings_captured_on_the_vif_and_in_the_guest_with_completeness(lab: Lab, pcaps: dict[str, str]) -> None:
    on_port = hv(pcaps, "capture", "start", "--port", VM2_VIF, "--name", "vif2")
    in_guest = hv(pcaps, "capture", "start", "--guest", "VM2", "--name", "vm2-icmp", "--filter", "icmp")
    limited = run_hvnet("capture", "start", "--port", VM2_VIF, "--name", "five", "--count", "5", env=pcaps)
    assert limited.returncode == 0 and "capture five started on port vif2.0" in limited.stdout, limited.stderr
    assert on_port["state"] == in_guest["state"] == "running"
    jsonschemas.check(documents.CAPTURE, on_port)
    jsonschemas.check(documents.CAPTURE, in_guest)
    ping(lab, 50)
    listed = hv(pcaps, "capture", "list")
    jsonschemas.check(documents.CAPTURE_LIST, listed)
    live = {c["spec"]["name"]: c for c in listed["captures"]}
    assert live["vif2"]["state"] == "running" and live["vif2"]["packets"] >= 100, live["vif2"]
    assert live["five"]["state"] == "finished" and live["five"]["packets"] == 5, live["five"]

    table = run_hvnet("capture", "list", env=pcaps)
    assert table.returncode == 0 and "pkt/s" in table.stdout, table.stdout + table.stderr

    port = hv(pcaps, "capture", "stop", "vif2")
    assert port["state"] == "stopped" and port["tcpdump"]["dropped_by_kernel"] == 0
    jsonschemas.check(documents.CAPTURE_SHOW, port)
    assert icmp_requests(Path(port["directory"])) >= 50
    comp = port["completeness"]
    assert comp["ratio"] is not None and 0.95 <= comp["ratio"] <= 1.0, comp
    assert comp["captured"] >= 100 and comp["captured"] == port["packets"]

    guest = hv(pcaps, "capture", "stop", "vm2-icmp")
    assert guest["state"] == "stopped" and icmp_requests(Path(guest["directory"])) == 50
    assert guest["completeness"]["ratio"] is None and "filter" in guest["completeness"]["reason"]
    five = hv(pcaps, "capture", "show", "five")
    assert five["completeness"]["ratio"] is None and "limit of 5" in five["completeness"]["reason"]
    text = run_hvnet("capture", "stop", "five", env=pcaps)  # already ended: its final figures
    assert text.returncode == 0 and "capture five: finished" in text.stdout, text.stdout + text.stderr
    assert "complete  unknown: the capture stopped at its limit of 5 packets" in text.stdout, text.stdout
    text = run_hvnet("capture", "show", "vif2", env=pcaps)
    assert text.returncode == 0 and f"complete  {comp['ratio']:.1%}" in text.stdout, text.stdout + text.stderr
    meta = json.loads((Path(port["directory"]) / "capture.json").read_text())
    assert meta["counters_before"]["tx_packets"] is not None and meta["stopped"] > meta["started"]
    jsonschemas.check(documents.CAPTURE, meta)
    assert_private(Path(pcaps["HVNET_PCAP_DIR"]))


def assert_private(base: Path) -> None:
    """Directories 0700, files 0600 (the test runs under umask 022): tenants' pcaps are root's alone."""
    assert base.stat().st_mode & 0o777 == 0o700
    for directory in base.iterdir():
        assert directory.stat().st_mode & 0o777 == 0o700, directory
        modes = {f.name: oct(f.stat().st_mode & 0o777) for f in directory.iterdir()}
        assert any(".pcap" in name for name in modes) and set(modes.values()) == {"0o600"}, modes


def test_rotation_by_size_and_by_time_with_a_duration(lab: Lab, pcaps: dict[str, str]) -> None:
    rec = hv(pcaps, "capture", "start", "--port", VM2_VIF, "--name", "rot", "--rotate-mb", "1")
    capped = hv(pcaps, "capture", "start", "--port", VM2_VIF, "--name", "capped", "--rotate-seconds", "1",
                "--max-mb", "1")  # fmt: skip
    assert (
        capped["spec"]["limits"]["max_bytes"] == 1_000_000
        and capped["disk"]["bound"] == "at most 1 MB of files rotated every 1 s"
    )
    timed = hv(pcaps, "capture", "start", "--guest", "VM2", "--name", "timed", "--rotate-seconds", "1",
               "--duration", "2", "--snaplen", "64")  # fmt: skip
    ping(lab, 1200, "-s", "1400", "-i", "0.002")  # about 3.5 MB both ways, over 2.4 s at least
    deadline = time.monotonic() + 10
    while (timed := hv(pcaps, "capture", "show", "timed"))["state"] == "running" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert timed["state"] == "finished" and "duration of 2 s" in timed["reason"], timed
    assert len(timed["files"]) >= 2 and all(f.startswith("timed-") for f in timed["files"]), timed["files"]
    assert timed["bytes"] <= timed["packets"] * (64 + 16) + 24 * len(timed["files"])  # the snaplen held
    rec = hv(pcaps, "capture", "stop", "rot")
    files = sorted(Path(rec["directory"]).glob("rot.pcap*"))
    assert len(files) >= 3, files
    assert all(f.stat().st_size <= 1_000_000 + 1600 for f in files)
    assert rec["files"] == [f.name for f in sorted(files, key=lambda f: (f.stat().st_mtime, f.name))]
    assert icmp_requests(Path(rec["directory"])) == 1200
    capped = hv(pcaps, "capture", "show", "capped")  # stopped by its supervisor at its cap, long before the pings ended
    assert capped["state"] == "finished" and capped["reason"] == "its files reached their cap of 1 MB", capped
    assert 1_000_000 <= capped["bytes"] < 2_500_000, capped  # checked twice a second: ~0.7 MB of pings meanwhile
    assert rec["spec"]["limits"]["rotate_files"] == 10  # --rotate-mb alone: a ring of the default 10 files


def test_a_capture_killed_behind_hvnets_back_is_dead(lab: Lab, pcaps: dict[str, str]) -> None:
    rec = hv(pcaps, "capture", "start", "--port", VM2_VIF, "--name", "victim")
    os.kill(rec["supervisor_pid"], signal.SIGKILL)
    os.kill(rec["tcpdump_pid"], signal.SIGKILL)
    time.sleep(0.2)
    elsewhere = Path(pcaps["HVNET_PCAP_DIR"]).parent / "elsewhere"
    elsewhere.mkdir()
    meta_file = Path(rec["directory"]) / "capture.json"
    meta_file.write_text(json.dumps({**json.loads(meta_file.read_text()), "directory": str(elsewhere)}))
    views = hv(pcaps, "capture", "list")["captures"]
    assert [(v["spec"]["name"], v["state"]) for v in views] == [("victim", "dead")]
    assert "killed behind hvnet's back" in views[0]["reason"]
    stopped = hv(pcaps, "capture", "stop", "victim", code=1)
    assert stopped["state"] == "dead"
    assert stopped["directory"] == rec["directory"] and list(elsewhere.iterdir()) == []  # not the record's word

    # tcpdump alone killed: its supervisor sees it and says so
    rec = hv(pcaps, "capture", "start", "--port", VM2_VIF, "--name", "victim2")
    res = run_hvnet("capture", "delete", "victim2", env=pcaps)
    assert res.returncode == 2 and "is running" in res.stderr, res.stderr
    os.kill(rec["tcpdump_pid"], signal.SIGKILL)
    deadline = time.monotonic() + 5
    while (view := hv(pcaps, "capture", "show", "victim2"))["state"] == "running" and time.monotonic() < deadline:
        time.sleep(0.05)
    assert view["state"] == "dead" and "killed by SIGKILL, not by hvnet" in view["reason"], view
    assert view["completeness"]["ratio"] is None and "no packet counts" in view["completeness"]["reason"]
    assert run_hvnet("capture", "delete", "victim2", env=pcaps).returncode == 0
    assert not Path(rec["directory"]).exists()


def test_bad_input_starts_nothing(lab: Lab, pcaps: dict[str, str], tmp_path: Path) -> None:
    cases = [
        (["--port", "nosuch0"], "no port 'nosuch0'"),
        (["--guest", "VM9"], "no guest 'VM9'"),
        (["--port", VM2_VIF, "--filter", "icmp and and"], "tcpdump rejects the filter"),
        (["--port", VM2_VIF, "--name", "../escape"], "leave hvnet's captures directory"),
        (["--port", VM2_VIF, "--name", "/tmp/abs"], "absolute path"),
        (["--port", VM2_VIF, "--snaplen", "5"], "--snaplen 5 is out of range"),
        (["--port", VM2_VIF, "--duration", "0"], "--duration 0 is out of range"),
        (["--port", VM2_VIF, "--rotate-mb", "1", "--rotate-seconds", "1"], "--rotate-mb and --rotate-seconds"),
        (["--port", VM2_VIF, "--rotate-mb", "10000", "--rotate-files", "20"], "at most 100000 MB"),
        (["--port", VM2_VIF, "--free-floor", "95%"], "--free-floor '95%' is not a free-space floor; allowed: a share"),
    ]
    for extra, message in cases:
        res = run_hvnet("capture", "start", *extra, env=pcaps)
        assert res.returncode == 2 and message in res.stderr, (extra, res.stderr)
        assert "Traceback" not in res.stderr
    base = Path(pcaps["HVNET_PCAP_DIR"])
    assert not base.exists() or not any(base.iterdir())
    assert not (tmp_path / "escape").exists()


def test_capture_on_a_mirrors_output_port(lab: Lab, pcaps: dict[str, str]) -> None:
    """What VM1 sends, mirrored to VM3's VIF, captured there: every copy the switch sent is in the pcap."""
    res = run_hvnet("mirror", "add", "capmirror", "--bridge", "xenbr0", "--src", "vif1.0", "--output-port", "vif3.0",
                    "--allow-isolation-exception")  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    try:
        hv(pcaps, "capture", "start", "--port", "vif3.0", "--name", "mon")
        ping(lab, 50)
        rec = hv(pcaps, "capture", "stop", "mon")
    finally:
        res = run_hvnet("mirror", "del", "capmirror")
        assert res.returncode == 0, res.stdout + res.stderr
    assert icmp_requests(Path(rec["directory"])) == 50
    comp = rec["completeness"]
    assert comp["ratio"] is not None and 0.95 <= comp["ratio"] <= 1.0, comp


@pytest.fixture()
def small_disk(tmp_path: Path) -> Iterator[Path]:
    """A tmpfs of 8 MiB, mounted for one test (and unmounted, once no capture process uses it)."""
    mnt = tmp_path / "small"
    mnt.mkdir(mode=0o700)
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m,mode=0700", "hvnet-captest", str(mnt)], check=True)
    try:
        yield mnt
    finally:
        left = _processes_under(mnt)
        for pid in left:
            os.kill(pid, signal.SIGKILL)
        time.sleep(0.1)
        subprocess.run(["umount", str(mnt)], check=True)
        assert not left, f"capture processes left running: {left}"


def test_a_capture_that_could_fill_the_disk_is_refused_and_one_running_stops_at_the_floor(
    lab: Lab, small_disk: Path
) -> None:
    env = {"HVNET_PCAP_DIR": str(small_disk / "captures")}
    res = run_hvnet("capture", "start", "--port", VM2_VIF, "--name", "big", env=env)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr
    assert (f"the capture could leave {small_disk / 'captures'} under its free-space floor: its worst case is 1.0 GB "
            "(a ring of 10 files of 100 MB), 8.4 MB is free and the floor is 838.9 kB (10% of 8.4 MB) "
            "(capture_free_floor)") in res.stderr, res.stderr  # fmt: skip
    assert list((small_disk / "captures").iterdir()) == []  # nothing started, nothing made

    rec = hv(env, "capture", "start", "--port", VM2_VIF, "--name", "small", "--rotate-mb", "1", "--rotate-files", "2",
             "--free-floor", "4MB")  # fmt: skip
    assert rec["disk"]["worst_case_bytes"] == 2 * (1_000_000 + 16 + 262144) and rec["disk"]["floor_bytes"] == 4_000_000
    res = run_hvnet(
        "capture",
        "start",
        "--port",
        VM2_VIF,
        "--name",
        "second",
        "--rotate-mb",
        "1",
        "--rotate-files",
        "2",
        "--free-floor",
        "4MB",
        env=env,
    )  # fits alone, not beside what "small" may still write
    assert res.returncode == 2 and "still to be written by 1 running capture" in res.stderr, res.stderr
    ping(lab, 20)
    (small_disk / "filler").write_bytes(b"\0" * 4_500_000)  # another writer takes the disk under the floor
    deadline = time.monotonic() + 5
    while (view := hv(env, "capture", "show", "small"))["state"] == "running" and time.monotonic() < deadline:
        time.sleep(0.1)
    assert view["state"] == "stopped" and view["reason"].startswith("stopped: free space fell to "), view
    assert (
        view["reason"].endswith(", under the floor of 4.0 MB (4MB)") and view["disk"]["free_at_stop_bytes"] < 4_000_000
    )
    assert view["tcpdump"]["captured"] >= 40 and icmp_requests(Path(view["directory"])) == 20
    text = run_hvnet("capture", "show", "small", env=env).stdout
    assert "  disk      worst case 2.5 MB (a ring of 2 files of 1 MB); floor 4.0 MB (4MB, --free-floor)" in text, text
