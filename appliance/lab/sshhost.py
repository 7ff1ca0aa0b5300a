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
from pathlib import Path

from appliance.core import proc
from appliance.core.errors import LabError
from appliance.lab import sshd
from appliance.lab.switch import Switch

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
        sshd.keygen(self.dir / "host_key", f"hvnet-lab-{self.name}")
        sshd.keygen(self.dir / "client_key", f"hvnet-lab-{self.name}")
        (self.dir / "authorized_keys").write_text((self.dir / "client_key.pub").read_text())
        host_pub = (self.dir / "host_key.pub").read_text()
        self.known_hosts.write_text(sshd.known_hosts_line(self.address, self.port, host_pub))
        bin_dir = self.dir / "bin"
        bin_dir.mkdir(exist_ok=True)
        for tool in REMOTE_TOOLS:
            found = shutil.which(tool)
            link = bin_dir / tool
            if found and not link.exists():
                link.symlink_to(found)
        self.ssh_config.write_text(
            sshd.ssh_config_block(self.name, self.address, self.port, self.dir / "client_key", self.known_hosts)
        )

    def start_sshd(self) -> None:
        """Start (or start again, after :meth:`kill_sshd`) the host's sshd and wait until it answers."""
        session = {"PATH": self.dir / "bin", "OVS_RUNDIR": self.switch.run_dir, "HOME": self.dir / "home"}
        extra = [
            "AllowStreamLocalForwarding yes",
            # 'no' would also refuse the OVSDB socket's forwarding (one permission list for both)
            "AllowTcpForwarding local",
            # HOME too: the console machine's root may have a .bashrc that puts Python back on PATH
            "SetEnv " + " ".join(sshd.config_arg(f"{k}={v}") for k, v in session.items()),
        ]
        (self.dir / "home").mkdir(exist_ok=True)
        what = f"the lab host {self.name} ({self.address}:{self.port})"
        config = sshd.sshd_config(self.address, self.port, self.dir, extra)
        sshd.start(self.netns, self.dir, config, lambda: sshd.answers(self.ssh_config, self.name), what)

    def sshd_pid(self) -> int | None:
        """The listening sshd's pid (its PidFile), when it is ours and running."""
        return sshd.pid(self.dir)

    def running(self) -> bool:
        """Namespace, both OVS daemons and sshd all there."""
        return (os.path.exists(f"/run/netns/{self.netns}") and self.sshd_pid() is not None
                and all(self.switch.pid(d) is not None for d in ("ovsdb-server", "ovs-vswitchd")))  # fmt: skip

    def kill_sshd(self) -> None:
        """SIGKILL sshd and every connection it serves, as a crash or a lost host would: clients see them drop."""
        sshd.kill(self.dir)

    def stop(self) -> None:
        """sshd and its connections (by pid), OVS (by theirs), then the link and the namespace; idempotent."""
        self.kill_sshd()
        self.switch.stop()
        proc.run(["ip", "link", "del", self.veth[0]], check=False)
        proc.run(["ip", "netns", "del", self.netns], check=False)
