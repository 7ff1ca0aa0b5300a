"""Probe verbs: probes as a guest source for a run, and the operator's ``probes list|clean``.

A :class:`ProbeSource` is what a suite or an isolation check gets instead of
the lab when its file names ``probes:``: it removes what earlier runs left
behind on that host, adds this run's probes (port recorded first, then the
namespace and veth, duplicate-address detection, the address), renews their
expiry while the run lasts and removes them when it ends -- also when the run
fails or is interrupted.  A SIGKILL leaves them: the next run on that host, or
``hvnet probes clean``, removes them.
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Optional

from appliance.core import proc
from appliance.core.errors import HvnetError, MissingTool, UsageError
from appliance.core.ovsdb import Connection
from appliance.endpoints.guests import GuestEndpoint
from appliance.endpoints.topology import Topology
from appliance.probes import lifecycle
from appliance.probes import spec as sp
from appliance.probes.spec import FoundProbe, ProbeSpec
from appliance.switch.host import Host

PROBE_TOOLS = ("ip", "ethtool", "arping")  # to make a probe
SUITE_TOOLS = ("netperf", "netserver")  # to run a suite's endpoints inside probes


def where(host: Host) -> str:
    return host.label or "this machine"


def require_tools(host: Host, tools: tuple[str, ...]) -> None:
    """Every tool on the host that runs the probes, or exit 4 naming the host, the tools and their packages
    (hvnet copies no binaries onto a hypervisor: they are installed there by its operator)."""
    missing = [t for t in tools if host.runner.which_optional(t) is None]
    if missing:
        packages = "; ".join(f"{t}: {proc.PACKAGE_OF.get(t, t)}" for t in missing)
        raise MissingTool(
            f"{', '.join(missing)} {'is' if len(missing) == 1 else 'are'} not installed on {where(host)}, "
            "which runs the probes",
            hint=f"install on {where(host)}: {packages} (hvnet does not copy programs onto hosts)",
        )


class ProbeSource:
    """This run's probes on ``host``'s switch: a GuestSource for the engine (see the module docstring)."""

    def __init__(self, host: Host, specs: list[ProbeSpec], *, tools: tuple[str, ...] = SUITE_TOOLS,
                 timeout: float = 10.0, lease_s: float = sp.LEASE_S) -> None:  # fmt: skip
        self.host = host
        self.specs = specs
        self.tools = tools
        self.timeout = timeout
        self.lease_s = lease_s
        self.owner = lifecycle.owner_id()
        self.cleaned: list[str] = []  # what was removed of earlier runs before this one started
        self._conn: Optional[Connection] = None
        self._placements: list[lifecycle.Placement] = []
        self._stop = threading.Event()
        self._renewer: Optional[threading.Thread] = None

    # -- GuestSource ------------------------------------------------------------------------------

    def require(self, topology: Topology, names: list[str]) -> dict[str, GuestEndpoint]:
        """The probes ``names`` as endpoints (they are up while this source is open)."""
        by_name = {pl.spec.name: pl for pl in self._placements}
        missing = [n for n in names if n not in by_name]
        if missing:
            raise UsageError(f"no probe {', '.join(missing)} is up on {where(self.host)}",
                             hint="probes: " + (", ".join(by_name) or "none"))  # fmt: skip
        return {n: lifecycle.endpoint(by_name[n], remote=not self.host.runner.local) for n in names}

    # -- life cycle ------------------------------------------------------------------------------

    def __enter__(self) -> ProbeSource:
        self.up()
        return self

    def __exit__(self, *exc: object) -> None:
        self.down()

    def up(self) -> None:
        """Clean up after earlier runs, then add every probe; on any failure nothing of this run is left."""
        require_tools(self.host, PROBE_TOOLS + self.tools)
        self._conn = self.host.connect(lifecycle.columns(), timeout=self.timeout)
        try:
            self.cleaned = lifecycle.remove(
                self._conn, self.host, [f for f, _ in lifecycle.stale(lifecycle.find(self._conn))]
            )
            placements = lifecycle.place(self._conn, self.specs)
            self._placements = placements
            lifecycle.record(self._conn, placements, self.owner, self.lease_s)
            lifecycle.limit(self._conn, placements)
            for pl in placements:
                lifecycle.plumb(self.host, pl.spec)
            lifecycle.wait_attached(self._conn, placements)
            flavour = lifecycle.arping_flavour(self.host)
            with ThreadPoolExecutor(max_workers=max(1, len(placements))) as pool:  # DAD waits: all at once
                for f in [pool.submit(lifecycle.claim, self.host, pl.spec, flavour) for pl in placements]:
                    f.result()
        except BaseException:
            self.down()
            raise
        self._renewer = threading.Thread(target=self._renew, name="hvnet-probe-renew", daemon=True)
        self._renewer.start()

    def _renew(self) -> None:
        names = [pl.spec.name for pl in self._placements]
        while not self._stop.wait(self.lease_s / 4):
            try:
                assert self._conn is not None
                lifecycle.renew(self._conn, names, self.owner, self.lease_s)
            except HvnetError:  # the switch went away: the probes expire; the run reports what failed
                continue

    def down(self) -> list[str]:
        """Remove this run's probes (only the ones it marked as its own); idempotent."""
        self._stop.set()
        if self._renewer is not None:
            self._renewer.join(timeout=5)
        if self._conn is None:
            return []
        try:
            mine = {pl.spec.dev for pl in self._placements}
            found = [f for f in lifecycle.find(self._conn) if f.port in mine and f.owner == self.owner]
            done = lifecycle.remove(self._conn, self.host, found)
            # a probe whose port was never recorded may still have devices (a failure between the steps)
            recorded = {f.port for f in found}
            for pl in self._placements:
                if pl.spec.dev not in recorded:
                    done += lifecycle.unplumb(self.host, pl.spec.netns, pl.spec.dev)
            return done
        finally:
            self._conn.close()
            self._conn = None
            self._placements = []


# -- the operator's verbs ----------------------------------------------------------------------------


def list_probes(host: Host, timeout: float = 10.0) -> list[dict[str, Any]]:
    """Every probe port on the host's switch, with whether any run may remove it and why."""
    with host.connect(lifecycle.columns(), timeout=timeout) as conn:
        return listing(lifecycle.find(conn))


def listing(found: list[FoundProbe]) -> list[dict[str, Any]]:
    """Each probe found, with whether any run may remove it (its owner gone, or expired) and why."""
    why = {f.port: reason for f, reason in lifecycle.stale(found)}
    return [{**f.to_json(), "stale": f.port in why, "reason": why.get(f.port)} for f in found]


def clean(host: Host, *, all_probes: bool = False, timeout: float = 10.0) -> list[str]:
    """Remove the probes left behind (owner gone, or expired); ``all_probes``: every probe, even a live run's."""
    with host.connect(lifecycle.columns(), timeout=timeout) as conn:
        found = lifecycle.find(conn)
        victims: list[FoundProbe] = found if all_probes else [f for f, _ in lifecycle.stale(found)]
        return lifecycle.remove(conn, host, victims)


def wait_gone(host: Host, names: list[str], timeout: float = 5.0) -> bool:
    """Whether the probes ``names`` are off the switch within ``timeout`` (tests and benchmarks)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if not any(p["probe"] in names for p in list_probes(host)):
            return True
        time.sleep(0.1)
    return False
