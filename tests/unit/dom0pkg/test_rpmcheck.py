"""rpm/dom0/rpmcheck.py: what dom0's rpm 4.11 refuses in a header, on captured output and on built packages."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tests.unit.dom0pkg.tools import build_rpm, load

rpmcheck = load("rpmcheck")

needs_rpmbuild = pytest.mark.skipif(shutil.which("rpmbuild") is None, reason="rpmbuild is not installed")

# rpm -qp --qf QUERY_FORMAT and --requires of hvnet's EL9 RPM's kind of package (rpm 4.18, zstd):
EL9_QF = "hvnet\nzstd\ncpio\n8\n"
EL9_REQUIRES = """\
/usr/bin/python3
python(abi) = 3.9
rpmlib(CompressedFileNames) <= 3.0.4-1
rpmlib(FileDigests) <= 4.6.0-1
rpmlib(PayloadFilesHavePrefix) <= 4.0-1
rpmlib(PayloadIsZstd) <= 5.4.18-1
rpmlib(RichDependencies) <= 4.12.0-1
"""


def test_an_el9_header_is_refused_for_each_reason() -> None:
    report = rpmcheck.judge(EL9_QF, EL9_REQUIRES)
    assert report.problems == [
        "payload compressor 'zstd': rpm 4.11 reads bzip2, gzip, lzma, xz",
        "requires rpmlib(PayloadIsZstd), which rpm 4.11 does not provide",
        "requires rpmlib(RichDependencies), which rpm 4.11 does not provide",
    ]
    assert report.requires[0] == "/usr/bin/python3"  # listed for the operator, not judged


def test_digests_and_formats_rpm_411_cannot_read() -> None:
    assert rpmcheck.judge("x\nxz\ncpio\n8\n", "").problems == []
    assert rpmcheck.judge("x\ngzip\ncpio\n(none)\n", "").problems == []  # no files: no digest algorithm
    assert rpmcheck.judge("x\nxz\ncpio\n12\n", "").problems == [
        "file digest algorithm '12': rpm 4.11 computes [1, 2, 8, 9, 10, 11]"
    ]
    assert rpmcheck.judge("x\nxz\nnewc\n8\n", "rpmlib(LargeFiles) <= 4.12.0-1\n").problems == [
        "payload format 'newc': rpm 4.11 reads cpio",
        "requires rpmlib(LargeFiles), which rpm 4.11 does not provide",
    ]
    with pytest.raises(ValueError, match="expected 4 lines"):
        rpmcheck.judge("x\nxz\n", "")


@needs_rpmbuild
def test_a_tiny_rpm_built_with_xz_is_accepted_and_with_zstd_refused(tmp_path: Path) -> None:
    xz = build_rpm(tmp_path, payload="w9.xzdio")
    qf = subprocess.run(["rpm", "-qp", "--qf", "%{PAYLOADCOMPRESSOR}", str(xz)], capture_output=True, text=True)
    assert qf.stdout == "xz"
    good = rpmcheck.query(xz)
    assert (good.compressor, good.digest_algo, good.problems) == ("xz", "8", [])
    assert "rpmlib(PayloadIsXz) <= 5.2-1" in good.requires

    zstd = build_rpm(tmp_path, payload="w19.zstdio")
    bad = rpmcheck.query(zstd)
    assert bad.compressor == "zstd"
    assert bad.problems == [
        "payload compressor 'zstd': rpm 4.11 reads bzip2, gzip, lzma, xz",
        "requires rpmlib(PayloadIsZstd), which rpm 4.11 does not provide",
    ]


@needs_rpmbuild
def test_the_command_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    xz = build_rpm(tmp_path, payload="w9.xzdio")
    zstd = build_rpm(tmp_path, name="tinyz", payload="w19.zstdio")
    assert rpmcheck.main([str(xz)]) == 0
    assert "tiny: readable by rpm 4.11 (payload xz, file digests 8)" in capsys.readouterr().out
    assert rpmcheck.main([str(xz), str(zstd), "--json"]) == 1
    reports = json.loads(capsys.readouterr().out)
    assert [(r["name"], bool(r["problems"])) for r in reports] == [("tiny", False), ("tinyz", True)]
    not_rpm = tmp_path / "not.rpm"
    not_rpm.write_text("text\n")
    assert rpmcheck.main([str(not_rpm)]) == 2
    assert "rpmcheck: rpm could not read" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        rpmcheck.main([str(tmp_path / "missing.rpm")])
    assert exc.value.code == 2
