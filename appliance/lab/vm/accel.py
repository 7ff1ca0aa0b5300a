"""KVM or TCG: decided by booting the probe image, not by the presence of /dev/kvm.

On some hosts ``/dev/kvm`` exists but guests hang (a nested, paravirtual KVM
flavour that QEMU accepts and then cannot run).  The only honest test is to
boot the probe image with KVM and wait for its agent's hello on the channel.
The verdict is cached per host boot and QEMU binary; ``HVNET_VM_ACCEL``
(``kvm`` or ``tcg``) overrides it.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from appliance.core import config, proc
from appliance.lab.switch import stop_pid
from appliance.lab.vm.protocol import PORT_NAME, LineDecoder, encode

CACHE = Path("/run/hvnet/accel.json")
KVM_BOOT_TIMEOUT_S = 20.0  # a KVM boot takes ~1 s; TCG ~3 s; a hung KVM never answers


@dataclass(frozen=True)
class Accel:
    domain_type: str  # libvirt's: "kvm" or "qemu" (TCG)
    reason: str

    @property
    def name(self) -> str:
        return "KVM" if self.domain_type == "kvm" else "TCG (software emulation)"


def _cache_key(qemu: str) -> str:
    boot_id = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    return f"{boot_id}:{qemu}:{os.stat(qemu).st_mtime_ns}"


def _hello(chan: Path, deadline: float, qemu: subprocess.Popen) -> bool:
    """Connect to the guest's channel and wait for the agent's hello."""
    dec = LineDecoder()
    while time.monotonic() < deadline and qemu.poll() is None:
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            s.connect(str(chan))
        except OSError:
            s.close()
            time.sleep(0.1)
            continue
        with s:
            try:
                s.sendall(encode({"op": "hello"}))
                s.settimeout(0.5)
                while time.monotonic() < deadline and qemu.poll() is None:
                    try:
                        data = s.recv(65536)
                    except socket.timeout:
                        s.sendall(encode({"op": "hello"}))
                        continue
                    if not data:
                        break
                    if any(m.get("ev") == "hello" for m in dec.feed(data)):
                        return True
            except OSError:  # QEMU went away mid-conversation: no answer, so no KVM
                time.sleep(0.1)
    return False


def probe_kvm(kernel: Path, initrd: Path, timeout: float = KVM_BOOT_TIMEOUT_S) -> tuple[bool, str]:
    """Boot the probe image under KVM; (True, why) only if its agent answered."""
    if not os.access("/dev/kvm", os.R_OK | os.W_OK):
        return False, "/dev/kvm is not available"
    qemu = proc.which("qemu-system-x86_64")
    with tempfile.TemporaryDirectory(prefix="hvnet-accel-") as tmp:
        chan = Path(tmp) / "agent.chan"
        argv = [qemu, "-accel", "kvm", "-machine", "pc", "-m", "256", "-nodefaults", "-display", "none",
                "-no-reboot", "-serial", f"file:{tmp}/console.log", "-kernel", str(kernel), "-initrd", str(initrd),
                "-append", "console=ttyS0 panic=-1", "-device", "virtio-serial",
                "-chardev", f"socket,id=c0,path={chan},server=on,wait=off",
                "-device", f"virtserialport,chardev=c0,name={PORT_NAME}"]  # fmt: skip
        started = time.monotonic()
        p = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        try:
            ok = _hello(chan, started + timeout, p)
            waited = time.monotonic() - started
            exited = p.poll() is not None  # on its own, before being stopped
        finally:
            if p.poll() is None:
                stop_pid(p.pid, timeout=3.0)
            p.wait()
        if ok:
            return True, f"a KVM guest booted to ready in {waited:.1f} s"
        err = (p.stderr.read().decode(errors="replace").strip().splitlines() or [""])[-1] if p.stderr else ""
        if exited:
            return False, f"QEMU with KVM failed: {err or 'exit status ' + str(p.returncode)}"
        return False, f"a KVM guest did not answer within {timeout:g} s (KVM hangs on this host)"


def detect(kernel: Path, initrd: Path) -> Accel:
    """The accelerator lab guests use, probing once per host boot."""
    forced = (config.env_only("HVNET_VM_ACCEL") or "").lower()
    if forced in ("kvm", "tcg"):
        return Accel("kvm" if forced == "kvm" else "qemu", f"HVNET_VM_ACCEL={forced}")
    qemu = proc.which("qemu-system-x86_64")
    key = _cache_key(qemu)
    try:
        cached = json.loads(CACHE.read_text())
        if cached.get("key") == key:
            return Accel(cached["domain_type"], cached["reason"] + " (probed earlier this boot)")
    except (OSError, ValueError, KeyError):
        pass
    ok, why = probe_kvm(kernel, initrd)
    accel = Accel("kvm" if ok else "qemu", why)
    CACHE.parent.mkdir(parents=True, exist_ok=True)
    tmp = CACHE.with_suffix(".tmp")
    tmp.write_text(json.dumps({"key": key, "domain_type": accel.domain_type, "reason": why}))
    tmp.replace(CACHE)
    return accel
