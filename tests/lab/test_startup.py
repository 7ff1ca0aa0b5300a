"""Start-up loads only what the verb needs: the layers hold at run time, not only in the import graph.

``hvnet status`` and ``hvnet agent`` run on every hypervisor; they must not
load the lab, the QEMU guest stack, the console or the plotting libraries.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from tests.conftest import ROOT

HEAVY = ("appliance.lab", "tui", "textual", "matplotlib", "numpy", "appliance.netperf", "appliance.isolation")

_PROBE = """
import json, sys
from appliance import cli
code = cli.main(sys.argv[1:])
print(json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.stderr)
"""


def _loaded(*argv: str) -> tuple[int, list[str]]:
    res = subprocess.run(
        [sys.executable, "-c", _PROBE, *argv], capture_output=True, text=True, cwd=ROOT, timeout=60, check=False
    )
    last = res.stderr.strip().splitlines()[-1]
    out = json.loads(last)
    return out["code"], out["modules"]


def _heavy(modules: list[str]) -> list[str]:
    return [m for m in modules if m.split(".")[0] in HEAVY or any(m.startswith(h + ".") or m == h for h in HEAVY)]


def test_status_loads_neither_lab_nor_console(switch) -> None:
    code, modules = _loaded("--db", switch.remote, "--libvirt", "none", "status", "--json")
    assert code == 0
    assert "appliance.switch.inventory" in modules  # the probe sees what status loaded
    assert _heavy(modules) == []


@pytest.mark.parametrize(
    "verb", [["agent", "--policy", "policies/seed-2010.yaml"], ["plan", "policies/seed-2010.yaml"]]
)
def test_policy_verbs_load_neither_lab_nor_console(tmp_path, verb) -> None:
    code, modules = _loaded("--db", f"unix:{tmp_path}/none.sock", "--timeout", "0.5", *verb)
    assert code != 0  # nothing listens there: the verb got as far as connecting
    assert "appliance.policy.apply.engine" in modules or "appliance.agent.daemon" in modules
    assert _heavy(modules) == []
