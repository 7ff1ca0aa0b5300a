"""An sshd of the lab's own, inside a network namespace: what lab hosts and lab guests share.

A lab host (:mod:`appliance.lab.sshhost`) and a lab guest reached like a VM
(:mod:`appliance.lab.guestssh`) both run OpenSSH's sshd in their namespace,
bound to a link-local management address, with a host key and one
authorized key generated for them, and both hand the client a ``known_hosts``
line and an ``ssh_config`` block with strict host key checking -- the client
never learns a key on first use.  The texts are built by pure functions (unit
tested); starting, probing and stopping go by the PID file sshd writes, and a
PID is trusted only while that process's command line still names the lab's
directory, so a reused PID is never signalled.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

from appliance.core import proc
from appliance.core.errors import LabError
from appliance.lab.switch import stop_pid

# -- texts (pure) -------------------------------------------------------------------------


def config_arg(value: str | Path, tokens: bool = False) -> str:
    """``value`` as one argument of an ssh_config or sshd_config line.

    The lab's directory comes from the operator (``HVNET_LAB_DIR``): a space
    would split the argument, and a ``%`` would be read as a token by the
    options that expand them (``tokens``), so those are quoted and doubled.
    A double quote or a line break cannot be written at all and is refused.
    """
    text = str(value)
    if any(c in text for c in '"\n\r'):
        raise LabError(f"{text!r} cannot be written into an OpenSSH configuration (a double quote or a line break)",
                       hint="choose a lab directory (HVNET_LAB_DIR) without them")  # fmt: skip
    if tokens:
        text = text.replace("%", "%%")
    return f'"{text}"' if any(c.isspace() for c in text) else text


def known_hosts_line(address: str, port: int, host_pub: str) -> str:
    """The ``known_hosts`` line for a server's public key file text (port 22 is written bare, as ssh looks it up)."""
    fields = host_pub.split()
    if len(fields) < 2:
        raise LabError(f"not an OpenSSH public key: {host_pub[:60]!r}")
    where = address if port == 22 else f"[{address}]:{port}"
    return f"{where} {fields[0]} {fields[1]}\n"


def ssh_config_block(name: str, address: str, port: int, identity: Path, known_hosts: Path) -> str:
    """One ``Host`` block: this key only, this known_hosts only, and a host key that must match it."""
    return (
        f"Host {name}\n  HostName {address}\n  Port {port}\n  User root\n"
        f"  IdentityFile {config_arg(identity, tokens=True)}\n  IdentitiesOnly yes\n"
        f"  UserKnownHostsFile {config_arg(known_hosts, tokens=True)}\n  StrictHostKeyChecking yes\n"
    )


def sshd_config(address: str, port: int, directory: Path, extra: list[str]) -> str:
    """An sshd_config whose key, PID file and authorized keys are all in ``directory``; root by key only.

    ``extra`` lines are the caller's (forwarding, the session's environment), written as given."""
    lines = [
        f"ListenAddress {address}",
        f"Port {port}",
        f"HostKey {config_arg(directory / 'host_key')}",
        f"PidFile {config_arg(directory / 'sshd.pid')}",
        f"AuthorizedKeysFile {config_arg(directory / 'authorized_keys', tokens=True)}",
        "PermitRootLogin prohibit-password",
        "PasswordAuthentication no",
        "KbdInteractiveAuthentication no",
        "UsePAM no",
        "StrictModes no",  # the lab's directory may be under a world-writable /tmp
        "X11Forwarding no",
        *extra,
        "LogLevel ERROR",
    ]
    return "\n".join(lines) + "\n"


# -- keys ---------------------------------------------------------------------------------


def keygen(path: Path, comment: str) -> None:
    """A fresh ed25519 key pair at ``path`` and ``path.pub`` (an old one is replaced)."""
    path.unlink(missing_ok=True)
    path.with_name(path.name + ".pub").unlink(missing_ok=True)
    proc.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(path)])


# -- the daemon ---------------------------------------------------------------------------


def sshd_binary() -> str:
    sshd = shutil.which("sshd") or "/usr/sbin/sshd"
    if not os.path.exists(sshd):
        raise LabError("sshd is not installed", hint="install openssh-server (make setup does)")
    return sshd


def start(
    netns: str, directory: Path, config_text: str, serves: Callable[[], bool], what: str, timeout: float = 10.0
) -> None:
    """Write ``directory/sshd_config``, start sshd in ``netns`` and wait until ``serves()`` says it logs in."""
    config = directory / "sshd_config"
    config.write_text(config_text)
    Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
    # -E: its log beside its keys; it daemonizes and writes its PidFile
    proc.run(proc.in_netns(netns, [sshd_binary(), "-f", str(config), "-E", str(directory / "sshd.log")]))
    deadline = time.monotonic() + timeout
    while not serves():
        if time.monotonic() > deadline:
            raise LabError(f"{what}'s sshd does not answer (see {directory / 'sshd.log'})")
        time.sleep(0.05)


def answers(ssh_config: Path, host: str) -> bool:
    """Whether ``ssh -F ssh_config host true`` logs in (keys only, never a prompt)."""
    argv = ["ssh", "-F", str(ssh_config), "-o", "BatchMode=yes", "-o", "ConnectTimeout=2", host, "true"]
    try:
        return subprocess.run(argv, capture_output=True, timeout=10, check=False).returncode == 0
    except subprocess.TimeoutExpired:
        return False


def pid(directory: Path) -> int | None:
    """The listening sshd's pid (its PidFile in ``directory``), when it is ours and running."""
    try:
        found = int((directory / "sshd.pid").read_text().strip())
    except (OSError, ValueError):
        return None
    return found if _is_ours(found, directory) else None


def kill(directory: Path) -> int | None:
    """SIGKILL the sshd of ``directory`` and every connection it serves, as a crash or a lost machine would.

    Stopping only the listener (what ``systemctl restart sshd`` does) leaves
    the established connections up; the per-connection processes are its
    descendants, found before it goes (they are reparented after).  Returns
    the pid it stopped, if any.
    """
    found = pid(directory)
    if found is None:
        (directory / "sshd.pid").unlink(missing_ok=True)
        return None
    for victim in [found, *_descendants(found)]:
        try:
            os.kill(victim, signal.SIGKILL)
        except ProcessLookupError:
            pass
    stop_pid(found)
    (directory / "sshd.pid").unlink(missing_ok=True)
    return found


def _descendants(root: int) -> list[int]:
    """Every process below ``root`` (from the parent pids in /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(") ", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [root]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _is_ours(found: int, directory: Path) -> bool:
    try:
        return str(directory).encode() in Path(f"/proc/{found}/cmdline").read_bytes()
    except OSError:
        return False
