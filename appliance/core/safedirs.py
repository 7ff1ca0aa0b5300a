"""Directories for data hvnet writes as root, wherever the operator points them.

Suite runs and pcaps live under ``/var/lib/hvnet`` by default, but a setting
may move them under a shared place such as ``/var/tmp``, writable by every
user: one who creates the directory first (or a symlink of that name) would
choose where root writes pcaps and results.  So every component of such a
path is checked before use, on the opened directory itself (``O_NOFOLLOW``,
``O_DIRECTORY``, ``fstat``: no gap between the check and what is checked): it
must be owned by root or by this user and writable by no one else, except a
world-writable directory with the sticky bit (``/tmp``, ``/var/tmp``), whose
entries only their owners can replace -- and those entries are checked in
turn.  A symlink on the way is followed only when root or this user owns it,
and the directories it leads through are checked like the others.

What hvnet creates there is its own: directories 0700, files 0600 (pcaps
hold tenants' traffic).  The same rules judge a remote host's directories,
from what a shell there reports (:func:`judge_dir`, :func:`judge_link`).
"""

from __future__ import annotations

import errno
import json
import os
import stat
from pathlib import Path, PurePosixPath
from typing import Any

from appliance.core.errors import HvnetError

_HINT = (
    "remove it, or point hvnet elsewhere ($HVNET_RUNS_DIR, $HVNET_CAPTURES_DIR, $HVNET_PCAP_DIR or hvnet.conf's [data])"
)
DIR_MODE = 0o700
FILE_MODE = 0o600
MAX_LINKS = 40  # symlinks followed on one path, as the kernel's own limit


class UnsafeDirectory(HvnetError):
    """A directory hvnet would write into is controlled by another user."""


def judge_dir(where: str | PurePosixPath, uid: int, mode: int, me: int) -> str | None:
    """Why no other user may be trusted with the directory ``where`` (None: it is safe)."""
    shared = mode & stat.S_IWOTH and mode & stat.S_ISVTX
    if uid not in (0, me) or (mode & (stat.S_IWGRP | stat.S_IWOTH) and not shared):
        return (
            f"{where} is owned by uid {uid} with mode {stat.S_IMODE(mode):o}: another user could choose where "
            "hvnet writes"
        )
    return None


def judge_link(where: str | PurePosixPath, uid: int, me: int) -> str | None:
    """Why the symlink ``where`` must not be followed (None: root or this user made it)."""
    if uid not in (0, me):
        return f"{where} is a symlink owned by uid {uid}: refusing to write through it"
    return None


def make_private(path: Path, mode: int = DIR_MODE) -> Path:
    """Create ``path`` (and missing parents, ``mode``) and check that no other user controls any part of it."""
    path = Path(os.path.abspath(path))
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY)
    try:
        _check(fd, Path("/"))
        parts, where, links = list(path.parts[1:]), Path("/"), 0
        while parts:
            part = parts.pop(0)
            if part in ("", "."):
                continue
            where = where.parent if part == ".." else where / part
            if part != "..":
                _mkdir(part, mode, fd, where)
            target = _open_dir(part, fd, where)
            if isinstance(target, str):  # a symlink root or this user made: walk what it names
                links += 1
                if links > MAX_LINKS:
                    raise UnsafeDirectory(f"{where}: more than {MAX_LINKS} symlinks on the way", hint=_HINT)
                if target.startswith("/"):
                    os.close(fd)
                    fd, where = os.open("/", os.O_RDONLY | os.O_DIRECTORY), Path("/")
                else:
                    where = where.parent
                parts[:0] = list(PurePosixPath(target).parts[1:] if target.startswith("/") else target.split("/"))
                continue
            os.close(fd)
            fd = target
            _check(fd, where)
    finally:
        os.close(fd)
    return path


def _mkdir(part: str, mode: int, dir_fd: int, where: Path) -> None:
    try:
        os.mkdir(part, mode, dir_fd=dir_fd)
    except FileExistsError:
        pass
    except OSError as exc:
        raise HvnetError(f"cannot create {where}: {exc.strerror or exc}") from None


def _open_dir(part: str, dir_fd: int, where: Path) -> int | str:
    """The directory ``part`` of ``dir_fd`` opened (never through a link), or the target of a trusted link."""
    try:
        return os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno not in (errno.ELOOP, errno.ENOTDIR):
            raise HvnetError(f"cannot open {where}: {exc.strerror or exc}") from None
    st = os.stat(part, dir_fd=dir_fd, follow_symlinks=False)
    if not stat.S_ISLNK(st.st_mode):
        raise UnsafeDirectory(f"{where} is not a directory")
    problem = judge_link(where, st.st_uid, os.geteuid())
    if problem:
        raise UnsafeDirectory(problem, hint=_HINT)
    return os.readlink(part, dir_fd=dir_fd)


def _check(fd: int, where: Path) -> None:
    st = os.fstat(fd)
    problem = judge_dir(where, st.st_uid, st.st_mode, os.geteuid())
    if problem:
        raise UnsafeDirectory(problem, hint=_HINT)


def create_new(path: Path) -> int:
    """Open a new private file for writing, never following a symlink or reusing an existing file."""
    return os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)


def write_json_durably(path: Path, data: Any) -> None:
    """Replace ``path`` with ``data`` atomically and durably: a temporary file of this process's own
    beside it (concurrent hvnet processes never share one), fsync, rename, fsync of the directory -- so
    after a crash or a power cut the file is the old one or the new one, never empty.  Raises OSError."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(json.dumps(data) + "\n")  # one line: the C encoder
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)
    fsync_dir(path.parent)


def fsync_dir(directory: Path) -> None:
    """Make a rename or an unlink in ``directory`` durable (the entry, not only the file's data)."""
    fd = os.open(directory, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
