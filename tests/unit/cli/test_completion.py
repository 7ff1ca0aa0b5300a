"""Shell completion: the scripts hvnet generates, loaded into real bash and zsh and asked to complete.

bash is driven the way its ``complete -F`` machinery drives it (COMP_WORDS,
COMP_CWORD, the function, COMPREPLY); zsh through a pseudo-terminal
(``zsh/zpty``), pressing Tab in an interactive shell whose fpath holds the
script.  The names that only the system knows come from the real sources:
a lab record, an inventory file, capture and run directories on disk.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.cli import main as cli
from tests.conftest import ROOT


def generate(shell: str) -> str:
    res = subprocess.run([sys.executable, "-m", "appliance", "completion", shell], capture_output=True, text=True,
                         cwd=ROOT, timeout=60, check=False)  # fmt: skip
    assert res.returncode == 0, res.stderr
    return res.stdout


def verbs(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> Iterator[tuple[str, ...]]:
    """Every public verb path (("mirror", "add"), ...): those listed in the help."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            public = {a.dest for a in action._get_subactions()}
            for name, sub in action.choices.items():
                if name in public:
                    yield (*prefix, name)
                    yield from verbs(sub, (*prefix, name))


def hvnet_on_path(d: Path) -> Path:
    """``d`` holding an ``hvnet`` that is this tree's: the scripts call the hvnet on PATH."""
    path = os.pathsep.join([str(ROOT), *filter(None, [os.environ.get("PYTHONPATH")])])
    (d / "hvnet").write_text(f'#!/bin/sh\nPYTHONPATH="{path}" exec "{sys.executable}" -m appliance "$@"\n')
    (d / "hvnet").chmod(0o755)
    return d


@pytest.fixture(scope="module")
def bin_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return hvnet_on_path(tmp_path_factory.mktemp("bin"))


@pytest.fixture(scope="module")
def bash_script(tmp_path_factory: pytest.TempPathFactory) -> Path:
    f = tmp_path_factory.mktemp("bash") / "hvnet.bash"
    f.write_text(generate("bash"))
    return f


def bash_complete(script: Path, bin_dir: Path, words: list[str], env: dict[str, str], cwd: Path) -> list[str]:
    """What bash offers for the last of ``words`` (COMPREPLY), as ``complete -F`` would ask for it."""
    program = (
        'source "$0"; COMP_WORDS=("$@"); COMP_CWORD=$(( ${#COMP_WORDS[@]} - 1 )); COMP_LINE="${COMP_WORDS[*]}"; '
        'COMP_POINT=${#COMP_LINE}; _shtab_hvnet; printf "%s\\n" "${COMPREPLY[@]}"'
    )
    full = {**os.environ, **env, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}"}
    res = subprocess.run(["bash", "-c", program, str(script), *words], capture_output=True, text=True, env=full,
                         cwd=cwd, timeout=60, check=False)  # fmt: skip
    assert res.returncode == 0 and not res.stderr, res.stderr
    return [line for line in res.stdout.splitlines() if line]


def test_both_scripts_are_valid_and_name_every_verb() -> None:
    public = list(verbs(cli.build_parser()))
    assert ("mirror", "add") in public and ("completion",) in public
    for shell in ("bash", "zsh"):
        text = generate(shell)
        res = subprocess.run([shell, "-n"], input=text, capture_output=True, text=True, timeout=30, check=False)
        assert res.returncode == 0, f"{shell} -n: {res.stderr}"
        for path in public:
            if shell == "bash":
                assert f"_shtab_hvnet_{'_'.join(path).replace('-', '_')}_option_strings=" in text, path
            else:
                assert f"{path[-1]}:" in text or f"{path[-1]})" in text, path
        assert "_supervise" not in text and " _complete:" not in text


@pytest.fixture()
def sources(tmp_path: Path) -> dict[str, str]:
    """Real files where hvnet looks: a lab record, an inventory, a capture and a run."""
    lab = tmp_path / "lab"
    lab.mkdir()
    (lab / "lab.json").write_text(json.dumps({"guests": [{"name": "VM1"}, {"name": "VM2"}]}))
    inventory = tmp_path / "hosts.yaml"
    inventory.write_text("hosts:\n  - {name: hvA, address: 192.0.2.1, group: rack1}\n  - {name: xs02}\n")
    pcaps = tmp_path / "captures"
    (pcaps / "vm2-cap").mkdir(parents=True)
    (pcaps / "vm2-cap" / "capture.json").write_text("{}")
    (pcaps / "not-a-capture").mkdir()
    runs = tmp_path / "runs"
    (runs / "quick-1").mkdir(parents=True)
    (runs / "quick-1" / "results.json").write_text("{}")
    return {"HVNET_LAB_DIR": str(lab), "HVNET_INVENTORY": str(inventory), "HVNET_PCAP_DIR": str(pcaps),
            "HVNET_RUNS_DIR": str(runs), "HVNET_DB": "unix:/nonexistent/db.sock"}  # fmt: skip


def test_bash_completes_verbs_options_and_what_exists(bash_script: Path, bin_dir: Path, sources, tmp_path) -> None:
    cwd = tmp_path / "cwd"
    cwd.mkdir()

    def offers(*words: str) -> list[str]:
        return bash_complete(bash_script, bin_dir, ["hvnet", *words], sources, cwd)

    assert offers("mir") == ["mirror"]
    assert sorted(offers("mirror", "")) == ["add", "del", "list"]
    assert offers("mirror", "add", "span1", "--may") == ["--may-exist"]
    assert offers("mirror", "del", "span1", "--if") == ["--if-exists"]
    assert {"-p", "-c", "-C", "--private-key", "--certificate", "--ca-cert"} <= set(offers("-"))
    assert offers("completion", "") == ["bash", "zsh"]
    assert offers("suite", "run", "qui") == ["quick"]
    assert offers("lab", "exec", "") == ["VM1", "VM2"]
    assert offers("capture", "start", "--guest", "VM") == ["VM1", "VM2"]
    assert offers("status", "--hosts", "") == ["all", "hvA", "rack1", "xs02"]
    assert offers("capture", "delete", "") == ["vm2-cap"]
    assert offers("capture", "fetch", "") == ["vm2-cap"]
    assert offers("suite", "report", "") == [f"{sources['HVNET_RUNS_DIR']}/quick-1"]
    assert offers("_") == []  # the hidden verbs are not offered
    # No switch at HVNET_DB: no names, and nothing printed into the shell.
    assert offers("mirror", "add", "m", "--bridge", "") == []


def test_the_helper_verb_lists_one_name_a_line(sources) -> None:
    res = subprocess.run([sys.executable, "-m", "appliance", "_complete", "hosts"], capture_output=True, text=True,
                         cwd=ROOT, env={**os.environ, **sources}, timeout=60, check=False)  # fmt: skip
    assert (res.returncode, res.stdout, res.stderr) == (0, "all\nhvA\nrack1\nxs02\n", "")


def zsh_complete(script: str, bin_dir: Path, typed: str, env: dict[str, str], tmp_path: Path) -> str:
    """The command line after typing ``typed`` and Tab in an interactive zsh with ``_hvnet`` on its fpath."""
    fpath = tmp_path / "zfunc"
    fpath.mkdir(exist_ok=True)
    (fpath / "_hvnet").write_text(script)
    driver = tmp_path / "drive.zsh"
    driver.write_text(
        "zmodload zsh/zpty\n"
        'zpty z "zsh -f -i"\n'
        f"zpty -w z 'PS1=\"%% \"; fpath=({fpath} $fpath); autoload -U compinit; compinit -u -D'\n"
        f"zpty -w -n z $'{typed}\\t'\n"
        "sleep 3\n"
        "zpty -w z $'\\C-aprint -r -- COMPLETED: '\n"  # the line as Tab left it, printed by the shell itself
        "sleep 0.5\n"
        'out=""; while zpty -r -t z line; do out+=$line; done; print -r -- "$out"\n'
        "zpty -d z\n"
    )
    full = {**os.environ, **env, "PATH": f"{bin_dir}{os.pathsep}{os.environ['PATH']}", "TERM": "dumb"}
    res = subprocess.run(["zsh", "-f", str(driver)], capture_output=True, text=True, env=full, timeout=60, check=False)
    done = [ln.strip() for ln in res.stdout.replace("\r", "\n").splitlines() if ln.strip().startswith("COMPLETED: ")]
    assert done, res.stdout + res.stderr
    return done[-1].removeprefix("COMPLETED: ")


@pytest.mark.skipif(shutil.which("zsh") is None, reason="zsh is not installed (.ci/setup-host installs it)")
def test_zsh_completes_verbs_and_what_exists(bin_dir: Path, sources, tmp_path: Path) -> None:
    script = generate("zsh")
    assert zsh_complete(script, bin_dir, "hvnet mir", sources, tmp_path) == "hvnet mirror"
    assert zsh_complete(script, bin_dir, "hvnet suite run qui", sources, tmp_path) == "hvnet suite run quick"
    assert zsh_complete(script, bin_dir, "hvnet --host hv", sources, tmp_path) == "hvnet --host hvA"
