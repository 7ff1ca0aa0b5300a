"""Directories for data hvnet writes as root, wherever the operator points them.

Suite runs and pcaps live under ``/var/lib/hvnet`` by default, but a setting
may move them under a shared place such as ``/var/tmp``, writable by every
user: one who creates the directory first (or a symlink of that name) would
choose where root writes pcaps and results.  So every component of such a
path is checked before use: it must
be owned by root or by this user and writable by no one else, except a
world-writable directory with the sticky bit (``/tmp``, ``/var/tmp``), whose
entries only their owners can replace -- and those entries are checked in
turn.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

from .errors import HvnetError

_HINT = (
    "remove it, or point hvnet elsewhere ($HVNET_RUNS_DIR, $HVNET_CAPTURES_DIR, $HVNET_PCAP_DIR or hvnet.conf's [data])"
)


class UnsafeDirectory(HvnetError):
    """A directory hvnet would write into is controlled by another user."""


def make_private(path: Path, mode: int = 0o755) -> Path:
    """Create ``path`` (and missing parents) and check that no other user controls any part of it."""
    path = Path(os.path.abspath(path))
    current = Path(path.anchor)
    for part in path.parts[1:]:
        current = current / part
        try:
            os.mkdir(current, mode)
        except FileExistsError:
            pass
        except OSError as exc:
            raise HvnetError(f"cannot create {current}: {exc.strerror or exc}") from None
        _check(current)
    return path


def _check(directory: Path) -> None:
    me = os.geteuid()
    link = os.lstat(directory)
    if stat.S_ISLNK(link.st_mode) and link.st_uid not in (0, me):
        raise UnsafeDirectory(f"{directory} is a symlink owned by uid {link.st_uid}: refusing to write through it",
                              hint=_HINT)  # fmt: skip
    st = os.stat(directory)
    if not stat.S_ISDIR(st.st_mode):
        raise UnsafeDirectory(f"{directory} is not a directory")
    shared = st.st_mode & stat.S_IWOTH and st.st_mode & stat.S_ISVTX
    if st.st_uid not in (0, me) or (st.st_mode & (stat.S_IWGRP | stat.S_IWOTH) and not shared):
        raise UnsafeDirectory(
            f"{directory} is owned by uid {st.st_uid} with mode {stat.S_IMODE(st.st_mode):o}: another user "
            "could choose where hvnet writes",
            hint=_HINT,
        )


def create_new(path: Path) -> int:
    """Open a new file for writing, never following a symlink or reusing an existing file."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
