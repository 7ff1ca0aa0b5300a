"""hvnet(1): generated from the parser and rendered by man(1) as an operator would read it."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from appliance.cli import main as cli
from tests.conftest import ROOT
from tests.unit.cli.test_completion import verbs


@pytest.fixture(scope="module")
def rendered(tmp_path_factory: pytest.TempPathFactory) -> str:
    if shutil.which("man") is None:
        pytest.fail("man is not installed: run .ci/setup-host (man-db)")
    page = tmp_path_factory.mktemp("man") / "hvnet.1"
    res = subprocess.run([sys.executable, "-m", "appliance", "_manpage"], capture_output=True, text=True, cwd=ROOT,
                         timeout=60, check=False)  # fmt: skip
    assert res.returncode == 0 and not res.stderr, res.stderr
    page.write_text(res.stdout)
    env = {**os.environ, "MANWIDTH": "200", "LC_ALL": "C.UTF-8"}
    res = subprocess.run(["man", "--warnings", "-l", "-P", "cat", str(page)], capture_output=True, text=True, env=env,
                         timeout=60, check=False)  # fmt: skip
    assert res.returncode == 0 and not res.stderr, res.stderr  # groff's warnings too
    return res.stdout


def test_every_verb_has_its_section(rendered: str) -> None:
    lines = [ln.strip() for ln in rendered.splitlines()]
    for path in verbs(cli.build_parser()):
        assert "hvnet " + " ".join(path) in lines, path
    assert "hvnet _complete" not in rendered and "_supervise" not in rendered


def test_the_page_has_the_options_exit_codes_and_environment(rendered: str) -> None:
    for heading in ("NAME", "SYNOPSIS", "DESCRIPTION", "GLOBAL OPTIONS", "COMMANDS", "EXIT STATUS", "ENVIRONMENT"):
        assert heading in rendered.splitlines(), heading
    assert "--ssl-key FILE, -p FILE, --private-key FILE" in rendered
    assert "--may-exist" in rendered and "--if-exists" in rendered
    assert "default 80% of the rate)" in rendered  # argparse's %% expanded
    assert "whether the change was made could not be known" in rendered
    env = rendered[rendered.index("ENVIRONMENT") :]
    assert "HVNET_DB" in env and "hvnet --db" in env
    assert "\\-" not in rendered and "\\e" not in rendered  # no escape left unrendered


def test_a_build_date_can_be_fixed(tmp_path: Path) -> None:
    """SOURCE_DATE_EPOCH (set by reproducible package builds) dates the page."""
    env = {**os.environ, "SOURCE_DATE_EPOCH": "0"}
    res = subprocess.run([sys.executable, "-m", "appliance", "_manpage"], capture_output=True, text=True, cwd=ROOT,
                         env=env, timeout=60, check=False)  # fmt: skip
    assert res.stdout.startswith('.TH HVNET 1 "1970-01-01" "hvnet ')
