"""Paths under /var/tmp that another user could plant: refused, never written through."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from appliance.core.safedirs import UnsafeDirectory, create_new, make_private
from appliance.isolation.pcap import read_arp

OTHER = 65534  # nobody

root_only = pytest.mark.skipif(os.geteuid() != 0, reason="planting another user's files needs root")


def _shared(tmp_path: Path) -> Path:
    shared = tmp_path / "vartmp"
    shared.mkdir()
    shared.chmod(0o1777)  # like /var/tmp: anyone may create entries
    return shared


def test_a_fresh_tree_is_created(tmp_path: Path) -> None:
    made = make_private(_shared(tmp_path) / "hvnet" / "runs" / "x")
    assert made.is_dir() and (made.stat().st_mode & 0o022) == 0


@root_only
def test_a_directory_planted_by_another_user_is_refused(tmp_path: Path) -> None:
    planted = _shared(tmp_path) / "hvnet"
    planted.mkdir()
    os.chown(planted, OTHER, OTHER)
    with pytest.raises(UnsafeDirectory, match="owned by uid 65534"):
        make_private(planted / "isolation" / "run-1")
    assert not (planted / "isolation").exists()


@root_only
def test_a_symlink_planted_by_another_user_is_refused(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere"
    target.mkdir()
    link = _shared(tmp_path) / "hvnet"
    link.symlink_to(target)
    os.lchown(link, OTHER, OTHER)
    with pytest.raises(UnsafeDirectory, match="symlink"):
        make_private(link / "runs")
    assert list(target.iterdir()) == []


def test_a_directory_others_may_write_is_refused(tmp_path: Path) -> None:
    loose = tmp_path / "loose"
    loose.mkdir()
    loose.chmod(0o777)  # world-writable without the sticky bit: anyone may replace entries
    with pytest.raises(UnsafeDirectory, match="mode 777"):
        make_private(loose / "runs")


def test_captures_are_created_new_and_read_without_following_links(tmp_path: Path) -> None:
    victim = tmp_path / "victim"
    victim.write_bytes(b"")
    planted = tmp_path / "VM1.pcap"
    planted.symlink_to(victim)
    with pytest.raises(OSError):
        create_new(planted)  # never written through
    with pytest.raises(OSError):
        read_arp(planted)  # never read through
    os.close(create_new(tmp_path / "VM2.pcap"))
    with pytest.raises(FileExistsError):
        create_new(tmp_path / "VM2.pcap")


def test_what_hvnet_creates_is_private(tmp_path: Path) -> None:
    """Directories 0700 and files 0600 whatever the umask: pcaps hold tenants' traffic."""
    old = os.umask(0o022)
    try:
        made = make_private(_shared(tmp_path) / "hvnet" / "captures")
        os.close(create_new(made / "VM1.pcap"))
    finally:
        os.umask(old)
    assert (made.stat().st_mode & 0o777, made.parent.stat().st_mode & 0o777) == (0o700, 0o700)
    assert (made / "VM1.pcap").stat().st_mode & 0o777 == 0o600


def test_a_trusted_symlink_is_followed_and_its_target_checked(tmp_path: Path) -> None:
    real = tmp_path / "data"
    real.mkdir(mode=0o700)
    (tmp_path / "link").symlink_to("data")  # made by this user: followed
    assert make_private(tmp_path / "link" / "captures") == tmp_path / "link" / "captures"
    assert (real / "captures").is_dir()
    (tmp_path / "abs").symlink_to(real)
    assert make_private(tmp_path / "abs" / "runs").is_dir() and (real / "runs").is_dir()


@root_only
def test_a_trusted_symlink_into_another_users_directory_is_refused(tmp_path: Path) -> None:
    """The link is root's, but the way to its target passes a directory another user owns: every
    component of the target is checked, not only the last one."""
    other = _shared(tmp_path) / "theirs"
    other.mkdir()
    os.chown(other, OTHER, OTHER)
    inner = other / "inner"
    inner.mkdir(mode=0o755)  # root's own, inside theirs: they can rename it away and plant another
    (tmp_path / "pcaps").symlink_to(inner)
    with pytest.raises(UnsafeDirectory, match="theirs is owned by uid 65534"):
        make_private(tmp_path / "pcaps" / "c1")
    assert not (inner / "c1").exists()


def test_a_symlink_loop_is_refused(tmp_path: Path) -> None:
    (tmp_path / "a").symlink_to("b")
    (tmp_path / "b").symlink_to("a")
    with pytest.raises(UnsafeDirectory, match="symlinks on the way"):
        make_private(tmp_path / "a" / "x")


def test_a_file_on_the_way_is_refused(tmp_path: Path) -> None:
    (tmp_path / "f").write_text("")
    with pytest.raises(UnsafeDirectory, match="not a directory"):
        make_private(tmp_path / "f" / "x")
