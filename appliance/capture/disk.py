"""How much disk a capture may take, and the free space it must leave.

On a XenServer dom0 the root file system is small and xapi needs it, so a
capture never runs unbounded: every one has a worst case in bytes (its ring
of files, or the cap of a time-rotated one, see :func:`worst_case`), it is
refused when that worst case does not fit above the *free-space floor*
(``[data] capture_free_floor``: a share of the file system or a size), and
its supervisor stops it when free space falls under the floor all the same
(other writers share the disk).  Free space is what a user other than root
may still write (statvfs's ``f_bavail``, df's "Available"): root's reserve
is not counted, it is left to root's daemons.

Pure where it can be: the parsers and the arithmetic are unit-tested on
real ``df -P`` output; :func:`local_space` is statvfs.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.capture.spec import SNAPLEN_RANGE, Limits
from appliance.core.config import Floor, parse_floor
from appliance.core.errors import UsageError
from appliance.core.render import si

__all__ = ["Floor", "Space", "check_fits", "local_space", "parse_df", "parse_floor", "worst_case"]
RECORD_OVERHEAD = 16  # a pcap record header before each packet's bytes
FILE_HEADER = 24  # a pcap file's header


@dataclass(frozen=True)
class Space:
    """A file system's size and what may still be written on it, in bytes."""

    free: int
    total: int


def local_space(path: Path) -> Space:
    """statvfs of the file system holding ``path``."""
    st = os.statvfs(path)
    return Space(free=st.f_bavail * st.f_frsize, total=st.f_blocks * st.f_frsize)


# "Filesystem 1024-blocks Used Available Capacity Mounted on", then one line per file system (-P: never
# wrapped); a file system's name may hold spaces, so the figures are found from the capacity backwards.
_DF_LINE = re.compile(r"\s([0-9]+)\s+([0-9]+)\s+([0-9]+)\s+([0-9]+)%\s")


def parse_df(text: str) -> Space | None:
    """``df -P -k DIR``'s output -> the :class:`Space` of DIR's file system (None: not df's output)."""
    lines = [line for line in text.splitlines() if line.strip()]
    if len(lines) < 2 or not lines[0].startswith("Filesystem"):
        return None
    m = _DF_LINE.search(lines[1] + " ")
    if m is None:
        return None
    total, _used, available = (int(m.group(i)) * 1024 for i in (1, 2, 3))
    return Space(free=available, total=total)


def df_argv(directory: str) -> list[str]:
    return ["df", "-P", "-k", "--", directory]


def worst_case(limits: Limits) -> int:
    """The most bytes the capture's files can hold at once (``limits`` as :func:`~.spec.check_limits` made them).

    A ring of N files of C MB: tcpdump starts a new file once one holds more than C million bytes,
    so each may exceed it by one packet.  A time-rotated capture: its cap (its supervisor stops it
    there).  A packet limit bounds either further.
    """
    packet = RECORD_OVERHEAD + (limits.snaplen or SNAPLEN_RANGE[1])
    if limits.rotate_mb is not None and limits.rotate_files is not None:
        bound = limits.rotate_files * (limits.rotate_mb * 1_000_000 + packet)
    else:
        bound = (limits.max_mb or 0) * 1_000_000 + packet
    if limits.count is not None:
        bound = min(bound, FILE_HEADER + limits.count * packet)
    return bound


def describe_bound(limits: Limits) -> str:
    """What bounds the capture's files, in the options' words."""
    if limits.rotate_mb is not None and limits.rotate_files is not None:
        text = f"a ring of {limits.rotate_files} files of {limits.rotate_mb} MB"
    else:
        text = f"at most {limits.max_mb} MB of files rotated every {limits.rotate_seconds} s"
    if limits.count is not None:
        text += f", {limits.count} packets"
    return text


def check_fits(
    where: str, space: Space, limits: Limits, floor: Floor, source: str, running: Sequence[tuple[int, int]] = ()
) -> dict[str, Any]:
    """The capture's disk figures for its record, or a :class:`UsageError` when its worst case would take
    free space under the floor (nothing has been created yet).

    ``running``: (worst case, bytes written so far) of the captures still running on that file system;
    what they may still write is not free for this one."""
    worst, floor_bytes = worst_case(limits), floor.bytes_of(space.total)
    reserved = sum(max(0, bound - written) for bound, written in running)
    figures = {
        "worst_case": worst, "bound": describe_bound(limits), "floor": floor_bytes, "floor_setting": floor.text,
        "floor_source": source, "free_at_start": space.free, "filesystem_size": space.total,
        "reserved_by_running": reserved,
    }  # fmt: skip
    if space.free - reserved - worst < floor_bytes:
        others = ""
        if reserved:
            n = len(running)
            others = f", {si(reserved, 'B')} of it still to be written by {n} running capture{'s' * (n != 1)},"
        raise UsageError(
            f"the capture could leave {where} under its free-space floor: its worst case is {si(worst, 'B')} "
            f"({describe_bound(limits)}), {si(space.free, 'B')} is free{others} and the floor is "
            f"{floor.describe(space.total)} ({source})",
            hint="a smaller ring (--rotate-mb, --rotate-files), --count, or a lower floor (--free-floor, "
            "$HVNET_CAPTURE_FREE_FLOOR, hvnet.conf's [data] capture_free_floor)",
        )
    return figures


def running_bounds(views: list[Any]) -> list[tuple[int, int]]:
    """(worst case, bytes so far) of the live captures among ``views`` (:class:`~.view.CaptureView`) that
    recorded a worst case (one started by an hvnet that bounded none is not counted: it has none)."""
    return [
        (v.record.disk["worst_case"], v.bytes)
        for v in views
        if v.state in ("starting", "running") and v.record.disk and "worst_case" in v.record.disk
    ]


def under_floor_reason(free: int, disk: dict[str, Any]) -> str:
    """Why a capture was stopped when free space fell under its floor (its record's words)."""
    floor = si(disk["floor"], "B")
    return f"stopped: free space fell to {si(free, 'B')}, under the floor of {floor} ({disk['floor_setting']})"
