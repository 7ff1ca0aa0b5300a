"""What a capture is asked to do, checked before anything starts.

Every limit has a range and every refusal says what is allowed: a capture
that cannot be what the operator asked for is never started.  The output
name is one path component of hvnet's captures directory, checked here and
created there with ``O_EXCL`` semantics (see :mod:`appliance.core.safedirs`), so no
name -- ``..``, an absolute path, a NUL, a planted symlink -- makes root write
elsewhere.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

from appliance.capture.limits import BUFFER_KIB_RANGE
from appliance.core.errors import UsageError

NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,63}")
SNAPLEN_RANGE = (14, 262144)  # an Ethernet header at least; tcpdump's own maximum
DURATION_RANGE = (1, 7 * 86400)  # seconds
COUNT_RANGE = (1, 10**9)  # packets
ROTATE_MB_RANGE = (1, 10_000)  # tcpdump -C: millions of bytes per file
ROTATE_FILES_RANGE = (2, 1000)  # tcpdump -W: a ring of this many files
ROTATE_SECONDS_RANGE = (1, 86400)  # tcpdump -G
MAX_MB_RANGE = (1, 100_000)  # a time-rotated capture's cap (its supervisor stops it there)
RING_MAX_MB = 100_000  # --rotate-mb x --rotate-files: 100 GB at most
DEFAULT_RING = (100, 10)  # MB per file, files: every capture is bounded (1 GB) unless told otherwise
DEFAULT_MAX_MB = DEFAULT_RING[0] * DEFAULT_RING[1]
PCAP_SUFFIX = ".pcap"
# What tcpdump appends to a capture's name: the suffix and a ring number (-C/-W), or the time (-G).
PCAP_FILE_RE = re.compile(r"(?:\.pcap[0-9]{0,6}|-[0-9]{8}-[0-9]{6}\.pcap[0-9]{0,6})")


@dataclass(frozen=True)
class Limits:
    """When a capture ends by itself and how its files rotate (None: no such limit)."""

    snaplen: int | None = None  # bytes kept per packet (tcpdump's default: all of it)
    duration: float | None = None  # seconds, then the capture stops
    count: int | None = None  # packets, then tcpdump exits (-c)
    rotate_mb: int | None = None  # a new file every this many MB (-C)
    rotate_files: int | None = None  # keep only this many files, oldest overwritten (-W)
    rotate_seconds: int | None = None  # a new file every this many seconds (-G)
    max_mb: int | None = None  # a time-rotated capture stops when its files hold this many MB
    buffer_kib: int | None = None  # the kernel's ring for tcpdump (-B); None: libpcap's default (see .limits)


@dataclass(frozen=True)
class CaptureSpec:
    """One capture: a name (its directory), where it listens, what it keeps."""

    name: str
    kind: str  # "port" (a port of the switch, captured on the hypervisor) or "guest" (inside a lab guest)
    target: str  # the port's name, or the guest's
    port: str  # the switch port whose counters say what was offered (the guest's VIF for a guest)
    interface: str  # what tcpdump listens on (the port, or the guest's eth0)
    bpf: str | None = None
    limits: Limits = field(default_factory=Limits)

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> CaptureSpec:
        return cls(**{**data, "limits": Limits(**data.get("limits", {}))})


def check_name(name: str) -> str:
    """``name`` if it is one safe path component, else a :class:`UsageError` saying why."""
    if "\0" in name:
        raise UsageError("capture name contains a NUL byte")
    if name.startswith("/"):
        raise UsageError(f"capture name {name!r} is an absolute path: give a name, kept in hvnet's captures directory")
    if ".." in name.split("/") or name in (".", ".."):
        raise UsageError(f"capture name {name!r} would leave hvnet's captures directory")
    if not NAME_RE.fullmatch(name):
        raise UsageError(
            f"capture name {name!r} is not allowed: 1-64 letters, digits, '.', '_' or '-', starting with a "
            "letter or digit (no '/')"
        )
    return name


def default_name(target: str, stamp: str) -> str:
    """A name for a capture that was given none: its target and the time, made safe."""
    safe = re.sub(r"[^A-Za-z0-9._-]", "_", target).lstrip("._-") or "capture"
    return f"{safe[:40]}-{stamp}"


def _in_range(what: str, value: float | None, bounds: tuple[float, float], unit: str) -> None:
    if value is not None and not bounds[0] <= value <= bounds[1]:
        raise UsageError(f"{what} {value:g} is out of range: {bounds[0]:g}..{bounds[1]:g} {unit}")


def check_limits(limits: Limits) -> Limits:
    """``limits`` with their bound filled in, if every value is in range and they make sense together.

    Every capture is bounded: a ring of files (tcpdump -C/-W, :data:`DEFAULT_RING` for what is not
    given), or, rotated by time (-G), a cap on its files' total that its supervisor enforces --
    tcpdump ignores -W when -C and -G are both given, so that pair is refused.
    """
    _in_range("--snaplen", limits.snaplen, SNAPLEN_RANGE, "bytes")
    _in_range("--duration", limits.duration, DURATION_RANGE, "seconds")
    _in_range("--count", limits.count, COUNT_RANGE, "packets")
    _in_range("--rotate-mb", limits.rotate_mb, ROTATE_MB_RANGE, "MB")
    _in_range("--rotate-files", limits.rotate_files, ROTATE_FILES_RANGE, "files")
    _in_range("--rotate-seconds", limits.rotate_seconds, ROTATE_SECONDS_RANGE, "seconds")
    _in_range("--max-mb", limits.max_mb, MAX_MB_RANGE, "MB")
    _in_range("--buffer-kib", limits.buffer_kib, BUFFER_KIB_RANGE, "KiB")
    if limits.rotate_seconds is not None:
        if limits.rotate_mb is not None:
            raise UsageError("--rotate-mb and --rotate-seconds together: tcpdump then ignores --rotate-files and "
                             "keeps every file, so nothing would bound the capture; give one of them")  # fmt: skip
        return replace(limits, max_mb=limits.max_mb or DEFAULT_MAX_MB)
    if limits.max_mb is not None:
        raise UsageError("--max-mb bounds a capture rotated by time (--rotate-seconds); a ring is bounded by "
                         "--rotate-mb x --rotate-files")  # fmt: skip
    mb, files = limits.rotate_mb or DEFAULT_RING[0], limits.rotate_files or DEFAULT_RING[1]
    if mb * files > RING_MAX_MB:
        raise UsageError(f"a ring of {files} files of {mb} MB holds {mb * files} MB: at most {RING_MAX_MB} MB "
                         "(--rotate-mb x --rotate-files)")  # fmt: skip
    return replace(limits, rotate_mb=mb, rotate_files=files)


def check_filter_text(bpf: str | None) -> str | None:
    """The filter as tcpdump will get it (one argument), or None; tcpdump itself judges its syntax."""
    if bpf is None or not bpf.strip():
        return None
    if "\0" in bpf or "\n" in bpf:
        raise UsageError("the filter contains a NUL or a newline")
    if len(bpf) > 4096:
        raise UsageError("the filter is longer than 4096 characters")
    return bpf.strip()


def filter_check_argv(tcpdump: str, bpf: str) -> list[str]:
    """The argv that compiles ``bpf`` for Ethernet without capturing (exit 0 when tcpdump accepts it)."""
    return [tcpdump, "-y", "EN10MB", "-d", "--", bpf]


def pcap_base(directory: Path, spec: CaptureSpec) -> Path:
    """The file tcpdump writes; rotation adds a number (-C: ``.pcap1``..., -W: ``.pcap0``...) or the time (-G)."""
    if spec.limits.rotate_seconds is not None:
        return directory / f"{spec.name}-%Y%m%d-%H%M%S{PCAP_SUFFIX}"
    return directory / f"{spec.name}{PCAP_SUFFIX}"


def tcpdump_argv(tcpdump: str, spec: CaptureSpec, directory: Path) -> list[str]:
    """tcpdump's arguments for ``spec`` writing into ``directory``.

    ``-Z root``: Debian's tcpdump drops to its own user before opening (and
    re-opening, on rotation) its files; hvnet's captures directory is
    root's and writable by no one else, so tcpdump keeps root's identity.
    ``-U --immediate-mode``: each packet is taken from the kernel and
    written out as it comes, so a capture's files are current while it runs
    (and whole when it is killed) and its "captured" count at SIGINT holds
    every packet -- without it the packets still in the kernel's ring are
    counted received, never captured.
    """
    lim = spec.limits
    argv = [tcpdump, "-i", spec.interface, "-n", "-U", "--immediate-mode", "-Z", "root"]
    if lim.snaplen is not None:
        argv += ["-s", str(lim.snaplen)]
    if lim.buffer_kib is not None:
        argv += ["-B", str(lim.buffer_kib)]
    if lim.count is not None:
        argv += ["-c", str(lim.count)]
    if lim.rotate_mb is not None:
        argv += ["-C", str(lim.rotate_mb)]
    if lim.rotate_seconds is not None:
        argv += ["-G", str(lim.rotate_seconds)]
    if lim.rotate_files is not None:
        argv += ["-W", str(lim.rotate_files)]
    argv += ["-w", str(pcap_base(directory, spec))]
    if spec.bpf:
        argv += ["--", spec.bpf]
    return argv


def pcap_files(directory: Path, spec: CaptureSpec) -> list[Path]:
    """The capture's files as they are now, oldest first (by modification time, then number: 2 before 10)."""
    stem = spec.name
    found = [
        p
        for p in directory.iterdir()
        if p.is_file() and not p.is_symlink() and p.name.startswith(stem) and PCAP_SUFFIX in p.name
    ]
    return sorted(
        found,
        key=lambda p: (p.stat().st_mtime_ns, [int(t) if t.isdigit() else t for t in re.split(r"([0-9]+)", p.name)]),
    )


def is_pcap_file_name(capture: str, file_name: str) -> bool:
    """Whether ``file_name`` (as another host listed it) is one of the capture's own pcaps: a plain name
    tcpdump made from the capture's (``NAME.pcap``, ``NAME.pcap3``, ``NAME-20250101-120000.pcap``), never a path."""
    rest = file_name[len(capture) :] if file_name.startswith(capture) else None
    return (
        rest is not None
        and PCAP_FILE_RE.fullmatch(rest) is not None
        and "/" not in file_name
        and NAME_RE.fullmatch(capture) is not None
    )


def ended_by_itself(limits: Limits) -> str:
    """Why tcpdump exited 0 on its own when no packet limit stopped it."""
    if limits.rotate_seconds is not None and limits.rotate_files is not None:
        return f"tcpdump ended by itself after its {limits.rotate_files} files of {limits.rotate_seconds} s"
    return "tcpdump ended by itself"
