"""Stored runs keep loading: a ``results.json`` version 1 (runs saved by the lab before version 2, policing in
kbit/s and kbit) reads as version 2, reports and compares as before, validates against the published schema once
upgraded, and can be compared with a version 2 run."""

from __future__ import annotations

import copy
import json
import shutil
from pathlib import Path

import pytest

from appliance.core import documents
from appliance.netperf.figures import compare
from appliance.netperf.report import html
from appliance.netperf.report import text as report
from appliance.netperf.store import results, upgrade
from tests import jsonschemas

DATA = Path(__file__).resolve().parents[1] / "data" / "netperf"
POLICING = DATA / "policing-results.json"  # steps policed by a meter: 1024 kbit/s burst 819 kbit, then 5120/4096
POLICED_SETUP = DATA / "quick-policed-results.json"  # the setup's policing: 10240 kbit/s burst 8192 kbit
STORED = sorted(DATA.glob("*-results.json")) + sorted((DATA / "verdict").glob("*.json"))


def test_the_stored_runs_are_version_1() -> None:
    """What this test is about: runs saved before version 2 (if they are upgraded in place, it tests nothing)."""
    assert len(STORED) >= 8
    assert {json.loads(f.read_text())["version"] for f in STORED} == {1}


@pytest.mark.parametrize("stored", STORED, ids=lambda p: p.name)
def test_every_stored_run_loads_as_version_2_and_validates(stored: Path) -> None:
    raw = json.loads(stored.read_text())
    doc = results.load(stored).to_json()
    assert (doc["schema"], doc["version"]) == ("hvnet.netperf.results", 2)
    jsonschemas.check(documents.SUITE_RESULTS, doc)
    assert json.loads(stored.read_text()) == raw  # the file is read, never rewritten


def test_the_policing_keys_are_renamed_and_scaled_exactly() -> None:
    doc = results.load(POLICING)
    pol = doc.steps[0].policing
    assert pol is not None and (pol.rate_bits_per_s, pol.burst_bits) == (1_024_000, 819_000)
    assert (pol.rate_kbps, pol.burst_kbit, pol.mechanism, pol.verified) == (1024, 819, "meter", True)
    out = doc.to_json()["steps"][0]["policing"]
    assert list(out) == ["port", "rate_bits_per_s", "burst_bits", "mechanism", "verified"]  # same places
    assert all(isinstance(out[k], int) for k in ("rate_bits_per_s", "burst_bits"))
    setup = results.load(POLICED_SETUP).meta.setup
    assert setup is not None and setup["policing"]["rate_bits_per_s"] == 10_240_000
    assert setup["policing"]["burst_bits"] == 8_192_000 and "rate_kbps" not in setup["policing"]


def test_a_version_1_document_is_not_a_version_2_one() -> None:
    """The schema tells the two apart: the old keys are refused, so a reader must upgrade (or read version 1)."""
    raw = json.loads(POLICING.read_text())
    found = jsonschemas.problems(documents.SUITE_RESULTS, raw)
    assert any("rate_kbps" in p for p in found) and any("version" in p for p in found)
    raw["version"] = 2
    assert any("rate_bits_per_s" in p for p in jsonschemas.problems(documents.SUITE_RESULTS, raw))


def test_an_upgraded_run_reports_as_before() -> None:
    doc = results.load(POLICING)
    text = report.text(doc)
    assert "1024/819 meter" in text and "5120/4096 meter" in text  # the policing row, in kbit/s / kbit as always
    page = html.suite_page(results.load(POLICED_SETUP), "run", plots=False)
    assert "10240 kbit/s, burst 8192 kbit, meter" in page


def test_runs_of_both_versions_compare(tmp_path: Path) -> None:
    """``hvnet suite compare OLD NEW`` with OLD saved by an older hvnet and NEW by this one."""
    new_dir = tmp_path / "new"
    new_dir.mkdir()
    results.write(new_dir, results.load(POLICING))
    assert json.loads((new_dir / results.RESULTS).read_text())["version"] == 2
    old, new = results.load(POLICING), results.load(new_dir)
    r = compare.compare(old, new)
    assert r.rows and r.regressions == []
    assert compare.compare(old, old).rows == r.rows


def test_upgrade_leaves_its_input_alone_and_refuses_a_newer_version(tmp_path: Path) -> None:
    raw = json.loads(POLICING.read_text())
    before = copy.deepcopy(raw)
    assert upgrade.upgrade(raw)["steps"][0]["policing"]["rate_bits_per_s"] == 1_024_000
    assert raw == before
    newer = tmp_path / "newer"
    newer.mkdir()
    shutil.copy(POLICING, newer / results.RESULTS)
    raw["version"] = 3
    (newer / results.RESULTS).write_text(json.dumps(raw))
    with pytest.raises(results.NotARun, match="version 3; this hvnet reads versions 1 to 2"):
        results.load(newer)
