"""The shipped alerting rules (contrib/prometheus/hvnet-rules.yml): Prometheus' own promtool checks them
and runs their unit tests (hvnet-rules.test.yml: series that fire each alert beside series that must not),
and every rule reads only what the exporter exports and says which VIF (and VM) it is about.

promtool is required, never skipped: CI's set-up installs it (.ci/setup-host: Debian's prometheus
package), and a skip there would hide a broken rule.  The RPM's %check, on a builder without it, leaves
this file out by name."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

from appliance.services import metrics

ROOT = Path(__file__).resolve().parents[3]
RULES = ROOT / "contrib" / "prometheus" / "hvnet-rules.yml"
TESTS = RULES.with_name("hvnet-rules.test.yml")


def _promtool(*args: str, cwd: Path = RULES.parent) -> subprocess.CompletedProcess[str]:
    tool = shutil.which("promtool")
    if tool is None:
        pytest.fail("promtool is not installed: Debian's prometheus package has it (.ci/setup-host installs it)")
    return subprocess.run([tool, *args], capture_output=True, text=True, cwd=cwd, timeout=120, check=False)


def _rules(path: Path = RULES) -> list[dict]:
    return [rule for group in yaml.safe_load(path.read_text())["groups"] for rule in group["rules"]]


def test_promtool_checks_the_rules() -> None:
    res = _promtool("check", "rules", str(RULES))
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"SUCCESS: {len(_rules())} rules found" in res.stdout, res.stdout


def test_promtool_runs_the_rules_unit_tests() -> None:
    res = _promtool("test", "rules", TESTS.name)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout, res.stdout


def test_the_unit_tests_catch_a_join_that_mixes_up_hosts(tmp_path: Path) -> None:
    """Joined on vif alone, xs1's and xs2's vif1.0 (one --hosts exporter) meet: the tests must fail."""
    text = RULES.read_text().replace("on(job, instance, host, vif)", "on(vif)")
    (tmp_path / RULES.name).write_text(text)
    shutil.copy(TESTS, tmp_path / TESTS.name)
    res = _promtool("test", "rules", TESTS.name, cwd=tmp_path)
    assert res.returncode != 0 and "FAILED" in res.stdout + res.stderr, res.stdout


def test_every_rule_is_tested_and_says_what_it_is_about() -> None:
    tested = {t["alertname"] for case in yaml.safe_load(TESTS.read_text())["tests"] for t in case["alert_rule_test"]}
    for rule in _rules():
        name = rule["alert"]
        assert name in tested, f"{name} has no promtool test"
        assert rule["for"] and rule["labels"]["severity"] in ("critical", "warning"), name
        assert set(rule["annotations"]) >= {"summary", "description"}, name
        if "hvnet_vif_" in rule["expr"]:  # about a VIF: names it and its VM, joined from the info series
            assert "$labels.vif" in rule["annotations"]["summary"], name
            assert "group_left(vm, vm_uuid) hvnet_vif_info" in rule["expr"], name


def test_the_rules_read_only_exported_metrics() -> None:
    for rule in _rules():
        expr = re.sub(r'"[^"]*"', '""', rule["expr"])  # label values are not names
        names = set(re.findall(r"\bhvnet_[a-z_]+\b", expr))
        assert names or expr.startswith("up{"), rule["alert"]  # the exporter's metrics, or its scrape
        assert names - set(metrics.FAMILIES) == set(), (rule["alert"], names)
