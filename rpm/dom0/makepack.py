#!/usr/bin/env python3
"""Build a XenServer / XCP-ng supplemental pack (an ISO) from dom0 RPMs.

    makepack.py --name hvnet --version 1.4.0 --description "..." --out hvnet.iso RPM...
        [--requires 8.2.0] [--build B] [--uuid U] [--sign-key KEYID]

What goes on the disc (packmeta.py says why each file is there):

    update.xml [update.xml.asc]      xe-install-supplemental-pack / xe update-upload
    repodata/ [repomd.xml.asc]       the yum repository xapi serves, comps group "update"
    XS-REPOSITORY, XS-PACKAGES       the older format (host installer, installed-repos)
    control-NAME-VERSION-1.noarch.rpm  Requires: product-version >= the --requires versions
    the given RPMs

XenServer verifies ``update.xml.asc`` and ``repodata/repomd.xml.asc`` against the keys
in /opt/xensource/gpg, so a pack not signed by a key XenServer trusts is refused there
("Invalid signature"); ``--sign-key`` signs with a key of the caller's GnuPG home.
Tools: rpmbuild (control package, xz payload), createrepo_c (gz metadata: dom0's yum is
3.4), xorriso (the ISO).  Every given RPM is first checked as rpmcheck.py does: one
dom0's rpm 4.11 cannot open is refused here rather than on the host.
Exit 0: built and checked; 1: an RPM or the check refused; 2: bad input.
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

# rpm/dom0 is build tooling, not a package: its modules import each other from this directory
from packmeta import (
    VERSION_RE,
    PackError,
    PackInfo,
    Requirement,
    RpmFile,
    check_pack,
    control_spec,
    groups_xml,
    md5_of,
    update_xml,
    xs_packages,
    xs_repository,
)
from rpmcheck import query


def run(cmd: list[str]) -> subprocess.CompletedProcess[str]:
    res = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if res.returncode != 0:
        raise RuntimeError(f"{cmd[0]} failed ({res.returncode}): {res.stderr.strip() or res.stdout.strip()}")
    return res


def rpm_file(path: Path) -> RpmFile:
    out = run(["rpm", "-qp", "--nosignature", "--nodigest", "--qf", "%{NAME}\\n%{SIZE}\\n", "--", str(path)]).stdout
    label, installed = out.splitlines()[:2]
    return RpmFile(path.name, label, path.stat().st_size, md5_of(path), int(installed or 0))


def build_control(info: PackInfo, work: Path) -> Path:
    """rpmbuild the control package, with a payload and digests dom0's rpm 4.11 reads."""
    spec = work / f"{info.control}.spec"
    spec.write_text(control_spec(info))
    top = work / "rpmbuild"
    run(
        ["rpmbuild", "-bb", "--quiet", "-D", f"_topdir {top}", "-D", "_binary_payload w9.xzdio",
         "-D", "_binary_filedigest_algorithm 8", "-D", "_build_id_links none", str(spec)]
    )  # fmt: skip
    (rpm,) = (top / "RPMS" / "noarch").glob(f"{info.control}-*.rpm")
    return rpm


def sign(path: Path, key: str) -> None:
    out = f"{path}.asc"
    run(["gpg", "--batch", "--yes", "--local-user", key, "--armor", "--detach-sign", "--output", out, str(path)])


def stage(info: PackInfo, rpms: list[Path], disc: Path, work: Path, key: str | None) -> None:
    """Lay out the pack's files in ``disc``."""
    files = [*rpms, build_control(info, work)]
    for f in files:
        shutil.copy2(f, disc / f.name)
    entries = [rpm_file(disc / f.name) for f in files]
    (disc / "update.xml").write_text(update_xml(info, entries))
    (disc / "XS-REPOSITORY").write_text(xs_repository(info))
    (disc / "XS-PACKAGES").write_text(xs_packages(entries))
    groups = work / "groups.xml"
    groups.write_text(groups_xml([e.label for e in entries]))
    run(
        ["createrepo_c", "--quiet", "--groupfile", str(groups), "--compress-type", "gz",
         "--general-compress-type", "gz", "--checksum", "sha256", "--no-database", str(disc)]
    )  # fmt: skip
    if key:
        sign(disc / "update.xml", key)
        sign(disc / "repodata" / "repomd.xml", key)


def make_iso(info: PackInfo, disc: Path, out: Path) -> None:
    run(
        ["xorriso", "-as", "mkisofs", "-quiet", "-r", "-J", "-joliet-long", "-V", info.volume_id,
         "-A", f"{info.originator} {info.name}", "-o", str(out), str(disc)]
    )  # fmt: skip


def build(info: PackInfo, rpms: list[Path], out: Path, key: str | None = None) -> list[str]:
    """Build the ISO at ``out``; the problems ``check_pack`` finds in what was staged."""
    # a package dom0's rpm 4.11 cannot open would fail only on the host, at apply time
    refused = [f"{r.name}: {p}" for r in map(query, rpms) for p in r.problems]
    if refused:
        return refused
    with tempfile.TemporaryDirectory(prefix="hvnet-pack-") as tmp:
        disc, work = Path(tmp) / "disc", Path(tmp) / "work"
        disc.mkdir()
        work.mkdir()
        stage(info, rpms, disc, work, key)
        problems = check_pack(disc)
        if not problems:
            make_iso(info, disc, out)
        return problems


def _requirement(text: str) -> Requirement:
    if not VERSION_RE.match(text):
        raise argparse.ArgumentTypeError(f"not a product version: {text!r} (e.g. 8.2.0)")
    return Requirement(version=text)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description="Build a XenServer/XCP-ng supplemental pack ISO from RPMs.")
    ap.add_argument("rpms", nargs="+", type=Path, metavar="RPM")
    ap.add_argument("--name", required=True, help="the pack's name-label, e.g. hvnet")
    ap.add_argument("--version", required=True, help="the pack's version, e.g. 1.4.0")
    ap.add_argument("--description", required=True, help="one line")
    ap.add_argument("--originator", default="hvnet")
    ap.add_argument("--build", default="", help="a build identifier (XS-REPOSITORY)")
    ap.add_argument("--uuid", default="", help="default: derived from originator, name and version")
    ap.add_argument(
        "--requires", type=_requirement, action="append", help="lowest product version (repeatable; default 8.2.0)"
    )
    ap.add_argument("--sign-key", help="GnuPG key to sign update.xml and repomd.xml with")
    ap.add_argument("--out", type=Path, required=True, help="the ISO to write")
    args = ap.parse_args(argv)
    missing = [str(p) for p in args.rpms if not p.is_file() or p.suffix != ".rpm"]
    if missing:
        ap.error(f"not an .rpm file: {', '.join(missing)}")
    try:
        info = PackInfo(
            name=args.name, version=args.version, description=args.description, originator=args.originator,
            build=args.build, uuid=args.uuid, requires=args.requires or [Requirement()],
        )  # fmt: skip
    except PackError as exc:
        ap.error(str(exc))
    try:
        problems = build(info, args.rpms, args.out, args.sign_key)
    except RuntimeError as exc:
        print(f"makepack: {exc}", file=sys.stderr)
        return 1
    for p in problems:
        print(f"makepack: {p}", file=sys.stderr)
    if not problems:
        print(f"{args.out}: {info.name} {info.version} ({len(args.rpms)} RPMs, uuid {info.uuid})")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
