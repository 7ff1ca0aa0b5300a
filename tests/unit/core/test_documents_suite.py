"""The suite verbs' documents against their schemas: each printed by ``hvnet`` itself (main() in-process) from
real runs (results.json of runs made in the lab, kept under tests/unit/data/netperf) and the shipped suites and
studies; ``suite run``'s from a real run loaded as it ends."""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from appliance.cli import suite as cli_suite
from appliance.cli.main import main
from appliance.core import documents
from appliance.netperf.store import results
from tests import jsonschemas

ROOT = Path(__file__).resolve().parents[3]
DATA = ROOT / "tests" / "unit" / "data" / "netperf"


def _runs(tmp_path: Path) -> Path:
    """A runs directory holding two runs of the quick suite (one pinned) and a seed-2010 run."""
    base = tmp_path / "runs"
    for name, saved in (("quick-1", "quick-results.json"), ("quick-2", "quick-results.json"),
                        ("seed-1", "verdict/seed-2010-tc-vmhost.json")):  # fmt: skip
        (base / name).mkdir(parents=True)
        shutil.copy(DATA / saved, base / name / "results.json")
    (base / "quick-1" / "pinned").write_text("pinned\n")
    return base


def _json(capsys: pytest.CaptureFixture[str], argv: list[str], code: int = 0) -> dict[str, Any]:
    assert main(argv) == code
    return json.loads(capsys.readouterr().out)


def test_suite_list_validates_with_its_estimate_in_seconds(capsys, tmp_path: Path) -> None:
    doc = _json(capsys, ["--no-lab", "suite", "list", "--runs", str(_runs(tmp_path)), "--json"])
    jsonschemas.check(documents.SUITE_LIST, doc)
    seed = next(s for s in doc["suites"] if s["suite"] == "seed-2010")
    assert isinstance(seed["estimated_at_least_s"], int) and seed["estimated_at_least_s"] > 60
    assert len(doc["runs"]) == 3 and sum(r["pinned"] for r in doc["runs"]) == 1
    seed["minutes"] = seed.pop("estimated_at_least_s") / 60  # as version 1 wrote it
    assert any("minutes" in p for p in jsonschemas.problems(documents.SUITE_LIST, doc))


def test_suite_validate_validates(capsys) -> None:
    doc = _json(capsys, ["suite", "validate", str(ROOT / "netperf-suites/seed-2010.yaml"), "--json"])
    jsonschemas.check(documents.SUITE_VALIDATE, doc)
    assert jsonschemas.problems(documents.SUITE_VALIDATE, {**doc, "valid": False})


def test_suite_compare_validates(capsys, tmp_path: Path) -> None:
    base = _runs(tmp_path)
    doc = _json(capsys, ["suite", "compare", str(base / "quick-1"), str(base / "quick-2"), "--json"])
    jsonschemas.check(documents.SUITE_COMPARE, doc)
    assert doc["rows"] and doc["regressions"] == 0 and doc["threshold_pct"] == 5.0
    doc["rows"][0]["verdict"] = "worse"
    assert jsonschemas.problems(documents.SUITE_COMPARE, doc)


def test_suite_report_against_a_study_validates(capsys, tmp_path: Path) -> None:
    run = _runs(tmp_path) / "seed-1"
    doc = _json(capsys, ["suite", "report", str(run), "--against", "seed-2010", "--json"])
    jsonschemas.check(documents.SUITE_AGAINST, doc)
    assert doc["tables"][0]["rows"][0]["cells"][0]["study"] == 631.17 and doc["conclusions"]
    doc["conclusions"][0]["status"] = "maybe"
    assert jsonschemas.problems(documents.SUITE_AGAINST, doc)


def test_suite_prune_validates_as_a_dry_run_and_when_it_removes(capsys, tmp_path: Path) -> None:
    base = _runs(tmp_path)
    dry = _json(capsys, ["--no-lab", "suite", "prune", "--runs", str(base), "--keep", "1", "--json"])
    jsonschemas.check(documents.SUITE_PRUNE, dry)
    assert dry["dry_run"] is True and len(dry["would_remove"]) == 1 and "removed" not in dry
    done = _json(capsys, ["--no-lab", "suite", "prune", "--runs", str(base), "--keep", "1", "--yes", "--json"])
    jsonschemas.check(documents.SUITE_PRUNE, done)
    assert done["removed"][0]["run"] == dry["would_remove"][0]["run"]
    assert jsonschemas.problems(documents.SUITE_PRUNE, {**dry, "removed": dry["would_remove"]})  # both lists
    assert jsonschemas.problems(documents.SUITE_PRUNE, {**done, "dry_run": True})  # removed, yet a dry run


def test_suite_pin_and_unpin_validate(capsys, tmp_path: Path) -> None:
    run = _runs(tmp_path) / "quick-2"
    pinned = _json(capsys, ["suite", "pin", str(run), "--json"])
    jsonschemas.check(documents.SUITE_PIN, pinned)
    unpinned = _json(capsys, ["suite", "unpin", str(run), "--json"])
    jsonschemas.check(documents.SUITE_UNPIN, unpinned)
    assert jsonschemas.problems(documents.SUITE_UNPIN, {**unpinned, "pinned": True})


def test_suite_run_validates() -> None:
    doc = cli_suite.run_json(Path("/var/lib/hvnet/runs/quick-1"), results.load(DATA / "quick-results.json"))
    jsonschemas.check(documents.SUITE_RUN, doc)
    assert doc["steps"] > 0 and doc["state"] == "complete"
    assert jsonschemas.problems(documents.SUITE_RUN, {**doc, "steps": "3"})
