"""Captures on a host over SSH: what the host's probe printed, parsed, and the final record made from it.

``data/captures/remote-probe.txt`` is real output of the probe script
(:data:`appliance.capture.remote.PROBE`): one capture still running (asked for
its counts with SIGUSR1), one that tcpdump ended at its packet limit.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from appliance.capture import remote as rc

DATA = Path(__file__).parents[1] / "data" / "captures"
MARK = "hvnet-0123456789abcdef"


def probes() -> dict[str, rc.Probe]:
    return rc.parse_probe((DATA / "remote-probe.txt").read_text(), MARK)


def test_a_running_capture_reports_tcpdumps_fresh_counts() -> None:
    run = probes()["run1"]
    assert run.record is not None and run.record.state == "running" and run.record.spec.port == "lo"
    assert run.tcpdump_alive and run.wrapper_alive and not run.ended
    counts = run.live_counts()
    assert counts is not None and (counts.captured, counts.dropped) == (10, 0)
    assert run.files == [("run1.pcap", 1164)] and run.bytes == 1164


def test_counts_that_did_not_arrive_are_not_shown() -> None:
    run = probes()["run1"]
    run.fresh = False  # the SIGUSR1 answer did not come within the probe's second: an older count is not shown
    assert run.live_counts() is None


def test_an_ended_capture_gets_its_final_record_from_what_the_host_recorded() -> None:
    cnt = probes()["cnt1"]
    assert cnt.ended and cnt.status == 0 and cnt.ended_at == 1795488255.0 and cnt.ended_by is None
    assert not cnt.tcpdump_alive and cnt.counters_after is not None and cnt.counters_after.rx_packets == 9180996
    rec = cnt.record
    assert rec is not None
    from appliance.capture.supervise import counters_of

    final = rc.finished(rec, cnt, counters_of(rec.counters_before), now=2e9)
    assert (final.state, final.reason) == ("finished", "tcpdump stopped at its limit of 4 packets")
    assert final.stopped == 1795488255.0  # when the host recorded the end, not when hvnet looked
    # no "dropped by interface" line in its log: not reported, not 0
    assert final.tcpdump == {"captured": 4, "received": 8, "dropped_by_kernel": 0, "dropped_by_interface": None}
    assert final.tcpdump_cpu is not None and final.tcpdump_cpu["reason"].startswith("not measured: tcpdump ran on")
    assert final.files == ["cnt1.pcap"] and final.counters_after["rx_packets"] == 9180996
    assert final.completeness["ratio"] is None and final.completeness["offered"] == 16  # a filter: unknown


def test_outcomes_in_the_local_supervisors_words() -> None:
    rec = probes()["cnt1"].record
    assert rec is not None
    for ended_by, status, want in (
        ("stop", 0, ("stopped", "stopped by 'hvnet capture stop'")),
        (None, 137, ("dead", "tcpdump was killed by signal 9, not by hvnet")),
        (None, 1, ("dead", "tcpdump exited with status 1: tcpdump: vifX: No such device exists")),
    ):
        probe = rc.Probe("cnt1", ended_by=ended_by, status=status, log="tcpdump: vifX: No such device exists\n")
        assert rc.outcome(rec, probe) == want


def test_hostile_output_is_data() -> None:
    text = f"{MARK} x record\nnot json\n{MARK} x procs alive\n{MARK} x status 12\nbanana\n{MARK} x files\n12 \nq /a/b\n"
    x = rc.parse_probe(text, MARK)["x"]
    assert x.record is None and x.error and x.status == -1 and x.files == []
    assert rc.parse_probe("garbage\nwithout markers\n", MARK) == {}


# -- the walk of hvnet's captures directory on a host (the script run by this machine's sh) -----------------

OTHER = 65534  # nobody


def walk(path: Path) -> tuple[str | None, bool]:
    out = subprocess.run(["sh", "-c", rc.WALK, "hvnet", str(path)], capture_output=True, text=True, check=True)
    return rc.judge_walk(out.stdout, str(path))


def test_the_walk_enters_every_component_and_follows_trusted_links(tmp_path: Path) -> None:
    (tmp_path / "real" / "captures").mkdir(parents=True)
    (tmp_path / "link").symlink_to("real")
    (tmp_path / "abs").symlink_to(tmp_path / "real")
    assert walk(tmp_path / "real" / "captures") == (None, False)
    assert walk(tmp_path / "link" / "captures") == (None, False)
    assert walk(tmp_path / "abs" / ".." / "abs" / "captures") == (None, False)
    assert walk(tmp_path / "link" / "missing" / "deeper") == (None, True)
    (tmp_path / "file").write_text("")
    assert walk(tmp_path / "file" / "x") == (f"{tmp_path / 'file'} is not a directory", False)
    (tmp_path / "loop").symlink_to("loop")
    assert walk(tmp_path / "loop" / "x") == (f"{tmp_path / 'loop'} has too many symlinks on the way", False)


def test_a_directory_others_may_write_is_refused_wherever_it_is_on_the_way(tmp_path: Path) -> None:
    """Every component is judged, not only the last: a loose directory in the middle is refused."""
    loose = tmp_path / "loose"
    (loose / "hvnet" / "captures").mkdir(parents=True)
    loose.chmod(0o777)
    problem, _ = walk(loose / "hvnet" / "captures")
    assert (
        problem == f"{loose} is owned by uid {os.geteuid()} with mode 777: another user could choose where hvnet writes"
    )
    shared = tmp_path / "vartmp"
    shared.mkdir()
    shared.chmod(0o1777)  # sticky: only an entry's owner replaces it
    (shared / "hvnet").mkdir()
    assert walk(shared / "hvnet") == (None, False)


@pytest.mark.skipif(os.geteuid() != 0, reason="planting another user's files needs root")
def test_links_and_directories_of_another_user_are_refused(tmp_path: Path) -> None:
    theirs = tmp_path / "theirs"
    (theirs / "inner").mkdir(parents=True)
    os.chown(theirs, OTHER, OTHER)
    (tmp_path / "pcaps").symlink_to(theirs / "inner")  # root's link, into their directory
    problem, _ = walk(tmp_path / "pcaps" / "c1")
    assert problem is not None and problem.startswith(f"{theirs} is owned by uid {OTHER}")
    (tmp_path / "planted").symlink_to(tmp_path)
    os.lchown(tmp_path / "planted", OTHER, OTHER)
    assert walk(tmp_path / "planted") == (f"{tmp_path / 'planted'} is a symlink owned by uid {OTHER}: refusing to "
                                          "write through it", False)  # fmt: skip


def test_a_walk_that_said_nothing_conclusive_is_refused() -> None:
    for text in ("", "dir 0 755 /\nend\n", "me 0\ndir zero 755 /\nend\n", "me 0\ndir 0 755 /\n"):
        problem, missing = rc.judge_walk(text, "/var/lib/hvnet/captures")
        assert problem is not None and not missing and "could not be checked" in problem, text


def test_the_hosts_watcher_reads_the_free_space_as_hvnet_does() -> None:
    """The wrapper's df reading (its shell, run here on df's real outputs) agrees with parse_df, a file system
    whose name holds spaces included."""
    from appliance.capture.disk import parse_df

    for name in ("df-tmpfs.txt", "df-root.txt", "df-spaced.txt"):
        text = (DATA / name).read_text()
        out = subprocess.run(["sh", "-c", "cat | " + rc.DF_AVAILABLE], input=text, capture_output=True, text=True)
        space = parse_df(text)
        assert space is not None and int(out.stdout) * 1024 == space.free, (name, out.stdout, out.stderr)
