"""A capture's own limits: its buffer option, the drops tcpdump reports, tcpdump's CPU -- parsed from what
tcpdump 4.99.3 / libpcap 1.10.3 printed on this machine (tests/unit/data/captures):

- ``B32-s96-usr1``: ``-B 32 -s 96`` on lo under a UDP flood, SIGUSR1 then SIGINT (kernel drops);
- ``default-buffer``: no -B, the same flood (libpcap's 2 MiB ring, still kernel drops);
- ``ifdrop``: as B32 with ``ifdrop.c`` preloaded -- libpcap's real counts with its interface count set,
  so tcpdump's own code prints its "dropped by interface" line (libpcap counts a NIC's
  rx_missed/rx_fifo errors, which lo and a veth never have);
- ``tcpdump-exited.stat``/``.uptime``: the B32 tcpdump's /proc/PID/stat read after it exited, before it
  was reaped, and /proc/uptime then.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.capture import limits
from appliance.capture.record import final_counts_text
from appliance.capture.spec import CaptureSpec, Limits, check_limits, tcpdump_argv
from appliance.core.errors import UsageError

DATA = Path(__file__).parents[1] / "data" / "captures"
HZ = 100  # this machine's SC_CLK_TCK when the files were taken


def final(name: str) -> str:
    return final_counts_text((DATA / f"{name}.tcpdump.log").read_text())


def test_interface_drops_are_not_reported_when_tcpdump_printed_no_such_line() -> None:
    assert limits.counts(final("default-buffer")) == {
        "captured": 27907, "received": 146800, "dropped_by_kernel": 90986, "dropped_by_interface": None,
    }  # fmt: skip
    got = limits.counts(final("B32-s96-usr1"))  # its SIGUSR1 line is not a final count
    assert got == {"captured": 137604, "received": 585600, "dropped_by_kernel": 310392, "dropped_by_interface": None}
    assert limits.dropped(got) == 310392


def test_interface_drops_are_read_when_tcpdump_printed_them() -> None:
    got = limits.counts(final("ifdrop"))
    assert got == {"captured": 0, "received": 308000, "dropped_by_kernel": 243107, "dropped_by_interface": 1234}
    assert limits.dropped(got) == 243107 + 1234


def test_no_counts_from_a_killed_tcpdump() -> None:
    assert limits.counts(final("killed")) is None
    assert limits.dropped(None) is None


def test_captured_and_kernel_drops_never_exceed_what_the_filter_received() -> None:
    for name in ("default-buffer", "B32-s96-usr1", "ifdrop", "vif2", "five"):
        c = limits.counts(final(name))
        assert c is not None and c["captured"] + c["dropped_by_kernel"] <= c["received"], name


def test_cpu_of_an_exited_tcpdump_from_its_proc_stat() -> None:
    stat, uptime = (DATA / "tcpdump-exited.stat").read_text(), (DATA / "tcpdump-exited.uptime").read_text()
    assert limits.parse_stat(stat) == ("tcpdump", 18 + 54, 4469741)
    cpu = limits.cpu_figures(stat, uptime, HZ)
    assert cpu == {"seconds": 0.72, "lifetime_s": 2.54, "pct_of_core": 28.3}
    assert limits.describe_cpu(cpu) == "28.3% of a core (0.72 s over 2.54 s)"


def test_cpu_not_measured_says_why() -> None:
    stat = (DATA / "tcpdump-exited.stat").read_text()
    assert "not tcpdump" in limits.cpu_figures(stat.replace("(tcpdump)", "(ip)"), "1.0 1.0", HZ)["reason"]
    assert limits.cpu_figures(None, "1.0 1.0", HZ)["pct_of_core"] is None
    assert limits.parse_stat("12 (odd) name) S 1") is None  # too few fields
    assert limits.parse_stat("7 (a) b) S " + " ".join(["0"] * 10) + " 3 4 0 0 0 0 0 0 99") == ("a) b", 7, 99)


def test_buffer_is_a_checked_option_passed_as_minus_b() -> None:
    spec = CaptureSpec("c", "port", "vif1.0", "vif1.0", "vif1.0", limits=check_limits(Limits(buffer_kib=8192)))
    argv = tcpdump_argv("/usr/sbin/tcpdump", spec, Path("/d"))
    assert argv[argv.index("-B") + 1] == "8192"
    assert "-B" not in tcpdump_argv("/usr/sbin/tcpdump", CaptureSpec("c", "port", "p", "p", "p"), Path("/d"))
    for bad in (63, 1_048_577, 0):
        with pytest.raises(UsageError, match="--buffer-kib"):
            check_limits(Limits(buffer_kib=bad))


def test_the_default_buffer_is_said_to_be_libpcaps_not_measured() -> None:
    assert limits.describe_buffer(None).startswith("default (2048 KiB: libpcap's")
    assert limits.describe_buffer(8192) == "8192 KiB (-B 8192)"
