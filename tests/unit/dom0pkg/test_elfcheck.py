"""rpm/dom0/elfcheck.py: the glibc 2.17 ceiling and the prefix rule, on captured readelf output and real binaries."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.unit.dom0pkg.tools import load

elfcheck = load("elfcheck")

needs_gcc = pytest.mark.skipif(shutil.which("gcc") is None or shutil.which("readelf") is None, reason="gcc/readelf")

# readelf --wide --dynamic --version-info /usr/lib/x86_64-linux-gnu/libstdc++.so.6 (Debian 12), trimmed:
# its own version definitions (GLIBCXX_3.4.30) must not count as needs.
LIBSTDCXX = """\

Dynamic section at offset 0x22cc00 contains 30 entries:
  Tag        Type                         Name/Value
 0x0000000000000001 (NEEDED)             Shared library: [libm.so.6]
 0x0000000000000001 (NEEDED)             Shared library: [libc.so.6]
 0x0000000000000001 (NEEDED)             Shared library: [ld-linux-x86-64.so.2]
 0x0000000000000001 (NEEDED)             Shared library: [libgcc_s.so.1]
 0x000000000000000e (SONAME)             Library soname: [libstdc++.so.6]
 0x0000000000000000 (NULL)               0x0

Version definition section '.gnu.version_d' contains 48 entries:
 Addr: 0x0000000000079f40  Offset: 0x00079f40  Link: 4 (.dynstr)
  000000: Rev: 1  Flags: BASE  Index: 1  Cnt: 1  Name: libstdc++.so.6
  0x001c: Rev: 1  Flags: none  Index: 2  Cnt: 1  Name: GLIBCXX_3.4
  0x044c: Rev: 1  Flags: none  Index: 32  Cnt: 2  Name: GLIBCXX_3.4.30

Version needs section '.gnu.version_r' contains 4 entries:
 Addr: 0x000000000007a5d8  Offset: 0x0007a5d8  Link: 4 (.dynstr)
  000000: Version: 1  File: libm.so.6  Cnt: 1
  0x0010:   Name: GLIBC_2.2.5  Flags: none  Version: 64
  0x0020: Version: 1  File: ld-linux-x86-64.so.2  Cnt: 1
  0x0030:   Name: GLIBC_2.3  Flags: none  Version: 63
  0x0040: Version: 1  File: libgcc_s.so.1  Cnt: 4
  0x0050:   Name: GCC_4.2.0  Flags: none  Version: 67
  0x0060:   Name: GCC_3.4  Flags: none  Version: 60
  0x0090: Version: 1  File: libc.so.6  Cnt: 5
  0x00a0:   Name: GLIBC_2.14  Flags: none  Version: 68
  0x00c0:   Name: GLIBC_2.33  Flags: none  Version: 65
  0x0120:   Name: GLIBC_2.17  Flags: none  Version: 55
  0x0140:   Name: GLIBC_2.36  Flags: none  Version: 52
  0x0170:   Name: GLIBC_2.2.5  Flags: none  Version: 49
"""

# A CPython extension module as the dom0 runtime should ship it: glibc 2.17 at most, its
# OpenSSL found beside the interpreter through $ORIGIN.
EXTENSION = """\
 0x0000000000000001 (NEEDED)             Shared library: [libssl.so.3]
 0x0000000000000001 (NEEDED)             Shared library: [libc.so.6]
 0x000000000000001d (RUNPATH)            Library runpath: [$ORIGIN/../..:/usr/local/lib]

Version needs section '.gnu.version_r' contains 2 entries:
  000000: Version: 1  File: libssl.so.3  Cnt: 1
  0x0010:   Name: OPENSSL_3.0.0  Flags: none  Version: 3
  0x0020: Version: 1  File: libc.so.6  Cnt: 2
  0x0030:   Name: GLIBC_2.14  Flags: none  Version: 4
  0x0040:   Name: GLIBC_2.17  Flags: none  Version: 2
"""


def test_the_parser_reads_needs_not_definitions() -> None:
    info = elfcheck.parse_readelf(LIBSTDCXX)
    assert info.needed == ["libm.so.6", "libc.so.6", "ld-linux-x86-64.so.2", "libgcc_s.so.1"]
    assert info.search == []
    assert info.version_needs["libc.so.6"] == ["GLIBC_2.14", "GLIBC_2.33", "GLIBC_2.17", "GLIBC_2.36", "GLIBC_2.2.5"]
    assert "GLIBCXX_3.4.30" not in [v for vs in info.version_needs.values() for v in vs]
    assert elfcheck.highest(info.version_needs["libc.so.6"], "GLIBC_") == (2, 36)  # 2.36 > 2.33: numeric, not text
    assert elfcheck.highest(info.version_needs["libgcc_s.so.1"], "GCC_") == (4, 2, 0)


def test_versions_parse_numerically_and_private_ones_are_ignored() -> None:
    assert elfcheck.parse_version("GLIBC_2.3.4") == ("GLIBC_", (2, 3, 4))
    assert elfcheck.parse_version("GLIBCXX_3.4.19") == ("GLIBCXX_", (3, 4, 19))
    assert elfcheck.parse_version("GLIBC_PRIVATE") is None
    assert elfcheck.parse_version("OPENSSL_3.0.0") is None


def test_too_new_glibc_and_a_library_outside_glibc_are_reported(tmp_path: Path) -> None:
    info = elfcheck.parse_readelf(LIBSTDCXX)
    problems = [p.what for p in elfcheck.judge("lib/libstdc++.so.6", info, tmp_path, tmp_path, elfcheck.CEILINGS)]
    assert problems == [
        "needs libgcc_s.so.1, neither glibc's nor found in the tree through $ORIGIN",
        "needs GLIBC_2.36 from libc.so.6 (dom0 has at most GLIBC_2.17)",
    ]  # GCC_4.2.0 <= 4.8.0 is fine; libgcc_s itself is not glibc's


def test_a_bundled_library_through_origin_passes_and_an_absolute_runpath_does_not(tmp_path: Path) -> None:
    ext_dir = tmp_path / "lib" / "python3.11" / "lib-dynload"
    ext_dir.mkdir(parents=True)
    info = elfcheck.parse_readelf(EXTENSION)
    assert info.search == ["$ORIGIN/../..", "/usr/local/lib"]
    missing = [p.what for p in elfcheck.judge("x.so", info, ext_dir, tmp_path, elfcheck.CEILINGS)]
    assert missing == [
        "search path '/usr/local/lib' is outside the prefix (use $ORIGIN)",
        "needs libssl.so.3, neither glibc's nor found in the tree through $ORIGIN",
    ]
    (tmp_path / "lib" / "libssl.so.3").write_bytes(b"")  # $ORIGIN/../.. from lib/python3.11/lib-dynload
    info.search = ["$ORIGIN/../.."]
    assert elfcheck.judge("x.so", info, ext_dir, tmp_path, elfcheck.CEILINGS) == []


def test_origin_cannot_climb_out_of_the_tree(tmp_path: Path) -> None:
    root = tmp_path / "opt"
    (root / "bin").mkdir(parents=True)
    (tmp_path / "libevil.so.1").write_bytes(b"")
    info = elfcheck.ElfInfo(needed=["libevil.so.1"], search=["$ORIGIN/../.."])
    outside = ["needs libevil.so.1, neither glibc's nor found in the tree through $ORIGIN"]
    assert [p.what for p in elfcheck.judge("bin/x", info, root / "bin", root, elfcheck.CEILINGS)] == outside
    (root / "lib").mkdir()
    (root / "lib" / "libevil.so.1").symlink_to(tmp_path / "libevil.so.1")  # inside by name, outside in fact
    info.search = ["$ORIGIN/../lib"]
    assert [p.what for p in elfcheck.judge("bin/x", info, root / "bin", root, elfcheck.CEILINGS)] == outside


@pytest.mark.skipif(not Path("/usr/bin/true").exists(), reason="no /usr/bin/true")
def test_this_machines_true_is_too_new_for_dom0(tmp_path: Path) -> None:
    """A real binary of a glibc >= 2.34 system: its __libc_start_main@GLIBC_2.34 is above 2.17."""
    shutil.copy("/usr/bin/true", tmp_path / "true")
    count, problems = elfcheck.scan(tmp_path)
    assert count == 1
    assert len(problems) == 1 and problems[0].path == "true"
    assert "from libc.so.6 (dom0 has at most GLIBC_2.17)" in problems[0].what


@needs_gcc
def test_real_binaries_a_static_one_fits_a_dynamic_one_does_not(tmp_path: Path) -> None:
    src = tmp_path / "m.c"
    src.write_text("int main(void) { return 0; }\n")
    tree = tmp_path / "opt" / "hvnet"
    (tree / "bin").mkdir(parents=True)
    subprocess.run(["gcc", "-o", str(tree / "bin" / "dyn"), str(src)], check=True)
    static = subprocess.run(["gcc", "-static", "-o", str(tree / "bin" / "static"), str(src)], check=False)
    (tree / "bin" / "script").write_text("#!/bin/sh\n")  # not ELF: skipped
    os.symlink("dyn", tree / "bin" / "link")  # symlinks are checked through their target
    count, problems = elfcheck.scan(tree)
    assert count == (2 if static.returncode == 0 else 1)
    assert [p.path for p in problems] == ["bin/dyn"]
    assert "GLIBC_2.34" in problems[0].what or "GLIBC_2.3" in problems[0].what
    # the command line: exit 1 with the problem named; a higher ceiling lets it through
    assert elfcheck.main([str(tree)]) == 1
    assert elfcheck.main([str(tree), "--glibc", "2.99"]) == 0


@needs_gcc
def test_a_shared_library_linked_through_origin_passes(tmp_path: Path) -> None:
    """A real RUNPATH: bin/tool needs lib/libtiny.so.1, found through $ORIGIN/../lib."""
    tree = tmp_path / "opt"
    (tree / "bin").mkdir(parents=True)
    (tree / "lib").mkdir()
    (tmp_path / "t.c").write_text("int tiny(void) { return 1; }\n")
    subprocess.run(
        ["gcc", "-shared", "-nostdlib", "-fPIC", "-Wl,-soname,libtiny.so.1", "-o", str(tree / "lib" / "libtiny.so.1"),
         str(tmp_path / "t.c")],
        check=True,
    )  # fmt: skip
    (tmp_path / "u.c").write_text("int tiny(void);\nint use(void) { return tiny(); }\n")
    subprocess.run(
        ["gcc", "-shared", "-nostdlib", "-fPIC", "-o", str(tree / "bin" / "libuse.so"), str(tmp_path / "u.c"),
         str(tree / "lib" / "libtiny.so.1"), "-Wl,--enable-new-dtags,-rpath,$ORIGIN/../lib"],
        check=True,
    )  # fmt: skip
    count, problems = elfcheck.scan(tree)
    assert (count, problems) == (2, [])
    (tree / "lib" / "libtiny.so.1").rename(tree / "libtiny.so.1")  # moved off the search path
    count, problems = elfcheck.scan(tree)
    assert [p.what for p in problems] == ["needs libtiny.so.1, neither glibc's nor found in the tree through $ORIGIN"]


def test_bad_use_exits_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        elfcheck.main([str(tmp_path / "nope")])
    assert exc.value.code == 2
    with pytest.raises(SystemExit) as exc:
        elfcheck.main([str(tmp_path), "--glibc", "two"])
    assert exc.value.code == 2
    assert "not a glibc version" in capsys.readouterr().err


ZIG = importlib.util.find_spec("ziglang") is not None


@pytest.mark.skipif(not ZIG, reason="the ziglang package is not installed (see docs/reference/dom0-runtime.md)")
def test_zig_targeting_glibc_2_17_fits(tmp_path: Path) -> None:
    src = tmp_path / "m.c"
    src.write_text('#include <stdio.h>\nint main(void) { puts("hi"); return 0; }\n')
    out = tmp_path / "tree" / "m"
    out.parent.mkdir()
    cmd = [sys.executable, "-m", "ziglang", "cc", "-target", "x86_64-linux-gnu.2.17", "-o", str(out), str(src)]
    subprocess.run(cmd, check=True, capture_output=True)
    assert elfcheck.scan(out.parent) == (1, [])
