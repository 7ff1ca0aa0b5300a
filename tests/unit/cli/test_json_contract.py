"""The ``--json`` contract: every read, validate, report, pin and delete verb has ``--json``; under it a
failure is one JSON object on stderr (``{"error": {...}}``) with the exit code, and stdout stays empty.

Each command runs in-process through :func:`appliance.cli.main.main` on real files: a shipped suite, a
saved isolation result (``isolation check --json`` in the lab), a run made from a real run's results.json,
a capture record of a real capture.
"""

from __future__ import annotations

import argparse
import json
import shutil
from pathlib import Path

import pytest

from appliance.cli import main as cli
from appliance.cli.main import main
from appliance.core import documents
from tests.conftest import ROOT

DATA = ROOT / "tests/unit/data"

# Verbs that print nothing a script reads: a command run inside a guest, daemons, the console, the
# completion and man page generators, and the capture supervisor hvnet starts itself.
NO_JSON = {"lab exec", "agent", "capture _supervise", "exporter", "tui", "completion", "_complete"}


def _leaves(parser: argparse.ArgumentParser, path: tuple[str, ...] = ()) -> dict[str, argparse.ArgumentParser]:
    subs = [a for a in parser._actions if isinstance(a, argparse._SubParsersAction)]
    if not subs:
        return {" ".join(path): parser}
    out: dict[str, argparse.ArgumentParser] = {}
    for action in subs:
        for name, sub in action.choices.items():
            out |= _leaves(sub, (*path, name))
    return out


def test_every_verb_that_prints_a_result_has_json() -> None:
    leaves = _leaves(cli.build_parser())
    without = {verb for verb, p in leaves.items() if "--json" not in {o for a in p._actions for o in a.option_strings}}
    assert without == NO_JSON
    for verb in ("suite validate", "isolation report", "suite pin", "suite unpin", "capture delete", "qos show",
                 "sflow show", "ipfix show", "vif show"):  # fmt: skip
        assert verb in leaves and verb not in NO_JSON


def test_every_verb_with_json_prints_a_registered_document() -> None:
    """A verb cannot ship --json without a schema: each is in documents.BY_VERB, with the documents it prints."""
    leaves = _leaves(cli.build_parser())
    with_json = {verb for verb, p in leaves.items() if "--json" in {o for a in p._actions for o in a.option_strings}}
    assert not with_json - set(documents.BY_VERB), "verbs with --json and no registered document"
    assert not set(documents.BY_VERB) - with_json  # no stale entry
    for docs in documents.BY_VERB.values():
        assert docs and all(d in documents.ALL for d in docs)
    printed = {d for docs in documents.BY_VERB.values() for d in docs}
    only_written = {documents.AUDIT_LINE, documents.ROLLBACK_RECORD}
    assert printed | only_written == set(documents.ALL)


def test_a_new_verb_with_json_and_no_document_is_caught(monkeypatch) -> None:
    """The walk above fails for a verb added with --json that names no document (the test can fail)."""
    monkeypatch.delitem(documents.BY_VERB, "qos show")
    with pytest.raises(AssertionError, match="no registered document"):
        test_every_verb_with_json_prints_a_registered_document()


def _error(capsys: pytest.CaptureFixture[str], code: int, argv: list[str]) -> dict:
    assert main(argv) == code
    out, err = capsys.readouterr()
    assert out == ""
    doc = json.loads(err)
    assert set(doc) == {"error"} and doc["error"]["exit_code"] == code
    assert err.isascii()  # the terminal shows it as sent
    return doc["error"]


def _exit(capsys: pytest.CaptureFixture[str], code: int, argv: list[str]) -> tuple[str, str]:
    with pytest.raises(SystemExit) as exc:
        main(argv)
    assert exc.value.code == code
    return capsys.readouterr()


def test_a_usage_error_under_json_is_json(capsys) -> None:
    out, err = _exit(capsys, 2, ["status", "--json", "--bogus"])
    assert out == ""
    e = json.loads(err)["error"]
    assert e == {"message": "unrecognized arguments: --bogus", "hint": "'hvnet --help' lists what is allowed",
                 "exit_code": 2, "kind": "UsageError", "meaning": "invalid"}  # fmt: skip


def test_a_usage_error_without_json_stays_text(capsys) -> None:
    _, err = _exit(capsys, 2, ["status", "--bogus"])
    assert err.startswith("usage: hvnet") and "hvnet: error: unrecognized arguments: --bogus" in err


def test_json_after_double_dash_is_the_guests_not_hvnets() -> None:
    assert cli._wants_json(["status", "--json"])
    assert not cli._wants_json(["lab", "exec", "VM1", "--", "ip", "--json", "link"])


def test_a_bad_rate_under_json_names_the_option_and_both_readings(capsys) -> None:
    e = _error(capsys, 2, ["qos", "set", "vif1.0", "--ingress-rate", "10kbps", "--json"])
    assert e["kind"] == "ConfigError" and e["meaning"] == "invalid"
    (problem,) = e["problems"]
    assert problem["field"] == "--ingress-rate" and problem["file"] == "command line"
    assert "ambiguous" in problem["message"] and "kilobytes/s to tc" in problem["message"]


def test_an_unreachable_database_under_json(capsys) -> None:
    e = _error(capsys, 3, ["--no-lab", "--db", "unix:/nonexistent/db.sock", "status", "--json"])
    assert e["kind"] == "OvsdbUnreachable" and e["meaning"] == "unreachable"
    assert "/nonexistent/db.sock" in e["message"] and e["hint"]


def test_a_control_character_under_json(capsys) -> None:
    e = _error(capsys, 2, ["qos", "show", "vif\x1b[31m", "--json"])
    assert e["kind"] == "UsageError" and "argument 3" in e["message"]


def test_pool_with_a_one_switch_verb_under_json(capsys) -> None:
    e = _error(capsys, 2, ["--pool", "p", "qos", "clear", "vif1.0", "--json"])
    assert "--pool works with" in e["message"]


# -- the verbs that gained --json ---------------------------------------------------------------------


def test_suite_validate_json(capsys) -> None:
    assert main(["suite", "validate", str(ROOT / "netperf-suites/seed-2010.yaml"), "--json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["valid"] is True and doc["tests"] == 4 and doc["steps"] == 28
    assert doc["estimated_at_least_s"] > 0


def test_suite_validate_problems_under_json(capsys, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("name: bad\ntests:\n  - type: TCP_STREM\n")
    e = _error(capsys, 2, ["suite", "validate", str(bad), "--json"])
    assert e["kind"] == "ConfigError" and e["problems"]
    assert all(p["file"] == str(bad) for p in e["problems"])
    assert any(p["line"] == 3 for p in e["problems"])


@pytest.mark.parametrize("saved", ["isolation-misconfigured.json", "isolation-guest-down.json"])
def test_isolation_report_json_is_the_saved_result_and_exits_as_the_check_did(capsys, saved: str) -> None:
    code = main(["isolation", "report", str(DATA / saved), "--json"])
    out = json.loads(capsys.readouterr().out)
    saved_doc = json.loads((DATA / saved).read_text())
    assert code == out["exit_code"] == saved_doc["exit_code"] != 0
    assert (out["scenario"], out["expected"], out["guests"]) == (saved_doc["scenario"], saved_doc["expected"],
                                                                 saved_doc["guests"])  # fmt: skip


def test_suite_pin_and_unpin_json(capsys, tmp_path: Path) -> None:
    run = tmp_path / "quick-1"
    run.mkdir()
    shutil.copy(DATA / "netperf/quick-results.json", run / "results.json")
    assert main(["suite", "pin", str(run), "--note", "baseline", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"schema": "hvnet.suite.pin", "version": 1, "run": str(run),
                                                   "pinned": True, "marker": str(run / "pinned")}  # fmt: skip
    assert main(["suite", "unpin", str(run), "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"schema": "hvnet.suite.unpin", "version": 1, "run": str(run),
                                                   "pinned": False, "was_pinned": True}  # fmt: skip
    assert main(["suite", "unpin", str(run), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["was_pinned"] is False


def test_capture_delete_json(capsys, tmp_path: Path, monkeypatch) -> None:
    pcaps = tmp_path / "captures"
    (pcaps / "vif2-cap").mkdir(parents=True)
    shutil.copy(DATA / "captures/vif2.capture.json", pcaps / "vif2-cap" / "capture.json")
    monkeypatch.setenv("HVNET_PCAP_DIR", str(pcaps))
    assert main(["--no-lab", "capture", "delete", "vif2-cap", "--json"]) == 0
    assert json.loads(capsys.readouterr().out) == {"schema": "hvnet.capture.delete", "version": 1, "name": "vif2-cap",
                                                   "removed": str(pcaps / "vif2-cap")}  # fmt: skip
    assert not (pcaps / "vif2-cap").exists()
    assert main(["--no-lab", "capture", "delete", "vif2-cap", "--if-exists", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["removed"] is None
    e = _error(capsys, 2, ["--no-lab", "capture", "delete", "vif2-cap", "--json"])
    assert e["message"] == "no capture named 'vif2-cap'" and e["hint"] == "hvnet capture list"
