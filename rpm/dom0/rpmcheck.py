#!/usr/bin/env python3
"""Can dom0's rpm 4.11 read this RPM?

XenServer 8 and XCP-ng 8.x install with rpm 4.11.3 (CentOS 7).  A package built
by a newer rpmbuild installs there only if nothing in its header needs a newer
rpm, and those needs are written down in the header itself:

- PAYLOADCOMPRESSOR: rpm 4.11's rpmio reads gzip, bzip2, xz and lzma; zstd came
  with rpm 4.14 (the EL8/EL9 default, and so hvnet's EL9 RPM's);
- the ``rpmlib(...)`` requirements: each must be one rpm 4.11.3 provides (the
  list below is lib/rpmds.c's at the rpm-4.11.3-release tag); a zstd payload,
  rich dependencies, large files and carets add ones it lacks;
- FILEDIGESTALGO: the hash of the per-file digests, one rpm 4.11 computes (MD5,
  SHA-1, SHA-2); a package without files has none.

The checks read ``rpm -qp --qf`` and ``rpm -qp --requires`` output, so they are
tested on captured text as well as on packages built both ways.

    rpmcheck.py FILE.rpm... [--json]   exit 0: readable; 1: problems; 2: bad use
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
from dataclasses import asdict, dataclass, field
from pathlib import Path

# rpm 4.11.3's rpmlib provides (lib/rpmds.c, tag rpm-4.11.3-release).
RPMLIB_411 = frozenset(
    {
        "rpmlib(VersionedDependencies)",
        "rpmlib(CompressedFileNames)",
        "rpmlib(PayloadIsBzip2)",
        "rpmlib(PayloadIsXz)",
        "rpmlib(PayloadIsLzma)",
        "rpmlib(PayloadFilesHavePrefix)",
        "rpmlib(ExplicitPackageProvide)",
        "rpmlib(HeaderLoadSortsTags)",
        "rpmlib(ScriptletInterpreterArgs)",
        "rpmlib(PartialHardlinkSets)",
        "rpmlib(ConcurrentAccess)",
        "rpmlib(BuiltinLuaScripts)",
        "rpmlib(FileDigests)",
        "rpmlib(FileCaps)",
        "rpmlib(ScriptletExpansion)",
        "rpmlib(TildeInVersions)",
    }
)

# Payload compressors rpm 4.11's rpmio opens (gzdio, bzdio, xzdio, lzdio).
COMPRESSORS_411 = frozenset({"gzip", "bzip2", "xz", "lzma"})

# PGPHASHALGO numbers rpm 4.11 computes file digests with: MD5, SHA-1, SHA-256/384/512/224.
DIGESTS_411 = {1: "md5", 2: "sha1", 8: "sha256", 9: "sha384", 10: "sha512", 11: "sha224"}

QUERY_FORMAT = "%{NAME}\\n%{PAYLOADCOMPRESSOR}\\n%{PAYLOADFORMAT}\\n%{FILEDIGESTALGO}\\n"


@dataclass
class RpmReport:
    """What was read from one package and what rpm 4.11 would refuse in it."""

    name: str
    compressor: str
    payload_format: str
    digest_algo: str
    requires: list[str] = field(default_factory=list)
    problems: list[str] = field(default_factory=list)


def _rpmlib_name(line: str) -> str:
    return line.split()[0] if line.split() else ""


def judge(qf_output: str, requires_output: str) -> RpmReport:
    """Read the query's four lines and the --requires list; name each problem."""
    lines = qf_output.splitlines()
    if len(lines) < 4:
        raise ValueError(f"expected 4 lines of rpm --qf output, got {len(lines)}: {qf_output!r}")
    name, compressor, payload_format, algo = (x.strip() for x in lines[:4])
    requires = [r.strip() for r in requires_output.splitlines() if r.strip()]
    report = RpmReport(name, compressor, payload_format, algo, requires)
    if compressor not in COMPRESSORS_411:
        # rpm before 4.12 wrote no PAYLOADCOMPRESSOR for gzip: "(none)" means gzip there,
        # but a modern rpmbuild always writes it, so its absence here is worth a look.
        allowed = ", ".join(sorted(COMPRESSORS_411))
        report.problems.append(f"payload compressor {compressor!r}: rpm 4.11 reads {allowed}")
    if payload_format != "cpio":
        report.problems.append(f"payload format {payload_format!r}: rpm 4.11 reads cpio")
    if algo != "(none)" and (not algo.isdigit() or int(algo) not in DIGESTS_411):
        report.problems.append(f"file digest algorithm {algo!r}: rpm 4.11 computes {sorted(DIGESTS_411)}")
    for req in requires:
        lib = _rpmlib_name(req)
        if lib.startswith("rpmlib(") and lib not in RPMLIB_411:
            report.problems.append(f"requires {lib}, which rpm 4.11 does not provide")
    return report


def query(path: Path) -> RpmReport:
    """Query one package file with the host's rpm (no signature check: only the header is read)."""
    base = ["rpm", "-qp", "--nosignature", "--nodigest"]
    qf = subprocess.run([*base, "--qf", QUERY_FORMAT, "--", str(path)], capture_output=True, text=True, check=False)
    if qf.returncode != 0:
        raise RuntimeError(f"rpm could not read {path}: {qf.stderr.strip()}")
    req = subprocess.run([*base, "--requires", "--", str(path)], capture_output=True, text=True, check=False)
    if req.returncode != 0:
        raise RuntimeError(f"rpm could not read the requires of {path}: {req.stderr.strip()}")
    return judge(qf.stdout, req.stdout)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Check that dom0's rpm 4.11 can read and install these RPMs.")
    ap.add_argument("rpms", nargs="+", type=Path)
    ap.add_argument("--json", action="store_true", help="print the reports as JSON")
    args = ap.parse_args(argv)
    missing = [str(p) for p in args.rpms if not p.is_file()]
    if missing:
        ap.error(f"no such file: {', '.join(missing)}")
    try:
        reports = [query(p) for p in args.rpms]
    except RuntimeError as exc:
        print(f"rpmcheck: {exc}", file=sys.stderr)
        return 2
    if args.json:
        print(json.dumps([asdict(r) for r in reports], indent=2))
    else:
        for r in reports:
            verdict = "refused" if r.problems else "readable"
            print(f"{r.name}: {verdict} by rpm 4.11 (payload {r.compressor}, file digests {r.digest_algo})")
            for p in r.problems:
                print(f"  {p}")
    return 1 if any(r.problems for r in reports) else 0


if __name__ == "__main__":
    sys.exit(main())
