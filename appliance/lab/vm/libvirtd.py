"""libvirt's daemons for the lab: found running, or started (and later stopped) by hvnet.

libvirt plugs a VM's tap device into OVS by running ``ovs-vsctl`` itself,
with no ``--db``: it reaches whatever ``$OVS_RUNDIR/db.sock`` (default
``/var/run/openvswitch/db.sock``) names.  A libvirtd that hvnet starts gets
``OVS_RUNDIR`` pointing at the lab's switch, so the system OVS (if any) is
never touched.  A libvirtd already running belongs to the host: the lab uses
it only if the default socket path is free, and then links that path to the
lab's socket for as long as the lab is up (recorded, removed by ``lab down``).

Daemons are started without systemd (these hosts may not run it): the
``libvirt-qemu`` user and the ``kvm``/``libvirt-qemu`` groups and libvirt's
directories are created when missing, ``virtlogd`` then ``libvirtd`` are
started in their own sessions, and only the PIDs hvnet started are stopped.
"""

from __future__ import annotations

import os
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

from appliance.core import proc
from appliance.core.errors import LabError
from appliance.lab.switch import stop_pid

URI = "qemu:///system"
LIBVIRT_SOCK = Path("/run/libvirt/libvirt-sock")
VIRTLOGD_SOCK = Path("/run/libvirt/virtlogd-sock")
SYSTEM_OVS_SOCK = Path("/var/run/openvswitch/db.sock")
LIBVIRTD_PIDFILE = Path("/run/libvirtd.pid")
OWNER_VAR = "HVNET_LAB_RUN_DIR"  # in the environment of the daemons a lab started: whose they are
DIRS = ("/var/log/libvirt", "/var/lib/libvirt", "/var/cache/libvirt", "/run/libvirt")
PACKAGES = "libvirt-daemon libvirt-daemon-driver-qemu libvirt-clients qemu-system-x86 (Debian)"


@dataclass
class Daemons:
    """What :func:`ensure` found or did; the lab records ``started`` and ``linked``."""

    started: dict[str, int] = field(default_factory=dict)  # daemon -> pid hvnet started
    linked: str | None = None  # the default OVS socket path hvnet linked to the lab's
    actions: list[str] = field(default_factory=list)


def _listening(path: Path) -> bool:
    """True if something accepts connections on the unix socket ``path``."""
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.settimeout(1.0)
    try:
        s.connect(str(path))
        return True
    except OSError:
        return False
    finally:
        s.close()


def available() -> str | None:
    """None if libvirtd and QEMU are installed, else why not (for skips and errors)."""
    for tool in ("libvirtd", "virtlogd", "virsh", "qemu-system-x86_64"):
        if proc.which_optional(tool) is None:
            return f"{tool} is not installed (install {PACKAGES})"
    try:
        import libvirt  # noqa: F401
    except ImportError:
        return "the libvirt Python binding is not importable (python3-libvirt)"
    return None


def reachable() -> bool:
    """True if libvirt is installed and a libvirtd answers on its socket (nothing is started)."""
    return available() is None and _listening(LIBVIRT_SOCK)


def _ensure_accounts() -> list[str]:
    """The user, groups and directories libvirt's QEMU driver expects."""
    done = []
    for group in ("kvm", "libvirt-qemu"):
        if proc.run(["getent", "group", group], check=False).returncode != 0:
            proc.run(["groupadd", "-r", group])
            done.append(f"created group {group}")
    if proc.run(["getent", "passwd", "libvirt-qemu"], check=False).returncode != 0:
        proc.run(["useradd", "-r", "-g", "libvirt-qemu", "-G", "kvm", "-d", "/var/lib/libvirt",
                  "-s", "/usr/sbin/nologin", "libvirt-qemu"])  # fmt: skip
        done.append("created user libvirt-qemu")
    for d in DIRS:
        os.makedirs(d, exist_ok=True)
    return done


# Run in a private mount namespace with /dev/null over /dev/kvm: the daemon (and the QEMUs it starts)
# cannot see a KVM that does not work.  The only value passed is the daemon's path, as "$0".
_WITHOUT_KVM = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
                'mount --bind /dev/null /dev/kvm && exec "$0"']  # fmt: skip


def _start(
    daemon: str, sock: Path, log: Path, env: dict[str, str] | None = None, timeout: float = 15.0, hide_kvm: bool = False
) -> int:
    """Start ``daemon`` in the foreground of its own session; wait for its socket."""
    argv = [proc.which(daemon)]
    if hide_kvm and os.path.exists("/dev/kvm"):
        argv = [proc.which("unshare"), *_WITHOUT_KVM[1:], argv[0]]
    with open(log, "ab") as out:
        p = subprocess.Popen(
            argv,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, **(env or {}), OWNER_VAR: str(log.parent)},
            start_new_session=True,
            cwd="/",
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if p.poll() is not None:
            raise LabError(f"{daemon} exited with status {p.returncode} at start", hint=f"see {log}")
        if _listening(sock):
            return p.pid
        time.sleep(0.05)
    stop_pid(p.pid)
    raise LabError(f"{daemon} did not open {sock} within {timeout:g} s", hint=f"see {log}")


def ensure(run_dir: Path, ovs_rundir: Path, kvm_works: bool = True) -> Daemons:
    """libvirtd reachable and pointed at the switch in ``ovs_rundir``.

    With ``kvm_works=False`` a libvirtd hvnet starts does not see ``/dev/kvm``: where KVM is
    present but broken, libvirt re-probes it on every domain definition (~30-50 s each here);
    hidden, a definition takes milliseconds.  A libvirtd already running is left as it is.

    Raises :class:`LabError` (changing nothing) if a libvirtd that hvnet did
    not start would have to be pointed at a socket path a system OVS owns.
    """
    why = available()
    if why:
        raise LabError(f"QEMU guests need libvirt: {why}", hint="run .ci/setup-host, or use namespace guests only")
    out = Daemons()
    lab_sock = ovs_rundir / "db.sock"
    if _listening(LIBVIRT_SOCK):
        served = serving_ovs_rundir()
        if served is not None:
            if Path(served).resolve() == ovs_rundir.resolve():
                return out  # a libvirtd started for this very switch (an earlier 'lab up')
            raise LabError(
                f"libvirtd is already running for the OVS in {served} (another lab?), not this lab's {ovs_rundir}",
                hint=f"bring that lab down first (HVNET_LAB_DIR={served} hvnet lab down)",
            )
        # The host's own libvirtd: it will run ovs-vsctl against the default path.
        if SYSTEM_OVS_SOCK.is_symlink() and os.readlink(SYSTEM_OVS_SOCK) == str(lab_sock):
            return out
        if SYSTEM_OVS_SOCK.exists() or SYSTEM_OVS_SOCK.is_symlink():
            raise LabError(
                f"libvirtd is already running and plugs VMs into the OVS at {SYSTEM_OVS_SOCK}, "
                "which is not the lab's; the lab does not touch a system OVS",
                hint="stop that libvirtd (hvnet then starts its own, pointed at the lab), or use namespace guests",
            )
        SYSTEM_OVS_SOCK.parent.mkdir(parents=True, exist_ok=True)
        os.symlink(lab_sock, SYSTEM_OVS_SOCK)
        out.linked = str(SYSTEM_OVS_SOCK)
        out.actions.append(f"linked {SYSTEM_OVS_SOCK} to the lab's switch for the running libvirtd")
        return out
    out.actions += _ensure_accounts()
    if not _listening(VIRTLOGD_SOCK):
        out.started["virtlogd"] = _start("virtlogd", VIRTLOGD_SOCK, run_dir / "virtlogd.log")
        out.actions.append(f"started virtlogd (pid {out.started['virtlogd']})")
    hide = not kvm_works and os.path.exists("/dev/kvm")
    try:
        out.started["libvirtd"] = _start(
            "libvirtd", LIBVIRT_SOCK, run_dir / "libvirtd.log", env={"OVS_RUNDIR": str(ovs_rundir)}, hide_kvm=hide
        )
    except LabError:
        release(out.started, None, run_dir)  # the virtlogd started above is recorded nowhere else
        raise
    out.actions.append(
        f"started libvirtd (pid {out.started['libvirtd']}) with OVS_RUNDIR={ovs_rundir}"
        + (", /dev/kvm hidden from it (KVM does not boot guests here)" if hide else "")
    )
    return out


def serving_ovs_rundir() -> str | None:
    """The ``OVS_RUNDIR`` the running libvirtd was started with (a lab's), or None (the system's)."""
    try:
        pid = int(Path(LIBVIRTD_PIDFILE).read_text().strip())
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except (OSError, ValueError):
        return None
    for item in env:
        if item.startswith(b"OVS_RUNDIR="):
            return item.split(b"=", 1)[1].decode(errors="replace")
    return None


def is_ours(pid: int, daemon: str, run_dir: Path) -> bool:
    """True if ``pid`` is still the ``daemon`` this lab started: its program and the owner mark
    in its environment both match (a reused PID, or another lab's daemon, is never stopped)."""
    try:
        cmd = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")[0].decode(errors="replace")
        env = Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False
    return os.path.basename(cmd) == daemon and f"{OWNER_VAR}={run_dir}".encode() in env


def release(started: dict[str, int], linked: str | None, run_dir: Path) -> list[str]:
    """Stop the daemons this lab started (libvirtd first) and remove its link; returns what was done."""
    done = []
    for daemon in ("libvirtd", "virtlogd"):
        pid = started.get(daemon)
        if pid and is_ours(pid, daemon, run_dir):
            stop_pid(pid, timeout=10.0)
            done.append(f"stopped {daemon} (pid {pid})")
    if linked and Path(linked).is_symlink():
        os.unlink(linked)
        done.append(f"removed the link {linked}")
    return done
