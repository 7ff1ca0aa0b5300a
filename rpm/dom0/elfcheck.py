#!/usr/bin/env python3
"""Does every ELF file under a directory fit a XenServer 8 / XCP-ng 8.x dom0?

dom0 is a CentOS 7 userland: glibc 2.17 and GCC 4.8's libstdc++.  A binary linked
against a newer glibc fails there at load time ("version `GLIBC_2.34' not found"),
long after the RPM installed cleanly, so the payload is checked before it ships:

- each file's version needs (``readelf --version-info``) on a library that is not
  bundled: GLIBC_ at most 2.17, GLIBCXX_ 3.4.19, CXXABI_ 1.3.7, GCC_ 4.8.0 -- the
  ceilings of the manylinux2014 policy, which describes the same CentOS 7 base;
- each DT_NEEDED library: one of glibc's own, or found inside the tree through an
  RPATH/RUNPATH entry relative to ``$ORIGIN`` (a bundled OpenSSL, zlib, libffi).

The parsers take readelf's text so they are tested on captured output; ``scan``
runs readelf itself, with an argument list (file names never meet a shell).

    elfcheck.py DIR [--glibc 2.17] [--json]   exit 0: fits; 1: problems; 2: bad use
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

ELF_MAGIC = b"\x7fELF"

# glibc's own libraries on CentOS 7 (x86_64): what dom0 always has.
GLIBC_LIBS = frozenset(
    {
        "libc.so.6",
        "libm.so.6",
        "libpthread.so.0",
        "libdl.so.2",
        "librt.so.1",
        "libutil.so.1",
        "libcrypt.so.1",
        "libresolv.so.2",
        "ld-linux-x86-64.so.2",
    }
)

# Highest symbol version dom0 provides, per version prefix (manylinux2014 = CentOS 7).
CEILINGS: dict[str, tuple[int, ...]] = {
    "GLIBC_": (2, 17),
    "GLIBCXX_": (3, 4, 19),
    "CXXABI_": (1, 3, 7),
    "GCC_": (4, 8, 0),
}

_NEED_FILE = re.compile(r"^\s*0x?[0-9a-f]+:\s+Version:\s+\d+\s+File:\s+(\S+)\s+Cnt:")
_NEED_NAME = re.compile(r"^\s*0x[0-9a-f]+:\s+Name:\s+(\S+)\s+Flags:")
_DYNAMIC = re.compile(r"^\s*0x[0-9a-f]+\s+\((NEEDED|RPATH|RUNPATH)\)\s+[^\[]*\[(.*)\]\s*$")


@dataclass
class ElfInfo:
    """What one ELF file asks of the system that loads it."""

    needed: list[str] = field(default_factory=list)
    search: list[str] = field(default_factory=list)  # RPATH/RUNPATH entries, in order
    version_needs: dict[str, list[str]] = field(default_factory=dict)  # library -> versions


@dataclass
class Problem:
    path: str
    what: str

    def __str__(self) -> str:
        return f"{self.path}: {self.what}"


def parse_version(text: str) -> tuple[str, tuple[int, ...]] | None:
    """'GLIBC_2.3.4' -> ('GLIBC_', (2, 3, 4)); None for names like 'GLIBC_PRIVATE'."""
    for prefix in CEILINGS:
        if text.startswith(prefix):
            parts = text[len(prefix) :].split(".")
            if all(p.isdigit() for p in parts):
                return prefix, tuple(int(p) for p in parts)
    return None


def parse_readelf(text: str) -> ElfInfo:
    """Read ``readelf --wide --dynamic --version-info`` output.

    Only the version *needs* section counts: a library's own version definitions
    (libc.so.6 defines GLIBC_2.36 here) say what it offers, not what it asks for.
    """
    info = ElfInfo()
    in_needs = False
    current: str | None = None
    for line in text.splitlines():
        if line.startswith("Version needs section"):
            in_needs = True
            continue
        if line.startswith(("Version definition section", "Version symbols section")):
            in_needs = False
            continue
        m = _DYNAMIC.match(line)
        if m:
            kind, value = m.groups()
            if kind == "NEEDED":
                info.needed.append(value)
            else:
                info.search.extend(p for p in value.split(":") if p)
            continue
        if not in_needs:
            continue
        m = _NEED_FILE.match(line)
        if m:
            current = m.group(1)
            info.version_needs.setdefault(current, [])
            continue
        m = _NEED_NAME.match(line)
        if m and current is not None:
            info.version_needs[current].append(m.group(1))
    return info


def highest(versions: list[str], prefix: str) -> tuple[int, ...] | None:
    parsed = [parse_version(v) for v in versions]
    found = [p[1] for p in parsed if p is not None and p[0] == prefix]
    return max(found) if found else None


def _resolve(lib: str, search: list[str], origin: Path, root: Path) -> Path | None:
    """The bundled file ``lib`` resolves to through $ORIGIN search paths, if any."""
    for entry in search:
        if not entry.startswith(("$ORIGIN", "${ORIGIN}")):
            continue
        rel = entry.replace("${ORIGIN}", "$ORIGIN").replace("$ORIGIN", str(origin), 1)
        candidate = Path(os.path.normpath(Path(rel) / lib))
        # resolved: a bundled name that is a symlink out of the tree is not bundled
        if candidate.exists() and candidate.resolve().is_relative_to(root):
            return candidate
    return None


def judge(rel: str, info: ElfInfo, origin: Path, root: Path, ceilings: dict[str, tuple[int, ...]]) -> list[Problem]:
    """The problems of one file, given where it sits in the tree."""
    problems: list[Problem] = []
    bundled: set[str] = set()
    for entry in info.search:
        if not entry.startswith(("$ORIGIN", "${ORIGIN}")):
            problems.append(Problem(rel, f"search path {entry!r} is outside the prefix (use $ORIGIN)"))
    for lib in info.needed:
        if lib in GLIBC_LIBS:
            continue
        if _resolve(lib, info.search, origin, root) is not None:
            bundled.add(lib)
            continue
        problems.append(Problem(rel, f"needs {lib}, neither glibc's nor found in the tree through $ORIGIN"))
    for lib, versions in sorted(info.version_needs.items()):
        if lib in bundled:
            continue  # a bundled library offers its own versions
        for prefix, ceiling in ceilings.items():
            top = highest(versions, prefix)
            if top is not None and top > ceiling:
                have = prefix + ".".join(map(str, top))
                limit = prefix + ".".join(map(str, ceiling))
                problems.append(Problem(rel, f"needs {have} from {lib} (dom0 has at most {limit})"))
    return problems


def is_elf(path: Path) -> bool:
    try:
        with path.open("rb") as fh:
            return fh.read(4) == ELF_MAGIC
    except OSError:
        return False


def readelf(path: Path) -> str:
    res = subprocess.run(
        ["readelf", "--wide", "--dynamic", "--version-info", "--", str(path)],
        capture_output=True,
        text=True,
        check=False,
    )
    if res.returncode != 0:
        raise RuntimeError(f"readelf failed on {path}: {res.stderr.strip()}")
    return res.stdout


def scan(root: Path, ceilings: dict[str, tuple[int, ...]] | None = None) -> tuple[int, list[Problem]]:
    """Check every regular ELF file under ``root``: (files checked, problems)."""
    ceilings = ceilings or CEILINGS
    root = root.resolve()
    count = 0
    problems: list[Problem] = []
    for dirpath, _dirs, files in os.walk(root):
        for name in sorted(files):
            path = Path(dirpath) / name
            if path.is_symlink() or not path.is_file() or not is_elf(path):
                continue
            count += 1
            info = parse_readelf(readelf(path))
            problems += judge(str(path.relative_to(root)), info, path.parent, root, ceilings)
    return count, problems


def _glibc(text: str) -> tuple[int, ...]:
    parsed = parse_version("GLIBC_" + text)
    if parsed is None:
        raise argparse.ArgumentTypeError(f"not a glibc version: {text!r} (e.g. 2.17)")
    return parsed[1]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Check that every ELF file under DIR fits a glibc 2.17 dom0.")
    ap.add_argument("dir", type=Path)
    ap.add_argument("--glibc", type=_glibc, default=CEILINGS["GLIBC_"], help="highest GLIBC_ version (2.17)")
    ap.add_argument("--json", action="store_true", help="print the result as JSON")
    args = ap.parse_args(argv)
    if not args.dir.is_dir():
        ap.error(f"{args.dir}: not a directory")
    count, problems = scan(args.dir, {**CEILINGS, "GLIBC_": args.glibc})
    if args.json:
        print(json.dumps({"files": count, "problems": [asdict(p) for p in problems]}, indent=2))
    else:
        for p in problems:
            print(p)
        print(f"{count} ELF files checked, {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
