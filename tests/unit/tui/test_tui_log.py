"""The Log screen's pure rules: audit entries summarised, filter as you type."""

from __future__ import annotations

from tui.screens.log import audit_row, changes_summary, matches


def test_changes_summary_pairs_before_and_after() -> None:
    entry = {
        "before": [{"kind": "vlan", "name": "vif3.0", "value": "access tag 2"}],
        "after": [{"kind": "vlan", "name": "vif3.0", "value": "access tag 7"}],
    }
    assert changes_summary(entry) == "vif3.0 vlan: access tag 2 -> access tag 7"
    assert changes_summary({"before": [], "after": []}) == "no change"
    assert changes_summary({}) == "no change"


def test_audit_row_clips_long_commands_and_survives_odd_entries() -> None:
    row = audit_row({"time": "bad", "user": "ops", "command": "x" * 100, "result": "applied"})
    assert row[0] == "bad" and row[1] == "ops" and row[2].endswith("…") and len(row[2]) < 100
    assert audit_row({})[1] == "?"


def test_matches_every_word_anywhere() -> None:
    cells = ("10:00", "ops", "hvnet vif set vif3.0", "applied")
    assert matches(cells, "vif3 ops")
    assert matches(cells, "APPLIED")
    assert not matches(cells, "vif3 root")
