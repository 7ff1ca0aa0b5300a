"""The VM host image: a Debian 12 root file system with Open vSwitch, the cloud kernel, a tiny initramfs.

Production hypervisors run Open vSwitch's *kernel* datapath (tc policing,
kernel mirrors and tunnels); this machine's kernel has no openvswitch module,
so the lab boots a hypervisor of its own: Debian's cloud kernel (which ships
``openvswitch.ko``, ``act_police``, ``cls_matchall`` ... as modules) over a
root file system made by ``debootstrap --variant=minbase`` with the packages
of :data:`PACKAGES`.  The kernel package is downloaded (``apt-get download``),
never installed; its modules go under ``usr/lib/modules`` followed by
``depmod -b`` -- ``dpkg -x`` over a merged-/usr root would replace the ``/lib``
symlink with a directory and break every binary in it.  The root becomes an
ext4 image (``mke2fs -d``, no loop mount), booted through a busybox
initramfs that loads the virtio block driver and ``switch_root``s into
:data:`INIT` (:mod:`appliance.lab.vmhost.boot` passes each VM its own
configuration on a second disk).

Images are cached under ``<cache>/vmhost/<digest>/``, the digest covering
every input (this recipe's text, the package list, the kernel package
version, the builder version); one build at a time (a lock file), in a
temporary directory renamed into place, so a crash never leaves half an image.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from appliance.core import proc
from appliance.core.errors import HvnetError, MissingTool
from appliance.lab.sshhost import REMOTE_TOOLS
from appliance.lab.vm import image as probe_image
from appliance.lab.vmhost import recipe
from appliance.lab.vmhost.recipe import INIT, INITRAMFS_INIT

BUILDER_VERSION = "1"  # bump when a build step below changes what an image holds
SUITE = "bookworm"
COMPONENTS = ("main", "non-free")  # netperf is in non-free
DEFAULT_MIRROR = "http://deb.debian.org/debian"
PACKAGES = ("openvswitch-switch", "openssh-server", "iproute2", "tcpdump", "ethtool", "iputils-ping", "arping",
            "iperf3", "procps", "kmod", "netperf")  # fmt: skip
# insmod order in the initramfs (each after what it needs): enough to reach the root disk.
BLOCK_MODULES = ("virtio_ring", "virtio", "virtio_pci_modern_dev", "virtio_pci_legacy_dev", "virtio_pci",
                 "virtio_blk")  # fmt: skip
INITRAMFS_APPLETS = ("sh", "insmod", "mount", "umount", "mkdir", "sleep", "cat", "cut", "switch_root", "poweroff")
SESSION_BIN = "usr/lib/hvnet/bin"  # the ssh session's PATH: symlinks to the tools of REMOTE_TOOLS, no Python
FREE_SPACE_MB = 512  # room in the root for OVS's database, logs and captures
DEBOOTSTRAP_TIMEOUT_S = 1800.0


class VmHostImageError(HvnetError):
    """The VM host image could not be built."""


class PackagesUnavailable(MissingTool):
    """Packages of the recipe cannot be fetched from the mirror: exit 4, as for a missing tool."""


@dataclass
class VmHostImage:
    """A built (or found) VM host image: what QEMU's ``-kernel``, ``-initrd`` and root ``-drive`` take."""

    kernel: Path
    initrd: Path
    root: Path
    digest: str
    built: bool
    seconds: float
    manifest: dict[str, Any] = field(default_factory=dict)

    @property
    def kernel_release(self) -> str:
        return str(self.manifest.get("kernel_release", ""))

    @property
    def root_bytes(self) -> int:
        """What the root image takes on disk (it is sparse: less than its apparent size)."""
        return self.root.stat().st_blocks * 512


# -- pure parts ----------------------------------------------------------------------------


def debian_mirror(sources: list[str], suite: str = SUITE) -> str | None:
    """The first Debian mirror serving ``suite`` (not its -security/-updates archive) in apt's sources.

    ``sources`` are the texts of the source files, one-line (``deb URI SUITE ...``)
    or deb822 (``URIs:``/``Suites:`` stanzas) alike.
    """
    for text in sources:
        for line in text.splitlines():
            fields = re.sub(r"\[[^\]]*\]", " ", line.split("#", 1)[0]).split()  # without [options]
            if len(fields) >= 3 and fields[0] == "deb" and fields[2] == suite:
                return fields[1].rstrip("/")
        for stanza in re.split(r"\n\s*\n", text):
            values: dict[str, list[str]] = {}
            for line in stanza.splitlines():
                m = re.match(r"([A-Za-z-]+):\s*(.*)$", line.split("#", 1)[0].rstrip())
                if m:
                    values[m.group(1).lower()] = m.group(2).split()
            if "deb" in values.get("types", []) and suite in values.get("suites", []) and values.get("uris"):
                return values["uris"][0].rstrip("/")
    return None


def digest_inputs(kernel_package: str, kernel_version: str) -> dict[str, Any]:
    """Everything an image is made of: the cache key is a hash of this."""
    recipe_text = Path(recipe.__file__).read_text()  # the scripts the image runs; build steps: BUILDER_VERSION
    return {
        "builder": BUILDER_VERSION,
        "suite": SUITE,
        "components": list(COMPONENTS),
        "packages": sorted(PACKAGES),
        "kernel_package": kernel_package,
        "kernel_version": kernel_version,
        "block_modules": list(BLOCK_MODULES),
        "session_tools": list(REMOTE_TOOLS),
        "recipe": hashlib.sha256(recipe_text.encode()).hexdigest(),
    }


def missing_packages(output: str) -> list[str]:
    """The packages debootstrap says it could not find or download, from its output."""
    found: list[str] = []
    for m in re.finditer(r"(?:Couldn't find these debs|Couldn't download packages?):\s*(.*)", output):
        found += [p for p in m.group(1).split() if p not in found]
    return found


def root_size_mb(used_bytes: int) -> int:
    """The ext4 image's size: what the tree takes, a quarter more for the file system, and free space."""
    return int(used_bytes * 1.25 / (1 << 20)) + FREE_SPACE_MB


# -- building -----------------------------------------------------------------------------


def _mirror() -> str:
    texts = []
    for path in [Path("/etc/apt/sources.list"), *sorted(Path("/etc/apt/sources.list.d").glob("*"))]:
        try:
            texts.append(path.read_text())
        except OSError:
            continue
    return debian_mirror(texts) or DEFAULT_MIRROR


def _debootstrap(root: Path, mirror: str, log: Path) -> None:
    argv = ["debootstrap", "--variant=minbase", f"--components={','.join(COMPONENTS)}",
            f"--include={','.join(PACKAGES)}", SUITE, str(root), mirror]  # fmt: skip
    if proc.which_optional("debootstrap") is None:
        raise MissingTool("debootstrap is not installed", hint="install the package debootstrap (.ci/setup-host does)")
    res = proc.run(argv, check=False, timeout=DEBOOTSTRAP_TIMEOUT_S)
    text = res.stdout + res.stderr
    log.write_text(text)
    if res.returncode == 0:
        return
    missing = missing_packages(text)
    if missing:
        raise PackagesUnavailable(
            f"the VM host image's packages cannot be fetched from {mirror}: {', '.join(missing)}",
            hint="check the mirror in apt's sources and that Debian's non-free component is enabled there",
        )
    tail = "\n".join(text.strip().splitlines()[-5:])
    raise VmHostImageError(f"debootstrap failed (exit {res.returncode}):\n{tail}")


def _add_kernel(root: Path, deb: Path, work: Path) -> tuple[str, Path]:
    """The kernel package's modules into ``usr/lib/modules`` (then depmod); its release and vmlinuz."""
    extracted = work / "kernel"
    proc.run(["dpkg-deb", "-x", str(deb), str(extracted)], timeout=300)
    mod_dirs = sorted((extracted / "lib" / "modules").glob("*")) or sorted(
        (extracted / "usr" / "lib" / "modules").glob("*")
    )
    vmlinuz = next((extracted / "boot").glob("vmlinuz-*"), None)
    if vmlinuz is None or not mod_dirs:
        raise VmHostImageError(f"no kernel or modules in {deb.name}")
    release = mod_dirs[0].name
    dest = root / "usr" / "lib" / "modules" / release
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(mod_dirs[0], dest, symlinks=True)
    proc.run(["depmod", "-b", str(root), release], timeout=300)
    return release, vmlinuz


def _initramfs(modules_dir: Path) -> tuple[bytes, list[str]]:
    """A busybox initramfs that loads the block drivers and switches to the root disk."""
    builtin_file = modules_dir / "modules.builtin"
    listed = builtin_file.read_text().split() if builtin_file.exists() else []
    builtin = {Path(x).name.split(".ko")[0] for x in listed}
    index = {ko.name.split(".ko")[0].replace("-", "_"): ko for ko in modules_dir.rglob("*.ko*")}
    cpio = probe_image.Cpio()
    for d in ("bin", "proc", "sys", "dev", "newroot", "lib/modules", "etc"):
        cpio.dir(d)
    cpio.chardev("dev/console", 5, 1)
    cpio.chardev("dev/null", 1, 3)
    order = []
    for name in BLOCK_MODULES:
        if name in builtin:
            continue
        if name not in index:
            raise VmHostImageError(f"the kernel has no module {name}: the VM could not reach its root disk")
        cpio.file(f"lib/modules/{name}.ko", probe_image._module_bytes(index[name]))
        order.append(name)
    cpio.file("etc/modules", "".join(f"{m}\n" for m in order).encode())
    cpio.file("bin/busybox", Path(probe_image.BUSYBOX).read_bytes(), 0o755)
    for applet in INITRAMFS_APPLETS:
        cpio.symlink(f"bin/{applet}", "busybox")
    cpio.file("init", INITRAMFS_INIT.encode(), 0o755)
    return cpio.bytes(), order


def _session_bin(root: Path) -> list[str]:
    """Symlinks to the remote tools inside the root; returns the tools it has no binary for."""
    bin_dir = root / SESSION_BIN
    bin_dir.mkdir(parents=True, exist_ok=True)
    absent = []
    for tool in REMOTE_TOOLS:
        where = next((d for d in ("usr/sbin", "usr/bin") if (root / d / tool).exists()), None)
        if where is None:
            absent.append(tool)
            continue
        (bin_dir / tool).symlink_to(f"/{where}/{tool}")
    return absent


def _customize(root: Path) -> list[str]:
    """The recipe's own files; the image's shared host keys and downloaded packages removed."""
    for key in (root / "etc" / "ssh").glob("ssh_host_*"):
        key.unlink()  # each VM gets the host key the lab made for it
    shutil.rmtree(root / "var" / "cache" / "apt" / "archives", ignore_errors=True)
    (root / "var" / "cache" / "apt" / "archives" / "partial").mkdir(parents=True)
    for lists in (root / "var" / "lib" / "apt" / "lists").glob("*_Packages"):
        lists.unlink()
    init = root / "usr" / "lib" / "hvnet" / "init"
    init.parent.mkdir(parents=True, exist_ok=True)
    init.write_text(INIT)
    init.chmod(0o755)
    return _session_bin(root)


def _du(path: Path) -> int:
    return int(proc.run(["du", "-sxb", str(path)], timeout=300).stdout.split()[0])


def _release_tree(tree: Path) -> None:
    """Unmount whatever a failed debootstrap left mounted under ``tree`` (deepest first) before removal."""
    prefix = str(tree.resolve()) + "/"
    mounts = []
    for line in Path("/proc/self/mounts").read_text().splitlines():
        point = line.split()[1].replace("\\040", " ")
        if point.startswith(prefix):
            mounts.append(point)
    for point in sorted(mounts, key=len, reverse=True):
        proc.run(["umount", "-l", point], check=False)


def default_cache_root() -> Path:
    """Beside the probe images: ``<image cache>/vmhost``."""
    return probe_image.default_cache_root() / "vmhost"


def _found(final: Path, digest: str, start: float) -> VmHostImage | None:
    try:
        manifest = json.loads((final / "manifest.json").read_text())
    except (OSError, ValueError):
        return None
    return VmHostImage(final / "vmlinuz", final / "initrd.img", final / "root.img", digest, False,
                       time.monotonic() - start, manifest)  # fmt: skip


def build_image(cache_root: Path | None = None) -> VmHostImage:
    """The VM host image for the current inputs, found in the cache or built (needs root: debootstrap)."""
    start = time.monotonic()
    cache_root = Path(cache_root) if cache_root is not None else default_cache_root()
    pkg, version = probe_image._kernel_package(cache_root)
    inputs = digest_inputs(pkg, version)
    digest = probe_image.compute_digest(inputs)
    final = cache_root / digest
    if (found := _found(final, digest, start)) is not None:
        return found
    with probe_image._locked(cache_root / ".lock"):
        if (found := _found(final, digest, start)) is not None:
            return found  # another build finished it while this one waited
        deb = probe_image._fetch_kernel(cache_root, pkg, version)
        tmp = Path(tempfile.mkdtemp(prefix=f".build-{digest[:12]}-", dir=cache_root))
        try:
            _build(tmp, deb, inputs, digest, final)
        finally:
            _release_tree(tmp)
            shutil.rmtree(tmp, ignore_errors=True)
    image = _found(final, digest, start)
    if image is None:
        raise VmHostImageError(f"the image built at {final} has no manifest")
    image.built = True
    return image


def _build(tmp: Path, deb: Path, inputs: dict[str, Any], digest: str, final: Path) -> None:
    started = time.monotonic()
    root, out = tmp / "root", tmp / "image"
    out.mkdir()
    mirror = _mirror()
    _debootstrap(root, mirror, tmp / "debootstrap.log")
    bootstrapped = time.monotonic() - started
    release, vmlinuz = _add_kernel(root, deb, tmp)
    absent = _customize(root)
    initrd, order = _initramfs(root / "usr" / "lib" / "modules" / release)
    (out / "initrd.img").write_bytes(initrd)
    shutil.copyfile(vmlinuz, out / "vmlinuz")
    used = _du(root)
    size = root_size_mb(used)
    proc.run(["mke2fs", "-q", "-F", "-t", "ext4", "-L", "hvnet-root", "-d", str(root), str(out / "root.img"),
              f"{size}M"], timeout=900)  # fmt: skip
    manifest = {
        "digest": digest,
        "inputs": inputs,
        "mirror": mirror,
        "kernel_release": release,
        "initramfs_modules": order,
        "session_tools_absent": absent,
        "tree_bytes": used,
        "root_mb": size,
        "debootstrap_s": round(bootstrapped, 1),
        "build_s": round(time.monotonic() - started, 1),
        "built_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    (out / "manifest.json").write_text(json.dumps(manifest, indent=2, sort_keys=True) + "\n")
    os.rename(out, final)
