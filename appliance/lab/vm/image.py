"""The probe guest image: a Debian cloud kernel plus a tiny initramfs, built from Debian packages.

A probe guest exists to send and receive test traffic through the switch
under test, so it carries only what that takes: the kernel's virtio drivers,
busybox, netperf/netserver, iperf3, tcpdump, arping, ip, ethtool, bash and
GNU date (for stamps in ns), Debian's ``qemu-ga`` (libvirt's guest agent, as
on a real KVM guest), and hvnet's own agent that runs them for the host over a
virtio-serial port (:mod:`appliance.lab.vm.guest.agent`, with the guest's own
copy of Debian's Python and the few standard modules the agent imports).
Everything comes from Debian packages already on the host, except the kernel,
which is *downloaded* (``apt-get download``), never installed: the host's own
kernel is not touched.

Images are cached under ``<cache_root>/<digest>/`` where the digest covers
every input (kernel package version, the hash of every copied file, the
agent and init sources, this builder's version), so an image is rebuilt only
when something it is made of changed.  A build happens in a temporary
directory renamed into place at the end: a crashed or concurrent build never
leaves a half image behind.
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import json
import lzma
import os
import re
import shutil
import subprocess
import tempfile
import time
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appliance.core import config, proc
from appliance.core.errors import HvnetError
from appliance.lab.vm.protocol import PORT_NAME

BUILDER_VERSION = "3"
DEFAULT_CACHE = Path("/var/cache/hvnet/image")  # built in; default_cache_root() is the one in use
KERNEL_METAPACKAGE = "linux-image-cloud-amd64"
# insmod order: each module after the ones it depends on (there is no modprobe in the guest).
NET_MODULES = (
    "virtio_ring", "virtio", "virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio_pci",
    "failover", "net_failover", "virtio_net",
)  # fmt: skip
# Needed too, but only loaded when the kernel builds them as modules.
OPTIONAL_MODULES = ("virtio_console", "af_packet")
# GNU date and bash beside busybox: busybox's date has no %N, bash stamps with $EPOCHREALTIME (no fork).
TOOLS = ("netperf", "netserver", "tcpdump", "arping", "ip", "ethtool", "iperf3", "bash", "date")
# Debian's QEMU guest agent, as a real KVM guest runs it: hvnet reaches guests through libvirt with it too.
SBIN_TOOLS = ("qemu-ga",)
GA_PORT_NAME = "org.qemu.guest_agent.0"
GUEST_PYTHON = "/usr/bin/python3.11"  # Debian's, not a pyenv/venv one: its libraries are on every Debian 12 host
BUSYBOX = "/bin/busybox"  # busybox-static: no shared libraries to carry
GUEST_DIR = Path(__file__).resolve().parent / "guest"
AGENT_SOURCE = GUEST_DIR / "agent.py"
# Beyond what the agent imports: the isolation check's probe sender (a raw packet socket) runs
# in the guest as "python3 -c ...".
GUEST_EXTRA_MODULES = ("socket",)
# Measured under TCG (QEMU start -> agent hello, 2 boots each): a gzip initramfs (11 MB) 4.8-5.1 s,
# the same uncompressed (27 MB) 4.4-4.8 s.  Unpacking gzip in an emulated CPU costs more than
# QEMU copying the bigger file into guest memory, so the archive is left uncompressed.
COMPRESS = "none"


class ImageError(HvnetError):
    """The probe image could not be built."""


@dataclass
class ProbeImage:
    """A built (or found) probe image: what QEMU's ``-kernel``/``-initrd`` take."""

    kernel: Path
    initrd: Path
    digest: str
    built: bool  # False when it came from the cache
    seconds: float  # time to build it, or to find it in the cache
    notes: list[str] = field(default_factory=list)
    manifest: dict[str, Any] = field(default_factory=dict)

    @property
    def size_bytes(self) -> int:
        return self.kernel.stat().st_size + self.initrd.stat().st_size

    def to_json(self) -> dict[str, Any]:
        return {
            "kernel": str(self.kernel),
            "initrd": str(self.initrd),
            "digest": self.digest,
            "built": self.built,
            "elapsed_s": round(self.seconds, 3),  # to build it, or to find it in the cache
            "kernel_bytes": self.kernel.stat().st_size,
            "initrd_bytes": self.initrd.stat().st_size,
            "kernel_package": self.manifest.get("kernel_package"),
            "notes": self.notes,
        }


# -- pure parts ----------------------------------------------------------------------------


def compute_digest(inputs: dict[str, Any]) -> str:
    """The cache key of an image: a hash of its inputs, independent of dict order."""
    return hashlib.sha256(json.dumps(inputs, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def parse_ldd(text: str) -> list[str]:
    """The shared-library paths (loader included) in ``ldd`` output; the vDSO has no file."""
    out = []
    for line in text.splitlines():
        line = line.strip()
        m = re.match(r"\S+ => (/\S+) \(0x[0-9a-f]+\)$", line) or re.match(r"(/\S+) \(0x[0-9a-f]+\)$", line)
        if m:
            out.append(m.group(1))
        elif "=> not found" in line:
            raise ImageError(f"a shared library is missing on this host: {line}")
    return out


def parse_kernel_dependency(apt_show: str, meta: str = KERNEL_METAPACKAGE) -> tuple[str, str | None]:
    """(package, version or None) of the kernel a metapackage depends on, from ``apt-cache show``."""
    for line in apt_show.splitlines():
        if not line.startswith("Depends:"):
            continue
        for dep in line[len("Depends:") :].split(","):
            m = re.match(r"\s*(linux-image-[^\s(|]+)\s*(?:\(\s*=\s*([^\s)]+)\s*\))?", dep)
            if m and m.group(1) != meta:
                return m.group(1), m.group(2)
    raise ImageError(f"{meta} depends on no linux-image package", hint="run: apt-get update")


def kernel_cmdline(ip: str | None = None, *, gateway: str | None = None, extra: Iterable[str] = ()) -> str:
    """The kernel command line the probe image understands (see ``init``)."""
    args = ["console=ttyS0", "panic=-1", "quiet", "loglevel=3"]
    if ip:
        args.append(f"hvnet.ip={ip}")
    if gateway:
        args.append(f"hvnet.gw={gateway}")
    args += list(extra)
    return " ".join(args)


INIT = r"""#!/bin/sh
# hvnet probe guest init: drivers, network from the kernel command line, then the agent.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root
mount -t proc proc /proc
mount -t sysfs sysfs /sys
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t tmpfs -o mode=1777 tmpfs /tmp
say() { echo "hvnet-probe: $*"; }
say "init at $(cut -d' ' -f1 /proc/uptime) s"
while read -r m; do
    insmod "/lib/modules/$m.ko" || say "insmod $m failed"
done < /etc/hvnet/modules
ip link set lo up
IP= GW= MTU= NAME=probe
for arg in $(cat /proc/cmdline); do
    case "$arg" in
        hvnet.ip=*) IP=${arg#hvnet.ip=} ;;
        hvnet.gw=*) GW=${arg#hvnet.gw=} ;;
        hvnet.mtu=*) MTU=${arg#hvnet.mtu=} ;;
        hvnet.hostname=*) NAME=${arg#hvnet.hostname=} ;;
    esac
done
hostname "$NAME"
n=0
while [ ! -e /sys/class/net/eth0 ] && [ $n -lt 20 ]; do sleep 0.1; n=$((n + 1)); done
for dev in /sys/class/net/eth*; do
    [ -e "$dev" ] || continue
    dev=${dev##*/}
    [ -n "$MTU" ] && ip link set "$dev" mtu "$MTU"
    ip link set "$dev" up
    # TCP through OVS's userspace datapath hangs with TX checksum offload on.
    ethtool -K "$dev" tx off >/dev/null 2>&1 || say "ethtool -K $dev tx off failed"
done
[ -n "$IP" ] && { ip addr add "$IP" dev eth0 || say "cannot set $IP on eth0"; }
[ -n "$GW" ] && { ip route add default via "$GW" || say "cannot add the default route via $GW"; }
PORT=
n=0
while [ -z "$PORT" ] && [ $n -lt 100 ]; do
    for f in /sys/class/virtio-ports/*/name; do
        [ -e "$f" ] && [ "$(cat "$f")" = "@PORT_NAME@" ] && { p=${f%/name}; PORT=/dev/${p##*/}; }
    done
    [ -n "$PORT" ] || { sleep 0.1; n=$((n + 1)); }
done
if [ -z "$PORT" ]; then
    say "no virtio-serial port named @PORT_NAME@: the host cannot reach this guest"
    exec sh
fi
n=0
while [ ! -e "$PORT" ] && [ $n -lt 50 ]; do sleep 0.1; n=$((n + 1)); done
# qemu-ga on its own port (the ports appear together: no wait for a domain without it). No udev here:
# the port is found by its name in sysfs.
for f in /sys/class/virtio-ports/*/name; do
    [ -e "$f" ] && [ "$(cat "$f")" = "@GA_PORT_NAME@" ] || continue
    p=${f%/name}; GA=/dev/${p##*/}
    n=0
    while [ ! -e "$GA" ] && [ $n -lt 50 ]; do sleep 0.1; n=$((n + 1)); done
    mkdir -p /run/qemu-ga
    qemu-ga -m virtio-serial -p "$GA" -t /run/qemu-ga </dev/null >/run/qemu-ga.log 2>&1 &
    say "qemu-ga on $GA"
done
say "ip ${IP:-none} port $PORT, agent starting at $(cut -d' ' -f1 /proc/uptime) s"
exec @PYTHON@ -I -S -X utf8 /usr/lib/hvnet/agent.pyc "$PORT"
"""


def init_script() -> str:
    return (
        INIT.replace("@PORT_NAME@", PORT_NAME).replace("@GA_PORT_NAME@", GA_PORT_NAME).replace("@PYTHON@", GUEST_PYTHON)
    )


ETC_FILES = {
    "etc/passwd": "root:x:0:0:root:/root:/bin/sh\ntcpdump:x:103:106::/nonexistent:/bin/false\n",
    "etc/group": "root:x:0:\ntcpdump:x:106:\n",
    "etc/hosts": "127.0.0.1 localhost\n::1 localhost\n",
    "etc/nsswitch.conf": "passwd: files\ngroup: files\nhosts: files\n",
    "etc/services": "netperf 12865/tcp\n",
}


# -- the cpio archive (newc), written here so that device nodes need no root -----------------


class Cpio:
    """An initramfs archive in the kernel's "newc" format."""

    def __init__(self) -> None:
        self.parts: list[bytes] = []
        self.ino = 1
        self.seen: set[str] = set()

    def _entry(self, name: str, mode: int, data: bytes = b"", rdev: tuple[int, int] = (0, 0)) -> None:
        name = name.lstrip("/")
        if name in self.seen:
            return
        self.seen.add(name)
        fields = [self.ino, mode, 0, 0, 1, 0, len(data), 0, 0, rdev[0], rdev[1], len(name) + 1, 0]
        header = b"070701" + b"".join(b"%08X" % f for f in fields)
        self.ino += 1
        blob = header + name.encode() + b"\0"
        blob += b"\0" * (-len(blob) % 4)
        blob += data + b"\0" * (-len(data) % 4)
        self.parts.append(blob)

    def dir(self, path: str) -> None:
        """``path`` and its parents (entries already written are skipped)."""
        parts = [p for p in path.strip("/").split("/") if p]
        for i in range(1, len(parts) + 1):
            self._entry("/".join(parts[:i]), 0o040755)

    def file(self, path: str, data: bytes, mode: int = 0o644) -> None:
        self.dir(os.path.dirname(path.strip("/")))
        self._entry(path, 0o100000 | mode, data)

    def symlink(self, path: str, target: str) -> None:
        self.dir(os.path.dirname(path.strip("/")))
        self._entry(path, 0o120777, target.encode())

    def chardev(self, path: str, major: int, minor: int) -> None:
        self._entry(path, 0o020600, rdev=(major, minor))

    def bytes(self) -> bytes:
        trailer = Cpio()
        trailer._entry("TRAILER!!!", 0)
        data = b"".join(self.parts) + trailer.parts[0]
        return data + b"\0" * (-len(data) % 512)


# -- host inputs ------------------------------------------------------------------------------


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def _apt_state() -> str:
    """A fingerprint of apt's package lists: the kernel lookup is redone only when they change."""
    h = hashlib.sha256()
    for d in (Path("/var/lib/apt/lists"), Path("/etc/apt/sources.list.d"), Path("/etc/apt")):
        try:
            entries = sorted(d.iterdir())
        except OSError:
            continue
        for f in entries:
            try:
                st = f.stat()
            except OSError:
                continue
            h.update(f"{f}:{st.st_size}:{st.st_mtime_ns}\n".encode())
    return h.hexdigest()


def _kernel_package(cache_root: Path | None = None) -> tuple[str, str]:
    """(package, version) of the kernel the cloud metapackage currently depends on.

    apt-cache takes about a second here (no binary cache is kept), so the
    answer is remembered next to the images for as long as apt's lists stay the same.
    """
    memo = cache_root / "kernel-package.json" if cache_root is not None else None
    state = _apt_state()
    if memo is not None:
        try:
            known = json.loads(memo.read_text())
            if known["apt_state"] == state:
                return known["package"], known["version"]
        except (OSError, ValueError, KeyError):
            pass
    show = proc.run(["apt-cache", "show", "--no-all-versions", KERNEL_METAPACKAGE], check=False)
    if show.returncode != 0 or not show.stdout.strip():
        raise ImageError(
            f"apt knows no {KERNEL_METAPACKAGE}: {show.stderr.strip()}", hint="run: apt-get update (Debian 12 main)"
        )
    pkg, version = parse_kernel_dependency(show.stdout)
    if version is None:
        show = proc.run(["apt-cache", "show", "--no-all-versions", pkg], check=False)
        m = re.search(r"^Version:\s*(\S+)", show.stdout, re.M)
        if not m:
            raise ImageError(f"apt has no version of {pkg}", hint="run: apt-get update")
        version = m.group(1)
    if memo is not None:
        try:
            memo.parent.mkdir(parents=True, exist_ok=True)
            tmp = memo.with_suffix(f".{os.getpid()}.tmp")
            tmp.write_text(json.dumps({"apt_state": state, "package": pkg, "version": version}))
            os.replace(tmp, memo)
        except OSError:
            pass  # a read-only cache only costs time
    return pkg, version


_PY_PROBE = r"""
import importlib.util, json, os, sys, sysconfig
agent, out = sys.argv[1], sys.argv[2]
spec = importlib.util.spec_from_file_location("hvnet_agent", agent)
spec.loader.exec_module(importlib.util.module_from_spec(spec))
for extra in sys.argv[3:]:  # modules host-side code runs in the guest with "python3 -c"
    importlib.import_module(extra)
stdlib = os.path.realpath(sysconfig.get_paths()["stdlib"])
files = {}
for name, mod in sorted(sys.modules.items()):
    f = getattr(mod, "__file__", None)
    if f and os.path.realpath(f).startswith(stdlib + os.sep):
        files[os.path.relpath(os.path.realpath(f), stdlib)] = os.path.realpath(f)
if out != "-":
    import py_compile
    for rel, src in files.items():
        if rel.endswith(".py"):
            py_compile.compile(src, cfile=os.path.join(out, rel + "c"), dfile=rel, doraise=True)
        else:
            dest = os.path.join(out, rel)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with open(src, "rb") as a, open(dest, "wb") as b:
                b.write(a.read())
    py_compile.compile(agent, cfile=os.path.join(out, "agent.pyc"), dfile="agent.py", doraise=True)
print(json.dumps({"stdlib": stdlib, "version": sys.version.split()[0], "files": files}))
"""


def _python_modules(out: str = "-") -> dict[str, Any]:
    """The stdlib files the agent needs, found by importing it in the guest's interpreter.

    With ``out`` they are also compiled there (by that same interpreter, so the
    bytecode matches the guest's Python), sourceless, in the stdlib layout.
    """
    if not os.access(GUEST_PYTHON, os.X_OK):
        raise ImageError(f"{GUEST_PYTHON} is missing", hint="install Debian's python3.11 (package python3.11)")
    res = subprocess.run(
        [GUEST_PYTHON, "-I", "-S", "-X", "utf8", "-c", _PY_PROBE, str(AGENT_SOURCE), out, *GUEST_EXTRA_MODULES],
        capture_output=True,
        text=True,
        check=False,
        timeout=120,
    )
    if res.returncode != 0:
        raise ImageError(f"cannot list the agent's modules with {GUEST_PYTHON}: {res.stderr.strip()[-400:]}")
    return json.loads(res.stdout)


def _binaries(modules: dict[str, Any]) -> dict[str, str]:
    """Guest path -> host path of every executable and shared library to copy."""
    files: dict[str, str] = {}
    programs = {f"/usr/bin/{t}": proc.which(t) for t in TOOLS}
    programs.update({f"/usr/sbin/{t}": proc.which(t) for t in SBIN_TOOLS})
    programs[GUEST_PYTHON] = GUEST_PYTHON
    stdlib = modules["stdlib"]
    dynload = [os.path.join(stdlib, rel) for rel in modules["files"] if rel.endswith(".so")]
    for dest, src in programs.items():
        files[dest] = os.path.realpath(src)
    for obj in [*programs.values(), *dynload]:
        for lib in parse_ldd(proc.run(["ldd", obj]).stdout):
            files.setdefault(lib, os.path.realpath(lib))
    return files


def collect_inputs(cache_root: Path | None = None) -> dict[str, Any]:
    """Everything an image is made of, hashed: the digest of this is the cache key."""
    pkg, version = _kernel_package(cache_root)
    if not os.access(BUSYBOX, os.X_OK):
        raise ImageError(f"{BUSYBOX} is missing", hint="install the package busybox-static")
    modules = _python_modules()
    binaries = _binaries(modules)
    return {
        "builder": BUILDER_VERSION,
        "compress": COMPRESS,
        "kernel_package": pkg,
        "kernel_version": version,
        "modules": [*NET_MODULES, *OPTIONAL_MODULES],
        "busybox": _sha256(Path(BUSYBOX)),
        "files": {dest: _sha256(Path(src)) for dest, src in sorted(binaries.items())},
        "python": modules["version"],
        "stdlib": {rel: _sha256(Path(src)) for rel, src in sorted(modules["files"].items())},
        "agent": _sha256(AGENT_SOURCE),
        "init": hashlib.sha256(init_script().encode()).hexdigest(),
        "etc": hashlib.sha256(json.dumps(ETC_FILES, sort_keys=True).encode()).hexdigest(),
        "_binaries": binaries,  # not hashed: host paths only say where the hashed files came from
    }


# -- building -----------------------------------------------------------------------------------


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w") as f:
        fcntl.flock(f, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def _fetch_kernel(cache_root: Path, pkg: str, version: str) -> Path:
    """The kernel package's .deb, downloaded once into the cache (never installed)."""
    debs = cache_root / "debs"
    debs.mkdir(parents=True, exist_ok=True)
    for deb in debs.glob(f"{pkg}_*.deb"):
        if proc.run(["dpkg-deb", "-f", str(deb), "Version"], check=False).stdout.strip() == version:
            return deb
    res = subprocess.run(
        [proc.which("apt-get"), "download", f"{pkg}={version}"],
        cwd=debs, capture_output=True, text=True, timeout=600, check=False,
    )  # fmt: skip
    found = [d for d in debs.glob(f"{pkg}_*.deb") if d.stat().st_size > 0]
    if res.returncode != 0 or not found:
        raise ImageError(
            f"apt-get download {pkg}={version} failed: {res.stderr.strip()[-300:]}",
            hint="check that deb.debian.org (or the configured mirror) is reachable, then retry",
        )
    return max(found, key=lambda d: d.stat().st_mtime)


def _module_bytes(path: Path) -> bytes:
    """A module's bytes, decompressed: busybox's insmod reads plain .ko files only."""
    data = path.read_bytes()
    name = path.name
    if name.endswith(".xz"):
        return lzma.decompress(data)
    if name.endswith(".gz"):
        return gzip.decompress(data)
    if name.endswith(".zst"):
        return subprocess.run([proc.which("zstd"), "-dc", str(path)], capture_output=True, check=True).stdout
    return data


def _kernel_parts(root: Path) -> tuple[Path, dict[str, Path], list[str], list[str]]:
    """vmlinuz, the modules to load (name -> file, in order), and notes, from an extracted package."""
    vmlinuz = next((root / "boot").glob("vmlinuz-*"), None)
    mod_dirs = sorted((root / "lib" / "modules").glob("*")) or sorted((root / "usr" / "lib" / "modules").glob("*"))
    if vmlinuz is None or not mod_dirs:
        raise ImageError(f"no kernel or modules in the package extracted at {root}")
    mod_dir = mod_dirs[0]
    builtin = set()
    builtin_file = mod_dir / "modules.builtin"
    if builtin_file.exists():
        builtin = {Path(line).name.split(".ko")[0] for line in builtin_file.read_text().split()}
    index: dict[str, Path] = {}
    for ko in mod_dir.rglob("*.ko*"):
        index.setdefault(ko.name.split(".ko")[0].replace("-", "_"), ko)
    wanted: dict[str, Path] = {}
    notes = []
    order = []
    for name in (*NET_MODULES, *OPTIONAL_MODULES):
        if name in builtin:
            notes.append(f"{name}: built into the kernel")
        elif name in index:
            wanted[name] = index[name]
            order.append(name)
        elif name in NET_MODULES:
            raise ImageError(f"the kernel package has no module {name}: the probe guest would have no network")
        else:
            notes.append(f"{name}: neither built in nor a module")
    return vmlinuz, wanted, order, notes


def _assemble(inputs: dict[str, Any], modules: dict[str, Path], order: list[str], pyout: Path) -> bytes:
    cpio = Cpio()
    for d in ("bin", "sbin", "usr/bin", "usr/sbin", "usr/lib/hvnet", "lib/modules", "lib64", "etc/hvnet",
              "proc", "sys", "dev", "tmp", "run", "root", "var/tmp"):  # fmt: skip
        cpio.dir(d)
    cpio.chardev("dev/console", 5, 1)  # the kernel opens it for init's stdio before devtmpfs is mounted
    cpio.chardev("dev/null", 1, 3)
    cpio.file("init", init_script().encode(), 0o755)
    for path, text in ETC_FILES.items():
        cpio.file(path, text.encode())
    cpio.file("etc/hvnet/modules", "".join(f"{m}\n" for m in order).encode())
    for name, path in modules.items():
        cpio.file(f"lib/modules/{name}.ko", _module_bytes(path))
    binaries: dict[str, str] = inputs["_binaries"]
    for dest, src in sorted(binaries.items()):
        cpio.file(dest, Path(src).read_bytes(), 0o755)
    cpio.file("bin/busybox", Path(BUSYBOX).read_bytes(), 0o755)
    ours = {os.path.basename(d) for d in binaries}
    applets = subprocess.run([BUSYBOX, "--list-full"], capture_output=True, text=True, check=True).stdout.split()
    for applet in applets:
        if os.path.basename(applet) not in ours and applet != "bin/busybox":
            cpio.symlink(applet, "/bin/busybox")
    cpio.symlink("usr/bin/python3", os.path.basename(GUEST_PYTHON))
    # The guest's Python: its stdlib subset (sourceless .pyc) and the agent.
    stdlib_guest = f"usr/lib/python{inputs['python'].rsplit('.', 1)[0]}"
    cpio.dir(f"{stdlib_guest}/lib-dynload")  # its absence makes Python warn at every start
    for f in sorted(pyout.rglob("*")):
        if f.is_file():
            rel = f.relative_to(pyout).as_posix()
            if rel == "agent.pyc":
                cpio.file("usr/lib/hvnet/agent.pyc", f.read_bytes())
            else:
                cpio.file(f"{stdlib_guest}/{rel}", f.read_bytes(), 0o755 if rel.endswith(".so") else 0o644)
    return cpio.bytes()


def _cached(final: Path, digest: str, start: float) -> ProbeImage | None:
    manifest_path = final / "manifest.json"
    if not manifest_path.exists():
        return None
    try:
        manifest = json.loads(manifest_path.read_text())
    except (OSError, ValueError):
        return None  # a damaged cache entry is rebuilt, not trusted
    return ProbeImage(
        kernel=final / "vmlinuz",
        initrd=final / "initrd.img",
        digest=digest,
        built=False,
        seconds=time.monotonic() - start,
        notes=list(manifest.get("notes", [])),
        manifest=manifest,
    )


def default_cache_root() -> Path:
    """The image cache: ``$HVNET_IMAGE_CACHE``, ``[lab] image_cache`` in hvnet.conf, else :data:`DEFAULT_CACHE`."""
    return Path(config.resolve("lab.image_cache").value or DEFAULT_CACHE)


def build_image(cache_root: Path | None = None, force: bool = False) -> ProbeImage:
    """The probe image for the current inputs: found in the cache, or built (``force``: always built)."""
    start = time.monotonic()
    cache_root = Path(cache_root) if cache_root is not None else default_cache_root()
    inputs = collect_inputs(cache_root)
    digest = compute_digest({k: v for k, v in inputs.items() if not k.startswith("_")})
    final = cache_root / digest
    if not force and (found := _cached(final, digest, start)) is not None:
        return found
    with _locked(cache_root / ".lock"):
        if not force and (found := _cached(final, digest, start)) is not None:
            return found  # another build finished it while we waited
        deb = _fetch_kernel(cache_root, inputs["kernel_package"], inputs["kernel_version"])
        tmp = Path(tempfile.mkdtemp(prefix=f".build-{digest[:12]}-", dir=cache_root))
        try:
            extracted = tmp / "deb"
            proc.run(["dpkg-deb", "-x", str(deb), str(extracted)], timeout=300)
            vmlinuz, modules, order, notes = _kernel_parts(extracted)
            pyout = tmp / "python"
            _python_modules(str(pyout))
            archive = _assemble(inputs, modules, order, pyout)
            out = tmp / "image"
            out.mkdir()
            shutil.copyfile(vmlinuz, out / "vmlinuz")
            data = gzip.compress(archive, compresslevel=6, mtime=0) if COMPRESS == "gzip" else archive
            (out / "initrd.img").write_bytes(data)
            packed = f"{COMPRESS}: {len(data) / 1e6:.1f} MB" if COMPRESS != "none" else "uncompressed"
            notes.append(f"initramfs {len(archive) / 1e6:.1f} MB ({packed}), {len(order)} modules")
            manifest = {
                "digest": digest,
                "kernel_package": f"{inputs['kernel_package']}={inputs['kernel_version']}",
                "modules": order,
                "notes": notes,
                "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
                "inputs": {k: v for k, v in inputs.items() if not k.startswith("_")},
                "sources": inputs["_binaries"],
                "initrd_uncompressed_bytes": len(archive),
            }
            (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
            if final.exists():  # force: replace the old one, which readers may still hold open by path
                old = cache_root / f".old-{digest[:12]}-{os.getpid()}"
                os.rename(final, old)
                shutil.rmtree(old, ignore_errors=True)
            os.rename(out, final)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    image = _cached(final, digest, start)
    assert image is not None
    image.built = True
    return image
