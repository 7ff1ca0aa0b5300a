"""hvnet suite prune / pin / unpin on run directories made from a real run's results.json
(tests/unit/data/netperf/quick-results.json, a quick suite run in the lab), with only the
start time and state changed."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from appliance.core.errors import UsageError
from appliance.netperf.store.retention import SavedRun, decide, parse_age
from appliance.services import runs
from tests.conftest import ROOT

QUICK = json.loads((ROOT / "tests/unit/data/netperf/quick-results.json").read_text())
NOW = datetime.now(timezone.utc).replace(microsecond=0)  # the command measures ages from the real clock


def make_run(base: Path, name: str, days_ago: float, *, suite: str = "quick", state: str = "complete") -> Path:
    doc = json.loads(json.dumps(QUICK))
    doc["meta"]["started"] = (NOW - timedelta(days=days_ago)).isoformat(timespec="seconds")
    doc["meta"]["suite"]["name"] = suite
    doc["state"] = state
    d = base / name
    d.mkdir(parents=True)
    (d / "results.json").write_text(json.dumps(doc))
    (d / "raw").mkdir()
    (d / "raw" / "step-1.out").write_text("netperf output\n")
    return d


@pytest.fixture()
def base(tmp_path: Path) -> Path:
    b = tmp_path / "runs"
    make_run(b, "quick-old", 40)
    make_run(b, "quick-mid", 20)
    make_run(b, "quick-new", 1)
    make_run(b, "seed-old", 50, suite="seed-2010")
    make_run(b, "quick-killed", 60, state="running")
    runs.pin(make_run(b, "quick-baseline", 90), "the 0.1 baseline")
    (b / "notes").mkdir()  # not a run: never touched
    (b / "notes" / "todo.txt").write_text("x")
    os.symlink(b / "quick-old", b / "quick-link")  # a link to a run is not a run kept here
    return b


def test_ages() -> None:
    assert parse_age("30d") == timedelta(days=30) and parse_age("12h") == timedelta(hours=12)
    assert parse_age("90m") == timedelta(minutes=90) and parse_age("2w") == timedelta(days=14)
    for bad in ("0d", "30", "d", "-1d", "1.5d", "30 days", "1y"):
        with pytest.raises(ValueError, match="allowed: a positive whole number and m, h, d or w"):
            parse_age(bad)


def test_the_rules_each_say_why() -> None:
    r = lambda name, days, **kw: SavedRun(Path(name), kw.get("suite", "quick"),  # noqa: E731
                                          NOW - timedelta(days=days) if days is not None else None,
                                          kw.get("state", "complete"), kw.get("pinned", False))  # fmt: skip
    saved = [r("a", 1), r("b", 10), r("c", 30), r("s", 30, suite="seed"), r("p", 99, pinned=True),
             r("x", 99, state="running"), r("u", None)]  # fmt: skip
    got = {d.run.path.name: (d.remove, d.reason) for d in decide(saved, keep=1, now=NOW)}
    assert {k for k, (gone, _) in got.items() if gone} == {"b", "c"}
    assert got["a"][1] == "the newest of quick" and got["s"][1] == "the newest of seed"
    assert got["c"] == (True, "started 30 d ago, 3rd newest of quick")
    assert got["p"][1].startswith("pinned") and got["x"][1].startswith("running, or killed while running")
    assert got["u"][1] == "start time unknown"
    got = {d.run.path.name: (d.remove, d.reason) for d in decide(saved, older_than=timedelta(days=20), now=NOW)}
    assert {k for k, (gone, _) in got.items() if gone} == {"c", "s"}
    assert got["b"] == (False, "started 10 d ago, not more than 20 d")
    both = decide(saved, keep=0, older_than=timedelta(days=5), now=NOW)
    assert {d.run.path.name for d in both if d.remove} == {"b", "c", "s"}
    with pytest.raises(ValueError):
        decide(saved, now=NOW)


def test_a_dry_run_removes_nothing_and_yes_removes_exactly_what_it_said(base: Path) -> None:
    before = sorted(p.name for p in base.iterdir())
    dry = runs.prune(base, keep=1, older_than=timedelta(days=10), now=NOW)
    assert sorted(p.name for p in base.iterdir()) == before
    said = {d.run.path.name for d in dry.removed}
    assert said == {"quick-old", "quick-mid"}
    assert {d.run.path.name for d in dry.decisions} == {"quick-old", "quick-mid", "quick-new", "seed-old",
                                                         "quick-killed", "quick-baseline"}  # fmt: skip
    done = runs.prune(base, keep=1, older_than=timedelta(days=10), dry_run=False, now=NOW)
    assert {d.run.path.name for d in done.removed} == said and not done.failed
    assert sorted(p.name for p in base.iterdir()) == sorted(set(before) - said)
    assert (base / "notes" / "todo.txt").exists() and os.path.islink(base / "quick-link")
    assert json.loads(json.dumps(done.to_json()))["removed"][0]["run"] == str(base / "quick-mid")


def test_pin_and_unpin(base: Path) -> None:
    assert "the 0.1 baseline" in (base / "quick-baseline" / "pinned").read_text()
    assert runs.unpin(base / "quick-baseline") and not runs.unpin(base / "quick-baseline")
    gone = runs.prune(base, older_than=timedelta(days=30), dry_run=False, now=NOW)
    assert "quick-baseline" in {d.run.path.name for d in gone.removed}
    with pytest.raises(Exception, match="not an hvnet run"):
        runs.pin(base / "notes")
    with pytest.raises(UsageError, match="give --keep N, --older-than AGE or both"):
        runs.prune(base, keep=None, older_than=None)


def _hvnet(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "appliance", *args], capture_output=True, text=True, cwd=ROOT,
                          env={**os.environ, **(env or {})}, timeout=60, check=False)  # fmt: skip


def test_the_command(base: Path, tmp_path: Path) -> None:
    res = _hvnet("suite", "prune", "--keep", "1", env={"HVNET_RUNS_DIR": str(base)})
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert lines[0] == f"{base}: would remove 2 run(s), keeping 4"  # the quick runs but the newest
    assert any(line.startswith("quick-mid") and "would remove: started 20 d ago, 2nd newest" in line for line in lines)
    assert lines[-1] == "dry run: nothing was removed; --yes removes them"
    assert (base / "quick-mid").is_dir()

    conf = tmp_path / "hvnet.conf"
    conf.write_text(f"[data]\nruns_dir = {base}\n")
    res = _hvnet("suite", "prune", "--older-than", "1d", "--yes", "--json", env={"HVNET_CONFIG": str(conf)})
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["dry_run"] is False and doc["runs_dir"] == str(base)
    assert {Path(r["run"]).name for r in doc["removed"]} == {"quick-old", "quick-mid", "quick-new", "seed-old"}
    assert sorted(p.name for p in base.iterdir()) == ["notes", "quick-baseline", "quick-killed", "quick-link"]

    for argv, needle in ((["--runs", str(base)], "give --keep N, --older-than AGE or both"),
                         (["--keep", "x"], "'x' is not a number of runs"),
                         (["--older-than", "30 days"], "'30 days' is not an age"),
                         (["--keep", "1", "--runs", str(tmp_path / "nowhere")], "no runs directory at")):  # fmt: skip
        res = _hvnet("suite", "prune", *argv)
        assert res.returncode == 2 and needle in res.stderr and "Traceback" not in res.stderr, res.stderr
