"""The probe channel's pure rules: line framing, id remapping, exit statuses, image digests and archives."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from appliance.lab.vm import image
from appliance.lab.vm.protocol import EXIT_LOST, IdMap, LineDecoder, encode, exit_status


def test_encode_is_one_line() -> None:
    line = encode({"ev": "out", "id": 1, "data": "a\nb"})
    assert line.endswith(b"\n") and line.count(b"\n") == 1


def test_decoder_reassembles_and_skips_fragments() -> None:
    d = LineDecoder()
    msgs = list(d.feed(b'"ing":1}\n{"ev":"pong","seq":3}\n{"ev":"ex'))
    assert msgs == [{"ev": "pong", "seq": 3}]
    assert d.skipped == 1  # the fragment a reconnect cut in two
    assert list(d.feed(b'it","id":2}\n\n[1]\n')) == [{"ev": "exit", "id": 2}]
    assert d.skipped == 2  # a JSON value that is not an object is not a message


def test_id_map_keeps_clients_apart() -> None:
    m = IdMap()
    a1, b1 = m.allocate("a", 1), m.allocate("b", 1)
    assert a1 != b1
    assert m.client_of(a1) == ("a", 1) and m.client_of(b1) == ("b", 1)
    with pytest.raises(ValueError):
        m.allocate("a", 1)
    assert m.release(a1) == ("a", 1)
    again = m.allocate("a", 1)
    assert again not in (a1, b1), "guest ids are never reused"
    assert m.owned_by("b") == [b1]
    assert sorted(m.release_all()) == sorted([(b1, "b", 1), (again, "a", 1)])
    assert len(m) == 0 and m.guest_id("a", 1) is None


@pytest.mark.parametrize(("code", "status"), [(0, 0), (3, 3), (-15, 143), (-9, 137), (EXIT_LOST, 255)])
def test_exit_status(code: int, status: int) -> None:
    assert exit_status(code) == status


def test_digest_is_stable_and_sensitive() -> None:
    a = {"kernel_version": "6.1.192-2", "files": {"/usr/bin/ip": "aa", "/usr/bin/tcpdump": "bb"}}
    b = {"files": {"/usr/bin/tcpdump": "bb", "/usr/bin/ip": "aa"}, "kernel_version": "6.1.192-2"}
    assert image.compute_digest(a) == image.compute_digest(b)
    assert len(image.compute_digest(a)) == 64
    c = {**a, "kernel_version": "6.1.193-1"}
    assert image.compute_digest(c) != image.compute_digest(a)


def test_parse_ldd() -> None:
    out = """\tlinux-vdso.so.1 (0x00007ffd)
\tlibm.so.6 => /lib/x86_64-linux-gnu/libm.so.6 (0x00007f32fb6e1000)
\t/lib64/ld-linux-x86-64.so.2 (0x00007f32fb818000)
"""
    assert image.parse_ldd(out) == ["/lib/x86_64-linux-gnu/libm.so.6", "/lib64/ld-linux-x86-64.so.2"]
    with pytest.raises(image.ImageError):
        image.parse_ldd("\tlibfoo.so.1 => not found\n")


def test_parse_kernel_dependency() -> None:
    show = "Package: linux-image-cloud-amd64\nVersion: 6.1.192-2\nDepends: linux-image-6.1.0-56-cloud-amd64 (= 6.1.192-2)\n"
    assert image.parse_kernel_dependency(show) == ("linux-image-6.1.0-56-cloud-amd64", "6.1.192-2")
    assert image.parse_kernel_dependency("Depends: linux-image-6.1.0-9-cloud-amd64\n") == (
        "linux-image-6.1.0-9-cloud-amd64",
        None,
    )
    with pytest.raises(image.ImageError):
        image.parse_kernel_dependency("Depends: libc6\n")


def test_kernel_cmdline() -> None:
    line = image.kernel_cmdline("192.168.0.160/24", gateway="192.168.0.1")
    assert "console=ttyS0" in line and "hvnet.ip=192.168.0.160/24" in line and "hvnet.gw=192.168.0.1" in line


def test_init_names_the_port_and_turns_tx_checksum_off() -> None:
    init = image.init_script()
    assert "org.hvnet.agent" in init and "tx off" in init and "@" not in init
    # qemu-ga on the port named org.qemu.guest_agent.0, in the background, before hvnet's agent takes PID 1
    ga = init.index('qemu-ga -m virtio-serial -p "$GA"')
    assert '= "org.qemu.guest_agent.0" ]' in init and ga < init.index("exec /usr/bin/python3")
    assert "GA=/dev/${p##*/}" in init and "&\n" in init[ga:]
    assert init.startswith("#!/bin/sh\n")


def test_cpio_is_readable_by_cpio() -> None:
    """The hand-written newc archive lists as the kernel (and GNU cpio) read it."""
    archive = image.Cpio()
    archive.file("etc/hvnet/modules", b"virtio\n")
    archive.symlink("bin/sh", "/bin/busybox")
    archive.chardev("dev/console", 5, 1)
    data = archive.bytes()
    assert len(data) % 512 == 0 and data.startswith(b"070701")
    if shutil.which("cpio") is None:
        pytest.skip("GNU cpio is not installed: the archive could not be cross-checked")
    listing = subprocess.run(["cpio", "-itv"], input=data, capture_output=True, check=True).stdout.decode()
    for name in ("etc/hvnet/modules", "bin/sh -> /bin/busybox", "dev/console", "etc/hvnet"):
        assert name in listing
