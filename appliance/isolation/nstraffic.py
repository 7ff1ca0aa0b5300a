"""The traffic method in namespaces on another host: a VM host's guests, reached over its SSH connection.

hvnet cannot enter such a namespace or open a raw socket in it (and the host
has no Python), so its part of the method runs as :mod:`appliance.endpoints`
jobs there, one group per host: each guest's tcpdump on its ``eth0`` writes
a pcap into the group's private work dir, "listening on" is read back from
its stderr before any probe goes out, and a SIGINT stops it (its packet
counts then come back on stderr, as for a local capture).  The pcaps come
back as ``tcpdump -r -xx`` text in one command for the host's captures
(:mod:`appliance.isolation.audit.remote` reads that format) and are written
here as pcaps, read like any other.

The probes are ``arping`` in the sender's namespace: who-has for every other
guest's address and the unused one, from the guest's own MAC and address --
out of ``eth0`` untagged, and out of each VLAN sub-interface ``eth0.V`` the
guest has (:meth:`~appliance.endpoints.topology.Topology.tagged_vlans`), so
that kernel's 8021q tags it with V.  One job per interface, its targets in
turn; every job has ended before the closing controls go out.
"""

from __future__ import annotations

import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from appliance.core.errors import HvnetError
from appliance.core.safedirs import create_new
from appliance.endpoints.jobs import Job
from appliance.isolation.audit.remote import READ, pcap_bytes, split_dumps
from appliance.isolation.pcap import TcpdumpCounts, parse_tcpdump_counts
from appliance.switch.host import Host

# One sender interface's probes: $1 repetitions, $2 arping's deadline per target, $3 interface, $4 source
# address, then the targets.  arping exits 1 when no one answers (isolation): that is not a failure here.
SEND = 'r=$1 w=$2 i=$3 s=$4; shift 4; for t; do arping -q -c "$r" -W 0.01 -w "$w" -i "$i" -S "$s" "$t"; done; exit 0'
DEADLINE_S = "0.3"  # arping waits this long for a reply per target (one who-has answered or not)
POLL_S = 0.05


def interfaces(tagged: tuple[int, ...]) -> list[str]:
    """A guest's sender interfaces: ``eth0`` (untagged), then ``eth0.V`` for each VLAN it sends tagged on."""
    return ["eth0", *(f"eth0.{v}" for v in tagged)]


def send_jobs(index: int, netns: str, ifaces: list[str], source: str, targets: list[str], repeat: int) -> list[Job]:
    """The probe jobs of one guest (pure): one per interface, every target in turn."""
    return [Job(f"probe{index}-{i}", ("sh", "-c", SEND, "sh", str(repeat), DEADLINE_S, ifname, source, *targets),
                netns=netns) for i, ifname in enumerate(ifaces)]  # fmt: skip


def down_reason(host: Host, netns: str, ifaces: list[str]) -> Optional[str]:
    """Why the namespace ``netns`` on ``host`` cannot send or capture, or None (one command there)."""
    try:
        res = host.runner.run(["ip", "-n", netns, "-o", "link", "show"], check=False, timeout=30)
    except HvnetError as exc:
        return f"{host.label or 'the host'} does not answer: {exc}"
    if res.returncode != 0:
        return f"namespace {netns} does not exist on {host.label or 'the host'}"
    flags = {}
    for line in res.stdout.splitlines():
        fields = line.split(": ", 2)
        if len(fields) == 3:
            flags[fields[1].split("@", 1)[0]] = fields[2].partition("<")[2].partition(">")[0].split(",")
    for name in ifaces:
        if name not in flags:
            return f"{name} is missing"
        if "UP" not in flags[name]:
            return f"{name} is down"
    return None


@dataclass
class NsCapture:
    """One guest's capture in its namespace on another host."""

    name: str
    netns: str
    job: str
    pcap: str  # in the group's work dir, on that host
    error: Optional[str] = None
    counts: Optional[TcpdumpCounts] = None
    settled: bool = False
    frames: list[tuple[float, bytes]] = field(default_factory=list)


class HostCaptures:
    """Every capture on one host, in one endpoint group (one control shell over its SSH connection)."""

    def __init__(self, host: Host) -> None:
        from appliance.endpoints import launcher_for

        self.host = host
        self.group: Any = launcher_for(host, remote=True).group("isolation")
        self.caps: dict[str, NsCapture] = {}
        self.tcpdump = "tcpdump"

    def arm(self, guests: list[tuple[str, str]], bpf: str, timeout: float) -> None:
        """A tcpdump per (guest, namespace) on its ``eth0``; returns once each listens (or its error is set)."""
        self.tcpdump = self.host.runner.which("tcpdump")
        jobs = []
        for i, (name, netns) in enumerate(guests):
            job = f"cap{i:03d}"
            cap = NsCapture(name, netns, job, f"{self.group.dir}/{job}.pcap")
            self.caps[name] = cap
            argv = (self.tcpdump, "-i", "eth0", "-U", "--immediate-mode", "-nn", "-s", "128", "-w", cap.pcap, bpf)
            jobs.append(Job(job, argv, netns=netns))
        try:
            self.group.start(jobs, hold=False, ready_timeout=timeout)
        except HvnetError as exc:
            for cap in self.caps.values():
                cap.error = f"tcpdump did not start: {exc}"
            return
        pending = dict(self.caps)
        deadline = time.monotonic() + timeout
        while pending and time.monotonic() < deadline:
            errs = self._cat([f"{c.job}.err" for c in pending.values()])
            ended = self.group.poll()
            for name, cap in list(pending.items()):
                text = errs.get(f"{cap.job}.err") or ""
                if "listening on" in text:
                    del pending[name]
                elif cap.job in ended:
                    cap.error = f"tcpdump did not start: {text.strip()[-200:] or 'no output'}"
                    del pending[name]
            if pending:
                time.sleep(POLL_S)
        for cap in pending.values():
            cap.error = f"tcpdump not ready within {timeout:g} s"

    def probe(self, jobs: list[Job], timeout: float = 60.0) -> set[str]:
        """Run every probe job in a group of its own and wait for all; the jobs that ended well."""
        if not jobs:
            return set()
        from appliance.endpoints import launcher_for, wait_all

        group: Any = launcher_for(self.host, remote=True).group("probes")
        try:
            group.start(jobs, hold=False, ready_timeout=timeout)
            done = wait_all(group, [j.name for j in jobs], timeout, lambda: False)
        except HvnetError:
            return set()
        finally:
            group.close()
        return {n for n, r in done.items() if r.returncode == 0}

    def sizes(self) -> dict[str, int]:
        """Each live capture's pcap size now (-1: unknown), in one command."""
        live = [c for c in self.caps.values() if c.error is None]
        if not live:
            return {}
        try:
            res = self.host.runner.run(["sh", "-c", 'for f; do stat -c %s "$f" 2>/dev/null || echo -1; done', "sh",
                                        *(c.pcap for c in live)], check=False, timeout=30)  # fmt: skip
        except HvnetError:
            return {c.name: -1 for c in live}
        values = res.stdout.split()
        return {c.name: int(v) if v.lstrip("-").isdigit() else -1 for c, v in zip(live, values)}

    def settle(self, quiet_s: float, max_s: float) -> None:
        """Wait until no capture grew over two looks ``quiet_s`` apart (at most ``max_s``); mark the quiet ones."""
        started = time.monotonic()
        last = self.sizes()
        quiet: set[str] = set()
        while time.monotonic() - started < max_s:
            time.sleep(quiet_s)
            now = self.sizes()
            quiet = {n for n, s in now.items() if s >= 0 and last.get(n) == s}
            last = now
            if quiet == set(now):
                break
        for name in quiet:
            self.caps[name].settled = True

    def stop(self) -> None:
        """SIGINT every tcpdump, wait for it, then read what each printed (its counts) and its frames."""
        from appliance.endpoints import wait_all

        live = [c for c in self.caps.values() if c.error is None]
        if not live:
            return
        try:
            self.group.signal([c.job for c in live], "INT")
            ended = wait_all(self.group, [c.job for c in live], 5.0, lambda: False)
            errs = self._cat([f"{c.job}.err" for c in live])
        except HvnetError as exc:
            for c in live:
                c.error = f"the capture could not be stopped: {exc}"
            return
        for c in live:
            if ended.get(c.job) is None:
                c.error = "tcpdump did not stop"
            c.counts = parse_tcpdump_counts(errs.get(f"{c.job}.err") or "")
        res = self.host.runner.run(["sh", "-c", READ, "sh", self.tcpdump, *(c.pcap for c in live)], check=False,
                                   timeout=60.0)  # fmt: skip
        for c, dump in zip(live, split_dumps(res.stdout, len(live))):
            c.frames = dump

    def _cat(self, files: list[str]) -> dict[str, Optional[str]]:
        cat = getattr(self.group, "cat", None)
        if cat is not None:
            return dict(cat(files))
        return {f: self.group.read_text(f) for f in files}

    def write(self, name: str, local: Path) -> Optional[str]:
        """Guest ``name``'s frames as a pcap at ``local`` (created private, never through a link); why not."""
        cap = self.caps[name]
        if cap.error is not None:
            return cap.error
        local.unlink(missing_ok=True)
        with os.fdopen(create_new(local), "wb") as fh:
            fh.write(pcap_bytes(cap.frames))
        return None

    def close(self) -> None:
        try:
            self.group.close()
        except HvnetError:
            pass
