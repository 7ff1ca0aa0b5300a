"""Files that decide what hvnet does as root, read only when no other user could have written them.

``hvnet.conf``, the host inventory (which hosts root connects to, their XAPI
URL and credentials path), the XAPI credentials and the policy the agent
enforces all choose what root does: whoever can edit one of them, or swap it
for another file, chooses for root.  Each is read through :func:`read`, one
rule for all:

* the file must be a regular file owned by root or by the user running hvnet,
  and writable by no one else (no group or world write bit);
* so must its directory (a world-writable directory with the sticky bit, such
  as ``/tmp``, passes: only an entry's owner can rename or remove it, and the
  entry's owner is checked), and every directory above it;
* the checks are made on what was opened, not on the name: the directory is
  opened and ``fstat``-ed, the file is opened inside it with ``O_NOFOLLOW``
  (a symlink in the file's place is refused, not followed) and ``fstat``-ed,
  and the text returned is read from that same descriptor.  Nothing is
  checked by name and then opened again.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from appliance.core.errors import UsageError
from appliance.core.safedirs import judge_dir

_WRITABLE_BY_OTHERS = stat.S_IWGRP | stat.S_IWOTH


class UntrustedFile(UsageError):
    """A file that decides what hvnet does could have been written by another user (exit 2)."""


def _owners() -> str:
    me = os.geteuid()
    return "root" if me == 0 else f"root or uid {me} (the user running hvnet)"


def _refuse(path: str, what: str, why: str, hint: str) -> UntrustedFile:
    return UntrustedFile(
        f"{path}: {why}: another user could choose what hvnet does; {what} must be owned by {_owners()} and "
        "writable by no one else, its directory too; refusing to read it",
        hint=hint,
    )


def _check_dir(path: str, st: os.stat_result, what: str, file: str) -> None:
    if judge_dir(path, st.st_uid, st.st_mode, os.geteuid()) is not None:  # the rule hvnet's data dirs follow
        raise _refuse(file, what, f"its directory {path} is owned by uid {st.st_uid} with mode "
                      f"{stat.S_IMODE(st.st_mode):o}", f"chown root {path}; chmod go-w {path}")  # fmt: skip


def _check_ancestors(directory: str, what: str, file: str) -> None:
    """Every directory above the file's (by their real paths): another user able to rename one of them
    could put a directory of their own in the file's place."""
    current = os.path.dirname(directory)
    while True:
        try:
            st = os.stat(current)
        except OSError as exc:
            raise UntrustedFile(f"{file}: cannot check {current}: {exc.strerror or exc}") from None
        _check_dir(current, st, what, file)
        parent = os.path.dirname(current)
        if parent == current:
            return
        current = parent


def open_checked(path: str | Path, what: str) -> tuple[int, os.stat_result]:
    """Open ``path`` for reading after the checks above; the descriptor and its ``fstat``.

    ``what`` says what the file is in a refusal ("the host inventory").  A
    file that cannot be opened raises :class:`OSError` as ``open`` would (the
    caller says what a missing file means); one that fails a check raises
    :class:`UntrustedFile`.
    """
    file = os.path.abspath(path)
    directory = os.path.realpath(os.path.dirname(file))
    dfd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        try:  # opened first, so that an absent file is said to be absent whatever its directory
            flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC  # NONBLOCK: a FIFO never hangs
            fd = os.open(os.path.basename(file), flags, dir_fd=dfd)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise _refuse(file, what, "is a symbolic link", "name the file itself, not a link to it") from None
            raise
        dir_st = os.fstat(dfd)
    finally:
        os.close(dfd)
    st = os.fstat(fd)
    try:
        _check_dir(directory, dir_st, what, file)
        _check_ancestors(directory, what, file)
        if not stat.S_ISREG(st.st_mode):
            raise UntrustedFile(f"{file}: not a regular file; {what} must be one")
        if st.st_uid not in (0, os.geteuid()) or st.st_mode & _WRITABLE_BY_OTHERS:
            raise _refuse(file, what, f"owned by uid {st.st_uid} with mode {stat.S_IMODE(st.st_mode):o}",
                          f"chown root {file}; chmod go-w {file}")  # fmt: skip
    except UntrustedFile:
        os.close(fd)
        raise
    os.set_blocking(fd, True)
    return fd, st


def read(path: str | Path, what: str, *, max_bytes: int = 8 * 1024 * 1024) -> tuple[str, os.stat_result]:
    """The text of ``path`` (UTF-8) read from the descriptor :func:`open_checked` checked, and its ``fstat``.

    More than ``max_bytes`` is an error naming the file; :class:`UnicodeDecodeError` and
    :class:`OSError` reach the caller, who says what the file is.
    """
    fd, st = open_checked(path, what)
    with os.fdopen(fd, "rb") as fh:
        data = fh.read(max_bytes + 1)
    if len(data) > max_bytes:
        raise UsageError(f"{os.path.abspath(path)}: more than {max_bytes:,} bytes; {what} is far smaller")
    return data.decode("utf-8"), st
