"""The command runner: the one way hvnet starts an external program.

Every program hvnet runs on the host it manages (ovs-ofctl, ovs-appctl, tc,
ip, ethtool, netperf, netserver, tcpdump, arping) goes through a
:class:`CommandRunner` that the :class:`~appliance.switch.host.Host` carries, with an
argument list and never a shell.  :class:`LocalRunner` runs them here; a
runner for a remote hypervisor quotes each argument for the remote shell and
sends it over SSH, and nothing that calls the runner has to change.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any, Protocol

from appliance.core import proc

if TYPE_CHECKING:
    import subprocess


class CommandRunner(Protocol):
    """Runs programs on one host."""

    @property
    def local(self) -> bool:
        """True when the programs run on this machine (paths and namespaces are ours)."""
        ...

    def which(self, program: str) -> str:
        """The program's full path, or :class:`~appliance.core.errors.MissingTool` with the package to install."""
        ...

    def which_optional(self, program: str) -> str | None:
        """Like :meth:`which`, None when the program is absent."""
        ...

    def run(
        self,
        argv: Sequence[str],
        *,
        check: bool = True,
        env: Mapping[str, str] | None = None,
        timeout: float = 60.0,
        input_text: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        """Run to completion (text mode); ``check`` raises :class:`~appliance.core.errors.CommandFailed`."""
        ...

    def popen(
        self,
        argv: Sequence[str],
        *,
        stdin: int | IO[Any] | None = None,
        stdout: int | IO[Any] | None = None,
        stderr: int | IO[Any] | None = None,
        env: Mapping[str, str] | None = None,
        pass_fds: Sequence[int] = (),
        start_new_session: bool = False,
    ) -> subprocess.Popen[bytes]:
        """Start a long-running program (captures, netservers, batches); the caller waits for it."""
        ...

    def read_text(self, path: str) -> str | None:
        """A small file on the host (a pidfile, a counter), None when it cannot be read."""
        ...

    def exists(self, path: str) -> bool:
        """Whether ``path`` exists on the host (a socket, a pidfile)."""
        ...


class LocalRunner:
    """Programs on this machine, as argument lists (see :mod:`appliance.core.proc`)."""

    local = True

    def which(self, program: str) -> str:
        return proc.which(program)

    def which_optional(self, program: str) -> str | None:
        return proc.which_optional(program)

    def run(
        self,
        argv: Sequence[str],
        *,
        check: bool = True,
        env: Mapping[str, str] | None = None,
        timeout: float = 60.0,
        input_text: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        return proc.run(argv, check=check, env=env, timeout=timeout, input_text=input_text)

    def popen(
        self,
        argv: Sequence[str],
        *,
        stdin: int | IO[Any] | None = None,
        stdout: int | IO[Any] | None = None,
        stderr: int | IO[Any] | None = None,
        env: Mapping[str, str] | None = None,
        pass_fds: Sequence[int] = (),
        start_new_session: bool = False,
    ) -> subprocess.Popen[bytes]:
        return proc.popen(
            argv, stdin=stdin, stdout=stdout, stderr=stderr, env=env, pass_fds=pass_fds,
            start_new_session=start_new_session,
        )  # fmt: skip

    def read_text(self, path: str) -> str | None:
        try:
            with open(path, encoding="utf-8", errors="replace") as fh:
                return fh.read()
        except OSError:
            return None

    def exists(self, path: str) -> bool:
        return os.path.exists(path)


def in_netns(netns: str, argv: Sequence[str]) -> list[str]:
    """The argv that runs ``argv`` inside network namespace ``netns``."""
    return proc.in_netns(netns, argv)
