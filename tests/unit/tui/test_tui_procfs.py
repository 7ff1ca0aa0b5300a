"""A remote host's /proc as the Host screen reads it over SSH: parsing and the CPU shares between samples."""

from __future__ import annotations

import pytest

from tui.backend.procfs import parse, shares

STAT = """cpu  100 0 100 800 0 0 0 0 0 0
cpu0 50 0 50 400 0 0 0 0 0 0
cpu1 50 0 50 400 0 0 0 0 0 0
intr 12345
"""
MEMINFO = "MemTotal:       2048000 kB\nMemFree:         100000 kB\nMemAvailable:   1024000 kB\n"


def pid_files(pid: int, name: str, utime: int, stime: int) -> str:
    # proc(5): pid (comm) state ppid pgrp session tty_nr tpgid flags minflt cminflt majflt cmajflt utime stime ...
    return f"{pid} ({name}) S 1 1 1 0 -1 4194560 10 0 0 0 {utime} {stime} 0 0 20 0 3 0\nName:\tx\nVmRSS:\t  5120 kB\n"


def test_parse_reads_cores_memory_and_the_daemon() -> None:
    s = parse(STAT + MEMINFO + pid_files(42, "ovs-vswitchd", 30, 20), 42)
    assert s.cores == ((100, 500), (100, 500))
    assert (s.mem_total, s.mem_available) == (2048000 * 1024, 1024000 * 1024)
    assert s.pid_jiffies == 50 and s.pid_rss == 5120 * 1024


def test_a_command_name_with_spaces_and_parens_is_skipped_whole() -> None:
    s = parse(STAT + pid_files(7, "a) b (c", 3, 4), 7)
    assert s.pid_jiffies == 7


def test_a_gone_daemon_leaves_its_figures_unknown() -> None:
    s = parse(STAT + MEMINFO, 42)
    assert s.pid_jiffies is None and s.pid_rss is None and len(s.cores) == 2


def test_shares_between_two_samples() -> None:
    before = parse(STAT + pid_files(42, "ovs-vswitchd", 0, 0), 42)
    # 100 jiffies per core elapsed: core 0 was busy 25 of them, core 1 75; the daemon used 50 (half a core)
    after_stat = STAT.replace("cpu0 50 0 50 400", "cpu0 75 0 50 475").replace("cpu1 50 0 50 400", "cpu1 125 0 50 425")
    after = parse(after_stat + pid_files(42, "ovs-vswitchd", 30, 20), 42)
    per_core, daemon = shares(before, after)
    assert per_core == [pytest.approx(25.0), pytest.approx(75.0)]
    assert daemon == pytest.approx(50.0)


def test_no_elapsed_time_gives_zero_not_a_division_error() -> None:
    s = parse(STAT, None)
    assert shares(s, s) == ([0.0, 0.0], None)
