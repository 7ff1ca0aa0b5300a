"""The audit's captures: one tcpdump per listener's host-side device, kept to this audit's frames.

What the traffic method (:mod:`.audittraffic`) and its remote form (:mod:`.auditremote`) share: a
listener's record, the capture's argument list, the captures on this machine, and reading tcpdump's
closing counts.  Captures keep only the audit's frames (a BPF filter on the mark, see :mod:`.inject`),
in a 0700 directory as 0600 files (tcpdump under umask 077).
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from appliance.core.safedirs import make_private
from appliance.isolation.audit import inject
from appliance.isolation.pcap import ArpFrame, TcpdumpCounts, parse_tcpdump_counts, read_arp
from appliance.switch.host import Host

BUFFER_KIB = "256"  # tcpdump -B: a small kernel buffer per listener (the filter keeps only probes)
# A capture's disk bound: a listener gets one copy of each probe it hears and a few controls; a capture
# that reached the bound stopped before its closing control, so its "No" cells read unknown.
MAX_FRAMES = 5000  # at most ~720 KB of 128-byte records
UMASK_EXEC = 'umask 077 && exec "$@"'  # tcpdump's pcap created 0600 (the argv reaches sh as "$@", never as text)


@dataclass
class Listen:
    """One listener's capture and what it showed."""

    label: str
    device: str
    pcap: Path
    frames: list[ArpFrame] = field(default_factory=list)
    error: str | None = None
    counts: TcpdumpCounts | None = None
    settled: bool = False

    def has(self, kind: int, run: int) -> bool:
        return any((m := inject.mark_of(f)) is not None and m.kind == kind and m.run == run for f in self.frames)


class Captures(Protocol):
    """The listeners' captures on one host: this machine's tcpdumps, or a remote host's endpoint group."""

    def start(self, specs: list[tuple[str, str, str]], run: int, timeout: float) -> dict[str, Listen]:
        """A capture per (label, device, direction), each listening when this returns (or its error set)."""
        ...

    def frames(self) -> dict[str, list[ArpFrame]]:
        """What each capture holds so far."""
        ...

    def stop(self) -> None:
        """Stop every capture; its counts, frames or error into its Listen."""
        ...

    def close(self, keep: bool) -> None:
        """Remove the pcaps unless ``keep``."""
        ...


def tcpdump_argv(tcpdump: str, device: str, direction: str, pcap: str, run: int) -> list[str]:
    """One listener's capture: only this audit's frames, leaving the switch towards the VM."""
    return ["sh", "-c", UMASK_EXEC, "sh", tcpdump, "-i", device, "-Q", direction, "-p", "-B", BUFFER_KIB,
            "-U", "--immediate-mode", "-nn", "-s", "128", "-c", str(MAX_FRAMES), "-Z", "root", "-w", str(pcap),
            inject.capture_filter(run)]  # fmt: skip


class LocalCaptures:
    """Listeners' captures on this machine: one tcpdump each, its pcap in ``out_dir`` (0700, files 0600)."""

    def __init__(self, host: Host, out_dir: Path) -> None:
        self.host, self.out_dir = host, out_dir
        self.running: dict[str, tuple[subprocess.Popen, Listen]] = {}

    def start(self, specs: list[tuple[str, str, str]], run: int, timeout: float) -> dict[str, Listen]:
        """Start a capture per (label, device, direction) and wait until each says it is listening."""
        import select

        make_private(self.out_dir.parent)
        make_private(self.out_dir, 0o700)
        os.chmod(self.out_dir, 0o700)
        tcpdump = self.host.runner.which("tcpdump")
        for i, (label, device, direction) in enumerate(specs):
            pcap = self.out_dir / f"{i:04d}.pcap"  # not the label: a VM's name never becomes a path
            argv = tcpdump_argv(tcpdump, device, direction, str(pcap), run)
            proc = self.host.runner.popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
            self.running[label] = (proc, Listen(label, device, pcap))
        deadline = time.monotonic() + timeout
        pending = {proc.stderr.fileno(): (label, proc) for label, (proc, _l) in self.running.items() if proc.stderr}
        while pending and time.monotonic() < deadline:
            ready, _, _ = select.select(list(pending), [], [], max(0.0, deadline - time.monotonic()))
            for fd in ready:
                label, proc = pending.pop(fd)
                line = proc.stderr.readline().decode(errors="replace") if proc.stderr else ""
                if "listening on" not in line:
                    lst = self.running[label][1]
                    lst.error = f"tcpdump on {lst.device} did not start: {line.strip() or 'no output'}"
        for label, _proc in pending.values():
            lst = self.running[label][1]
            lst.error = f"tcpdump on {lst.device} not ready within {timeout:g} s"
        return {label: lst for label, (_p, lst) in self.running.items()}

    def frames(self) -> dict[str, list[ArpFrame]]:
        """What each capture holds so far (tcpdump -U writes each frame out as it comes)."""
        out = {}
        for label, (_p, lst) in self.running.items():
            try:
                out[label] = read_arp(lst.pcap)
            except (OSError, ValueError):
                out[label] = []
        return out

    def stop(self) -> None:
        """SIGINT every tcpdump (its own pid), then its counts and frames into its Listen."""
        for proc, _l in self.running.values():
            if proc.poll() is None:
                proc.send_signal(signal.SIGINT)  # sh exec'd tcpdump: this is tcpdump's own pid
        for proc, lst in self.running.values():
            try:
                proc.wait(timeout=5)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
                lst.error = lst.error or f"tcpdump on {lst.device} did not stop"
            err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
            if proc.stderr:
                proc.stderr.close()
            finish(lst, err, proc.returncode)
            if lst.error is None:
                try:
                    lst.frames = read_arp(lst.pcap)
                except (OSError, ValueError) as exc:
                    lst.error = f"cannot read the capture of {lst.device}: {exc}"

    def close(self, keep: bool) -> None:
        """Delete the pcaps (and their directory) unless asked to keep them."""
        if keep:
            return
        for _p, lst in self.running.values():
            lst.pcap.unlink(missing_ok=True)
        try:
            self.out_dir.rmdir()
        except OSError:
            pass


def finish(lst: Listen, err: str, returncode: int | None) -> None:
    """tcpdump's counts from what it printed when it stopped; a failure when it printed none."""
    lst.counts = parse_tcpdump_counts(err)
    if returncode not in (0, -signal.SIGINT, 130) and lst.error is None and lst.counts is None:
        lst.error = f"tcpdump on {lst.device} failed: {err.strip()[-200:] or f'exit {returncode}'}"
