"""A lab hypervisor reached over SSH: a network namespace with its own OVS and its own sshd.

What ``hvnet --host`` needs from a real hypervisor, and nothing more: sshd,
Open vSwitch's tools and iproute2.  The sshd runs inside the namespace on a
link-local address of a veth whose other end is in the console's namespace,
with its own host key, one authorized key, stream-local forwarding (the
OVSDB socket) and a ``PATH`` of symlinks to those tools only -- no Python, so
whatever works through it works agentless.  The lab writes the client's side
too: a private key, ``known_hosts`` with the host's key (strict checking
stays on) and an ``ssh_config`` naming the host, so ``hvnet --host NAME``
works with ``HVNET_SSH_CONFIG`` pointing there.

Everything is torn down by :meth:`SshHost.stop`: sshd and the OVS daemons by
the pids they wrote, the veth and the namespace by name.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import time
from pathlib import Path

from appliance.core import proc
from appliance.core.errors import LabError
from appliance.lab.switch import Switch, stop_pid

# The tools a hypervisor has without hvnet: what the agentless path may use.
REMOTE_TOOLS = ("sh", "bash", "cat", "grep", "test", "printf", "env", "uname", "ovs-vsctl", "ovs-ofctl", "ovs-appctl",
                "ovs-dpctl", "ip", "tc", "tcpdump", "netperf", "netserver", "ethtool",
                "mkdir", "mv", "rm", "stat", "sleep",  # coreutils, as every dom0 has: remote captures
                "mkfifo", "date",  # and endpoints (appliance.endpoints.remote)
                "arping", "kill", "ping",  # iputils and procps, as a dom0 has: probe ports
                "id", "df", "readlink",  # and the walk of their directory, their free space
                "ovsdb-client", "setsid")  # the host's own rollback of a --no-commit apply  # fmt: skip


class SshHost:
    """One namespaced hypervisor: OVS in ``run_dir``, sshd on ``address``:``port``."""

    def __init__(self, name: str, base: Path, index: int, port: int = 2222) -> None:
        if not name.replace("-", "").isalnum() or len(name) > 8:
            raise LabError(f"lab host name {name!r}: letters, digits and '-', at most 8")
        self.name = name
        self.dir = Path(base).resolve() / name
        self.netns = f"hvnet-{name}"
        self.veth = (f"hvh{index}a", f"hvh{index}b")
        self.address = f"169.254.{100 + index}.2"
        self.peer = f"169.254.{100 + index}.1"
        self.port = port
        self.switch = Switch(self.dir / "run", netns=self.netns)

    # -- paths the client uses ----------------------------------------------------------

    @property
    def ssh_config(self) -> Path:
        return self.dir / "ssh_config"

    @property
    def known_hosts(self) -> Path:
        return self.dir / "known_hosts"

    @property
    def client_env(self) -> dict[str, str]:
        """The environment that makes ``hvnet --host NAME`` reach this host."""
        return {"HVNET_SSH_CONFIG": str(self.ssh_config), "HVNET_REMOTE_OVS_RUNDIR": str(self.switch.run_dir)}

    # -- life cycle ---------------------------------------------------------------------

    def start(self) -> None:
        """Namespace, link, OVS and sshd; on any failure what was made is removed again."""
        try:
            self.dir.mkdir(parents=True, exist_ok=True)
            self._link()
            self.switch.start()
            self._keys()
            self.start_sshd()
        except BaseException:
            self.stop()
            raise

    def _link(self) -> None:
        a, b = self.veth
        proc.run(["ip", "netns", "add", self.netns])
        proc.run(["ip", "link", "add", a, "type", "veth", "peer", "name", b])
        proc.run(["ip", "link", "set", b, "netns", self.netns])
        proc.run(["ip", "addr", "add", f"{self.peer}/30", "dev", a])
        proc.run(["ip", "link", "set", a, "up"])
        inside = [["ip", "addr", "add", f"{self.address}/30", "dev", b], ["ip", "link", "set", b, "up"],
                  ["ip", "link", "set", "lo", "up"]]  # fmt: skip
        for argv in inside:
            proc.run(proc.in_netns(self.netns, argv))

    def _keys(self) -> None:
        for key in ("host_key", "client_key"):
            (self.dir / key).unlink(missing_ok=True)
            proc.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", f"hvnet-lab-{self.name}",
                      "-f", str(self.dir / key)])  # fmt: skip
        (self.dir / "authorized_keys").write_text((self.dir / "client_key.pub").read_text())
        host_pub = (self.dir / "host_key.pub").read_text().split()
        self.known_hosts.write_text(f"[{self.address}]:{self.port} {host_pub[0]} {host_pub[1]}\n")
        bin_dir = self.dir / "bin"
        bin_dir.mkdir(exist_ok=True)
        for tool in REMOTE_TOOLS:
            found = shutil.which(tool)
            link = bin_dir / tool
            if found and not link.exists():
                link.symlink_to(found)
        self.ssh_config.write_text(
            f"Host {self.name}\n  HostName {self.address}\n  Port {self.port}\n  User root\n"
            f"  IdentityFile {self.dir / 'client_key'}\n  IdentitiesOnly yes\n"
            f"  UserKnownHostsFile {self.known_hosts}\n  StrictHostKeyChecking yes\n"
        )

    def start_sshd(self) -> None:
        """Start (or start again, after :meth:`kill_sshd`) the host's sshd and wait until it answers."""
        config = self.dir / "sshd_config"
        config.write_text(
            f"ListenAddress {self.address}\nPort {self.port}\nHostKey {self.dir / 'host_key'}\n"
            f"PidFile {self.dir / 'sshd.pid'}\nAuthorizedKeysFile {self.dir / 'authorized_keys'}\n"
            "PermitRootLogin prohibit-password\nPasswordAuthentication no\nKbdInteractiveAuthentication no\n"
            "UsePAM no\nStrictModes no\nAllowStreamLocalForwarding yes\nX11Forwarding no\n"
            # 'no' would also refuse the OVSDB socket's forwarding (one permission list for both)
            "AllowTcpForwarding local\n"
            # HOME too: the console machine's root may have a .bashrc that puts Python back on PATH
            f"SetEnv PATH={self.dir / 'bin'} OVS_RUNDIR={self.switch.run_dir} HOME={self.dir / 'home'}\n"
            "LogLevel ERROR\n"
        )
        Path("/run/sshd").mkdir(exist_ok=True)  # sshd's privilege separation directory
        (self.dir / "home").mkdir(exist_ok=True)
        sshd = shutil.which("sshd") or "/usr/sbin/sshd"
        if not os.path.exists(sshd):
            raise LabError("sshd is not installed", hint="install openssh-server (make setup does)")
        # -E: its log beside its keys; it daemonizes and writes its PidFile
        proc.run(proc.in_netns(self.netns, [sshd, "-f", str(config), "-E", str(self.dir / "sshd.log")]))
        deadline = time.monotonic() + 10
        while not self._answers():
            if time.monotonic() > deadline:
                raise LabError(f"the lab host {self.name}'s sshd does not answer on {self.address}:{self.port}")
            time.sleep(0.05)

    def _answers(self) -> bool:
        argv = ["ssh", "-F", str(self.ssh_config), "-o", "BatchMode=yes", "-o", "ConnectTimeout=2", self.name, "true"]
        return subprocess.run(argv, capture_output=True, timeout=10, check=False).returncode == 0

    def sshd_pid(self) -> int | None:
        """The listening sshd's pid (its PidFile), when it is ours and running."""
        try:
            pid = int((self.dir / "sshd.pid").read_text().strip())
        except (OSError, ValueError):
            return None
        return pid if _is_our_sshd(pid, self.dir) else None

    def running(self) -> bool:
        """Namespace, both OVS daemons and sshd all there."""
        return (os.path.exists(f"/run/netns/{self.netns}") and self.sshd_pid() is not None
                and all(self.switch.pid(d) is not None for d in ("ovsdb-server", "ovs-vswitchd")))  # fmt: skip

    def kill_sshd(self) -> None:
        """SIGKILL sshd and every connection it serves, as a crash or a lost host would: clients see them drop.

        Stopping only the listener (what ``systemctl restart sshd`` does)
        leaves the established connections up; the per-connection processes
        are its descendants, found before it goes (they are reparented after).
        """
        pid = self.sshd_pid()
        if pid is None:
            return
        for victim in [pid, *_descendants(pid)]:
            try:
                os.kill(victim, signal.SIGKILL)
            except ProcessLookupError:
                pass
        stop_pid(pid)
        (self.dir / "sshd.pid").unlink(missing_ok=True)

    def stop(self) -> None:
        """sshd and its connections (by pid), OVS (by theirs), then the link and the namespace; idempotent."""
        self.kill_sshd()
        self.switch.stop()
        proc.run(["ip", "link", "del", self.veth[0]], check=False)
        proc.run(["ip", "netns", "del", self.netns], check=False)


def _descendants(pid: int) -> list[int]:
    """Every process below ``pid`` (from the parent pids in /proc)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            ppid = int((entry / "stat").read_text().rsplit(") ", 1)[1].split()[1])
        except (OSError, IndexError, ValueError):
            continue
        children.setdefault(ppid, []).append(int(entry.name))
    found, todo = [], [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            found.append(child)
            todo.append(child)
    return found


def _is_our_sshd(pid: int, directory: Path) -> bool:
    try:
        return str(directory).encode() in Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return False
