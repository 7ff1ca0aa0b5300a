"""A capture's metadata: ``capture.json`` beside its pcaps, the one record of it.

Written whole each time (a temporary file renamed over the old one), so a
reader sees either the previous record or the next, never half of one.  The
processes it names are recognised by their command lines before anyone
signals them: a pid reused by another program is never taken for a capture.
"""

from __future__ import annotations

import json
import os
import signal
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appliance.capture import upgrade
from appliance.capture.spec import CaptureSpec
from appliance.core.errors import HvnetError
from appliance.core.safedirs import FILE_MODE

META_FILE = "capture.json"
LOG_FILE = "tcpdump.log"  # tcpdump's stderr: "listening on", its counts on SIGUSR1 and at exit

# A capture's states.  "starting" and "running" are live; the others are final.
LIVE_STATES = ("starting", "running")
FINAL_STATES = ("stopped", "finished", "failed", "dead")


@dataclass
class CaptureRecord:
    """What ``capture.json`` holds (see the README's "Captures" section for each field)."""

    spec: CaptureSpec
    directory: str
    host: str  # the switch, as the journal names it
    argv: list[str]  # the full command that runs tcpdump (``ip netns exec ...`` for a guest)
    created: float
    state: str = "starting"
    reason: str | None = None  # why it ended (or failed, or died)
    started: float | None = None  # tcpdump listening
    stopped: float | None = None
    supervisor_pid: int | None = None
    tcpdump_pid: int | None = None
    counters_before: dict[str, Any] | None = None
    counters_after: dict[str, Any] | None = None
    tcpdump: dict[str, Any] | None = None  # tcpdump's counts at stop (see .limits.counts)
    tcpdump_cpu: dict[str, Any] | None = None  # tcpdump's own CPU over its life, or why not measured (.limits)
    completeness: dict[str, Any] | None = None
    files: list[str] = field(default_factory=list)
    disk: dict[str, Any] | None = None  # its worst case, the free-space floor, free space at start and stop

    @property
    def path(self) -> Path:
        return Path(self.directory)

    @property
    def name(self) -> str:
        return self.spec.name

    def to_json(self) -> dict[str, Any]:
        """Document ``hvnet.capture`` as this hvnet writes it (units in the keys, see :mod:`.upgrade`)."""
        data = {k: v for k, v in vars(self).items() if k != "spec"}
        return upgrade.to_document({"spec": self.spec.to_json(), **data})

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CaptureRecord:
        """A record of any version this hvnet reads (ValueError, KeyError or TypeError: not one)."""
        internal = upgrade.from_document(data)
        fields_ = {k: v for k, v in internal.items() if k != "spec"}
        return cls(spec=CaptureSpec.from_json(internal["spec"]), **fields_)


def save(record: CaptureRecord) -> None:
    """Replace ``capture.json`` atomically (never following a link planted in the directory)."""
    tmp = record.path / f".{META_FILE}.{os.getpid()}"
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, FILE_MODE)
    with os.fdopen(fd, "w") as fh:
        json.dump(record.to_json(), fh, indent=2, sort_keys=True)
        fh.write("\n")
    os.replace(tmp, record.path / META_FILE)


def load(directory: Path) -> CaptureRecord:
    """The record in ``directory``, or an :class:`HvnetError` naming the file.

    Its directory is where it was read from, whatever the file says: what hvnet later writes,
    signals or removes for it is found from hvnet's captures directory and the capture's checked
    name, never from a path stored in a file."""
    path = directory / META_FILE
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        with os.fdopen(fd) as fh:
            record = CaptureRecord.from_json(json.load(fh))
            record.directory = str(directory)
            return record
    except FileNotFoundError:
        raise HvnetError(f"{path}: no such capture record") from None
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise HvnetError(f"{path}: unreadable capture record: {exc}") from None


def process_alive(pid: int | None, marker: str) -> bool:
    """Whether ``pid`` runs and its command line holds ``marker`` (the capture's directory or file)."""
    if not pid:
        return False
    try:
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes()
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    if stat.rpartition(")")[2].split()[:1] == ["Z"]:
        return False  # exited, not yet reaped
    return any(marker in arg for arg in cmdline.decode(errors="replace").split("\0"))


def signal_process(pid: int | None, marker: str, sig: int = signal.SIGTERM) -> bool:
    """Send ``sig`` to ``pid`` if it is still the capture's process; whether it was sent."""
    if pid is None or not process_alive(pid, marker):
        return False
    try:
        os.kill(pid, sig)
    except ProcessLookupError:
        return False
    return True


def final_counts_text(log: str) -> str:
    """The counts tcpdump printed as it exited (one a line), without the live ones it printed on SIGUSR1
    ("tcpdump: N packets captured, ..."): a tcpdump killed outright printed none, and its last live
    counts must not pass for final ones."""
    return "\n".join(line for line in log.splitlines() if line[:1].isdigit())


def count_packets(files: list[Path]) -> int | None:
    """Packets in classic pcap files, counted from their record headers (None when one is not a pcap).

    Reads 16 bytes per packet and skips its data, so a large capture costs a
    walk of its headers, not a read of its bytes; a truncated last record
    (tcpdump writing it right now) is not counted.
    """
    total = 0
    for path in files:
        try:
            fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW)
        except OSError:
            return None
        with os.fdopen(fd, "rb") as fh:
            size = os.fstat(fh.fileno()).st_size
            head = fh.read(24)
            if len(head) < 24:
                continue  # tcpdump has not written its header yet
            endian = {b"\xd4\xc3\xb2\xa1": "<", b"\x4d\x3c\xb2\xa1": "<",
                      b"\xa1\xb2\xc3\xd4": ">", b"\xa1\xb2\x3c\x4d": ">"}.get(head[:4])  # fmt: skip
            if endian is None:
                return None
            pos = 24
            while pos + 16 <= size:
                fh.seek(pos + 8)
                (incl,) = struct.unpack(endian + "I", fh.read(4))
                if pos + 16 + incl > size:
                    break
                pos += 16 + incl
                total += 1
    return total


def read_log(directory: Path) -> str:
    """tcpdump's stderr so far ("" when there is none)."""
    try:
        fd = os.open(directory / LOG_FILE, os.O_RDONLY | os.O_NOFOLLOW)
    except OSError:
        return ""
    with os.fdopen(fd, "rb") as fh:
        return fh.read().decode(errors="replace")
