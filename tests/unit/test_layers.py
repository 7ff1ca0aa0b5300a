"""The import graph: no cycles, and the layer contracts that 'make lint' checks hold."""

from __future__ import annotations

import subprocess
import sys

import grimp

from tests.conftest import ROOT


def _cycles(graph: grimp.ImportGraph) -> list[list[str]]:
    adj = {m: sorted(graph.find_modules_directly_imported_by(m)) for m in sorted(graph.modules)}
    state: dict[str, int] = {}
    found: list[list[str]] = []

    def visit(m: str, path: list[str]) -> None:
        state[m] = 1
        path.append(m)
        for n in adj[m]:
            if state.get(n) == 1:
                found.append([*path[path.index(n) :], n])
            elif n not in state:
                visit(n, path)
        path.pop()
        state[m] = 2

    for m in adj:
        if m not in state:
            visit(m, [])
    return found


def test_no_import_cycle() -> None:
    assert _cycles(grimp.build_graph("appliance", "tui")) == []


def test_the_engine_never_imports_the_lab_or_the_console() -> None:
    graph = grimp.build_graph("appliance", "tui")
    below = (
        "policy", "netperf", "isolation", "capture", "ovn", "probes", "services", "endpoints", "switch", "core",
    )  # fmt: skip
    for name in below:
        for upper in ("appliance.lab", "tui"):
            chains = graph.find_shortest_chains(importer=f"appliance.{name}", imported=upper, as_packages=True)
            assert not chains, f"appliance.{name} reaches {upper}: {sorted(chains)}"


def test_layer_contracts_hold() -> None:
    res = subprocess.run([str(ROOT / ".venv/bin/lint-imports")], cwd=ROOT, capture_output=True, text=True, check=False)
    assert res.returncode == 0, res.stdout[-2000:]


def test_the_policy_package_names_what_it_loads_lazily() -> None:
    import appliance.policy as policy

    assert sorted(policy.__all__) == sorted(policy._WHERE)
    for name in policy.__all__:
        assert getattr(policy, name) is not None


def test_the_shared_conftest_loads_no_lab_code() -> None:
    """Lab fixtures live in tests/lab/conftest.py: collecting the unit tests imports nothing of the lab."""
    code = "import sys, tests.conftest; print(sorted(m for m in sys.modules if m.startswith('appliance.lab')))"
    res = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, check=True)
    assert res.stdout.strip() == "[]", res.stdout
