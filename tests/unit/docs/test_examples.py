"""The manual's command lines parse with hvnet's own parser, and its file examples validate.

Every ``hvnet ...`` line of a shell fence in docs/**/*.md and README.md is parsed (never run) by
:func:`appliance.cli.main.build_parser`; every fence marked ``<!-- example: KIND -->`` is loaded
by hvnet's loader for KIND, and a yaml fence with no marker is a failure (see :mod:`.fences`).
"""

from __future__ import annotations

import contextlib
import io
import os
from collections.abc import Callable
from pathlib import Path

import pytest

from appliance.cli import main as cli
from tests.conftest import ROOT
from tests.unit.docs.fences import KINDS, Fence, commands, fences

PAGES = sorted([ROOT / "README.md", *(ROOT / "docs").rglob("*.md")])
# What a relative path inside an example is relative to: the example is written where the
# shipped files of its kind are (suites beside netperf-suites/*.yaml, scenarios beside
# vlan-tests/*.yaml), in a scratch tree whose other entries link to the real ones.
HOMES = {"policy": "policies", "suite": "netperf-suites", "scenario": "vlan-tests",
         "topology": "vlan-tests/topologies", "inventory": "etc", "vms": "etc", "conf": "etc"}  # fmt: skip


def _where(page: Path, line: int) -> str:
    return f"{page.relative_to(ROOT)}:{line}"


def parse_error(argv: list[str]) -> str | None:
    """What hvnet's parser says about ``argv`` (None: it parses), without running anything."""
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
            cli.build_parser(argv).parse_args(argv)
    except SystemExit as exc:
        if exc.code not in (0, None):  # --help and --version exit 0
            return out.getvalue().strip().splitlines()[-2 if "hint:" in out.getvalue() else -1]
    return None


def _loaders() -> dict[str, Callable[[Path], object]]:
    from appliance.core import config, hostlist, vmlist
    from appliance.endpoints import topology
    from appliance.isolation import scenario
    from appliance.netperf.define import suite
    from appliance.policy.plan import document

    return {
        "policy": document.load,
        "suite": suite.load,
        "scenario": scenario.load,
        "topology": topology.load,
        "inventory": hostlist.load,
        "vms": vmlist.load,
        "conf": lambda p: config.parse(p.read_text(), p),
    }


@pytest.fixture(scope="module")
def scratch(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A tree like the checkout's, each shipped directory's entries linked, for examples to land in."""
    top = tmp_path_factory.mktemp("examples")
    for home in {h.split("/")[0] for h in HOMES.values()}:
        (top / home).mkdir()
        if (ROOT / home).is_dir():
            for entry in (ROOT / home).iterdir():
                (top / home / entry.name).symlink_to(entry)
    (top / "vlan-tests" / "topologies").unlink()
    (top / "vlan-tests" / "topologies").mkdir()
    for entry in (ROOT / "vlan-tests" / "topologies").iterdir():
        (top / "vlan-tests" / "topologies" / entry.name).symlink_to(entry)
    return top


def validate_example(fence: Fence, scratch: Path) -> str | None:
    """Why the example in ``fence`` is not a valid file of its kind (None: it is)."""
    if fence.marker not in KINDS:
        return f"unknown example kind {fence.marker!r}: one of {', '.join(KINDS)} or fragment"
    path = scratch / HOMES[fence.marker] / f"_example-{fence.line}.{'conf' if fence.marker == 'conf' else 'yaml'}"
    path.write_text(fence.body)
    os.chmod(path, 0o600)  # the inventory and the policy are read only if no other user can write them
    try:
        _loaders()[fence.marker](path)
    except Exception as exc:  # whatever the loader refuses (a crash too), with its message
        return f"{type(exc).__name__}: {exc}".replace(str(path), f"<{fence.marker} example>")
    finally:
        path.unlink()
    return None


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_command_line_parses(page: Path) -> None:
    failures = []
    for fence in fences(page.read_text()):
        for cmd in commands(fence):
            error = cmd.problem or parse_error(cmd.argv)
            if error:
                failures.append(f"{_where(page, cmd.line)}: {cmd.text}\n    {error}")
    assert not failures, "command lines hvnet's parser refuses:\n" + "\n".join(failures)


@pytest.mark.parametrize("page", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_file_example_validates(page: Path, scratch: Path) -> None:
    failures = []
    for fence in fences(page.read_text()):
        if fence.marker == "fragment":
            continue
        if fence.marker is None:
            if fence.lang in ("yaml", "yml"):
                failures.append(f"{_where(page, fence.line)}: a yaml block with no <!-- example: KIND --> "
                                "(or <!-- example: fragment -->) on the line before it")  # fmt: skip
            continue
        error = validate_example(fence, scratch)
        if error:
            failures.append(f"{_where(page, fence.line)}: {fence.marker} example: {error}")
    assert not failures, "file examples that do not validate:\n" + "\n".join(failures)
