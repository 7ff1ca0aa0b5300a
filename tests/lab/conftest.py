"""The lab's fixtures: a private ovsdb-server, and the built-in lab on real OVS.

Lab fixtures are module-scoped: each module that needs the lab gets a fresh
one in its own run directory, torn down (and checked to be gone) even when
its tests fail.  Tests that need root and OVS fail loudly when those are
missing instead of being skipped, so a green run means they ran.  The console's
and the package's tests take them from here too (their conftest imports them).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from appliance.endpoints.topology import DEFAULT_TOPOLOGY
from appliance.endpoints.topology import load as load_topology
from appliance.lab import Lab
from appliance.lab.switch import Switch
from tests.conftest import links, netns_list


def _require_root_and_ovs() -> None:
    if os.geteuid() != 0:
        pytest.fail("lab tests need root (network namespaces, veths, OVS daemons)")
    for tool in ("ovsdb-server", "ovs-vswitchd", "ovs-vsctl", "ip", "ethtool"):
        if shutil.which(tool) is None and not os.path.exists(f"/usr/sbin/{tool}"):
            pytest.fail(f"{tool} is not installed: run .ci/setup-host")


@pytest.fixture()
def switch(tmp_path: Path) -> Iterator[Switch]:
    """A private ovsdb-server only (no vswitchd, no devices): engine tests."""
    _require_root_and_ovs()
    sw = Switch(tmp_path / "ovs")
    sw.start(vswitchd=False)
    try:
        yield sw
    finally:
        sw.stop()


@contextmanager
def lab_up(topology_file: Path, run_dir: Path, vm_access: bool = False) -> Iterator[Lab]:
    """A lab on ``topology_file`` found through HVNET_LAB_DIR, torn down and
    checked to be gone afterwards, even when the body fails.  ``vm_access``:
    its namespace guests answer SSH like VMs (``lab up --vm-access``)."""
    _require_root_and_ovs()
    before_ns, before_links = netns_list(), links()
    the_lab = Lab(run_dir)
    old = os.environ.get("HVNET_LAB_DIR")
    os.environ["HVNET_LAB_DIR"] = str(run_dir)
    try:
        the_lab.up(load_topology(topology_file), vm_access=vm_access)
        yield the_lab
    finally:
        if old is None:
            os.environ.pop("HVNET_LAB_DIR", None)
        else:
            os.environ["HVNET_LAB_DIR"] = old
        Lab(run_dir).down()
        leaked_ns = netns_list() - before_ns
        leaked_links = links() - before_links
        assert not leaked_ns and not leaked_links, f"lab left {leaked_ns} {leaked_links}"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """The default (2010 study) lab, up for the module, down afterwards."""
    with lab_up(DEFAULT_TOPOLOGY, tmp_path_factory.mktemp("lab") / "run") as the_lab:
        yield the_lab
