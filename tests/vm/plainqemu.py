"""Boot the probe image with plain QEMU (no libvirt): for the image tests and the boot benchmark.

Always TCG: on some hosts /dev/kvm exists but its guests hang (see appliance/lab/vm/accel.py);
the lab detects the accelerator, these tests only need a guest that boots.
Everything started here is stopped by pid, and only when /proc confirms the
pid is still the process that was started.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from appliance.lab.vm import channel
from appliance.lab.vm.image import ProbeImage, kernel_cmdline
from appliance.lab.vm.protocol import PORT_NAME


@dataclass
class PlainGuest:
    """One QEMU guest and its multiplexer, all files under ``run_dir``."""

    run_dir: Path
    name: str
    qemu_pid: int = 0
    started: float = 0.0
    ready_s: float = 0.0  # QEMU start -> the agent's hello
    boot_s: float = 0.0  # the guest's own uptime at hello
    extra: list[str] = field(default_factory=list)

    @property
    def chan(self) -> Path:
        return self.run_dir / f"{self.name}.chan"

    @property
    def sock(self) -> Path:
        return self.run_dir / f"{self.name}.sock"

    @property
    def mux_pidfile(self) -> Path:
        return self.run_dir / f"{self.name}.mux.pid"

    @property
    def console(self) -> Path:
        return self.run_dir / f"{self.name}.console.log"

    def console_text(self) -> str:
        try:
            return self.console.read_text(errors="replace")
        except OSError:
            return ""


def qemu_argv(image: ProbeImage, g: PlainGuest, *, ip: str | None, tap: str | None, mac: str) -> list[str]:
    argv = [
        "qemu-system-x86_64", "-machine", "pc", "-accel", "tcg", "-m", "256", "-smp", "1",
        "-display", "none", "-monitor", "none", "-serial", f"file:{g.console}", "-no-reboot",
        "-kernel", str(image.kernel), "-initrd", str(image.initrd), "-append", kernel_cmdline(ip),
        "-device", "virtio-serial",
        "-chardev", f"socket,id=c0,path={g.chan},server=on,wait=off",
        "-device", f"virtserialport,chardev=c0,name={PORT_NAME}",
        "-pidfile", str(g.run_dir / f"{g.name}.qemu.pid"), "-daemonize",
    ]  # fmt: skip
    if tap == "user":  # QEMU's own user-mode network: a NIC without any host set-up (benchmarks)
        argv += ["-netdev", "user,id=n0", "-device", f"virtio-net-pci,netdev=n0,mac={mac}"]
    elif tap:
        argv += ["-netdev", f"tap,id=n0,ifname={tap},script=no,downscript=no",
                 "-device", f"virtio-net-pci,netdev=n0,mac={mac}"]  # fmt: skip
    else:
        argv += ["-nic", "none"]
    return argv


def boot(
    image: ProbeImage,
    run_dir: Path,
    name: str = "probe",
    *,
    ip: str | None = None,
    tap: str | None = None,
    mac: str = "52:54:00:77:00:a0",
    timeout: float = 90.0,
) -> PlainGuest:
    """Start QEMU and the multiplexer, wait for the agent's hello; stops what it started on failure."""
    g = PlainGuest(run_dir, name)
    g.started = time.monotonic()
    subprocess.run(qemu_argv(image, g, ip=ip, tap=tap, mac=mac), check=True, capture_output=True, timeout=30)
    g.qemu_pid = int((run_dir / f"{name}.qemu.pid").read_text())
    try:
        channel.start_mux(g.chan, g.sock, g.mux_pidfile, run_dir / f"{name}.mux.log")
        with channel.GuestClient(g.sock) as c:
            c.wait_ready(timeout)
            g.ready_s = time.monotonic() - g.started
            g.boot_s = float(c.guest.get("boot_s", 0))
    except BaseException:
        stop(g)
        raise
    return g


def _is_our_qemu(pid: int, g: PlainGuest) -> bool:
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace")
    except OSError:
        return False
    return "qemu-system" in cmd and str(g.chan) in cmd


def stop(g: PlainGuest) -> None:
    """Stop the multiplexer and QEMU (by pid, after checking it is ours); idempotent."""
    channel.stop_mux(g.mux_pidfile)
    if g.qemu_pid and _is_our_qemu(g.qemu_pid, g):
        os.kill(g.qemu_pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        while _is_our_qemu(g.qemu_pid, g) and time.monotonic() < deadline:
            time.sleep(0.05)
        if _is_our_qemu(g.qemu_pid, g):
            os.kill(g.qemu_pid, signal.SIGKILL)
    g.qemu_pid = 0
