"""hvnet exporter's pure parts: the listen address, ovs-vswitchd's thread times (a real ovs-vswitchd's
/proc lines), the audit log as the agent and an operator write it, a switch that cannot be reached, and
the shipped Grafana dashboard against the metrics the exporter exports."""

from __future__ import annotations

import json
import os
import re
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from appliance.core.errors import EXIT_CONFLICT, EXIT_USAGE, UsageError
from appliance.core.target import DbTarget
from appliance.exporter import server as exporter
from appliance.policy.apply.journal import Journal
from appliance.services import metrics, scrape
from appliance.switch.host import DataPaths, Host

DATA = Path(__file__).parents[1] / "data"
ROOT = Path(__file__).resolve().parents[3]
DASHBOARD = ROOT / "contrib" / "grafana" / "hvnet.json"


@pytest.mark.parametrize(
    ("text", "address", "port", "loopback"),
    [
        ("127.0.0.1:9477", "127.0.0.1", 9477, True),
        ("[::1]:9477", "::1", 9477, True),
        ("localhost:0", "localhost", 0, True),
        ("0.0.0.0:9477", "0.0.0.0", 9477, False),
        ("[2001:db8::1]:80", "2001:db8::1", 80, False),
    ],
)
def test_listen_forms(text: str, address: str, port: int, loopback: bool) -> None:
    got = exporter.parse_listen(text)
    assert (got.address, got.port, got.loopback) == (address, port, loopback)
    assert got.url(1234).endswith(":1234/metrics") and ("[" in got.url()) == (":" in address)


@pytest.mark.parametrize(
    "text", ["9477", "::1:9477", "[127.0.0.1]:80", "[::1]", "host.example:80", "127.0.0.1:65536", "1.2.3.4:x",
             "127.0.0.1:٣", ":80", "[::1]:99999999"],
)  # fmt: skip
def test_bad_listen_is_a_usage_error_naming_its_origin(text: str) -> None:
    with pytest.raises(UsageError) as err:
        exporter.parse_listen(text, "$HVNET_EXPORTER_LISTEN")
    assert err.value.exit_code == EXIT_USAGE
    assert str(err.value).startswith(f"$HVNET_EXPORTER_LISTEN: {text!r}: ") and "allowed: HOST:PORT" in str(err.value)


def test_a_non_loopback_address_needs_allow_remote() -> None:
    everywhere = exporter.parse_listen("0.0.0.0:9477")
    with pytest.raises(UsageError) as err:
        exporter.require_allowed(everywhere, allow_remote=False)
    assert "--allow-remote" in (err.value.hint or "")
    exporter.require_allowed(everywhere, allow_remote=True)
    exporter.require_allowed(exporter.parse_listen("[::1]:9477"), allow_remote=False)


def test_vswitchd_thread_times_from_a_real_ovs_vswitchd() -> None:
    lines = (DATA / "vswitchd-task-stat.txt").read_text().splitlines()
    assert metrics.parse_task_stat(lines[0], 100) == ("ovs-vswitchd", 0.0, 0.02)  # utime 0, stime 2 ticks
    got = metrics.thread_cpu([*lines, "", "garbage", "1 (x) S 1"], 100)
    assert set(got) == {"ovs-vswitchd", "ct_clean3", "ipf_clean1", "urcu2", "handler4", "revalidator5"}
    assert got["ovs-vswitchd"] == (0.0, 0.02)  # two threads of that name, summed


def test_a_thread_name_with_spaces_and_parentheses() -> None:
    line = "42 (a (b) c) S 1 1 1 0 -1 0 0 0 0 0 250 50 0 0 20 0 1 0"
    assert metrics.parse_task_stat(line, 100) == ("a (b) c", 2.5, 0.5)


def test_audit_times_as_the_journal_writes_them(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    mine, other = Journal("unix:/run/x/db.sock", tmp_path, log), Journal("unix:/other.sock", tmp_path, log)
    mine.audit("hvnet agent", [], "applied")
    mine.audit("hvnet agent", [], "unchanged")
    mine.audit("hvnet agent", [], "failed, nothing changed: boom")
    mine.audit("hvnet apply", [], "applied with problems: vif1.0: ...")
    other.audit("hvnet apply", [], "applied")
    entries = metrics.audit_tail(log)
    assert len(entries) == 5
    times = metrics.audit_times(entries, "unix:/run/x/db.sock")
    assert set(times) == {"agent_change", "agent_failure", "apply"}
    assert times["agent_change"] <= times["agent_failure"] <= times["apply"]
    assert metrics.audit_times(entries, "unix:/nowhere") == {}


def test_audit_tail_reads_only_the_end(tmp_path: Path) -> None:
    log = tmp_path / "audit.jsonl"
    journal = Journal("t", tmp_path, log)
    for _ in range(50):
        journal.audit("hvnet apply", [], "applied")
    size = log.stat().st_size
    got = metrics.audit_tail(log, limit=size // 2)
    assert 20 <= len(got) < 50  # whole lines only: the cut one is dropped
    assert metrics.audit_tail(tmp_path / "none.jsonl") == []


def test_an_unreachable_switch_is_up_0_and_nothing_else_about_it(tmp_path: Path) -> None:
    host = Host(DbTarget(f"unix:{tmp_path}/db.sock", "--db"), paths=DataPaths.for_lab(tmp_path))
    collector = scrape.Collector(host, timeout=0.5)
    fams = {f.name: f for f in collector.collect()}
    assert fams["hvnet_up"].samples == [((collector.name,), 0.0)]
    assert fams["hvnet_exporter_scrape_errors_total"].samples == [((collector.name, "ovsdb"), 1.0)]
    assert not [n for n in fams if n.startswith(("hvnet_vif", "hvnet_limit", "hvnet_agent_running", "hvnet_info"))]
    assert collector.host_label is False  # this machine's switch: Prometheus' instance says whose
    assert set(fams) <= set(metrics.FAMILIES)


def test_a_switch_reached_over_tcp_is_another_machines_and_labelled(tmp_path: Path) -> None:
    """--db tcp:HOST:PORT runs the exporter here against another machine's database: host names it."""
    host = Host(DbTarget("tcp:192.0.2.7:6640", "--db"), paths=DataPaths.for_lab(tmp_path))
    collector = scrape.Collector(host, timeout=0.5)
    assert collector.host_label is True and collector.name == "192.0.2.7"  # the switch's machine, not this one
    six = scrape.Collector(Host(DbTarget("ssl:[2001:db8::7]:6640", "--db"), paths=DataPaths.for_lab(tmp_path)))
    assert six.name == "2001:db8::7"


def test_another_machines_switch_is_labelled_with_its_host(tmp_path: Path) -> None:
    """--host NAME: the exporter runs elsewhere, so its instance does not name the hypervisor; host does."""
    from appliance.core.runner import LocalRunner

    class AsIfRemote(LocalRunner):
        local = False

    target = DbTarget(f"unix:{tmp_path}/db.sock", "--db")
    host = Host(target, paths=DataPaths.for_lab(tmp_path), runner=AsIfRemote(), label="xs7")
    collector = scrape.Collector(host, timeout=0.5)
    assert collector.host_label is True and collector.name == "xs7"
    exposed = exporter._Families(collector)
    try:
        up = next(f for f in exposed.collect() if f.name == "hvnet_up")
    finally:
        collector.stop()
    assert [(s.labels, s.value) for s in up.samples] == [({"host": "xs7"}, 0.0)]


def test_unknown_figures_are_left_out() -> None:
    out = metrics.Families()
    out.add("hvnet_agent_running", ("h",), None)
    out.add("hvnet_vifs", ("h",), 3)
    assert [f.name for f in out] == ["hvnet_vifs"]


def _exported_names() -> set[str]:
    return set(metrics.FAMILIES)


def _targets(dashboard: dict) -> list[dict]:
    return [t for panel in dashboard["panels"] for t in panel["targets"]]


def _names_in(expr: str) -> set[str]:
    """The metric names an expression reads: hvnet_ words not followed by a ( (a function) nor inside a
    string (a label value); enough for the dashboard's PromQL, whose label values are $variables."""
    without_strings = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    return set(re.findall(r"\bhvnet_[a-z_]+\b(?!\s*\()", without_strings))


def test_names_in_an_expression() -> None:
    expr = 'rate(hvnet_vif_rx_bytes_total{vif="hvnet_x"}[5m]) * on(vif) group_left(vm) hvnet_vif_info'
    assert _names_in(expr) == {"hvnet_vif_rx_bytes_total", "hvnet_vif_info"}


def test_the_dashboard_queries_only_exported_metrics() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    targets = _targets(dashboard)
    assert targets and all(p["targets"] for p in dashboard["panels"])
    used = {m for t in targets for m in _names_in(t["expr"])}
    used |= {m for v in dashboard["templating"]["list"] for m in _names_in(json.dumps(v.get("query", "")))}
    assert used - _exported_names() == set(), "the dashboard queries metrics the exporter does not export"
    for needed in (
        "hvnet_vif_rx_bytes_total",
        "hvnet_vif_rx_dropped_total",
        "hvnet_vif_limit_enforced",
        "hvnet_vif_ingress_policing_rate_bytes_per_second",
        "hvnet_vif_info",
        "hvnet_mirror_tx_packets_total",
        "hvnet_agent_running",
        "hvnet_ovs_vswitchd_cpu_seconds_total",
    ):
        assert needed in used, needed  # fmt: skip
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_the_dashboard_takes_vm_names_from_the_info_series() -> None:
    """VIF series carry only vif (and host): a legend naming the VM must join hvnet_vif_info for it, on the
    labels that identify a VIF in both modes (host is absent on both sides for one machine's exporter)."""
    for t in _targets(json.loads(DASHBOARD.read_text())):
        if "{{vm}}" in t["legendFormat"] or "{{vlan}}" in t["legendFormat"]:
            assert "* on(job, instance, host, vif) group_left(vm) hvnet_vif_info" in t["expr"], t["expr"]
        assert not re.search(r"\b(vm|vlan|bridge)=", t["expr"]), t["expr"]


def test_every_family_is_documented_in_the_metrics_reference() -> None:
    reference = (ROOT / "docs" / "reference" / "metrics.md").read_text()
    missing = [n for n in metrics.FAMILIES if f"`{n}`" not in reference]
    assert not missing, missing


def _hvnet(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    full = {**os.environ, "HVNET_LAB_DIR": "/nonexistent", **(env or {})}
    argv = [sys.executable, "-m", "appliance", "--db", "unix:/nonexistent/db.sock", "exporter", *args]
    return subprocess.run(argv, capture_output=True, text=True, env=full, cwd=ROOT, timeout=30, check=False)


@pytest.mark.parametrize(
    ("args", "env", "said"),
    [
        (("--listen", "0.0.0.0:9477"), {}, "flag --listen: 0.0.0.0: not a loopback address"),
        ((), {"HVNET_EXPORTER_LISTEN": "9477"}, "env HVNET_EXPORTER_LISTEN: '9477': no HOST:PORT"),
        (("--check-interval", "0"), {}, "--check-interval 0: allowed 1-3600 seconds"),
        (("--scrape-timeout", "0"), {}, "flag --scrape-timeout: '0': allowed more than 0, at most 60 seconds"),
        ((), {"HVNET_EXPORTER_SCRAPE_TIMEOUT": "soon"}, "env HVNET_EXPORTER_SCRAPE_TIMEOUT: 'soon': allowed"),
        (("--tls-key", "/etc/k.pem"), {}, "flag --tls-key: /etc/k.pem: HTTPS needs both a certificate and its key"),
        ((), {"HVNET_EXPORTER_CLIENT_CA": "ca.pem"}, "env HVNET_EXPORTER_CLIENT_CA: 'ca.pem' is not allowed"),
        (("--policy", "/nonexistent.yaml"), {}, "--policy /nonexistent.yaml: no such file"),
    ],
)
def test_the_command_refuses_bad_options_with_exit_2(args: tuple[str, ...], env: dict[str, str], said: str) -> None:
    res = _hvnet(*args, *(() if "--policy" in args else ("--policy", "none")), env=env)
    assert res.returncode == EXIT_USAGE, res.stderr
    assert said in res.stderr and "Traceback" not in res.stderr, res.stderr


def test_a_port_in_use_is_a_conflict() -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        res = _hvnet("--listen", f"127.0.0.1:{taken.getsockname()[1]}", "--policy", "none")
    assert res.returncode == EXIT_CONFLICT, res.stderr
    assert "cannot listen on http://127.0.0.1:" in res.stderr and "Traceback" not in res.stderr


def _samples(fams: metrics.Families, name: str) -> dict[tuple[str, ...], float]:
    fam = fams.get(name)
    return dict(fam.samples) if fam is not None else {}


def test_fleet_hosts_answer_on_their_own(tmp_path: Path) -> None:
    """A host that opens (its switch down), one that cannot be reached, one that hangs: each its own row."""
    from appliance.core.errors import HvnetError
    from appliance.services.metrics_fleet import FleetCollector

    release = threading.Event()

    def opener(name: str, timeout: float) -> Host:
        if name == "gone":
            raise HvnetError("cannot reach gone")
        if name == "hung":
            release.wait(10)
        return Host(DbTarget(f"unix:{tmp_path}/{name}.sock", "--db"), paths=DataPaths.for_lab(tmp_path), label=name)

    fleet = FleetCollector({"down": None, "gone": None, "hung": None}, opener, timeout=0.2)
    try:
        start = time.monotonic()
        first = fleet.collect()
        assert time.monotonic() - start < fleet.deadline + 0.5
        assert _samples(first, "hvnet_up") == {("down",): 0.0, ("gone",): 0.0, ("hung",): 0.0}
        errors = _samples(first, "hvnet_exporter_scrape_errors_total")
        assert errors[("down", "ovsdb")] == 1 and errors[("gone", "connect")] == 1 and errors[("hung", "busy")] == 1
        release.set()
        time.sleep(0.5)  # the hung host finished after the scrape gave up: its late figures are not exported
        second = fleet.collect()
        # its late collection (the first) was dropped; these figures are a second one, made for this scrape
        assert _samples(second, "hvnet_exporter_scrapes_total")[("hung",)] == 2
        assert _samples(second, "hvnet_exporter_scrape_errors_total")[("hung", "fleet-busy")] == 1
    finally:
        release.set()
        fleet.stop()
