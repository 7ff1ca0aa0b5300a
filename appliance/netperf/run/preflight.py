"""Checks before a suite starts anything: fail fast, with the reason, or warn.

A 60-second x 7-step suite that dies at step 5 on a file-descriptor limit,
or whose TCP_CRR steps silently measure port exhaustion, wastes the run.
Everything checkable is checked first: the tools and their version, the
endpoints, the limits the concurrency needs, and the ephemeral port range
against what TCP_CRR will consume; every policy fragment is planned against
the switch (:func:`fragment_failures`), and what packet-rate steps and
listeners need is looked for (:func:`.pktgen.packet_rate`).  Reaching the netserver
is checked once it has started (see :mod:`appliance.netperf.run.servers`).
"""

from __future__ import annotations

import os
import re
import resource
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

import psutil

from appliance.core.errors import HvnetError
from appliance.core.runner import CommandRunner
from appliance.endpoints.guests import GuestSource
from appliance.netperf.define.cases import Case
from appliance.netperf.define.tests import Test
from appliance.netperf.figures.verdict import TIME_WAIT_S, crr_ceiling
from appliance.netperf.run.launch import Endpoint
from appliance.policy import Policy, PolicyEngine

MIN_NETPERF = (2, 5)  # omni output selectors (-k) and latency percentiles (-j)
FDS_PER_INSTANCE = 4  # hvnet's side, with headroom: an instance's two output files are open while it spawns
PROCS_PER_INSTANCE = 2  # a netperf, and the netserver child serving it


class PreflightFailed(HvnetError):
    """The suite cannot run here as written; nothing was started."""

    def __init__(self, reasons: list[str]) -> None:
        head = reasons[0] if len(reasons) == 1 else f"{len(reasons)} problems:\n  " + "\n  ".join(reasons)
        super().__init__(f"preflight failed: {head}")
        self.reasons = reasons


@dataclass
class Preflight:
    netperf: str = ""
    netserver: Optional[str] = None
    netperf_version: Optional[str] = None
    failures: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    facts: dict[str, Any] = field(default_factory=dict)

    def raise_if_failed(self) -> None:
        if self.failures:
            raise PreflightFailed(self.failures)


def parse_version(text: str) -> Optional[tuple[int, ...]]:
    m = re.search(r"[Nn]etperf version ([0-9]{1,9})\.([0-9]{1,9})(?:\.([0-9]{1,9})\b)?", text)
    return tuple(int(x) for x in m.groups() if x is not None) if m else None


def port_range(text: str) -> Optional[tuple[int, int]]:
    parts = text.split()
    if len(parts) != 2 or not all(p.isdigit() for p in parts):
        return None
    return int(parts[0]), int(parts[1])


def check(runner: CommandRunner, client: Endpoint, tests: Sequence[Test], *, peak: int, managed_server: bool,
          server_runner: Optional[CommandRunner] = None) -> Preflight:  # fmt: skip
    """Everything that can be checked before starting a process that matters.

    ``runner`` reaches the client's host; ``server_runner`` the server's when that is another machine (a guest
    of the other host of a mixed pair): netserver is looked for where it will run.  ``tests``: the suite's;
    ``peak``: the instances its busiest step starts, every pair's."""
    pf = Preflight()
    try:
        pf.netperf = runner.which("netperf")
    except HvnetError as exc:
        pf.failures.append(str(exc))
        return pf
    if managed_server:
        try:
            pf.netserver = (server_runner or runner).which("netserver")
        except HvnetError as exc:
            pf.failures.append(str(exc))
    try:
        out = runner.run([pf.netperf, "-V"], check=False, timeout=10)
        version = parse_version(out.stdout + out.stderr)
    except (OSError, HvnetError):
        version = None
    if version is None:
        pf.failures.append(f"{pf.netperf} -V did not report a netperf version")
    else:
        pf.netperf_version = ".".join(map(str, version))
        if version[:2] < MIN_NETPERF:
            pf.failures.append(
                f"netperf {pf.netperf_version} is too old: hvnet reads omni output selectors and latency "
                f"percentiles, netperf {'.'.join(map(str, MIN_NETPERF))} or later"
            )

    _limits(peak, pf)
    crr = [t for t in tests if t.type == "TCP_CRR"]
    if crr:
        _ports(runner, crr, client, pf)
    return pf


def _limits(peak: int, pf: Preflight) -> None:
    """Open files and processes for the ``peak`` instances; the one side effect here is raising
    hvnet's own soft open-file limit up to its hard limit when that is enough (recorded in facts)."""
    need_fds = peak * FDS_PER_INSTANCE + 64
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if soft != resource.RLIM_INFINITY and soft < need_fds:
        if hard == resource.RLIM_INFINITY or hard >= need_fds:
            resource.setrlimit(resource.RLIMIT_NOFILE, (need_fds, hard))
            pf.facts["nofile_raised_to"] = need_fds
        else:
            pf.failures.append(
                f"open-file limit {soft} (hard {hard}) is below the {need_fds} that concurrency {peak} needs; "
                "raise it (ulimit -n, or LimitNOFILE= in the unit)"
            )
    nproc_soft, _ = resource.getrlimit(resource.RLIMIT_NPROC)
    if nproc_soft != resource.RLIM_INFINITY:
        uid = os.getuid()
        mine = sum(1 for p in psutil.process_iter(["uids"]) if p.info["uids"] and p.info["uids"].real == uid)
        need = mine + peak * PROCS_PER_INSTANCE + 16
        if nproc_soft < need:
            pf.failures.append(
                f"process limit {nproc_soft} leaves no room for {peak * PROCS_PER_INSTANCE} more processes "
                f"({mine} running as uid {uid}); raise it (ulimit -u)"
            )
    try:
        with open("/proc/sys/kernel/pid_max") as fh:
            pid_max = int(fh.read())
        if len(psutil.pids()) + peak * PROCS_PER_INSTANCE > pid_max:
            pf.failures.append(f"kernel.pid_max {pid_max} is too low for concurrency {peak}")
    except (OSError, ValueError):
        pass
    pf.facts["peak_concurrency"] = peak


def _ports(runner: CommandRunner, crr: Sequence[Test], client: Endpoint, pf: Preflight) -> None:
    """TCP_CRR opens one connection per transaction: compare what each ``crr`` test may need with the port range."""
    argv = client.wrap(["cat", "/proc/sys/net/ipv4/ip_local_port_range", "/proc/sys/net/ipv4/tcp_tw_reuse"])
    out = runner.run(argv, timeout=10)
    lines = out.stdout.splitlines() if out.returncode == 0 else []
    rng = port_range(lines[0]) if lines else None
    if rng is None:
        pf.warnings.append("could not read the client's ephemeral port range; TCP_CRR port exhaustion not checked")
        return
    ports = rng[1] - rng[0] + 1
    reuse = lines[1].strip() if len(lines) > 1 else "?"
    pf.facts["ephemeral_ports"] = {"range": list(rng), "count": ports, "tcp_tw_reuse": reuse}
    for t in crr:
        ceiling = crr_ceiling(ports, t.duration)
        pf.warnings.append(
            f"{t.name}: TCP_CRR above {ceiling:,.0f} connections/s in total runs out of ephemeral ports in "
            f"{t.duration} s ({ports} ports {rng[0]}-{rng[1]}, TIME_WAIT {TIME_WAIT_S} s, tcp_tw_reuse={reuse}); "
            "steps that reach it are flagged"
        )
        pf.facts.setdefault("crr_ceiling_per_s", {})[t.name] = round(ceiling, 1)


def fragment_failures(
    fragments: Sequence[tuple[str, Optional[Policy]]], cases: Sequence[Case], engine: PolicyEngine,
    guests: GuestSource, host_label: Optional[str],
) -> list[str]:  # fmt: skip
    """Plan every policy fragment (label, policy) against the switch now (changes nothing), so a selector that
    matches no VIF fails the run before the first case, not after the earlier cases ran; and refuse ``cases``
    that monitor where no collector can listen."""
    failures = []
    if any(c.monitors() for c in cases):
        if not hasattr(guests, "start_collector"):
            failures.append("cases that monitor (monitor:, phases:) need the lab's sFlow/IPFIX collectors")
        elif host_label is not None:
            failures.append(
                f"cases that monitor run on the built-in lab's switch, not on {host_label}: the "
                "collector listens on this machine's loopback, where only that ovs-vswitchd can send"
            )
    for label, policy in fragments:
        if policy is None:
            continue
        try:
            engine.plan(policy)
        except HvnetError as exc:
            failures.append(f"{label}: {exc}")
    return failures
