"""Captures without a switch: argument checks, tcpdump's arguments, the record, the completeness
arithmetic -- on what a real capture wrote (tests/unit/data/captures: the lab test's tcpdump logs,
record and pcap)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from appliance.capture import record as rec_mod
from appliance.capture.completeness import completeness, offered_between
from appliance.capture.record import CaptureRecord, count_packets, final_counts_text
from appliance.capture.spec import (
    CaptureSpec,
    Limits,
    check_filter_text,
    check_limits,
    check_name,
    default_name,
    filter_check_argv,
    pcap_files,
    tcpdump_argv,
)
from appliance.capture.supervise import counters_of
from appliance.core.errors import EXIT_USAGE, HvnetError, UsageError
from appliance.isolation.pcap import parse_tcpdump_counts
from appliance.switch.counters import Counters

DATA = Path(__file__).parents[1] / "data" / "captures"


def log(name: str) -> str:
    return (DATA / f"{name}.tcpdump.log").read_text()


# -- names ---------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["vif2", "VM2-icmp.1", "a", "x" * 64, "2026-11-23_run"])
def test_names_that_are_one_safe_component_are_kept(name: str) -> None:
    assert check_name(name) == name


@pytest.mark.parametrize(
    ("name", "why"),
    [
        ("..", "leave hvnet's captures directory"),
        ("../x", "leave hvnet's captures directory"),
        ("a/../../b", "leave hvnet's captures directory"),
        ("/etc/cron.d/x", "absolute path"),
        ("a\0b", "NUL"),
        ("a/b", "no '/'"),
        (".hidden", "starting with a letter or digit"),
        ("", "not allowed"),
        ("x" * 65, "1-64"),
        ("sp ace", "not allowed"),
    ],
)
def test_names_that_could_escape_are_refused(name: str, why: str) -> None:
    with pytest.raises(UsageError, match=why) as exc:
        check_name(name)
    assert exc.value.exit_code == EXIT_USAGE


def test_a_default_name_is_safe_whatever_the_target() -> None:
    assert check_name(default_name("vif2.0", "20261123-204500")) == "vif2.0-20261123-204500"
    assert check_name(default_name("../../x y", "T"))  # made safe, not refused


# -- limits and filters -----------------------------------------------------------------


@pytest.mark.parametrize(
    ("limits", "why"),
    [
        (Limits(snaplen=13), "--snaplen 13 is out of range: 14..262144"),
        (Limits(snaplen=262145), "--snaplen"),
        (Limits(duration=0), "--duration 0 is out of range"),
        (Limits(duration=8 * 86400), "--duration"),
        (Limits(count=0), "--count 0"),
        (Limits(rotate_mb=0), "--rotate-mb 0"),
        (Limits(rotate_mb=1, rotate_files=1), "--rotate-files 1"),
        (Limits(rotate_seconds=0), "--rotate-seconds 0"),
        (Limits(rotate_mb=100_001), "--rotate-mb 100001 is out of range: 1..10000"),
        (Limits(rotate_files=10_000), "--rotate-files 10000 is out of range: 2..1000"),
        (Limits(rotate_mb=10_000, rotate_files=11), "holds 110000 MB: at most 100000 MB"),
        (Limits(rotate_mb=1, rotate_seconds=60), "--rotate-mb and --rotate-seconds together"),
        (Limits(max_mb=10), "--max-mb bounds a capture rotated by time"),
        (Limits(rotate_seconds=60, max_mb=0), "--max-mb 0 is out of range"),
    ],
)
def test_limits_out_of_range_are_refused(limits: Limits, why: str) -> None:
    with pytest.raises(UsageError, match=why.replace("..", r"\.\.")):
        check_limits(limits)


def test_limits_in_range_are_kept() -> None:
    ok = Limits(snaplen=96, duration=1, count=10**9, rotate_mb=1, rotate_files=2)
    assert check_limits(ok) == ok
    timed = Limits(rotate_seconds=86400, rotate_files=3, max_mb=5)
    assert check_limits(timed) == timed


def test_every_capture_is_bounded_by_default() -> None:
    """No limit given: a ring of 10 files of 100 MB; half a ring given: the other half's default; rotated by
    time: a cap its supervisor enforces."""
    assert check_limits(Limits()) == Limits(rotate_mb=100, rotate_files=10)
    assert check_limits(Limits(count=5, duration=3)) == Limits(count=5, duration=3, rotate_mb=100, rotate_files=10)
    assert check_limits(Limits(rotate_mb=1)) == Limits(rotate_mb=1, rotate_files=10)
    assert check_limits(Limits(rotate_files=4)) == Limits(rotate_mb=100, rotate_files=4)
    assert check_limits(Limits(rotate_seconds=1)) == Limits(rotate_seconds=1, max_mb=1000)
    argv = tcpdump_argv("tcpdump", CaptureSpec("c", "port", "p", "p", "p", None, check_limits(Limits())), Path("/d"))
    assert argv[argv.index("-C") + 1] == "100" and argv[argv.index("-W") + 1] == "10"


def test_filter_text_is_one_argument_and_tcpdump_judges_it() -> None:
    assert check_filter_text("  ") is None and check_filter_text(None) is None
    assert check_filter_text(" icmp and host 10.0.0.1 ") == "icmp and host 10.0.0.1"
    for bad in ("icmp\0", "icmp\nor arp", "x" * 4097):
        with pytest.raises(UsageError):
            check_filter_text(bad)
    # "--" keeps a filter that starts with "-" from being read as an option
    assert filter_check_argv("/usr/bin/tcpdump", "-x") == ["/usr/bin/tcpdump", "-y", "EN10MB", "-d", "--", "-x"]


def test_tcpdump_arguments_carry_every_limit(tmp_path: Path) -> None:
    lim = Limits(snaplen=128, count=50, rotate_mb=1, rotate_files=3)
    argv = tcpdump_argv("/usr/bin/tcpdump", CaptureSpec("c1", "port", "vif2.0", "vif2.0", "vif2.0", "icmp", lim),
                        tmp_path)  # fmt: skip
    assert argv == ["/usr/bin/tcpdump", "-i", "vif2.0", "-n", "-U", "--immediate-mode", "-Z", "root",
                    "-s", "128", "-c", "50", "-C", "1", "-W", "3", "-w", str(tmp_path / "c1.pcap"), "--", "icmp"]  # fmt: skip
    timed = tcpdump_argv("tcpdump", CaptureSpec("c2", "guest", "VM2", "vif2.0", "eth0", None,
                                                 Limits(rotate_seconds=60)), tmp_path)  # fmt: skip
    assert timed[-2:] == ["-w", str(tmp_path / "c2-%Y%m%d-%H%M%S.pcap")] and "--" not in timed


# -- the record ------------------------------------------------------------------------------


def test_a_real_record_round_trips(tmp_path: Path) -> None:
    data = json.loads((DATA / "vif2.capture.json").read_text())
    rec = CaptureRecord.from_json(data)
    assert rec.spec.port == "vif2.0" and rec.spec.limits == Limits() and rec.state == "stopped"
    rec.directory = str(tmp_path)
    rec_mod.save(rec)
    again = rec_mod.load(tmp_path)
    assert again.to_json() == rec.to_json()
    assert [p.name for p in tmp_path.iterdir()] == ["capture.json"]  # the temporary file was renamed


def test_a_record_behind_a_link_or_broken_is_refused(tmp_path: Path) -> None:
    os.symlink(DATA / "vif2.capture.json", tmp_path / "capture.json")
    with pytest.raises(HvnetError, match="unreadable capture record"):
        rec_mod.load(tmp_path)
    (tmp_path / "capture.json").unlink()
    (tmp_path / "capture.json").write_text('{"spec": {}}')
    with pytest.raises(HvnetError, match="unreadable"):
        rec_mod.load(tmp_path)
    with pytest.raises(HvnetError, match="no such capture record"):
        rec_mod.load(tmp_path / "nowhere")


def test_process_checks_never_take_another_program_for_a_capture(tmp_path: Path) -> None:
    assert rec_mod.process_alive(os.getpid(), "pytest") or rec_mod.process_alive(os.getpid(), "python")
    assert not rec_mod.process_alive(os.getpid(), str(tmp_path / "not-in-my-cmdline"))
    assert not rec_mod.signal_process(os.getpid(), str(tmp_path / "not-in-my-cmdline"))
    assert not rec_mod.process_alive(None, "x")


def test_packets_counted_from_a_real_pcap_and_a_truncated_one(tmp_path: Path) -> None:
    assert count_packets([DATA / "five.pcap"]) == 5
    data = (DATA / "five.pcap").read_bytes()
    (tmp_path / "cut.pcap").write_bytes(data[:-10])  # tcpdump in the middle of writing its last packet
    (tmp_path / "cut.pcap1").write_bytes(data[:24])  # a new file with its header only
    (tmp_path / "cut.pcap2").write_bytes(b"")  # not even a header yet
    spec = CaptureSpec("cut", "port", "p", "p", "p")
    assert count_packets(pcap_files(tmp_path, spec)) == 4
    (tmp_path / "cut.pcap3").write_bytes(b"not a pcap file at all..")
    assert count_packets(pcap_files(tmp_path, spec)) is None


def test_pcap_files_are_in_the_order_written(tmp_path: Path) -> None:
    for name in ["r.pcap", "r.pcap1", "r.pcap10", "r.pcap2", "capture.json", "tcpdump.log", "other.pcap"]:
        (tmp_path / name).write_bytes(b"")
        os.utime(tmp_path / name, (1000, 1000))  # written within one clock tick: numbers decide
    spec = CaptureSpec("r", "port", "p", "p", "p")
    assert [p.name for p in pcap_files(tmp_path, spec)] == ["r.pcap", "r.pcap1", "r.pcap2", "r.pcap10"]
    os.utime(tmp_path / "r.pcap", (1001, 1001))  # a ring (-W) wrote over its first file last
    assert [p.name for p in pcap_files(tmp_path, spec)][-1] == "r.pcap"


# -- tcpdump's counts and the completeness ---------------------------------------------------


def test_final_counts_ignore_the_live_ones() -> None:
    final = parse_tcpdump_counts(final_counts_text(log("vif2")))
    assert final is not None and (final.captured, final.received, final.dropped) == (113, 113, 0)
    live = parse_tcpdump_counts(log("killed"))  # what 'list' reads while it runs
    assert live is not None and live.captured == 111
    assert parse_tcpdump_counts(final_counts_text(log("killed"))) is None  # killed: no final counts


def _real_counters() -> tuple[Counters | None, Counters | None]:
    data = json.loads((DATA / "vif2.capture.json").read_text())
    return counters_of(data["counters_before"]), counters_of(data["counters_after"])


def test_completeness_of_the_real_capture_is_captured_over_offered() -> None:
    before, after = _real_counters()
    counts = parse_tcpdump_counts(final_counts_text(log("vif2")))
    c = completeness(counts, before, after, bpf=None, count_limit=None)
    # offered: (57 + 61) - (2 + 3) frames the VIF received and sent while the capture ran
    assert (c.captured, c.offered, c.dropped, c.ratio) == (113, 113, 0, 1.0)
    assert c.describe() == "100.0% (113 of 113 offered)"


def test_completeness_shows_loss_and_drops() -> None:
    before, after = _real_counters()
    counts = parse_tcpdump_counts("90 packets captured\n113 packets received by filter\n23 packets dropped by kernel\n")
    c = completeness(counts, before, after, bpf=None, count_limit=None)
    assert c.ratio == pytest.approx(90 / 113) and c.dropped == 23
    assert c.describe() == "79.6% (90 of 113 offered, 23 dropped by the capture)"


def test_completeness_is_unknown_with_the_reason_rather_than_a_guess() -> None:
    before, after = _real_counters()
    icmp = parse_tcpdump_counts(final_counts_text(log("vm2-icmp")))
    c = completeness(icmp, before, after, bpf="icmp", count_limit=None)
    assert c.ratio is None and c.offered == 113 and "filter 'icmp' keeps a subset" in c.reason
    five = parse_tcpdump_counts(final_counts_text(log("five")))
    c = completeness(five, before, after, bpf=None, count_limit=5)
    assert c.ratio is None and "limit of 5 packets" in c.reason
    c = completeness(None, before, after, bpf=None, count_limit=None)
    assert c.ratio is None and "no packet counts" in c.reason and c.describe().startswith("unknown: ")
    c = completeness(five, before, None, bpf=None, count_limit=None)
    assert c.ratio is None and "could not be read after" in c.reason
    c = completeness(five, after, before, bpf=None, count_limit=None)
    assert c.ratio is None and "went backwards" in c.reason
    c = completeness(five, before, before, bpf=None, count_limit=None)
    assert c.ratio is None and c.offered == 0 and "no packets" in c.reason


def test_offered_needs_packet_counters_on_both_sides() -> None:
    before, after = _real_counters()
    assert offered_between(before, after) == (113, None)
    assert offered_between(Counters(rx_packets=1, source="kernel"), after)[0] is None
