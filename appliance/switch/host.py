"""The host hvnet manages: built once at the front door, passed down.

A :class:`Host` carries everything below the front ends would otherwise
discover for themselves: the OVSDB target, where state, the audit log and run
data live, where VM names come from, where ovs-vswitchd's control sockets are,
and the :class:`~appliance.core.runner.CommandRunner` every external program goes
through.  Modules below the front door take a Host (or the piece of it they
need) and never read ``HVNET_*`` variables, look for a lab or call
``subprocess`` themselves: that is what lets a remote hypervisor be the same
object with a different runner.
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Protocol

from appliance.core.runner import CommandRunner, LocalRunner
from appliance.core.target import DbTarget

if TYPE_CHECKING:
    from appliance.core.ovsdb import Connection
    from appliance.switch.names import NameSource

DEFAULT_STATE_DIR = Path("/var/lib/hvnet")
DEFAULT_POLICY_FILE = "/etc/hvnet/policy.yaml"  # what the agent enforces; policy commands' default file
DEFAULT_AUDIT_LOG = Path("/var/log/hvnet/audit.jsonl")
DEFAULT_DATA_DIR = DEFAULT_STATE_DIR  # runs and pcaps: kept (tmpfiles ages /var/tmp out), the package's 0700
DEFAULT_CACHE_DIR = Path("/run/hvnet")


@dataclass(frozen=True)
class DataPaths:
    """Where hvnet keeps what it writes for one host."""

    state_dir: Path = DEFAULT_STATE_DIR  # rollback records, the pending --no-commit apply, the watcher's log
    audit_log: Path = DEFAULT_AUDIT_LOG
    runs_dir: Path = DEFAULT_DATA_DIR / "runs"  # suite runs ('hvnet suite prune' removes old ones)
    captures_dir: Path = DEFAULT_DATA_DIR / "isolation"  # isolation checks' pcaps
    pcap_dir: Path = DEFAULT_DATA_DIR / "captures"  # 'hvnet capture': one directory per capture
    # a measurement's processes on the host (appliance.endpoints): one private work dir per group, removed after
    endpoints_dir: Path = DEFAULT_DATA_DIR / "endpoints"
    pcap_free_floor: str = "10%"  # free space a capture leaves on pcap_dir's file system (capture.disk)
    cache_dir: Path = DEFAULT_CACHE_DIR  # answers kept per boot (is tc policing enforced here?)

    @classmethod
    def for_lab(cls, run_dir: Path) -> DataPaths:
        """A lab keeps its state and audit log in its own run directory, gone with ``lab down`` (runs and
        pcaps made on it go where everyone's do: they are results to keep)."""
        return cls(state_dir=run_dir, audit_log=run_dir / "audit.jsonl")


@dataclass(frozen=True)
class NameConfig:
    """Where VM names come from: the settings, not the connections (those are opened lazily)."""

    libvirt_uri: str | None = None  # the front end's --libvirt choice
    environ: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # XAPI/libvirt settings
    static: Mapping[str, str] = field(default_factory=lambda: MappingProxyType({}))  # uuid -> name (the lab's)


class Link(Protocol):
    """What carries a remote hypervisor's programs and database (its SSH session)."""

    def alive(self) -> bool:
        """Whether the connection is up."""
        ...

    def reconnect(self) -> None:
        """Make it again (raises :class:`~appliance.core.errors.HvnetError` naming the host when it cannot)."""
        ...


class Host:
    """One hypervisor as hvnet sees it (see the module docstring)."""

    def __init__(
        self,
        target: DbTarget,
        *,
        paths: DataPaths | None = None,
        runner: CommandRunner | None = None,
        names: NameConfig | None = None,
        ovs_rundir: Path | None = None,
        stop_at: str | None = None,
        label: str | None = None,
    ) -> None:
        self.target = target
        self.label = label  # a remote hypervisor's name (``--host``); None for this machine
        self.stop_at = stop_at  # a fault drill's checkpoint (see checkpoint)
        self.paths = paths or DataPaths()
        self.runner: CommandRunner = runner or LocalRunner()
        # What runs on this machine whichever hypervisor the switch is on: hvnet's own children (the
        # --no-commit watcher) and a guest's argv (GuestEndpoint.argv: ip netns exec, a VM channel's client).
        self.local_runner: CommandRunner = self.runner if isinstance(self.runner, LocalRunner) else LocalRunner()
        self.names = names or NameConfig()
        if ovs_rundir is None and len(target.remotes) == 1 and target.remote.startswith("unix:"):
            ovs_rundir = Path(target.remote[5:]).parent  # ovs-vswitchd's sockets sit beside the database's
        self.ovs_rundir = ovs_rundir
        self._sources: list[NameSource] | None = None

    @property
    def remote(self) -> str:
        return self.target.remote

    @property
    def identity(self) -> str:
        """The switch as the journal names it: stable across runs (a remote host's forwarded socket is not)."""
        if self.label is not None:
            return f"ssh:{self.label}:{self.ovs_rundir}/db.sock"
        return self.target.remote

    @property
    def link(self) -> Link | None:
        """A remote host's connection, which a long-lived process (the agent) keeps up; None on this machine."""
        return getattr(self.runner, "session", None)

    def close(self) -> None:
        """Let go of what reaching the host holds (a remote host's SSH connection); idempotent."""
        close = getattr(self.runner, "close", None)
        if close is not None:
            close()

    def checkpoint(self, step: str) -> None:
        """A step of an apply where a fault drill may stop this process (``$HVNET_STOP_AT``).

        Operators rehearse failures the way the test suite does: stop hvnet
        at a step (it says so on stderr and stops itself with SIGSTOP), break
        something -- kill ovsdb-server, stop ovs-vswitchd, kill hvnet -- then
        continue it (SIGCONT) and watch what the journal and ``rollback`` make
        of it.  Steps: ``before-commit`` (the intent is written, nothing is
        sent), ``committed``, ``recorded``, ``meters``, ``verified``.
        """
        if self.stop_at == step:
            self.stop_at = None  # once: a transaction re-planned after TRY_AGAIN passes the step again
            sys.stderr.write(f"hvnet: stopped at {step} (pid {os.getpid()}); SIGCONT continues\n")
            sys.stderr.flush()
            os.kill(os.getpid(), signal.SIGSTOP)

    def describe(self) -> str:
        return self.target.describe()

    # -- OVSDB -------------------------------------------------------------------

    def connect(self, columns: dict[str, list[str]], *, timeout: float = 5.0, sync: bool = True) -> Connection:
        """Open an OVSDB connection registered for ``columns`` (what the caller will read or write).

        ``sync=False``: see :meth:`appliance.core.ovsdb.Connection.open`.
        """
        from appliance.core.ovsdb import Connection

        return Connection.open(self.target, columns, timeout=timeout, sync=sync)

    # -- VM names ------------------------------------------------------------------

    def name_sources(self) -> list[NameSource]:
        """libvirt, XAPI and static names, built once per Host (their connections are kept)."""
        if self._sources is None:
            from appliance.switch import names

            self._sources = names.default_sources(
                dict(self.names.static), self.names.environ, self.names.libvirt_uri,
                this_host=self.label is None and isinstance(self.runner, LocalRunner),
            )  # fmt: skip
        return self._sources

    # -- OVS's own tools -------------------------------------------------------------

    @property
    def ovs_env(self) -> dict[str, str]:
        """The environment that makes ovs-appctl/ovs-ofctl find this switch's sockets."""
        return {"OVS_RUNDIR": str(self.ovs_rundir)} if self.ovs_rundir else {}

    def daemon_ctl(self, daemon: str) -> str | None:
        """``daemon``'s unixctl socket in the OVS run directory (see :func:`daemon_ctl`)."""
        return daemon_ctl(self.ovs_rundir, daemon, self.runner) if self.ovs_rundir is not None else None

    def appctl(self, daemon: str, *args: str, check: bool = True, timeout: float = 30.0) -> str:
        """``ovs-appctl -t DAEMON ARGS`` against this switch's daemon; its output."""
        ctl = self.daemon_ctl(daemon) or daemon
        res = self.runner.run(["ovs-appctl", "-t", ctl, *args], check=check, env=self.ovs_env, timeout=timeout)
        return res.stdout

    def __repr__(self) -> str:
        return f"Host({self.target.describe()})"


def daemon_pid(rundir: Path, daemon: str, runner: CommandRunner | None = None) -> int | None:
    """The pid an OVS daemon wrote in its run directory (``DAEMON.pid``), or None (read on the runner's host)."""
    text = (runner or LocalRunner()).read_text(str(rundir / f"{daemon}.pid"))
    try:
        return int(text.strip()) if text else None
    except ValueError:
        return None


def daemon_ctl(rundir: Path, daemon: str, runner: CommandRunner | None = None) -> str | None:
    """An OVS daemon's unixctl socket: ``DAEMON.ctl`` (hvnet's lab names it so) or ``DAEMON.PID.ctl``."""
    runner = runner or LocalRunner()
    fixed = rundir / f"{daemon}.ctl"
    if runner.exists(str(fixed)):
        return str(fixed)
    pid = daemon_pid(rundir, daemon, runner)
    if pid is None:
        return None
    ctl = rundir / f"{daemon}.{pid}.ctl"
    return str(ctl) if runner.exists(str(ctl)) else None
