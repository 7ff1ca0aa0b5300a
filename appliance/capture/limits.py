"""A capture's own limits, recorded beside its completeness: its buffer, its drops as tcpdump reports them,
and the CPU tcpdump itself used.

A one-copy capture that keeps a fifth of what it was offered says nothing of why
unless these are kept with it (the 2015 capture study's question: what limits a
capture).  Three places a packet is lost, each its own figure:

- the ring between the kernel and tcpdump (``-B KiB``; tcpdump asks libpcap for
  no size without it, and libpcap on Linux then asks the kernel for 2 MiB): a
  full ring is "packets dropped by kernel";
- the interface: libpcap's count of the interface's own drops (on Linux 1.10,
  its ``rx_missed_errors`` + ``rx_fifo_errors``), which tcpdump prints only when
  it is not 0 -- an absent line is "not reported", never taken for 0;
- tcpdump's own CPU: a capture that cannot empty its ring as fast as it fills
  shows it here (user + system time over its life, % of one core).

Pure: the parsers are unit-tested on tcpdump's real stderr and a real
``/proc/PID/stat``; reading them is :mod:`.supervise`'s.
"""

from __future__ import annotations

from typing import Any, Optional

from appliance.isolation.pcap import parse_tcpdump_counts

BUFFER_KIB_RANGE = (64, 1_048_576)  # tcpdump -B: 64 KiB .. 1 GiB of kernel memory the host gives the ring
DEFAULT_BUFFER_KIB = 2048  # libpcap on Linux asks for 2 MiB when tcpdump is given no -B (pcap-linux.c)
INTERFACE_LINE = "dropped by interface"


def describe_buffer(kib: Optional[int]) -> str:
    """The ring's size as asked: the option given, or libpcap's default said to be one (not a measured size)."""
    if kib is None:
        return f"default ({DEFAULT_BUFFER_KIB} KiB: libpcap's on Linux, tcpdump given no -B)"
    return f"{kib} KiB (-B {kib})"


def describe_snaplen(snaplen: Optional[int]) -> str:
    return "whole packets (tcpdump's default, 262144 B)" if snaplen is None else f"{snaplen} B per packet"


def counts(final: str) -> Optional[dict[str, Optional[int]]]:
    """tcpdump's final counts (its exit lines, see :func:`~.record.final_counts_text`) as a capture records them:
    ``captured``, ``received`` (by filter), ``dropped_by_kernel``, ``dropped_by_interface`` -- the last None
    when tcpdump printed no such line (it prints one only when libpcap's count is not 0, or when libpcap
    counts none at all: not reported, not 0).  None: tcpdump printed no counts (killed)."""
    parsed = parse_tcpdump_counts(final)
    if parsed is None:
        return None
    return {
        "captured": parsed.captured,
        "received": parsed.received,
        "dropped_by_kernel": parsed.dropped_by_kernel,
        "dropped_by_interface": parsed.dropped_by_interface if INTERFACE_LINE in final else None,
    }


def dropped(tcpdump: Optional[dict[str, Any]]) -> Optional[int]:
    """A record's drops, kernel and reported interface ones together (None: no counts)."""
    if not tcpdump or tcpdump.get("dropped_by_kernel") is None:
        return None
    return int(tcpdump["dropped_by_kernel"]) + int(tcpdump.get("dropped_by_interface") or 0)


def parse_stat(text: str) -> Optional[tuple[str, int, int]]:
    """``/proc/PID/stat`` -> (command name, user + system clock ticks, start time in ticks after boot); None when
    it is not one.  The name is between the first '(' and the last ')' (it may hold spaces or parentheses)."""
    head, sep, rest = text.rpartition(")")
    if not sep or "(" not in head:
        return None
    fields = rest.split()  # fields[0] is the state (field 3); utime is field 14, stime 15, starttime 22
    try:
        return head.partition("(")[2], int(fields[11]) + int(fields[12]), int(fields[19])
    except (IndexError, ValueError):
        return None


def cpu_figures(stat: Optional[str], uptime: Optional[str], hz: int, program: str = "tcpdump") -> dict[str, Any]:
    """tcpdump's CPU over its life from its ``/proc/PID/stat`` read as it exited (before it was reaped) and
    ``/proc/uptime`` read then: ``{seconds, lifetime_s, pct_of_core}``, or ``{seconds: None, reason}``."""
    parsed = parse_stat(stat or "")
    if parsed is None:
        return not_measured("its /proc/PID/stat could not be read before it was reaped")
    name, ticks, start = parsed
    if name != program:
        return not_measured(f"the process hvnet started is {name!r}, not {program}")
    try:
        now = float((uptime or "").split()[0])
    except (IndexError, ValueError):
        return not_measured("/proc/uptime could not be read")
    seconds, life = ticks / hz, now - start / hz
    pct = round(100.0 * seconds / life, 1) if life > 0 else None
    return {"seconds": round(seconds, 2), "lifetime_s": round(life, 2), "pct_of_core": pct}


def not_measured(reason: str) -> dict[str, Any]:
    return {"seconds": None, "pct_of_core": None, "reason": f"not measured: {reason}"}


def describe_cpu(cpu: Optional[dict[str, Any]]) -> str:
    if not cpu:
        return "not measured"
    if cpu.get("pct_of_core") is None:
        return str(cpu.get("reason") or "not measured")
    return f"{cpu['pct_of_core']:.1f}% of a core ({cpu['seconds']:.2f} s over {cpu['lifetime_s']:.2f} s)"
