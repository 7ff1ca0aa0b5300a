"""Start-up loads only what the verb needs: the layers hold at run time, not only in the import graph.

``hvnet status`` and ``hvnet agent`` run on every hypervisor; they must not
load the lab, the QEMU guest stack, the console, the plotting libraries, the
measurement engines or captures -- nor the libvirt binding where no libvirt
daemon's socket is.  ``hvnet --help`` loads no engine at all.  What a process
loaded is read from ``sys.modules`` when the command returns (not timed: the
bench, ``tests/bench/run.py``, measures the time).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

HEAVY = (
    "appliance.lab", "tui", "textual", "matplotlib", "numpy", "appliance.netperf", "appliance.isolation",
    "appliance.capture", "libvirt",
)  # fmt: skip
ENGINE = ("appliance.services", "appliance.policy", "appliance.switch.inventory", "appliance.core.ovsdb", "ovs")
# What 'status' has no use for: the modules declaring the other verbs' arguments, python-ovs's JSON
# parser (the read is parsed by the standard library's), libvirt's XML parser (no domain asked about).
NOT_FOR_STATUS = (
    "appliance.cli.audit", "appliance.cli.policy_args", "appliance.cli.suite", "appliance.cli.capture_args",
    "appliance.cli.exporter", "appliance.cli.config", "appliance.cli.tap_args", "appliance.cli.probes",
    "appliance.cli.completion", "ovs.json", "ovs._json", "xml.etree",
)  # fmt: skip

_PROBE = """
import json, sys
from appliance.cli.main import main
try:
    code = main(sys.argv[1:])
except SystemExit as exc:  # --help
    code = exc.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


def _loaded(*argv: str) -> tuple[int, list[str]]:
    res = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, cwd=ROOT, timeout=60, check=False
    )
    last = res.stderr.strip().splitlines()[-1]
    out = json.loads(last)
    return out["code"], out["modules"]


def _within(modules: list[str], packages: tuple[str, ...]) -> list[str]:
    return [m for m in modules if any(m == p or m.startswith(p + ".") for p in packages)]


def _heavy(modules: list[str]) -> list[str]:
    return _within(modules, HEAVY)


def test_status_loads_neither_lab_nor_console(switch) -> None:
    code, modules = _loaded("--db", switch.remote, "--libvirt", "none", "status", "--json")
    assert code == 0
    assert "appliance.switch.inventory" in modules  # the probe sees what status loaded
    assert _heavy(modules) == []
    assert _within(modules, NOT_FOR_STATUS) == []


def test_status_imports_no_libvirt_without_its_socket(switch, tmp_path: Path) -> None:
    """libvirt asked (a VIF of a KVM domain is there to be named), its daemon absent: not even imported."""
    switch.vsctl("add-br", "br0", "--", "add-port", "br0", "vnet0", "--", "set", "Interface", "vnet0",
                 "external_ids:vm-id=6f1c5a5e-0000-4000-8000-000000000001",
                 "external_ids:attached-mac=52:54:00:00:00:01")  # fmt: skip
    uri = f"qemu+unix:///system?socket={tmp_path}/libvirt-sock"
    code, modules = _loaded("--db", switch.remote, "--libvirt", uri, "status", "--json")
    assert code == 0
    assert "appliance.switch.names" in modules  # the name sources were asked
    assert _heavy(modules) == []


def test_help_loads_no_engine() -> None:
    code, modules = _loaded("--help")
    assert code == 0
    assert "appliance.cli.policy_args" in modules and "appliance.cli.completion" in modules  # every verb listed
    assert _heavy(modules) == [] and _within(modules, ENGINE) == []


@pytest.mark.parametrize(
    "verb", [["agent", "--policy", "policies/seed-2010.yaml"], ["plan", "policies/seed-2010.yaml"]]
)
def test_policy_verbs_load_neither_lab_nor_console(tmp_path, verb) -> None:
    code, modules = _loaded("--db", f"unix:{tmp_path}/none.sock", "--timeout", "0.5", *verb)
    assert code != 0  # nothing listens there: the verb got as far as connecting
    assert "appliance.policy.apply.engine" in modules or "appliance.agent.daemon" in modules
    assert _heavy(modules) == []
