"""Bringing an ended capture's pcaps to this machine (``hvnet [--host NAME] capture fetch NAME --out DIR``).

A capture on a hypervisor over SSH writes its files *there*; an operator wants them here, to open in
Wireshark.  Each file is read by ``cat`` through the host's runner (the one SSH connection, nothing
installed there), written here under a temporary name, checked against the size the host listed, then
renamed: a file in ``DIR`` is whole or absent.  Only a capture that has ended is fetched (its files no longer
change), only the files the host listed as the capture's own pcaps (a name tcpdump made from the capture's,
never a path), and an existing file here is never overwritten.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from typing import Any

from appliance.capture.spec import is_pcap_file_name
from appliance.core.documents import CAPTURE_FETCH
from appliance.core.errors import HvnetError, UsageError
from appliance.core.runner import CommandRunner
from appliance.core.safedirs import FILE_MODE

READ_TIMEOUT_S = 600.0  # one file of a ring (100 MB by default) over a slow link


@dataclass
class Fetched:
    """What one fetch brought here: each file's name and bytes, and where they are."""

    name: str
    source: str  # the capture's directory, as the host names it
    directory: Path
    files: list[tuple[str, int]] = field(default_factory=list)

    @property
    def bytes(self) -> int:
        return sum(size for _, size in self.files)

    def to_json(self) -> dict[str, Any]:
        """Document ``hvnet.capture.fetch`` (``capture fetch --json``)."""
        return CAPTURE_FETCH.stamp(
            {
                "name": self.name,
                "source": self.source,
                "directory": str(self.directory),
                "files": [{"name": n, "bytes": b} for n, b in self.files],
                "bytes": self.bytes,
            }
        )


def plan(capture: str, listed: list[tuple[str, int]], out: Path) -> list[tuple[str, int]]:
    """The files to fetch, in order; UsageError for a name that is not the capture's pcap or a file already in
    ``out`` (pure but for the existence check: nothing is read or written)."""
    foreign = [n for n, _ in listed if not is_pcap_file_name(capture, n)]
    if foreign:
        raise HvnetError(f"capture {capture}: the host lists files that are not its pcaps: {foreign!r}")
    present = [n for n, _ in listed if (out / n).exists() or (out / n).is_symlink()]
    if present:
        raise UsageError(f"{out} already has {', '.join(present)}", hint="fetch into another --out directory")
    return list(listed)


def fetch(runner: CommandRunner, label: str, capture: str, source: PurePosixPath | Path,
          listed: list[tuple[str, int]], out: Path) -> Fetched:  # fmt: skip
    """Copy the capture's listed files from ``source`` on the host (``runner``) into ``out``."""
    files = plan(capture, listed, out)
    out.mkdir(parents=True, exist_ok=True)
    done = Fetched(capture, str(source), out)
    for name, size in files:
        part = out / f".{name}.part"
        fd = os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, FILE_MODE)
        try:
            with os.fdopen(fd, "wb") as fh:
                if runner.local:
                    with open(Path(source) / name, "rb") as src:
                        shutil.copyfileobj(src, fh)
                else:
                    _read_remote(runner, label, str(PurePosixPath(source) / name), fh)
            got = part.stat().st_size
            if got != size:
                raise HvnetError(f"{label}: {name} of capture {capture}: {got} bytes read, the host listed {size}",
                                 hint="fetch again")  # fmt: skip
            try:
                os.link(part, out / name)  # unlike a rename, never replaces a file that appeared since the plan
            except FileExistsError:
                raise UsageError(f"{out} already has {name}", hint="fetch into another --out directory") from None
        finally:
            part.unlink(missing_ok=True)
        done.files.append((name, size))
    return done


def _read_remote(runner: CommandRunner, label: str, path: str, fh: Any) -> None:
    proc = runner.popen(["cat", "--", path], stdin=subprocess.DEVNULL, stdout=fh, stderr=subprocess.PIPE)
    try:
        _, err = proc.communicate(timeout=READ_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise HvnetError(f"{label}: reading {path} took over {READ_TIMEOUT_S:g} s") from None
    if proc.returncode != 0:
        why = (err or b"").decode(errors="replace").strip() or f"exit {proc.returncode}"
        raise HvnetError(f"{label}: cannot read {path}: {why}")
