"""hvnet suite prune and pin on runs the real runner made in the lab (default run directory names,
the runs directory from hvnet.conf), not on copies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from appliance.core import documents
from appliance.lab import Lab
from tests import jsonschemas
from tests.conftest import run_hvnet

pytestmark = pytest.mark.lab

ONE_STEP = Path(__file__).parent / "data" / "suite-one-step.yaml"  # a run in seconds: prune is about directories


def test_prune_keeps_the_pinned_baseline_and_removes_the_older_run(lab: Lab, tmp_path: Path) -> None:
    runs = tmp_path / "runs"
    conf = tmp_path / "hvnet.conf"
    conf.write_text(f"[data]\nruns_dir = {runs}\n")
    env = {"HVNET_CONFIG": str(conf), "HVNET_RUNS_DIR": ""}  # the file's runs_dir, not a variable's
    made = []
    for _ in range(3):
        res = run_hvnet("suite", "run", str(ONE_STEP), "--json", env=env, timeout=180)
        assert res.returncode == 0, res.stdout + res.stderr
        jsonschemas.check(documents.SUITE_RUN, json.loads(res.stdout))
        made.append(Path(json.loads(res.stdout)["run"]))
    assert [p.parent for p in made] == [runs] * 3 and len(set(made)) == 3
    baseline, older, newest = made

    assert run_hvnet("suite", "pin", str(baseline), "--note", "baseline", env=env).returncode == 0
    res = run_hvnet("suite", "prune", "--keep", "1", "--json", env=env)
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    jsonschemas.check(documents.SUITE_PRUNE, doc)
    assert doc["dry_run"] and [r["run"] for r in doc["would_remove"]] == [str(older)]
    assert {r["run"]: r["reason"] for r in doc["kept"]} == {
        str(newest): "the newest of one-step",
        str(baseline): "pinned ('hvnet suite unpin' releases it)",
    }
    assert all(p.is_dir() for p in made)  # a dry run

    res = run_hvnet("suite", "prune", "--keep", "1", "--yes", env=env)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines()[0] == f"{runs}: removed 1 run(s), keeping 2"
    assert sorted(runs.iterdir()) == sorted([baseline, newest])
    listing = json.loads(run_hvnet("suite", "list", "--json", env=env).stdout)
    jsonschemas.check(documents.SUITE_LIST, listing)
    listed = listing["runs"]
    assert [(r["run"], r["pinned"]) for r in listed] == [(str(newest), False), (str(baseline), True)]


def test_config_show_names_the_running_lab(lab: Lab, tmp_path: Path) -> None:
    conf = tmp_path / "hvnet.conf"
    conf.write_text("[data]\nstate_dir = /srv/hvnet/state\nruns_dir = /srv/hvnet/runs\n")
    res = run_hvnet("config", "show", "--json", env={"HVNET_CONFIG": str(conf), "HVNET_DB": "", "HVNET_STATE_DIR": ""})
    assert res.returncode == 0, res.stderr
    jsonschemas.check(documents.CONFIG, json.loads(res.stdout))
    got = {s["name"]: (s["value"], s["source"]) for s in json.loads(res.stdout)["settings"]}
    where = f"running lab {lab.run_dir}"
    assert got["target.db"] == (f"unix:{lab.run_dir.resolve() / 'db.sock'}", where)
    assert got["data.state_dir"] == (str(lab.run_dir.resolve()), f"{where} (its own)")  # not the file's
    assert got["data.runs_dir"] == ("/srv/hvnet/runs", f"{conf}:3")
    res = run_hvnet("--no-lab", "config", "show", "--json", env={"HVNET_CONFIG": str(conf), "HVNET_DB": ""})
    got = {s["name"]: (s["value"], s["source"]) for s in json.loads(res.stdout)["settings"]}
    assert got["target.db"] == ("unix:/var/run/openvswitch/db.sock", "default")
    assert got["data.state_dir"] == ("/srv/hvnet/state", f"{conf}:2")
