"""rpm/dom0/makepack.py and packmeta.py: a supplemental pack built from a tiny RPM, read back off its ISO."""

from __future__ import annotations

import os
import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from tests.unit.dom0pkg.tools import build_rpm, load

packmeta = load("packmeta")
makepack = load("makepack")
rpmcheck = load("rpmcheck")

TOOLS = ("rpmbuild", "createrepo_c", "xorriso")
needs_tools = pytest.mark.skipif(
    any(shutil.which(t) is None for t in TOOLS), reason=f"needs {', '.join(TOOLS)} (.ci/setup-host installs them)"
)


def unpack(iso: Path, into: Path) -> Path:
    """Read the ISO back the way a host would see it: every file extracted by xorriso."""
    subprocess.run(["xorriso", "-osirrox", "on", "-indev", str(iso), "-extract", "/", str(into)], check=True,
                   capture_output=True)  # fmt: skip
    return into


def info(**kw: object) -> object:
    return packmeta.PackInfo(**{"name": "hvnet", "version": "1.4.0", "description": "hvnet in dom0", **kw})


def test_pack_input_is_checked_with_the_field_named() -> None:
    for kw, field in [
        ({"name": "hv net"}, "--name"),
        ({"name": "a" * 65}, "--name"),
        ({"version": "1.4.0-rc1"}, "--version"),
        ({"originator": "a b"}, "--originator"),
        ({"description": "two\nlines"}, "--description"),
        ({"uuid": "nope"}, "--uuid"),
        ({"requires": [packmeta.Requirement(test="~")]}, "requirement"),
    ]:
        with pytest.raises(packmeta.PackError, match=field):
            info(**kw)


def test_the_uuid_is_stable_for_a_name_and_version() -> None:
    """xapi refuses one UUID for two updates and two UUIDs for one: a rebuild keeps its UUID."""
    assert info().uuid == info().uuid != info(version="1.4.1").uuid


def test_metadata_text_follows_the_formats() -> None:
    i = info(build="b42")
    repo = ET.fromstring(packmeta.xs_repository(i))
    assert repo.tag == "repository"
    assert {k: repo.get(k) for k in ("originator", "name", "product", "version", "build")} == {
        "originator": "hvnet", "name": "hvnet", "product": "XenServer", "version": "1.4.0", "build": "b42",
    }  # fmt: skip
    assert [r.attrib for r in repo.findall("requires")] == [
        {"originator": "xs", "name": "main", "test": "ge", "version": "8.2.0"}
    ]
    rpms = [
        packmeta.RpmFile("a-1-1.noarch.rpm", "a", 10, "0" * 32, 100),
        packmeta.RpmFile("b.rpm", "b", 5, "1" * 32, 23),
    ]
    upd = ET.fromstring(packmeta.update_xml(i, rpms))
    assert upd.get("installation-size") == "123" and upd.get("control") == "control-hvnet"
    assert upd.findtext("name-description") == "hvnet in dom0"
    comps = ET.fromstring(packmeta.groups_xml(["a", "b"]))
    assert comps.findtext("group/id") == "update"
    assert [p.text for p in comps.findall("group/packagelist/packagereq")] == ["a", "b"]
    assert "Requires: product-version >= 8.2.0" in packmeta.control_spec(i)


@needs_tools
def test_a_pack_from_a_tiny_rpm_reads_back_to_the_format(tmp_path: Path) -> None:
    tiny = build_rpm(tmp_path, payload="w9.xzdio")
    qf = subprocess.run(["rpm", "-qp", "--qf", "%{PAYLOADCOMPRESSOR}", str(tiny)], capture_output=True, text=True)
    assert qf.stdout == "xz"
    iso = tmp_path / "hvnet.iso"
    assert makepack.main(["--name", "hvnet", "--version", "1.4.0", "--description", "hvnet in dom0",
                          "--requires", "8.2.0", "--out", str(iso), str(tiny)]) == 0  # fmt: skip
    disc = unpack(iso, tmp_path / "disc")
    assert packmeta.check_pack(disc) == []

    upd = ET.parse(disc / "update.xml").getroot()
    assert (upd.get("name-label"), upd.get("version"), upd.get("control")) == ("hvnet", "1.4.0", "control-hvnet")
    pkgs = ET.parse(disc / "XS-PACKAGES").getroot().findall("package")
    assert sorted(p.get("label") for p in pkgs) == ["control-hvnet", "tiny"]
    for p in pkgs:  # the checksums are those of the files on the disc
        assert p.get("md5") == packmeta.md5_of(disc / p.text.strip())
    # the yum repository: gz metadata, the comps group "update" naming both packages
    repomd = (disc / "repodata" / "repomd.xml").read_text()
    assert "groups.xml" in repomd and ".zst" not in repomd
    primary = subprocess.run(["bash", "-c", f"zcat {disc}/repodata/*-primary.xml.gz"], capture_output=True, text=True)
    assert "<name>tiny</name>" in primary.stdout and "<name>control-hvnet</name>" in primary.stdout
    # the control package states the product version and is itself readable by rpm 4.11
    (control,) = disc.glob("control-hvnet-*.rpm")
    report = rpmcheck.query(control)
    assert report.problems == [] and "product-version >= 8.2.0" in report.requires
    # the volume label
    pvd = subprocess.run(["xorriso", "-indev", str(iso), "-pvd_info"], capture_output=True, text=True).stdout
    assert "hvnet-1.4.0" in pvd


@needs_tools
def test_check_pack_finds_a_tampered_or_incomplete_pack(tmp_path: Path) -> None:
    tiny = build_rpm(tmp_path)
    iso = tmp_path / "p.iso"
    assert makepack.main(["--name", "p", "--version", "1", "--description", "d", "--out", str(iso), str(tiny)]) == 0
    disc = unpack(iso, tmp_path / "disc")
    for f in disc.rglob("*"):
        f.chmod(0o755 if f.is_dir() else 0o644)  # xorriso extracts read-only
    (disc / "tiny-1.0-1.noarch.rpm").write_bytes(b"changed")
    (disc / "update.xml").write_text('<update uuid="x" name-label="p" version="1" control="control-q"/>')
    for f in (disc / "repodata").glob("*groups*"):
        f.unlink()
    repomd = disc / "repodata" / "repomd.xml"
    repomd.write_text(
        repomd.read_text().replace('type="group"', 'type="groupx"').replace("-other.xml.gz", "-other.xml.zst")
    )
    *problems, zst = packmeta.check_pack(disc)
    assert problems == [
        "update.xml: uuid 'x' is not a UUID",
        "update.xml: no <name-description> text",
        "XS-PACKAGES: size or md5 of tiny-1.0-1.noarch.rpm does not match the file",
        "update.xml: control package 'control-q' is not on the disc",
        "repodata: no group file (the comps group 'update' is what xapi installs)",
    ]
    assert zst.startswith("repodata: other at ") and zst.endswith(
        "-other.xml.zst': plain, gz or bz2 only (dom0's yum 3.4 predates zstd)"
    )
    (disc / "XS-REPOSITORY").unlink()
    assert any(p.startswith("XS-REPOSITORY:") for p in packmeta.check_pack(disc))


@needs_tools
def test_an_rpm_dom0_cannot_read_is_refused_before_anything_is_built(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    zstd = build_rpm(tmp_path, payload="w19.zstdio")
    iso = tmp_path / "z.iso"
    assert makepack.main(["--name", "z", "--version", "1", "--description", "d", "--out", str(iso), str(zstd)]) == 1
    assert not iso.exists()
    err = capsys.readouterr().err
    assert "makepack: tiny: payload compressor 'zstd': rpm 4.11 reads bzip2, gzip, lzma, xz" in err
    assert "makepack: tiny: requires rpmlib(PayloadIsZstd), which rpm 4.11 does not provide" in err


def test_bad_command_lines_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    fake = tmp_path / "a.rpm"
    fake.write_bytes(b"")
    for argv, msg in [
        (["--name", "a b", "--version", "1", "--description", "d", "--out", "x.iso", str(fake)], "--name"),
        (["--name", "a", "--version", "1", "--description", "d", "--out", "x.iso", str(tmp_path / "no.rpm")], "not an .rpm"),
        (["--name", "a", "--version", "1", "--description", "d", "--requires", "eight", "--out", "x", str(fake)], "product version"),
    ]:  # fmt: skip
        with pytest.raises(SystemExit) as exc:
            makepack.main(argv)
        assert exc.value.code == 2
        assert msg in capsys.readouterr().err


@needs_tools
@pytest.mark.skipif(shutil.which("gpg") is None or shutil.which("gpgconf") is None, reason="needs gpg")
def test_a_signed_pack_carries_detached_signatures_that_verify(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "gnupg"
    home.mkdir(mode=0o700)
    monkeypatch.setenv("GNUPGHOME", str(home))
    try:
        subprocess.run(["gpg", "--batch", "--passphrase", "", "--quick-gen-key", "pack-test@hvnet.invalid",
                        "ed25519", "sign", "never"], check=True, capture_output=True)  # fmt: skip
        iso = tmp_path / "s.iso"
        argv = ["--name", "s", "--version", "1", "--description", "d", "--sign-key", "pack-test@hvnet.invalid"]
        assert makepack.main([*argv, "--out", str(iso), str(build_rpm(tmp_path))]) == 0
        disc = unpack(iso, tmp_path / "disc")
        for signed in (disc / "update.xml", disc / "repodata" / "repomd.xml"):
            verify = subprocess.run(["gpg", "--batch", "--verify", f"{signed}.asc", str(signed)], capture_output=True)
            assert verify.returncode == 0, verify.stderr
    finally:
        subprocess.run(["gpgconf", "--kill", "gpg-agent"], check=False, env={**os.environ, "GNUPGHOME": str(home)})
