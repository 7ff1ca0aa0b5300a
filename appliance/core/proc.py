"""Running system programs: argument lists only, never a shell.

Interface names and values come from files and operators; they are passed as
separate argv elements so no quoting mistake can turn them into commands.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from typing import IO, TYPE_CHECKING, Any

from appliance.core.errors import CommandFailed, CommandTimedOut, MissingTool

# subprocess is loaded by the first command run (shutil by the first lookup): a verb that runs none
# (hvnet status on the local host) does without it.
if TYPE_CHECKING:
    import subprocess

# The Debian/EL package that provides each program, for "install X" hints.
PACKAGE_OF = {
    "ovs-vsctl": "openvswitch-switch (Debian) / openvswitch (EL)",
    "ovs-appctl": "openvswitch-switch (Debian) / openvswitch (EL)",
    "ovs-ofctl": "openvswitch-switch (Debian) / openvswitch (EL)",
    "ovsdb-server": "openvswitch-switch (Debian) / openvswitch (EL)",
    "ovsdb-tool": "openvswitch-switch (Debian) / openvswitch (EL)",
    "ovs-vswitchd": "openvswitch-switch (Debian) / openvswitch (EL)",
    "ip": "iproute2 (Debian) / iproute (EL)",
    "ethtool": "ethtool",
    "netperf": "netperf (Debian non-free; hvnet's netperf RPM on EL)",
    "netserver": "netperf (Debian non-free; hvnet's netperf RPM on EL)",
    "tcpdump": "tcpdump",
    "arping": "arping (Debian) / iputils (EL)",
    "ping": "iputils-ping (Debian) / iputils (EL)",
}

# Where root's tools live even when PATH is a user's minimal one.
_EXTRA_PATH = ("/usr/sbin", "/sbin", "/usr/local/sbin")


def which(program: str) -> str:
    """Return the full path of ``program`` or raise :class:`MissingTool`."""
    import shutil

    found = shutil.which(program)
    if found is None:
        for directory in _EXTRA_PATH:
            candidate = os.path.join(directory, program)
            if os.access(candidate, os.X_OK):
                return candidate
        pkg = PACKAGE_OF.get(program, program)
        raise MissingTool(f"{program} is not installed", hint=f"install the package {pkg}")
    return found


def which_optional(program: str) -> str | None:
    """Like :func:`which`, but ``None`` when the program is absent."""
    try:
        return which(program)
    except MissingTool:
        return None


def run(
    argv: Sequence[str],
    *,
    check: bool = True,
    env: Mapping[str, str] | None = None,
    timeout: float = 60.0,
    input_text: str | None = None,
) -> subprocess.CompletedProcess[str]:
    """Run ``argv`` and return the completed process (text mode).

    ``env`` entries are added to the current environment.  With ``check`` a
    non-zero exit raises :class:`CommandFailed` carrying stderr.  So do the
    failures that are not the program's exit: output that is not UTF-8 (a
    name the program prints as bytes hvnet cannot read) and an argument list
    the kernel refuses (E2BIG: a policy with thousands of names in one call),
    so every caller that handles hvnet's errors handles these too.
    """
    import subprocess

    args = [which(argv[0]), *argv[1:]]
    full_env = None
    if env:
        full_env = dict(os.environ)
        full_env.update(env)
    try:
        proc = subprocess.run(
            args,
            capture_output=True,
            text=True,
            env=full_env,
            timeout=timeout,
            input=input_text,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise CommandTimedOut(list(argv), -1, f"no result within {timeout:g} s") from None
    except UnicodeDecodeError as exc:
        raise CommandFailed(shown_argv(argv), -1, f"its output is not UTF-8 text ({exc.reason} at byte "
                            f"{exc.start}); hvnet reads only UTF-8") from None  # fmt: skip
    except OSError as exc:  # E2BIG, ENOEXEC, EACCES: the program never ran
        raise CommandFailed(shown_argv(argv), -1, f"could not be started: {exc.strerror or exc}") from None
    if check and proc.returncode != 0:
        raise CommandFailed(list(argv), proc.returncode, proc.stderr or proc.stdout)
    return proc


_SHOWN_ARG = 200  # characters of one argument an error message repeats


def shown_argv(argv: Sequence[str]) -> list[str]:
    """``argv`` for an error message: an argument too long to read (the one E2BIG is about) cut short."""
    return [a if len(a) <= _SHOWN_ARG else f"{a[:_SHOWN_ARG]}...({len(a)} characters)" for a in argv]


def in_netns(netns: str, argv: Sequence[str]) -> list[str]:
    """The argv that runs ``argv`` inside network namespace ``netns``."""
    return ["ip", "netns", "exec", netns, *argv]


def popen(
    argv: Sequence[str],
    *,
    stdin: int | IO[Any] | None = None,
    stdout: int | IO[Any] | None = None,
    stderr: int | IO[Any] | None = None,
    env: Mapping[str, str] | None = None,
    pass_fds: Sequence[int] = (),
    start_new_session: bool = False,
) -> subprocess.Popen[bytes]:
    """Start ``argv`` (binary mode); ``env`` entries are added to the current environment.

    The program is looked up as :func:`run` does, except an argv that is
    already a path (e.g. ``sys.executable``) is kept as it is.
    """
    import subprocess

    first = argv[0] if os.path.isabs(argv[0]) else which(argv[0])
    full_env = None
    if env:
        full_env = dict(os.environ)
        full_env.update(env)
    return subprocess.Popen(
        [first, *argv[1:]], stdin=stdin, stdout=stdout, stderr=stderr, env=full_env, pass_fds=tuple(pass_fds),
        start_new_session=start_new_session,
    )  # fmt: skip
