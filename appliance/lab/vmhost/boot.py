"""Booting a VM host: QEMU on the cached image, a management link, sshd with keys the lab made.

One VM host lives in ``<base>/<name>/``: its root disk is a qcow2 overlay
over the cached image (the image itself is never written), its configuration
a tar archive on a second, read-only disk (hostname, management address,
modules, the host key, the authorized key and sshd's configuration; see
:mod:`appliance.lab.vmhost.recipe` for what the VM does with it), its serial
console a log file.  The management link is a tap device on this machine on
a link-local /30 of :data:`MGMT_BLOCK`, apart from the lab hosts'
(169.254.100.0 and up) and the guests' management links (169.254.64.0/20).
The client's side is written beside it as for the namespaced lab hosts: the
private key, ``known_hosts`` with the host key the lab put in (never learnt
on first use), an ``ssh_config`` naming the host.

QEMU gets 4 vCPUs whatever the machine has: with fewer, Open vSwitch 3.1
uses per-CPU upcall dispatch with no handler thread and loses every upcall
(see PLATFORM.md).  Everything is stopped by :meth:`VmHost.stop` from the
files alone -- QEMU by the pid it wrote (checked against its command line),
the tap by its name, the directory removed -- so a later process can clean up
after a crashed one.
"""

from __future__ import annotations

import io
import ipaddress
import re
import shutil
import subprocess
import tarfile
import time
from dataclasses import dataclass
from pathlib import Path

from appliance.core import proc
from appliance.core.errors import LabError
from appliance.lab import sshd
from appliance.lab.switch import stop_pid
from appliance.lab.vm import accel
from appliance.lab.vm import image as probe_image
from appliance.lab.vmhost.image import SESSION_BIN, VmHostImage

MGMT_BLOCK = ipaddress.ip_network("169.254.32.0/20")
TAP_PREFIX = "hvk"  # hvk1, hvk2 ...: the management link's end on this machine
PORT = 22
VCPUS = 4
# Measured under TCG: 41 MB in use (of 468 MB the kernel reports) with OVS up and a bridge with a policed
# port; 512 MB leaves room for the namespaced guests and their netperf/iperf3 a suite adds.
MEMORY_MB = 512
BOOT_TIMEOUT_S = 240.0  # boot to SSH took 9 s under TCG on an idle 2-core machine; far more on a busy one
# What the kernel datapath needs beyond openvswitch: tc policing and shaping, and 802.1Q for trunks.
MODULES = ("openvswitch", "act_police", "cls_basic", "cls_matchall", "sch_ingress", "sch_htb", "8021q")
VM_SSH_DIR = Path("/etc/hvnet/ssh")  # where the VM's init puts the ssh files of the configuration disk
CONSOLE_LINES = 25  # of the console, shown when the VM does not come up
_NAME = re.compile(r"[a-z][a-z0-9-]{0,14}$")
_MODULE = re.compile(r"[a-z0-9_]+$")


TRUNK_MAX = 8  # trunk NICs of one VM host (a chain gives it at most two per bridge)


@dataclass(frozen=True)
class MgmtLink:
    """A VM host's management link: the tap here (``peer``) and the VM's ``mgmt0`` (``address``)."""

    name: str
    index: int
    tap: str
    peer: str
    address: str
    mac: str
    prefix: int = 30


@dataclass(frozen=True)
class TrunkNic:
    """A VM host's NIC for a trunk link to its neighbour: a tap here (``tap``, until the lab moves it into the
    neighbour's namespace under the link end's name), ``inside`` in the VM -- a port of the VM's bridge --
    found there by its ``mac``."""

    tap: str
    mac: str
    inside: str


# -- planning (pure) ----------------------------------------------------------------------


def plan(name: str, index: int) -> MgmtLink:
    """The ``index``-th VM host's link (1-based): the index-th /30 of the block, a MAC derived from it."""
    if not _NAME.match(name):
        raise LabError(f"VM host name {name!r}: a lower-case letter, then letters, digits or '-', at most 15")
    count = MGMT_BLOCK.num_addresses // 4
    if not 1 <= index <= count - 1:
        raise LabError(f"VM host index {index}: between 1 and {count - 1}")
    net = list(MGMT_BLOCK.subnets(new_prefix=30))[index]
    return MgmtLink(name, index, f"{TAP_PREFIX}{index}", str(net[1]), str(net[2]),
                    f"52:54:00:6b:{index >> 8:02x}:{index & 0xFF:02x}")  # fmt: skip


def trunk_nics(link: MgmtLink, inside: tuple[str, ...]) -> tuple[TrunkNic, ...]:
    """The VM's trunk NICs, one per link end ``inside`` names (in order): taps ``hvkNtI`` beside the
    management tap ``hvkN``, MACs apart from the management link's (``52:54:00:6b:...``)."""
    if len(inside) > TRUNK_MAX:
        raise LabError(f"VM host {link.name}: {len(inside)} trunk links, at most {TRUNK_MAX}")
    return tuple(TrunkNic(f"{link.tap}t{i}", f"52:54:{0x10 + i:02x}:6b:{link.index >> 8:02x}:{link.index & 0xFF:02x}",
                          name) for i, name in enumerate(inside))  # fmt: skip


def trunk_taps(link: MgmtLink, names: list[str]) -> list[str]:
    """Which of ``names`` (this machine's interfaces) are this VM host's trunk taps still here."""
    mine = re.compile(rf"{re.escape(link.tap)}t[0-9]+$")
    return sorted(n for n in names if mine.match(n))


def host_conf(link: MgmtLink, modules: tuple[str, ...] = MODULES) -> str:
    """The VM's ``host.conf``: ``key=value`` lines its init reads (never evaluates)."""
    bad = [m for m in modules if not _MODULE.match(m)]
    if bad:
        raise LabError(f"not a kernel module name: {', '.join(map(repr, bad))}")
    return (f"hostname={link.name}\nmac={link.mac}\naddress={link.address}/{link.prefix}\n"
            f"modules={' '.join(modules)}\n")  # fmt: skip


def vm_sshd_config(link: MgmtLink) -> str:
    """The VM's sshd: on the management address only, root by the lab's key, a PATH without Python."""
    session = f"PATH=/{SESSION_BIN} HOME=/root"
    extra = ["AllowStreamLocalForwarding yes", "AllowTcpForwarding local", f"SetEnv {session}"]
    return sshd.sshd_config(link.address, PORT, VM_SSH_DIR, extra)


def config_archive(link: MgmtLink, host_key: str, host_pub: str, authorized: str,
                   modules: tuple[str, ...] = MODULES) -> bytes:  # fmt: skip
    """The configuration disk's content: a tar archive (its init extracts it from the raw disk)."""
    files = [
        ("host.conf", host_conf(link, modules), 0o644),
        ("ssh/sshd_config", vm_sshd_config(link), 0o644),
        ("ssh/host_key", host_key, 0o600),
        ("ssh/host_key.pub", host_pub, 0o644),
        ("ssh/authorized_keys", authorized, 0o644),
    ]
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.USTAR_FORMAT) as tar:
        for name, text, mode in files:
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size, info.mode, info.mtime = len(data), mode, 0
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def kernel_cmdline() -> str:
    return "console=ttyS0 panic=-1 loglevel=4"


def qemu_argv(image: VmHostImage, run_dir: Path, link: MgmtLink, accel: str, memory_mb: int = MEMORY_MB,
              trunks: tuple[TrunkNic, ...] = ()) -> list[str]:  # fmt: skip
    """QEMU's arguments: daemonized with a pid file, the overlay and the configuration disk, the management
    tap, then one virtio NIC on its own tap per trunk link."""
    if accel not in ("kvm", "tcg"):
        raise LabError(f"accelerator {accel!r}: kvm or tcg")
    nics = [word for i, nic in enumerate(trunks)
            for word in ("-netdev", f"tap,id=trunk{i},ifname={nic.tap},script=no,downscript=no",
                         "-device", f"virtio-net-pci,netdev=trunk{i},mac={nic.mac}")]  # fmt: skip
    return [
        "qemu-system-x86_64", "-name", f"hvnet-vmhost-{link.name}", "-machine", "q35", "-accel", accel,
        "-cpu", "host" if accel == "kvm" else "max", "-smp", str(VCPUS), "-m", str(memory_mb),
        "-nodefaults", "-display", "none", "-monitor", "none", "-no-reboot",
        "-serial", f"file:{run_dir / 'console.log'}",
        "-kernel", str(image.kernel), "-initrd", str(image.initrd), "-append", kernel_cmdline(),
        "-drive", f"file={run_dir / 'root.qcow2'},format=qcow2,if=virtio",
        "-drive", f"file={run_dir / 'config.tar'},format=raw,if=virtio,readonly=on",
        "-netdev", f"tap,id=mgmt,ifname={link.tap},script=no,downscript=no",
        "-device", f"virtio-net-pci,netdev=mgmt,mac={link.mac}", *nics,
        "-pidfile", str(run_dir / "qemu.pid"), "-daemonize",
    ]  # fmt: skip


def problems(status: str) -> list[str]:
    """What the VM's init could not do (its ``/run/hvnet/status``), one item per line."""
    return [line.strip() for line in status.splitlines() if line.strip()]


def console_tail(text: str, lines: int = CONSOLE_LINES) -> str:
    """The console's last lines, control characters shown escaped (it is the VM's text, not ours)."""
    shown = [repr(line)[1:-1] for line in text.replace("\r", "").splitlines() if line.strip()]
    return "\n".join("  | " + line for line in shown[-lines:]) or "  (nothing on its console)"


# -- the VM -------------------------------------------------------------------------------


class VmHost:
    """One VM host in ``<base>/<name>``, with the ``index``-th management link and a NIC for each trunk
    link end ``trunks`` names (its ports in the VM).  Found again from its files alone, ``trunks`` is not
    needed: :meth:`stop` finds its trunk taps by their names."""

    def __init__(self, name: str, base: Path, index: int, memory_mb: int = MEMORY_MB,
                 trunks: tuple[str, ...] = (), modules: tuple[str, ...] = MODULES) -> None:  # fmt: skip
        self.link = plan(name, index)
        self.trunks = trunk_nics(self.link, trunks)
        self.name = name
        self.dir = Path(base).resolve() / name
        self.memory_mb = memory_mb
        self.modules = modules  # what its init loads; one it cannot load makes start() refuse the host
        self.boot_s = 0.0  # QEMU start -> sshd answering with the lab's key

    @property
    def ssh_config(self) -> Path:
        return self.dir / "ssh_config"

    @property
    def known_hosts(self) -> Path:
        return self.dir / "known_hosts"

    @property
    def overlay(self) -> Path:
        return self.dir / "root.qcow2"

    @property
    def console(self) -> Path:
        return self.dir / "console.log"

    def start(self, image: VmHostImage, accel: str, timeout: float = BOOT_TIMEOUT_S) -> float:
        """Boot it and wait for its sshd; anything short of a usable host is stopped again and raised."""
        self.stop()  # what a crashed run may have left under the same name
        try:
            self.dir.mkdir(parents=True)
            self._files(image)
            self._tap()
            self._boot(image, accel, timeout)
        except BaseException:
            self.stop()
            raise
        return self.boot_s

    def boot_again(self, image: VmHostImage, accel: str, timeout: float = BOOT_TIMEOUT_S) -> float:
        """Boot it once more on the disk it had: what a host that crashed does when it comes back.

        Its OVSDB is what reached the disk before the crash; what lived in memory (the kernel datapath,
        namespaces) is gone, as on a real host after a power cut."""
        if self.qemu_pid() is not None:
            raise LabError(f"the VM host {self.name} is still running (QEMU pid {self.qemu_pid()})")
        if not self.overlay.exists():
            raise LabError(f"the VM host {self.name} has no disk to boot again: {self.overlay}")
        self._boot(image, accel, timeout)
        return self.boot_s

    def _boot(self, image: VmHostImage, accel: str, timeout: float) -> None:
        started = time.monotonic()
        proc.run(qemu_argv(image, self.dir, self.link, accel, self.memory_mb, self.trunks), timeout=60)
        self._wait_ssh(started + timeout, timeout)
        self.boot_s = time.monotonic() - started
        found = problems(self.ssh("cat /run/hvnet/status").stdout)
        if found:
            release = self.ssh("uname -r", check=False).stdout.strip() or "unknown"
            raise LabError(f"the VM host {self.name} came up without: {'; '.join(found)} (kernel {release})",
                           hint="a module its kernel lacks, or OVS failed: see its console")  # fmt: skip

    def _files(self, image: VmHostImage) -> None:
        proc.run(["qemu-img", "create", "-q", "-f", "qcow2", "-F", "raw", "-b", str(image.root), str(self.overlay)])
        sshd.keygen(self.dir / "host_key", f"hvnet-vmhost-{self.name}")
        sshd.keygen(self.dir / "client_key", f"hvnet-lab-{self.name}")
        host_pub = (self.dir / "host_key.pub").read_text()
        archive = config_archive(self.link, (self.dir / "host_key").read_text(), host_pub,
                                 (self.dir / "client_key.pub").read_text(), self.modules)  # fmt: skip
        (self.dir / "config.tar").write_bytes(archive)
        self.known_hosts.write_text(sshd.known_hosts_line(self.link.address, PORT, host_pub))
        self.ssh_config.write_text(sshd.ssh_config_block(self.name, self.link.address, PORT,
                                                         self.dir / "client_key", self.known_hosts))  # fmt: skip

    def _tap(self) -> None:
        tap = self.link.tap
        proc.run(["ip", "tuntap", "add", "dev", tap, "mode", "tap"])
        proc.run(["ip", "addr", "add", f"{self.link.peer}/{self.link.prefix}", "dev", tap])
        proc.run(["ip", "link", "set", tap, "up"])
        for nic in self.trunks:  # QEMU opens each by name; the lab then moves it to the neighbour
            proc.run(["ip", "tuntap", "add", "dev", nic.tap, "mode", "tap"])
            proc.run(["ip", "link", "set", nic.tap, "up"])

    def _trunk_taps_here(self) -> list[str]:
        try:
            return trunk_taps(self.link, [p.name for p in Path("/sys/class/net").iterdir()])
        except OSError:
            return []

    def _wait_ssh(self, deadline: float, timeout: float) -> None:
        while not sshd.answers(self.ssh_config, self.name):
            if self.qemu_pid() is None:
                raise LabError(f"the VM host {self.name} stopped while booting; its console ends:\n"
                               f"{console_tail(self.console_text())}")  # fmt: skip
            if time.monotonic() > deadline:
                raise LabError(f"the VM host {self.name} did not answer over SSH within {timeout:g} s; "
                               f"its console ends:\n{console_tail(self.console_text())}")  # fmt: skip
            time.sleep(1.0)

    def console_text(self) -> str:
        try:
            return self.console.read_text(errors="replace")
        except OSError:
            return ""

    def ssh(self, command: str, timeout: float = 60.0, check: bool = True) -> subprocess.CompletedProcess[str]:
        """Run ``command`` (one shell line, the caller quotes) in the VM with strict host keys."""
        argv = ["ssh", "-F", str(self.ssh_config), "-o", "BatchMode=yes", self.name, command]
        res = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False)
        if check and res.returncode != 0:
            raise LabError(f"on the VM host {self.name}: {command} failed (exit {res.returncode}): "
                           f"{res.stderr.strip()[-300:]}")  # fmt: skip
        return res

    def qemu_pid(self) -> int | None:
        """QEMU's pid from its pid file, when that process is still a QEMU of this directory."""
        try:
            pid = int((self.dir / "qemu.pid").read_text().strip())
            cmd = Path(f"/proc/{pid}/cmdline").read_bytes()
        except (OSError, ValueError):
            return None
        return pid if b"qemu-system" in cmd and str(self.dir).encode() in cmd else None

    def leftovers(self) -> list[str]:
        """What of this VM host exists: empty once :meth:`stop` is done."""
        found = []
        if (pid := self.qemu_pid()) is not None:
            found.append(f"QEMU pid {pid}")
        if Path(f"/sys/class/net/{self.link.tap}").exists():
            found.append(f"tap {self.link.tap}")
        found += [f"tap {t}" for t in self._trunk_taps_here()]
        if self.overlay.exists():
            found.append(f"overlay {self.overlay}")
        if self.dir.exists():
            found.append(f"directory {self.dir}")
        return found

    def stop(self) -> None:
        """QEMU by its pid, the taps, the overlay and every file; idempotent, and works after a crash."""
        if (pid := self.qemu_pid()) is not None:
            stop_pid(pid, timeout=5.0)
        if Path(f"/sys/class/net/{self.link.tap}").exists():
            proc.run(["ip", "link", "del", self.link.tap], check=False)
        for tap in self._trunk_taps_here():  # not yet moved to the neighbour (whose namespace takes the rest)
            proc.run(["ip", "link", "del", tap], check=False)
        shutil.rmtree(self.dir, ignore_errors=True)


def choose_accel() -> tuple[str, str]:
    """``kvm`` or ``tcg`` and why: the lab's own verdict (a probe guest booted under KVM, or not)."""
    probe = probe_image.build_image(probe_image.default_cache_root())
    found = accel.detect(probe.kernel, probe.initrd)
    return ("kvm" if found.domain_type == "kvm" else "tcg"), found.reason
