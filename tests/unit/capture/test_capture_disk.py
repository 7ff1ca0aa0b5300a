"""A capture's bound on the disk: its worst case, the free-space floor, df's output read back.

``data/captures/df-*.txt`` are real outputs of ``df -P -k DIR`` (a tmpfs of 8 MiB, the root file system
of this kind of machine, and a tmpfs whose name and mount point hold spaces, a MiB written to it).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from appliance.capture import disk
from appliance.capture.spec import Limits, check_limits
from appliance.core.errors import EXIT_USAGE, UsageError

DATA = Path(__file__).parents[1] / "data" / "captures"


def test_the_default_ring_has_a_worst_case_of_a_gigabyte_and_a_packet_per_file() -> None:
    lim = check_limits(Limits())
    assert disk.worst_case(lim) == 10 * (100_000_000 + 16 + 262144)
    assert disk.describe_bound(lim) == "a ring of 10 files of 100 MB"
    small = check_limits(Limits(rotate_mb=1, rotate_files=3, snaplen=64))
    assert disk.worst_case(small) == 3 * (1_000_000 + 80)
    counted = check_limits(Limits(count=10, snaplen=100))
    assert disk.worst_case(counted) == 24 + 10 * 116  # fewer packets than the ring could hold
    timed = check_limits(Limits(rotate_seconds=1, max_mb=2))
    assert disk.worst_case(timed) == 2_000_000 + 16 + 262144
    assert disk.describe_bound(timed) == "at most 2 MB of files rotated every 1 s"


@pytest.mark.parametrize(
    ("text", "total", "floor"),
    [("10%", 8 * 2**20, 838860), ("0%", 10**9, 0), ("500MB", 1, 500_000_000), ("2gb", 1, 2_000_000_000),
     (" 1.5 GB ", 1, 1_500_000_000)],
)  # fmt: skip
def test_floors_are_a_share_or_a_size(text: str, total: int, floor: int) -> None:
    assert disk.parse_floor(text).bytes_of(total) == floor


@pytest.mark.parametrize("text", ["", "10", "91%", "-1%", "5 TB", "1e3MB", "10%%", "abc"])
def test_floors_that_mean_nothing_are_refused_saying_what_is_allowed(text: str) -> None:
    with pytest.raises(ValueError, match=r"a share of the file system \(0% to 90%\) or a size"):
        disk.parse_floor(text)


def test_df_output_is_read_back() -> None:
    tmpfs = disk.parse_df((DATA / "df-tmpfs.txt").read_text())
    assert tmpfs == disk.Space(free=8192 * 1024, total=8192 * 1024)
    root = disk.parse_df((DATA / "df-root.txt").read_text())
    assert root is not None and root.total > root.free > 0
    spaced = disk.parse_df((DATA / "df-spaced.txt").read_text())
    assert spaced == disk.Space(free=3072 * 1024, total=4096 * 1024)
    for junk in (
        "",
        "Filesystem\n",
        "df: /nowhere: No such file or directory\n",
        "Filesystem x\n/dev/sda1 a b c d% /\n",
    ):
        assert disk.parse_df(junk) is None


def test_statvfs_and_df_agree(tmp_path: Path) -> None:
    out = subprocess.run(disk.df_argv(str(tmp_path)), capture_output=True, text=True, check=True).stdout
    by_df, by_statvfs = disk.parse_df(out), disk.local_space(tmp_path)
    assert by_df is not None and by_df.total == by_statvfs.total
    assert abs(by_df.free - by_statvfs.free) < 64 * 2**20  # others write to this disk meanwhile


def test_a_worst_case_that_does_not_fit_above_the_floor_is_refused_naming_every_figure() -> None:
    space = disk.Space(free=5_000_000_000, total=20_000_000_000)
    figures = disk.check_fits("/var/lib/hvnet/captures", space, check_limits(Limits()), disk.parse_floor("10%"),
                              "capture_free_floor")  # fmt: skip
    assert figures["floor"] == 2_000_000_000 and figures["free_at_start"] == 5_000_000_000
    with pytest.raises(UsageError) as exc:
        disk.check_fits("/var/lib/hvnet/captures", space, check_limits(Limits(rotate_files=40)),
                        disk.parse_floor("10%"), "--free-floor")  # fmt: skip
    assert exc.value.exit_code == EXIT_USAGE
    assert exc.value.message == (
        "the capture could leave /var/lib/hvnet/captures under its free-space floor: its worst case is 4.0 GB "
        "(a ring of 40 files of 100 MB), 5.0 GB is free and the floor is 2.0 GB (10% of 20.0 GB) (--free-floor)"
    )
    assert "--rotate-mb" in (exc.value.hint or "")


def test_a_private_tmpfs_is_measured_as_it_fills(tmp_path: Path) -> None:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root")
    mnt = tmp_path / "mnt"
    mnt.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=8m", "hvnet-test", str(mnt)], check=True)
    try:
        before = disk.local_space(mnt)
        (mnt / "fill").write_bytes(b"\0" * 3 * 2**20)
        after = disk.local_space(mnt)
        assert before.total == 8 * 2**20 and before.free - after.free == 3 * 2**20
    finally:
        subprocess.run(["umount", str(mnt)], check=True)


def test_what_running_captures_may_still_write_is_not_free() -> None:
    space = disk.Space(free=3_500_000_000, total=20_000_000_000)
    lim, floor = check_limits(Limits()), disk.parse_floor("10%")
    ring = disk.worst_case(lim)
    assert disk.check_fits("/c", space, lim, floor, "x", [(ring, ring)])["reserved_by_running"] == 0  # a full ring
    with pytest.raises(UsageError) as exc:
        disk.check_fits("/c", space, lim, floor, "x", [(ring, 100_000_000), (ring, ring)])
    assert ", 3.5 GB is free, 902.6 MB of it still to be written by 2 running captures, and the floor is" in str(
        exc.value
    )
