"""Helpers of the dom0 packaging tests: load rpm/dom0's tools, build tiny real packages."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parents[3]
DOM0 = ROOT / "rpm" / "dom0"

SPEC = """\
Name: {name}
Version: 1.0
Release: 1
Summary: a package of the dom0 packaging tests
License: MIT
BuildArch: noarch
%description
A package of the dom0 packaging tests.
%install
mkdir -p %{{buildroot}}/opt/{name}
echo hello > %{{buildroot}}/opt/{name}/hello
%files
/opt/{name}/hello
"""


def load(name: str) -> ModuleType:
    """rpm/dom0/NAME.py as a module: build tooling, not part of the appliance package."""
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, DOM0 / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module  # dataclasses look their module up while the class is made
    spec.loader.exec_module(module)
    return module


def build_rpm(tmp: Path, name: str = "tiny", payload: str = "w9.xzdio") -> Path:
    """A noarch RPM with one file, built with the given payload compressor and SHA-256 file digests."""
    top = tmp / f"top-{name}-{payload}"
    spec = tmp / f"{name}.spec"
    spec.write_text(SPEC.format(name=name))
    subprocess.run(
        [
            "rpmbuild", "-bb", "--quiet",
            "-D", f"_topdir {top}",
            "-D", f"_binary_payload {payload}",
            "-D", "_binary_filedigest_algorithm 8",
            "-D", "_build_id_links none",
            str(spec),
        ],
        check=True, capture_output=True, text=True,
    )  # fmt: skip
    (rpm,) = top.glob("RPMS/noarch/*.rpm")
    return rpm
