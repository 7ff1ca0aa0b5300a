"""The audit's captures on a remote host: every listener's tcpdump started by one endpoint group.

The captures run in one control shell there (:mod:`appliance.endpoints`: one
SSH channel for all of them, not one each -- sshd allows ten per
connection), writing their pcaps into the group's private work dir (0700,
files 0600, removed when the group closes).  The frames are read back as
``tcpdump -r -xx`` text in one SSH command for every capture (a pcap is
binary; the text carries each frame's bytes in hex) and turned back into
frames here, so the verdicts read them exactly as a local capture's.
"""

from __future__ import annotations

import re
import struct
import time
from pathlib import Path
from typing import Any

from appliance.core.safedirs import create_new, make_private
from appliance.isolation.audit.capture import Listen, finish, tcpdump_argv
from appliance.isolation.pcap import ArpFrame, parse_frame
from appliance.switch.host import Host

MARKER = "@@hvnet-audit-pcap@@"
READ = 't=$1; shift; for f; do echo "' + MARKER + '"; "$t" -r "$f" -nn -tt -xx 2>/dev/null; done'
_HEADER = re.compile(r"^(?P<sec>[0-9]{1,12})\.(?P<frac>[0-9]{1,9}) ")
_HEX = re.compile(r"^\s+0x[0-9a-f]{4}:\s+(?P<hex>[0-9a-f ]+)$")
POLL_S = 0.05


def parse_hex_dump(text: str) -> list[tuple[float, bytes]]:
    """``tcpdump -r FILE -nn -tt -xx`` output -> (time, frame bytes) for each frame (pure)."""
    out: list[tuple[float, bytearray]] = []
    for line in text.splitlines():
        if m := _HEADER.match(line):
            out.append((int(m.group("sec")) + int(m.group("frac")) / 10 ** len(m.group("frac")), bytearray()))
        elif (m := _HEX.match(line)) and out:
            out[-1][1].extend(bytes.fromhex(m.group("hex").replace(" ", "")))
    return [(t, bytes(b)) for t, b in out]


def split_dumps(text: str, count: int) -> list[list[tuple[float, bytes]]]:
    """The batch's output, one frame list per file, in order (files past the output's end: none)."""
    parts = text.split(MARKER + "\n")[1:] if text.startswith(MARKER) else text.split("\n" + MARKER + "\n")[1:]
    dumps = [parse_hex_dump(p) for p in parts]
    return (dumps + [[] for _ in range(count)])[:count]


class RemoteCaptures:
    """Listeners' captures on ``host`` through its endpoint launcher (one control shell)."""

    def __init__(self, host: Host, keep_dir: Path | None) -> None:
        from appliance.endpoints import launcher_for

        self.host, self.keep_dir = host, keep_dir
        self.group: Any = launcher_for(host).group("audit")
        self.listens: dict[str, Listen] = {}
        self.names: dict[str, str] = {}  # label -> job name
        self.raw: dict[str, list[tuple[float, bytes]]] = {}
        self.tcpdump = "tcpdump"

    def start(self, specs: list[tuple[str, str, str]], run: int, timeout: float) -> dict[str, Listen]:
        from appliance.endpoints import Job

        self.tcpdump = self.host.runner.which("tcpdump")
        jobs = []
        for i, (label, device, direction) in enumerate(specs):
            name = f"cap{i:04d}"
            pcap = f"{self.group.dir}/{name}.pcap"
            argv = tcpdump_argv(self.tcpdump, device, direction, pcap, run)[4:]  # the group's shell has umask 077
            jobs.append(Job(name, argv))
            self.listens[label], self.names[label] = Listen(label, device, Path(pcap)), name
        self.group.start(jobs, hold=False, ready_timeout=timeout)
        pending = dict(self.names)
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            errs = self._cat([f"{n}.err" for n in pending.values()])
            ended = self.group.poll()
            for label, name in list(pending.items()):
                text = errs.get(f"{name}.err") or ""
                if "listening on" in text:
                    del pending[label]
                elif name in ended:
                    lst = self.listens[label]
                    lst.error = f"tcpdump on {lst.device} did not start: {text.strip()[-200:]}"
                    del pending[label]
            if pending:
                time.sleep(POLL_S)
        for label in pending:
            self.listens[label].error = f"tcpdump on {self.listens[label].device} not ready within {timeout:g} s"
        return self.listens

    def _cat(self, files: list[str]) -> dict[str, str | None]:
        cat = getattr(self.group, "cat", None)
        if cat is not None:
            return cat(files)
        return {f: self.group.read_text(f) for f in files}

    def frames(self) -> dict[str, list[ArpFrame]]:
        """Every capture's frames so far: one SSH command reads them all back."""
        labels = list(self.listens)
        res = self.host.runner.run(["sh", "-c", READ, "sh", self.tcpdump, *(str(self.listens[x].pcap) for x in labels)],
                                   check=False, timeout=60.0)  # fmt: skip
        dumps = split_dumps(res.stdout, len(labels))
        out = {}
        for label, dump in zip(labels, dumps):
            self.raw[label] = dump
            out[label] = [f for t, data in dump if (f := parse_frame(t, data)) is not None]
        return out

    def stop(self) -> None:
        names = list(self.names.values())
        self.group.signal(names, "INT")
        codes: dict[str, int | None] = {}
        deadline = time.monotonic() + 5.0
        while len(codes) < len(names) and time.monotonic() < deadline:
            codes.update({n: r.returncode for n, r in self.group.poll().items()})
            if len(codes) < len(names):
                time.sleep(POLL_S)
        errs = self._cat([f"{n}.err" for n in names])
        frames = self.frames()
        for label, name in self.names.items():
            lst = self.listens[label]
            if name not in codes:
                lst.error = lst.error or f"tcpdump on {lst.device} did not stop"
            finish(lst, errs.get(f"{name}.err") or "", codes.get(name, 0))
            if lst.error is None:
                lst.frames = frames.get(label, [])

    def close(self, keep: bool) -> None:
        """The group's work dir goes with it; kept captures are written here as pcaps first (0600, 0700 dir)."""
        try:
            if keep and self.keep_dir is not None:
                make_private(self.keep_dir, 0o700)
                for i, label in enumerate(self.listens):
                    path = self.keep_dir / f"{i:04d}.pcap"
                    with open(create_new(path), "wb") as fh:
                        fh.write(pcap_bytes(self.raw.get(label, [])))
                    path.chmod(0o600)
                    self.listens[label].pcap = path
        finally:
            self.group.close()


def pcap_bytes(frames: list[tuple[float, bytes]]) -> bytes:
    """A classic pcap file (Ethernet, microseconds) holding ``frames``."""
    out = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1)
    for t, data in frames:
        sec = int(t)
        out += struct.pack("<IIII", sec, round((t - sec) * 1e6), len(data), len(data)) + data
    return out
