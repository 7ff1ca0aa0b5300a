"""The pure parts of the kernel-datapath VM host: the image's digest inputs and mirror, what debootstrap
says is missing (real output), management addressing, the configuration disk the VM reads (its sshd
configuration checked by the real ``sshd -T``), QEMU's arguments, and the init scripts (parsed by the
real dash and busybox)."""

from __future__ import annotations

import hashlib
import io
import ipaddress
import shutil
import subprocess
import tarfile
from pathlib import Path

import pytest

from appliance.core.errors import EXIT_MISSING_TOOL, LabError
from appliance.lab import sshd
from appliance.lab.vm.image import compute_digest
from appliance.lab.vmhost import boot, image, recipe
from appliance.lab.vmhost.image import PackagesUnavailable, VmHostImage

DATA = Path(__file__).resolve().parents[1] / "data"

# This machine's /etc/apt/sources.list.d/debian.sources, as it is.
DEB822 = """Types: deb
# http://snapshot.debian.org/archive/debian/20250520T000000Z
URIs: http://deb.debian.org/debian
Suites: bookworm bookworm-updates
Components: main non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
# http://snapshot.debian.org/archive/debian-security/20250520T000000Z
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main non-free
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
"""


# -- the image ----------------------------------------------------------------------------


def test_the_mirror_is_the_one_serving_bookworm_in_either_source_format() -> None:
    assert image.debian_mirror([DEB822]) == "http://deb.debian.org/debian"
    one_line = ("# deb http://old.example/debian bookworm main\n"
                "deb http://security.debian.org/debian-security bookworm-security main\n"
                "deb [arch=amd64 signed-by=/k.gpg] http://mirror.example/debian/ bookworm main non-free\n")  # fmt: skip
    assert image.debian_mirror([one_line]) == "http://mirror.example/debian"
    security_only = DEB822.split("\n\n")[1]
    assert (
        image.debian_mirror([security_only, "deb https://packages.cloud.google.com/apt cloud-sdk-bookworm main"])
        is None
    )


def test_the_digest_covers_the_kernel_version_the_packages_and_the_recipe_text() -> None:
    a = image.digest_inputs("linux-image-6.1.0-56-cloud-amd64", "6.1.192-2")
    assert (
        a["packages"] == sorted(image.PACKAGES) and "netperf" in a["packages"] and "openvswitch-switch" in a["packages"]
    )
    assert a["recipe"] == hashlib.sha256(Path(recipe.__file__).read_text().encode()).hexdigest()
    assert a["builder"] == image.BUILDER_VERSION and a["components"] == ["main", "non-free"]
    b = image.digest_inputs("linux-image-6.1.0-56-cloud-amd64", "6.1.192-3")
    assert compute_digest(a) != compute_digest(b)
    assert compute_digest(a) == compute_digest(dict(reversed(list(a.items()))))  # order does not matter


def test_the_packages_debootstrap_could_not_find_are_named_with_exit_4() -> None:
    text = (DATA / "debootstrap-missing-debs.txt").read_text()
    assert image.missing_packages(text) == ["netperf-nope", "hvnet-no-such-package"]
    assert image.missing_packages("I: Base system installed successfully.\n") == []
    assert image.missing_packages("E: Couldn't download packages: netperf iperf3\n") == ["netperf", "iperf3"]
    assert PackagesUnavailable("x").exit_code == EXIT_MISSING_TOOL == 4


def test_the_root_image_has_room_beyond_its_tree() -> None:
    assert image.root_size_mb(311_630_511) == 883
    assert image.root_size_mb(0) == image.FREE_SPACE_MB


# -- addressing and the configuration disk ------------------------------------------------


def test_each_vm_host_gets_a_slash30_outside_every_range_the_lab_uses() -> None:
    links = [boot.plan(f"kh{i}", i) for i in (1, 2, 1022)]
    assert [(ln.tap, ln.peer, ln.address, ln.mac) for ln in links[:2]] == [
        ("hvk1", "169.254.32.5", "169.254.32.6", "52:54:00:6b:00:01"),
        ("hvk2", "169.254.32.9", "169.254.32.10", "52:54:00:6b:00:02"),
    ]
    assert links[2].mac == "52:54:00:6b:03:fe" and links[2].address == "169.254.47.250"
    taken = [ipaddress.ip_network("169.254.64.0/20"), ipaddress.ip_network("169.254.100.0/22"),
             ipaddress.ip_network("169.254.104.0/21"), ipaddress.ip_network("169.254.112.0/20"),
             ipaddress.ip_network("169.254.128.0/17")]  # guests' links; lab hosts' 169.254.100.0 and up  # fmt: skip
    for ln in links:
        net = ipaddress.ip_interface(f"{ln.address}/{ln.prefix}").network
        assert ipaddress.ip_address(ln.peer) in net and not any(net.overlaps(t) for t in taken)


@pytest.mark.parametrize("name", ["", "Kh1", "kh 1", "kh1;reboot", "a" * 16, "1kh"])
def test_a_name_that_is_no_hostname_is_refused(name: str) -> None:
    with pytest.raises(LabError, match="VM host name"):
        boot.plan(name, 1)


@pytest.mark.parametrize("index", [0, -1, 1024])
def test_an_index_outside_the_block_is_refused(index: int) -> None:
    with pytest.raises(LabError, match="index"):
        boot.plan("kh1", index)


def test_host_conf_is_key_value_lines_and_refuses_a_module_that_is_no_name() -> None:
    ln = boot.plan("kh1", 1)
    assert boot.host_conf(ln) == (
        "hostname=kh1\nmac=52:54:00:6b:00:01\naddress=169.254.32.6/30\n"
        "modules=openvswitch act_police cls_basic cls_matchall sch_ingress sch_htb 8021q\n"
    )
    with pytest.raises(LabError, match="not a kernel module"):
        boot.host_conf(ln, ("openvswitch", "x\nhostname=evil"))


def _archive(ln: boot.MgmtLink) -> dict[str, tarfile.TarInfo | bytes]:
    raw = boot.config_archive(ln, "PRIVATE\n", "ssh-ed25519 AAAAHOST kh\n", "ssh-ed25519 AAAACLIENT lab\n")
    assert len(raw) % 512 == 0  # read by tar from the raw disk
    out: dict[str, tarfile.TarInfo | bytes] = {}
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        for m in tar.getmembers():
            out[m.name] = m
            f = tar.extractfile(m)
            out[m.name + ":data"] = f.read() if f else b""
    return out


def test_the_configuration_disk_holds_the_conf_the_keys_and_sshds_configuration() -> None:
    ln = boot.plan("kh1", 1)
    got = _archive(ln)
    names = sorted(k for k in got if not k.endswith(":data"))
    assert names == ["host.conf", "ssh/authorized_keys", "ssh/host_key", "ssh/host_key.pub", "ssh/sshd_config"]
    key = got["ssh/host_key"]
    assert isinstance(key, tarfile.TarInfo) and key.mode == 0o600
    assert got["ssh/authorized_keys:data"] == b"ssh-ed25519 AAAACLIENT lab\n"
    assert got["host.conf:data"] == boot.host_conf(ln).encode()


def test_the_vms_sshd_listens_on_its_management_address_with_a_path_without_python(tmp_path: Path) -> None:
    ln = boot.plan("kh1", 1)
    text = boot.vm_sshd_config(ln)
    assert "SetEnv PATH=/usr/lib/hvnet/bin HOME=/root" in text
    sshd.keygen(tmp_path / "host_key", "t")
    local = text.replace(str(boot.VM_SSH_DIR), str(tmp_path))
    (tmp_path / "sshd_config").write_text(local)
    out = subprocess.run([sshd.sshd_binary(), "-T", "-f", str(tmp_path / "sshd_config")], capture_output=True,
                         text=True, check=True).stdout  # fmt: skip
    got = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in out.splitlines() if " " in line}
    assert got["listenaddress"] == "169.254.32.6:22"
    assert got["permitrootlogin"] == "without-password" and got["passwordauthentication"] == "no"
    assert got["hostkey"] == str(tmp_path / "host_key")


# -- QEMU -----------------------------------------------------------------------------------


def _image() -> VmHostImage:
    d = Path("/cache/vmhost/abc")
    return VmHostImage(d / "vmlinuz", d / "initrd.img", d / "root.img", "abc", False, 0.0)


def test_qemu_gets_four_vcpus_the_overlay_a_read_only_config_disk_and_the_tap(tmp_path: Path) -> None:
    ln = boot.plan("kh1", 1)
    argv = boot.qemu_argv(_image(), tmp_path, ln, "tcg", 1024)
    pairs = dict(zip(argv[1::2], argv[2::2]))
    assert argv[0] == "qemu-system-x86_64" and "-daemonize" in argv and "-no-reboot" in argv
    assert pairs["-smp"] == "4" and pairs["-m"] == "1024" and pairs["-accel"] == "tcg" and pairs["-cpu"] == "max"
    assert pairs["-kernel"] == "/cache/vmhost/abc/vmlinuz" and pairs["-initrd"] == "/cache/vmhost/abc/initrd.img"
    drives = [argv[i + 1] for i, a in enumerate(argv) if a == "-drive"]
    assert drives == [f"file={tmp_path}/root.qcow2,format=qcow2,if=virtio",
                      f"file={tmp_path}/config.tar,format=raw,if=virtio,readonly=on"]  # fmt: skip
    assert "root.img" not in " ".join(drives)  # the cached image is only the overlay's backing file
    assert pairs["-netdev"] == "tap,id=mgmt,ifname=hvk1,script=no,downscript=no"
    assert pairs["-device"] == "virtio-net-pci,netdev=mgmt,mac=52:54:00:6b:00:01"
    assert pairs["-serial"] == f"file:{tmp_path}/console.log" and pairs["-pidfile"] == f"{tmp_path}/qemu.pid"
    kvm = dict(zip(*[iter(boot.qemu_argv(_image(), tmp_path, ln, "kvm")[1:])] * 2))
    assert kvm["-accel"] == "kvm" and kvm["-cpu"] == "host" and kvm["-m"] == "512"
    with pytest.raises(LabError, match="accelerator"):
        boot.qemu_argv(_image(), tmp_path, ln, "hvf")


def test_what_the_vm_could_not_do_and_its_console_are_shown_literally() -> None:
    assert boot.problems("module act_police: not loaded\n\nmodule 8021q: not loaded\n") == [
        "module act_police: not loaded", "module 8021q: not loaded"]  # fmt: skip
    assert boot.problems("") == []
    console = "".join(f"line {i}\r\n" for i in range(40)) + "\x1b[31mpanic\x1b[0m\n"
    tail = boot.console_tail(console).splitlines()
    assert boot.console_tail("\r\n\n") == "  (nothing on its console)"
    assert len(tail) == boot.CONSOLE_LINES and tail[-1] == "  | \\x1b[31mpanic\\x1b[0m" and tail[0] == "  | line 16"


# -- the scripts ----------------------------------------------------------------------------


def test_the_init_scripts_parse_in_the_shells_that_run_them(tmp_path: Path) -> None:
    (tmp_path / "init").write_text(recipe.INIT)
    (tmp_path / "initramfs").write_text(recipe.INITRAMFS_INIT)
    dash = shutil.which("dash")
    assert dash, "dash runs the VM's init"
    subprocess.run([dash, "-n", str(tmp_path / "init")], check=True)
    subprocess.run(["/bin/busybox", "sh", "-n", str(tmp_path / "initramfs")], check=True)
    for applet in ("insmod", "mount", "switch_root", "poweroff", "sleep"):
        assert applet in image.INITRAMFS_APPLETS


def test_the_init_reads_host_conf_without_evaluating_it(tmp_path: Path) -> None:
    """The loop of the VM's init that reads host.conf, run by dash on a hostile file."""
    start = recipe.INIT.index("NAME=vmhost")
    end = recipe.INIT.index('done < "$CONF/host.conf"') + len('done < "$CONF/host.conf"')
    (tmp_path / "host.conf").write_text("hostname=$(touch pwned)\nmac=52:54:00:6b:00:01\nevil=`touch pwned`\n"
                                        "modules=openvswitch act_police\n")  # fmt: skip
    script = f'set -f\nCONF={tmp_path}\n{recipe.INIT[start:end]}\nprintf "%s|%s|%s" "$NAME" "$MAC" "$MODULES"\n'
    out = subprocess.run(["dash", "-c", script], capture_output=True, text=True, check=True, cwd=tmp_path).stdout
    assert out == "$(touch pwned)|52:54:00:6b:00:01|openvswitch act_police"
    assert not (tmp_path / "pwned").exists()


def test_trunk_nics_are_taps_beside_the_management_one_with_macs_of_their_own() -> None:
    link = boot.plan("kvm1", 3)
    nics = boot.trunk_nics(link, ("eth0-hv1", "eth1-hv1"))
    assert [n.tap for n in nics] == ["hvk3t0", "hvk3t1"]
    assert len({link.mac, *(n.mac for n in nics)}) == 3
    assert all(int(n.mac.split(":")[0], 16) & 0b10 for n in nics)  # locally administered
    with pytest.raises(LabError, match="at most 8"):
        boot.trunk_nics(link, tuple(f"eth{i}-x" for i in range(9)))


def test_qemu_gets_a_virtio_nic_on_its_own_tap_per_trunk(tmp_path: Path) -> None:
    link = boot.plan("kvm1", 1)
    img = VmHostImage(tmp_path / "k", tmp_path / "i", tmp_path / "r", "d", False, 0.0)
    nics = boot.trunk_nics(link, ("eth0-hv1",))
    argv = boot.qemu_argv(img, tmp_path, link, "tcg", trunks=nics)
    i = argv.index("tap,id=trunk0,ifname=hvk1t0,script=no,downscript=no")
    assert argv[i - 1 : i + 3] == ["-netdev", argv[i], "-device", f"virtio-net-pci,netdev=trunk0,mac={nics[0].mac}"]
    assert "trunk0" not in " ".join(boot.qemu_argv(img, tmp_path, link, "tcg"))


def test_the_trunk_taps_still_here_are_found_by_name_alone() -> None:
    link = boot.plan("kvm1", 1)
    names = ["hvk1", "hvk1t0", "hvk1t12", "hvk10", "hvk10t0", "hvk1tx", "eth0-kvm1"]
    assert boot.trunk_taps(link, names) == ["hvk1t0", "hvk1t12"]
