"""A remote hypervisor over SSH, with nothing installed there: the system OpenSSH client.

One multiplexed connection per host (OpenSSH's ControlMaster) carries every
program hvnet runs there and the forwarded OVSDB socket; it is opened once
and closed when hvnet exits.  The system client is used, not a Python SSH
library, so ``~/.ssh/config``, agents, ProxyJump, certificates and
``known_hosts`` behave as operators expect.

* Arguments are data: each one is quoted for the remote shell
  (:func:`remote_command`), so a VIF or VM name holding spaces, ``;``,
  ``$(...)`` or quotes reaches the program as it was given.
* Host keys are checked strictly and never added by hvnet: an unknown or
  changed key is refused with its fingerprint and the command that accepts it.
* Failures say which host and why: unreachable (exit 3), authentication
  refused, host key, a missing program (exit 4).  A remote program that
  itself exits 255 (ssh's own failure status) is told apart by asking the
  master whether it is still up (``ssh -O check``).
* The master never outlives hvnet: a watcher process holding the read end of
  a pipe only hvnet writes to closes it when hvnet is gone, even SIGKILLed
  (and ``ControlPersist`` is bounded besides).
* A long-lived process (the agent) asks :meth:`SshSession.alive` and calls
  :meth:`SshSession.reconnect`, which opens the master again on the same
  control path and re-creates the forwardings.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import tempfile
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

from appliance.core.errors import EXIT_UNREACHABLE, CommandFailed, CommandTimedOut, HvnetError, MissingTool, UsageError
from appliance.core.proc import shown_argv
from appliance.core.runner import LocalRunner

SSH_FAILED = 255  # ssh's own exit status when the connection, not the remote program, failed
# How long an idle master waits for a client before exiting, should the watcher be gone too.
CONTROL_PERSIST_S = 120
# The watcher: wait for EOF on stdin (hvnet gone), then close the master and remove its directory,
# unless hvnet's own close() already did (then it costs nothing more). A fixed script; the directory
# and the ssh argv are its positional arguments, never code.
_WATCHER = ('cat >/dev/null; dir=$1; shift; [ -S "$dir/master" ] && "$@" >/dev/null 2>&1; '
            '[ -d "$dir" ] && rm -rf -- "$dir"; exit 0')  # fmt: skip
_NAME = re.compile(r"^[A-Za-z0-9_.-]{1,253}$|^\[[0-9A-Fa-f:.]{2,45}\]$")
_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}$")


class HostUnreachable(HvnetError):
    """The SSH connection to a hypervisor could not be made or was lost."""

    exit_code = EXIT_UNREACHABLE


class AuthRefused(HostUnreachable):
    """The hypervisor's sshd refused hvnet's user or key: retrying will not help, a person must act."""


class HostKeyRefused(HvnetError):
    """The hypervisor's host key is unknown or has changed; hvnet never accepts one by itself."""

    exit_code = EXIT_UNREACHABLE


@dataclass(frozen=True)
class SshTarget:
    """``[USER@]NAME[:PORT]``: where a hypervisor's sshd answers."""

    name: str
    user: str | None = None
    port: int | None = None

    @classmethod
    def parse(cls, text: str, what: str = "--host") -> SshTarget:
        """Parse and validate; bad input is a usage error naming the option (nothing is contacted)."""
        user = port = None
        rest = text.strip()
        if "@" in rest:
            user, rest = rest.rsplit("@", 1)
            if not _USER.match(user):
                raise UsageError(f"{what}: {user!r} is not a user name")
        if rest.startswith("["):  # [IPv6]:port
            host, _, tail = rest.partition("]")
            rest, host = tail, host + "]"
            port_text = rest[1:] if rest.startswith(":") else None
        else:
            host, _, port_text = rest.partition(":")
            port_text = port_text or None
        if port_text is not None:
            if not port_text.isascii() or not port_text.isdigit() or not 0 < int(port_text) < 65536:
                raise UsageError(f"{what}: port {port_text!r} must be a number from 1 to 65535")
            port = int(port_text)
        if not _NAME.match(host) or host.startswith("-"):
            raise UsageError(f"{what}: {host!r} is not a host name or address")
        return cls(host, user, port)

    @property
    def destination(self) -> str:
        host = self.name.strip("[]")
        return f"{self.user}@{host}" if self.user else host

    def __str__(self) -> str:
        return f"{self.user + '@' if self.user else ''}{self.name}{':' + str(self.port) if self.port else ''}"


def remote_command(argv: Sequence[str], env: Mapping[str, str] | None = None) -> str:
    """One remote shell command line running ``argv`` with every argument quoted: data, never code."""
    if not argv:
        raise ValueError("empty command")
    words = [shlex.quote(a) for a in argv]
    if env:
        for key in env:
            if not re.match(r"^[A-Za-z_][A-Za-z0-9_]*$", key):
                raise ValueError(f"not an environment variable name: {key!r}")
        words = ["env", *(shlex.quote(f"{k}={v}") for k, v in env.items()), *words]
    return " ".join(words)


@dataclass
class SshOptions:
    """What the front door knows about reaching hosts (the inventory or the lab fills it in)."""

    known_hosts: Path | None = None  # else the user's own (~/.ssh/known_hosts)
    identity: Path | None = None
    config: Path | None = None
    connect_timeout: float = 10.0


class SshSession:
    """One ControlMaster connection to a hypervisor, owned by this process."""

    def __init__(self, target: SshTarget, options: SshOptions | None = None) -> None:
        self.target = target
        self.options = options or SshOptions()
        self._dir = Path(tempfile.mkdtemp(prefix="hvnet-ssh-"))  # private (0700): the control socket
        self.control = self._dir / "master"
        self.opened = False
        self.closed = False
        self.local = LocalRunner()  # ssh, ssh-keyscan, ssh-keygen: run here, like any program hvnet starts
        self._settings: dict[str, str] | None = None
        self._forwards: list[tuple[Path, str]] = []  # made again by reconnect()
        self._watcher: subprocess.Popen[bytes] | None = None
        self._watch_fd: int | None = None

    # -- argv -------------------------------------------------------------------

    def ssh_argv(self, *extra: str) -> list[str]:
        """``ssh`` with this session's options, before the destination."""
        o = self.options
        argv = ["ssh", "-S", str(self.control), "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes",
                "-o", f"ConnectTimeout={max(1, int(o.connect_timeout))}", "-o", "ServerAliveInterval=5",
                "-o", "ServerAliveCountMax=3"]  # fmt: skip
        if self.target.port:
            argv += ["-p", str(self.target.port)]
        if o.known_hosts is not None:
            argv += ["-o", f"UserKnownHostsFile={o.known_hosts}"]
        if o.identity is not None:
            argv += ["-i", str(o.identity), "-o", "IdentitiesOnly=yes"]
        if o.config is not None:
            argv += ["-F", str(o.config)]
        return [*argv, *extra]

    def command(self, argv: Sequence[str], env: Mapping[str, str] | None = None, *, stdin: bool = False) -> list[str]:
        """The local argv that runs ``argv`` on the host over the open master.

        Without ``stdin`` the program reads nothing (``ssh -n``): it never takes hvnet's own input.
        """
        return [*self.ssh_argv(*([] if stdin else ["-n"])), "--", self.target.destination, remote_command(argv, env)]

    # -- lifetime -----------------------------------------------------------------

    def open(self) -> None:
        """Start the master (backgrounded by ssh itself once authenticated); errors name the host.

        A host that cannot be reached leaves nothing behind: the session is closed.
        """
        if self.opened:
            return
        if self.closed:
            raise HostUnreachable(f"{self.target}: the SSH session was closed")
        try:
            self._start_master()
        except HvnetError:
            self.close()
            raise

    def _start_master(self) -> None:
        argv = self.ssh_argv("-o", "ControlMaster=yes", "-o", f"ControlPersist={CONTROL_PERSIST_S}", "-f", "-N", "--")
        try:
            res = self.local.run(
                [*argv, self.target.destination], check=False, timeout=self.options.connect_timeout + 20
            )
        except CommandFailed:  # no answer within the timeout
            raise HostUnreachable(
                f"{self.target}: no SSH connection within {self.options.connect_timeout:g} s"
            ) from None
        if res.returncode != 0:
            raise self.failure(res.stderr)
        self.opened = True
        self._watch()

    def _watch(self) -> None:
        """Tie the master to this process: a watcher closes it once hvnet is gone, however it went.

        The watcher reads a pipe whose write end only this process holds (not
        inherited: Python's pipes are close-on-exec); the kernel closes it
        when hvnet exits or is killed, and the watcher then runs ``ssh -O
        exit`` on the control socket and removes the session's directory.
        """
        if self._watcher is not None:
            return
        read_end, write_end = os.pipe()
        exit_argv = self.ssh_argv("-O", "exit", "--", self.target.destination)
        try:
            self._watcher = self.local.popen(
                ["sh", "-c", _WATCHER, "hvnet-ssh-watch", str(self._dir), *exit_argv], stdin=read_end,
                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True,
            )  # fmt: skip
        except BaseException:
            os.close(write_end)
            raise
        finally:
            os.close(read_end)
        self._watch_fd = write_end

    def alive(self) -> bool:
        """Whether the master still answers on its control socket (``ssh -O check``)."""
        if not self.opened or self.closed:
            return False
        argv = self.ssh_argv("-O", "check", "--", self.target.destination)
        try:
            return self.local.run(argv, check=False, timeout=10).returncode == 0
        except CommandFailed:
            return False

    def reconnect(self) -> None:
        """Open the master again (after sshd restarted or the network came back) and re-create the forwardings.

        Same control path and forwarded socket paths, so every user of the
        session (the runner, the OVSDB connection) finds it where it was.
        """
        if self.closed:
            raise HostUnreachable(f"{self.target}: the SSH session was closed")
        if self.opened:
            self.local.run(self.ssh_argv("-O", "exit", "--", self.target.destination), check=False, timeout=10)
            self.opened = False
        self.control.unlink(missing_ok=True)
        forwards, self._forwards = self._forwards, []
        try:
            self._start_master()  # a failure leaves the session as it is, for the next attempt
            for local, remote in forwards:
                self.forward_unix(local, remote)
        except BaseException:
            self._forwards = forwards  # the next attempt makes them again
            raise

    def forward_unix(self, local: Path, remote: str) -> None:
        """Forward the local socket ``local`` to the host's unix socket ``remote`` over the master."""
        local.unlink(missing_ok=True)  # left by a master that is gone (reconnect)
        argv = self.ssh_argv("-O", "forward", "-L", f"{local}:{remote}", "--", self.target.destination)
        res = self.local.run(argv, check=False, timeout=15)
        if res.returncode != 0:
            raise HostUnreachable(f"{self.target}: cannot forward {remote}: {_last_line(res.stderr)}")
        self._forwards.append((local, remote))

    def close(self) -> None:
        """Stop the master (and with it every forwarding) and its watcher; idempotent."""
        if self.opened:
            argv = self.ssh_argv("-O", "exit", "--", self.target.destination)
            try:
                self.local.run(argv, check=False, timeout=10)
            except CommandFailed:
                pass  # a master that does not answer goes with its socket below
            self.opened = False
        self.closed = True
        if self._dir.exists():
            for p in self._dir.iterdir():
                p.unlink(missing_ok=True)
            self._dir.rmdir()
        if self._watch_fd is not None:
            os.close(self._watch_fd)  # the watcher wakes, finds nothing left to close, and exits
            self._watch_fd = None
        if self._watcher is not None:
            try:
                self._watcher.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self._watcher.kill()
            self._watcher = None

    @property
    def work_dir(self) -> Path:
        """This session's private directory (the control socket, the forwarded OVSDB socket)."""
        return self._dir

    # -- errors -------------------------------------------------------------------

    def failure(self, stderr: str) -> HvnetError:
        """What ssh's own failure (exit 255) means, said for this host."""
        text = stderr.strip()
        if "REMOTE HOST IDENTIFICATION HAS CHANGED" in text or "Host key verification failed" in text:
            changed = "HAS CHANGED" in text
            keys, fingerprints = self._offered_keys()
            offers = ("; the host offers:\n  " + "\n  ".join(fingerprints)) if fingerprints else ""
            return HostKeyRefused(
                f"{self.target}: host key {'has CHANGED' if changed else 'is not known'}; hvnet never accepts "
                f"one by itself{offers}",
                hint=self._accept_hint(changed, keys),
            )
        if "Permission denied" in text or "Too many authentication failures" in text:
            return AuthRefused(
                f"{self.target}: authentication refused ({_last_line(text)})",
                hint="check the SSH user and key (ssh-agent, -i in the inventory or ~/.ssh/config)",
            )
        return HostUnreachable(f"{self.target}: cannot connect over SSH: {_last_line(text) or 'no reason given'}")

    def settings(self) -> dict[str, str]:
        """The options ssh applies to the target (``~/.ssh/config`` or -F included: ``ssh -G``), read once."""
        if self._settings is None:
            res = self.local.run([*self.ssh_argv("-G", "--"), self.target.destination], check=False, timeout=10)
            self._settings = dict(line.split(" ", 1) for line in res.stdout.splitlines() if " " in line)
        return self._settings

    def resolved(self) -> tuple[str, int]:
        """The address and port ssh would use for the target."""
        found = self.settings()
        port = found.get("port", "22")
        return found.get("hostname", self.target.name.strip("[]")), int(port) if port.isdigit() else 22

    def _offered_keys(self) -> tuple[list[str], list[str]]:
        """The keys the host offers now, as known_hosts lines, and their fingerprints: scanned once, so
        that the lines the hint says to add are the very keys whose fingerprints the operator compares."""
        try:
            address, port = self.resolved()
            argv = ["ssh-keyscan", "-T", "5", "-p", str(port), address]
            keys = key_lines(self.local.run(argv, check=False, timeout=10).stdout)
            if not keys:
                return [], []
            fps = self.local.run(["ssh-keygen", "-lf", "-"], check=False, timeout=10, input_text="\n".join(keys) + "\n")
        except HvnetError:  # not installed, or no answer: the refusal is said without fingerprints
            return [], []
        return keys, [line for line in fps.stdout.splitlines() if line.strip()]

    def _accept_hint(self, changed: bool, keys: list[str]) -> str:
        known = self.options.known_hosts or self._known_hosts_file()
        try:
            address, port = self.resolved()
        except HvnetError:
            address, port = self.target.name.strip("[]"), self.target.port or 22
        return accept_hint(changed, address, port, str(known), keys)

    def _known_hosts_file(self) -> str:
        try:
            found = self.settings().get("userknownhostsfile", "")
        except HvnetError:
            found = ""
        return found.split()[0] if found else "~/.ssh/known_hosts"


def key_lines(scan: str) -> list[str]:
    """The known_hosts lines in ``ssh-keyscan``'s output (``HOST TYPE KEY``), its comments left out."""
    return [line.strip() for line in scan.splitlines() if line.strip() and not line.lstrip().startswith("#")
            and len(line.split()) >= 3]  # fmt: skip


def accept_hint(changed: bool, address: str, port: int, known: str, keys: list[str]) -> str:
    """What to do about a refused host key: compare, then add exactly the key lines just scanned (never a
    command that scans again: a second scan could answer with another key than the one compared)."""
    entry = address if port == 22 else f"[{address}]:{port}"
    first = f"ssh-keygen -R {shlex.quote(entry)} -f {known}; then " if changed else ""
    if not keys:
        return (f"no key could be read from the host now; {first}add its key, read on its console "
                f"(/etc/ssh/ssh_host_*_key.pub, as '{entry} TYPE KEY'), to {known}")  # fmt: skip
    return (
        f"compare the fingerprints above with the host's console ('ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub'"
        f" there), then: {first}append these lines, the keys those fingerprints are of, to {known}:\n    "
        + "\n    ".join(keys)
    )


class SshRunner:
    """The :class:`~appliance.core.runner.CommandRunner` for a remote hypervisor: every program over one master."""

    local = False

    def __init__(self, session: SshSession) -> None:
        self.session = session
        self._found: dict[str, str | None] = {}

    @property
    def host(self) -> str:
        return str(self.session.target)

    def which_optional(self, program: str) -> str | None:
        if program not in self._found:
            res = self._run(["sh", "-c", 'command -v -- "$1"', "sh", program], timeout=30)
            path = res.stdout.strip().splitlines()
            self._found[program] = path[0] if res.returncode == 0 and path else None
        return self._found[program]

    def which(self, program: str) -> str:
        found = self.which_optional(program)
        if found is None:
            raise MissingTool(f"{program} is not installed on {self.host}", hint=f"install it on {self.host}")
        return found

    def run(
        self,
        argv: Sequence[str],
        *,
        check: bool = True,
        env: Mapping[str, str] | None = None,
        timeout: float = 60.0,
        input_text: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        res = self._run(argv, env=env, timeout=timeout, input_text=input_text)
        if check and res.returncode != 0:
            if res.returncode == 127 and self.which_optional(argv[0]) is None:
                raise MissingTool(f"{argv[0]} is not installed on {self.host}", hint=f"install it on {self.host}")
            raise CommandFailed([f"{self.host}:", *argv], res.returncode, res.stderr or res.stdout)
        return res

    def _run(
        self,
        argv: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        timeout: float = 60.0,
        input_text: str | None = None,
    ) -> subprocess.CompletedProcess[str]:
        self.session.open()
        command = self.session.command(argv, env, stdin=input_text is not None)
        try:
            res = self.session.local.run(command, check=False, timeout=timeout, input_text=input_text)
        except CommandTimedOut:  # the local ssh ran out of time: say it of the remote program
            raise CommandTimedOut([f"{self.host}:", *argv], -1, f"no result within {timeout:g} s") from None
        except CommandFailed as exc:  # output that is not UTF-8, an argument list too long for ssh
            raise CommandFailed([f"{self.host}:", *shown_argv(argv)], exc.returncode, exc.stderr) from None
        if res.returncode == SSH_FAILED and _ssh_failed(res.stderr) and not self.session.alive():
            # ssh's own failure; with the master still up it was the remote program's exit 255
            raise self.session.failure(res.stderr)
        return res

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
        if pass_fds:
            raise HvnetError(f"cannot pass file descriptors to a program on {self.host}")
        self.session.open()
        return self.session.local.popen(self.session.command(argv, env, stdin=stdin is not None), stdin=stdin,
                                        stdout=stdout, stderr=stderr, start_new_session=start_new_session)  # fmt: skip

    def close(self) -> None:
        self.session.close()

    def read_text(self, path: str) -> str | None:
        res = self._run(["cat", "--", path], timeout=30)
        return res.stdout if res.returncode == 0 else None

    def exists(self, path: str) -> bool:
        return self._run(["test", "-e", path], timeout=30).returncode == 0


def _ssh_failed(stderr: str) -> bool:
    """Whether exit 255 came from ssh itself (a remote program may exit 255 too)."""
    return bool(re.search(r"^(ssh:|Host key|Permission denied|Connection|kex_|mux_|Control socket|@@@)",
                          stderr, re.M))  # fmt: skip


def _last_line(text: str) -> str:
    lines = [line for line in text.strip().splitlines() if line.strip()]
    return lines[-1] if lines else ""
