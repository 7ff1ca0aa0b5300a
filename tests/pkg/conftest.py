"""Packaging fixtures: the RPMs built once per session from a clean clone, and
a scratch root they are installed into.

The build is 'make rpm' in a 'git clone' of this repository, so it packages
the committed tree exactly as CI would.  Downloads (wheels, netperf's source)
stay in /var/cache/hvnet/rpm between sessions; a warm build takes well under
a minute.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.conftest import ROOT
from tests.lab.conftest import lab  # noqa: F401  (the installed hvnet is tried on the real lab)

PACKAGES = ("hvnet", "hvnet-plots", "netperf")


def run(argv: list[str], timeout: float = 120, **kw: object) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, **kw)  # type: ignore[call-overload]


@pytest.fixture(scope="session")
def build_dir(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    work = tmp_path_factory.mktemp("rpm-build")
    yield work
    shutil.rmtree(work / "clone", ignore_errors=True)  # ~0.5 GB of build trees


@pytest.fixture(scope="session")
def rpms(build_dir: Path) -> dict[str, Path]:
    """name -> RPM file, from 'make rpm' in a fresh clone of the committed tree."""
    for tool in ("git", "make", "rpmbuild"):
        if shutil.which(tool) is None:
            pytest.fail(f"{tool} is not installed: run .ci/setup-host")
    clone = build_dir / "clone"
    res = run(["git", "clone", "--quiet", str(ROOT), str(clone)])
    assert res.returncode == 0, res.stderr
    out = build_dir / "rpms"
    # The clone has no venv: the man pages are built with this venv's Sphinx (rpm/build-rpms).
    env = {**os.environ, "HVNET_SPHINX_PYTHON": sys.executable}
    res = run(["make", "-C", str(clone), "rpm", f"RPM_OUT={out}"], timeout=1200, env=env)
    assert res.returncode == 0, f"make rpm failed:\n{res.stdout[-4000:]}\n{res.stderr[-4000:]}"
    found = {re.sub(r"-\d.*$", "", p.name): p for p in out.glob("*.rpm")}  # hvnet-plots-0.1.0-2... -> hvnet-plots
    assert set(found) == set(PACKAGES), f"make rpm built {sorted(p.name for p in out.glob('*.rpm'))}"
    return found


@pytest.fixture(scope="session")
def gpg_home(rpms: dict[str, Path], build_dir: Path) -> Path:
    """The GnuPG home 'make rpm' kept its signing key in (the clone's build/gnupg)."""
    home = build_dir / "clone" / "build" / "gnupg"
    assert home.is_dir(), "make rpm made no signing key"
    return home


@pytest.fixture(scope="session")
def installed_root(rpms: dict[str, Path], tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The RPMs installed into a scratch root (no dependencies: the OS parts
    come from this host; no scriptlets: they would run in a chroot without a shell)."""
    root = tmp_path_factory.mktemp("scratch-root")
    res = run(["rpm", "--root", str(root), "--nodeps", "--noscripts", "-i", *map(str, rpms.values())])
    assert res.returncode == 0, res.stdout + res.stderr
    yield root
    shutil.rmtree(root, ignore_errors=True)
