"""The manual builds (HTML and man pages, warnings as errors) and its pages follow the code.

``make test`` is what CI runs, so a broken manual fails it here rather than at release time.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from appliance.cli import main as cli
from appliance.core import config, errors
from tests.conftest import ROOT
from tests.unit.cli.test_completion import verbs

DOCS = ROOT / "docs"
sys.path.insert(0, str(DOCS / "_ext"))
from hvnet_manual import OTHER_VARIABLES, public_verbs  # noqa: E402


def _build(builder: str, out: Path) -> None:
    env = {**os.environ, "SOURCE_DATE_EPOCH": "0"}  # as a package build: the pages dated by the commit
    res = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", builder, str(DOCS), str(out),
         "-d", str(out.parent / f"doctrees-{builder}")],
        capture_output=True, text=True, env=env, timeout=300, check=False,
    )  # fmt: skip
    assert res.returncode == 0 and not res.stderr.strip(), res.stderr  # sphinx-argparse's own warnings too


@pytest.fixture(scope="module")
def man(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("docs") / "man"
    _build("man", out)
    return out


def render(page: Path) -> str:
    """``page`` as man(1) shows it; groff's warnings fail."""
    if shutil.which("man") is None:
        pytest.fail("man is not installed: run .ci/setup-host (man-db)")
    env = {**os.environ, "MANWIDTH": "200", "LC_ALL": "C.UTF-8"}
    res = subprocess.run(["man", "--warnings", "-l", "-P", "cat", str(page)], capture_output=True, text=True,
                         env=env, timeout=60, check=False)  # fmt: skip
    assert res.returncode == 0 and not res.stderr, res.stderr
    return res.stdout


def test_the_html_manual_builds(tmp_path: Path) -> None:
    _build("html", tmp_path / "html")
    assert (tmp_path / "html" / "index.html").is_file()
    assert (tmp_path / "html" / "reference" / "man" / "5" / "hvnet.conf.html").is_file()


def test_every_verb_has_its_page_and_nothing_else_does(man: Path) -> None:
    verbs = [v for v, _help in public_verbs(cli.build_parser())]
    assert sorted(p.name for p in man.glob("*.8")) == sorted(["hvnet.8", *(f"hvnet-{v}.8" for v in verbs)])
    assert sorted(p.name for p in man.glob("*.5")) == sorted(
        ["hvnet.conf.5", "hvnet-policy.5", "hvnet-suite.5", "hvnet-scenario.5", "hvnet-inventory.5"]
    )
    sources = {p.stem for p in (DOCS / "reference" / "man" / "8").glob("hvnet-*.md")}
    assert sources == {f"hvnet-{v}" for v in verbs}  # a new verb needs its page (copy hvnet-apply.md)


def test_a_verb_page_has_every_sub_verb_down_to_the_last(man: Path) -> None:
    pages: dict[str, str] = {}
    for path in verbs(cli.build_parser()):
        page = pages.setdefault(path[0], render(man / f"hvnet-{path[0]}.8"))
        assert re.search(rf"^\s+(usage: )?hvnet {' '.join(path)}( |$)", page, re.M), path  # its usage line
    assert "_complete" not in "".join(pages.values())


def test_the_pages_are_dated_by_source_date_epoch(man: Path) -> None:
    assert (man / "hvnet-apply.8").read_text().count('"Jan 01, 1970"') + (man / "hvnet-apply.8").read_text().count(
        '"1970-01-01"'
    ) == 1


def test_a_verb_page_has_its_sub_verbs_and_options(man: Path) -> None:
    mirror = render(man / "hvnet-mirror.8")
    assert "hvnet-mirror - port mirrors" in mirror
    for sub in ("add", "del", "list"):
        assert f"hvnet mirror {sub}" in mirror
    assert "--may-exist" in mirror and "--if-exists" in mirror
    qos = render(man / "hvnet-qos.8")
    assert "default 80% of the rate)" in qos  # argparse's %% expanded
    isolation = render(man / "hvnet-isolation.8")
    assert "run a scenario (vlan-tests/*.yaml)" in isolation  # help text shown as written, not as markup


def test_hvnet_8_has_the_verbs_exit_codes_and_every_variable(man: Path) -> None:
    page = render(man / "hvnet.8")
    for heading in ("NAME", "SYNOPSIS", "DESCRIPTION", "COMMANDS", "GLOBAL OPTIONS", "EXIT STATUS", "ENVIRONMENT",
                    "FILES", "EXAMPLES", "SEE ALSO"):  # fmt: skip
        assert heading in page.splitlines(), heading
    assert "--ssl-key" in page and "--private-key" in page
    for verb, _help in public_verbs(cli.build_parser()):
        assert f"hvnet-{verb}(8)" in page, verb
    status = page[page.index("EXIT STATUS") : page.index("ENVIRONMENT")]
    for e in errors.EXIT_CODES:
        assert re.search(rf"^\s+{e.code}\s+{re.escape(e.meaning[:40])}", status, re.M), e
    order = " ".join(status[status.index("most severe first") :].split())
    assert [int(c) for c in re.findall(r"\b(\d)\b", order)] == list(errors.SEVERITY)
    env = page[page.index("ENVIRONMENT") : page.index("FILES")]
    for name in documented_variables():
        assert re.search(rf"^\s+{name}\b", env, re.M), name


def documented_variables() -> list[str]:
    return [*(s.env for s in config.SETTINGS), *(name for name, _text in OTHER_VARIABLES)]


def test_every_variable_hvnet_reads_is_documented() -> None:
    """Every HVNET_ name in the code is in hvnet(8)'s ENVIRONMENT (a setting's, or one of the others)."""
    found = set()
    for tree in ("appliance", "tui"):
        for path in (ROOT / tree).rglob("*.py"):
            found |= set(re.findall(r"\bHVNET_[A-Z0-9_]*[A-Z0-9]\b", path.read_text()))
    assert found - set(documented_variables()) == set()


def test_hvnet_conf_5_has_every_setting(man: Path) -> None:
    page = render(man / "hvnet.conf.5")
    for s in config.SETTINGS:
        assert f"[{s.section}]" in page and re.search(rf"^\s+{s.key}\b", page, re.M), s.name
        assert f"${s.env}" in page and (s.default is None or f"default {s.default}" in page), s.name


def test_the_units_name_pages_the_manual_has(man: Path) -> None:
    """A unit's Documentation=man:PAGE(N) (what systemctl help shows) is a page the package ships."""
    for unit in (ROOT / "rpm").glob("*.service"):
        pages = re.findall(r"man:([\w.-]+)\((\d)\)", unit.read_text())
        assert pages, f"{unit.name} names no man page in Documentation="
        for name, section in pages:
            assert (man / f"{name}.{section}").is_file(), (unit.name, name)
