#!/usr/bin/env python3
"""Split the vendored libraries between hvnet and hvnet-plots (run by hvnet.spec's %install).

    split-vendor.py VENDOR_DIR INSTALLED_PREFIX MAIN_LIST PLOTS_LIST DIST...

Every top-level entry of VENDOR_DIR (a package, a module, a ``*.libs``
directory, a ``*.dist-info``) belongs to the distribution whose RECORD names
it; the entries of the DISTs given (matplotlib and what only it needs) go to
PLOTS_LIST, all others to MAIN_LIST, as %files lines under INSTALLED_PREFIX.
An entry no RECORD names stops the build: nothing lands in a package by
accident.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path


def normalise(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def owners(vendor: Path) -> dict[str, str]:
    """Top-level entry -> normalised distribution name."""
    out: dict[str, str] = {}
    for info in sorted(vendor.glob("*.dist-info")):
        dist = normalise(info.name[: -len(".dist-info")].rsplit("-", 1)[0])
        out[info.name] = dist
        for line in (info / "RECORD").read_text(encoding="utf-8").splitlines():
            # a wheel's data files are recorded relative to the scripts directory
            # ("../../share/man/man1/ttx.1"); pip --target put them in the target
            parts = [p for p in line.split(",", 1)[0].split("/") if p not in ("", "..")]
            if parts:
                out.setdefault(parts[0], dist)
    return out


def main() -> int:
    if len(sys.argv) < 6:
        print(__doc__, file=sys.stderr)
        return 2
    vendor, prefix, main_list, plots_list = Path(sys.argv[1]), sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4])
    plots = {normalise(d) for d in sys.argv[5:]}
    own = owners(vendor)
    unknown = plots - set(own.values())
    if unknown:
        print(f"split-vendor: not vendored: {sorted(unknown)}", file=sys.stderr)
        return 1
    lines: dict[bool, list[str]] = {True: [], False: [f"%dir {prefix}"]}
    for entry in sorted(p.name for p in vendor.iterdir()):
        dist = own.get(entry)
        if dist is None:
            print(f"split-vendor: {vendor / entry} belongs to no vendored distribution", file=sys.stderr)
            return 1
        lines[dist in plots].append(f"{prefix}/{entry}")
    main_list.write_text("\n".join(lines[False]) + "\n")
    plots_list.write_text("\n".join(lines[True]) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
