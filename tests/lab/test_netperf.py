"""netperf suites against the real lab: quick.yaml end to end, report, compare, lost instances, Ctrl-C."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.core import documents
from appliance.lab import Lab
from tests import jsonschemas
from tests.conftest import HVNET, ROOT, run_hvnet
from tests.lab.policy_helpers import vsctl

DATA = Path(__file__).parent / "data"
DURATION = 1  # seconds per instance in the module's quick runs (the suite's own: 2)
TYPES = {"TCP_STREAM", "UDP_STREAM", "TCP_RR", "TCP_CRR", "UDP_RR"}
VERDICTS = {"policer", "switch", "sender-cpu", "receiver-cpu", "ports", "unknown"}

pytestmark = pytest.mark.lab


def netperf_pids(lab: Lab) -> set[int]:
    """netperf/netserver processes in the lab's guests (none may outlive a run)."""
    pids: set[int] = set()
    for guest in ("VM1", "VM2"):
        out = subprocess.run(["ip", "netns", "pids", lab.ns_of(guest)], capture_output=True, text=True, check=False)
        for pid in out.stdout.split():
            try:
                comm = Path(f"/proc/{pid}/comm").read_text().strip()
            except OSError:
                continue
            if comm in ("netperf", "netserver"):
                pids.add(int(pid))
    return pids


def police_rate(lab: Lab) -> str | None:
    """The policing rate hvnet recorded on VM1's VIF (None: not policed)."""
    m = re.search(r'hvnet-police-rate-kbps="?(\d+)', vsctl(lab, "get", "Interface", "vif1.0", "external_ids"))
    return m.group(1) if m else None


def run_suite(*args: str, timeout: float = 300) -> subprocess.CompletedProcess:
    return run_hvnet("suite", "run", *args, timeout=timeout)


@pytest.fixture(scope="module")
def base_run(lab: Lab, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """The shipped quick suite, every step and all three repetitions, at 1 s an instance: what the tests
    check is the run's record (steps, repetitions, counters, files), which does not need its 2 s."""
    out = tmp_path_factory.mktemp("runs") / "quick-base"
    res = run_suite("quick", "--out", str(out), "--duration", str(DURATION))
    assert res.returncode == 0, res.stdout + res.stderr
    yield out


def test_quick_runs_end_to_end(lab: Lab, base_run: Path) -> None:
    doc = json.loads((base_run / "results.json").read_text())
    assert doc["schema"] == "hvnet.netperf.results" and doc["version"] == 2
    jsonschemas.check(documents.SUITE_RESULTS, doc)  # the real run is what docs/reference/json.md publishes
    assert doc["state"] == "complete" and doc["partial"] is False
    meta = doc["meta"]
    assert meta["ovs_version"] and meta["datapath_types"] == ["netdev"]
    assert meta["netperf_version"] == "2.7.0"
    assert len(meta["suite"]["sha256"]) == 64 and "vifs" in meta["policy_snapshot"]
    assert meta["server"]["managed"] and meta["server"]["netserver_pid"]
    assert {s["type"] for s in doc["steps"]} == TYPES
    assert [s["concurrency"] for s in doc["steps"]] == [1, 4] * 5
    for step in doc["steps"]:
        assert len(step["repetitions"]) == 3
        for rep in step["repetitions"]:
            assert rep["aggregate"]["lost"] == 0, rep["aggregate"]["lost_reasons"]
            assert len(rep["instances"]) == step["concurrency"]
            assert rep["aggregate"]["sum"] > 0  # (one of four TCP streams can be starved to 0: a result, not lost)
            assert rep["start_spread_ms"] is not None and rep["start_spread_ms"] < 200
            assert rep["cpu"]["vswitchd_pct_of_core"] > 0 and rep["cpu"]["samples"] >= 2
            assert rep["counters"]["vif1.0"]["rx_packets"] > 0  # the switch's own count of VM1's packets
            out = (base_run / rep["raw"] / "instance-000.out").read_text()
            assert out.startswith("NETPERF_INTERIM_RESULT[0]=") and "\nTHROUGHPUT=" in out  # -D 1, then the result
            series = rep["throughput_series"]  # every step's interim results, summed per second
            assert series and len(series) >= DURATION and all(v is not None and v >= 0 for v in series)
        units = {i["units"] for r in step["repetitions"] for i in r["instances"]}
        assert units == ({"Trans/s"} if step["type"].endswith("RR") else {"10^6bits/s"})
        if step["type"].endswith("RR"):
            assert step["summary"]["latency_p99_us"]["mean"] >= step["summary"]["latency_p50_us"]["mean"] > 0
        if step["type"] == "UDP_STREAM":
            assert step["summary"]["sent_mbps"]["mean"] >= step["summary"]["received_mbps"]["mean"] > 0
        assert step["summary"]["sum"]["ci95"] is not None  # three repetitions: an interval
        # every step names its bottleneck, with evidence; the userspace datapath's thread is the usual one
        assert step["verdict"]["verdict"] in VERDICTS and step["verdict"]["evidence"], step["verdict"]
        assert all(r["cpu"]["hvnet_pct_of_core"] < 5 for r in step["repetitions"])  # the observer's own cost
    lines = (base_run / "results.csv").read_text().splitlines()
    assert lines[0].startswith("step,test,type") and len(lines) == 1 + 10 * 3
    # the netserver hvnet started is gone, and no netperf is left behind
    assert not netperf_pids(lab)
    print(f"quick: TCP_STREAM c1 {doc['steps'][0]['summary']['sum']['mean']:.0f} Mbit/s, "
          f"TCP_RR c1 {doc['steps'][4]['summary']['sum']['mean']:.0f} trans/s")  # fmt: skip


def test_report_regenerates_tables_and_plots(base_run: Path) -> None:
    res = run_hvnet("suite", "report", str(base_run))
    assert res.returncode == 0, res.stderr
    out = res.stdout
    assert "avg throughput (Mbit/s)" in out and "avg transaction rate (trans/s)" in out
    assert "lost (of started)" in out and "concurrent instances" in out and "ovs-vswitchd (% of a core)" in out
    assert "hvnet's own CPU (% of a core)" in out and "bottleneck at 1: " in out
    pngs = sorted((base_run / "plots").glob("*.png"))
    tests = ["tcp-stream", "udp-stream", "tcp-rr", "tcp-crr", "udp-rr"]
    # each test's figures and its ovs-vswitchd threads' CPU
    assert sorted(p.stem for p in pngs) == sorted(tests + [f"{t}-threads" for t in tests])
    assert all(p.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" for p in pngs)
    page = base_run.parent / "quick.html"  # the same run as one page: its tables and a plot per test, inline
    res = run_hvnet("suite", "report", str(base_run), "--html", str(page))
    assert res.returncode == 0 and res.stdout.strip() == f"report: {page}", res.stderr
    html = page.read_text()
    assert html.count("<svg") == 5 and "avg transaction rate (trans/s)" in html and "netserver started by hvnet" in html
    listed = run_hvnet("suite", "list", "--runs", str(base_run.parent), "--json")
    assert any(r["run"] == str(base_run) for r in json.loads(listed.stdout)["runs"])


def test_report_exports_the_streams_for_flent(base_run: Path) -> None:
    """Every stream step's repetitions as flent files with their per-second series, read by flent's reader."""
    resultset = pytest.importorskip("flent.resultset")
    res = run_hvnet("suite", "report", str(base_run), "--format", "flent")
    assert res.returncode == 0, res.stderr
    files = sorted((base_run / "flent").glob("*.flent.gz"))
    assert len(files) == 4 * 3 and len(res.stdout.splitlines()) == 12  # TCP and UDP streams, c1 and c4, 3 reps
    assert "not exported: 2 TCP_RR step(s)" in res.stderr and "no interim results" not in res.stderr
    doc = json.loads((base_run / "results.json").read_text())
    for f in files:
        r = resultset.load(str(f))
        step = next(s for s in doc["steps"] if s["key"] == r.meta("HVNET")["step"])
        rep = step["repetitions"][r.meta("HVNET")["repetition"] - 1]
        (name,) = r.series_names
        assert r.series(name) == rep["throughput_series"] and r.meta("HVNET")["interim_results"] is True


def test_compare_flags_a_slowed_run_and_not_an_identical_one(lab: Lab, base_run: Path, tmp_path: Path) -> None:
    # An identical run is not flagged.  On a shared machine a burst of load can slow one run by
    # half (seen once); such a run is measured again, and an identical run flagged twice fails.
    for attempt in range(2):
        same = tmp_path / f"quick-again-{attempt}"
        # the base's duration, concurrency 1 only: its c4 steps are only in the base
        res = run_suite("quick", "--out", str(same), "--concurrency", "1", "--duration", str(DURATION))
        assert res.returncode == 0, res.stdout + res.stderr
        cmp_same = run_hvnet("suite", "compare", str(base_run), str(same), "--threshold", "50", "--json")
        verdict = json.loads(cmp_same.stdout)
        if cmp_same.returncode == 0 and verdict["regressions"] == 0:
            break
    assert cmp_same.returncode == 0, cmp_same.stdout
    assert verdict["regressions"] == 0

    slowed = tmp_path / "quick-policed"
    res = run_suite(str(DATA / "suite-policed.yaml"), "--out", str(slowed))
    assert res.returncode == 0, res.stdout + res.stderr
    cmp_slow = run_hvnet("suite", "compare", str(base_run), str(slowed), "--threshold", "50")
    assert cmp_slow.returncode == 1, cmp_slow.stdout
    assert "REGRESSION" in cmp_slow.stdout and "tcp-stream/default/m10000/c1" in cmp_slow.stdout
    rows = json.loads(run_hvnet("suite", "compare", str(base_run), str(slowed), "--threshold", "50", "--json").stdout)
    flagged = {r["key"] for r in rows["rows"] if r["verdict"] == "regression"}
    assert "tcp-stream/default/m10000/c1" in flagged
    assert "udp-stream/default/m1400/c4" in rows["only_in_base"]
    # the suite's policing was restored afterwards
    assert police_rate(lab) is None


def test_stopping_the_netserver_mid_suite_gives_lost_instances(lab: Lab, tmp_path: Path) -> None:
    out = tmp_path / "long"
    p = subprocess.Popen([*HVNET, "suite", "run", str(DATA / "suite-long.yaml"), "--out", str(out)], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        pid = None
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                doc = json.loads((out / "results.json").read_text())
            except (OSError, ValueError):
                doc = {}
            steps = doc.get("steps", [])
            if steps and len(steps[0]["repetitions"]) >= 2:
                pid = doc["meta"]["server"]["netserver_pid"]
                break
            time.sleep(0.05)
        assert pid, "the run never got going"
        os.kill(pid, signal.SIGKILL)  # the netserver hvnet started; its children finish their tests
        stdout, stderr = p.communicate(timeout=120)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 0, stdout + stderr  # lost instances are a result, not a failure
    doc = json.loads((out / "results.json").read_text())
    reps = doc["steps"][0]["repetitions"]
    assert reps[0]["aggregate"]["lost"] == 0
    last = reps[-1]["aggregate"]
    assert last["lost"] == 2 and all("establish control" in r for r in last["lost_reasons"]), last
    assert any("netserver" in n and "not running" in n for n in reps[-1]["notes"])
    assert "lost at 2:" in stdout and "establish control" in stdout
    lost = doc["steps"][0]["verdict"]["lost"]  # attributed, with its evidence
    assert lost["instances"] == sum(r["aggregate"]["lost"] for r in reps), lost  # every repetition's
    assert lost["verdict"] in VERDICTS and lost["evidence"], lost
    assert "lost at 2 attributed to " in stdout
    assert not netperf_pids(lab)


@pytest.mark.parametrize(("sig", "reason"), [(signal.SIGINT, "Ctrl-C"), (signal.SIGTERM, "SIGTERM")])
def test_interrupt_saves_partial_results_and_restores(lab: Lab, tmp_path: Path, sig: int, reason: str) -> None:
    out = tmp_path / "interrupted"
    p = subprocess.Popen([*HVNET, "suite", "run", str(DATA / "suite-long.yaml"), "--out", str(out)], cwd=ROOT,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if json.loads((out / "results.json").read_text())["steps"][0]["repetitions"]:
                    break
            except (OSError, ValueError, KeyError, IndexError):
                pass
            time.sleep(0.05)
        assert police_rate(lab) == "204800"
        p.send_signal(sig)
        stdout, stderr = p.communicate(timeout=60)
    finally:
        if p.poll() is None:
            p.kill()
    assert p.returncode == 1, stdout + stderr
    doc = json.loads((out / "results.json").read_text())
    assert doc["state"] == "partial" and doc["partial"] is True and reason in doc["partial_reason"]
    assert 1 <= len(doc["steps"][0]["repetitions"]) < 8
    assert "partial" in stdout
    assert police_rate(lab) is None
    assert not netperf_pids(lab)


def test_bad_input_changes_nothing(lab: Lab, tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        "endpoints: {client: VM1, server: VM2}\ntests:\n  - {type: TCP_STREEM}\n  - {type: TCP_RR, concurrency: 0}\n"
    )
    res = run_suite(str(bad), "--out", str(tmp_path / "never"))
    assert res.returncode == 2
    assert f"{bad}:3: tests[0].type: unknown test type 'TCP_STREEM'" in res.stderr
    assert f"{bad}:4: tests[1].concurrency: concurrency must be an integer 1..256" in res.stderr
    assert not (tmp_path / "never").exists()

    unreachable = tmp_path / "unreachable.yaml"
    unreachable.write_text(
        "endpoints: {client: VM1, server: {address: 192.168.0.152}}\ntests: [{type: TCP_RR, duration: 1}]\n"
    )
    res = run_suite(str(unreachable), "--out", str(tmp_path / "u"))
    assert res.returncode == 1
    assert "netserver on 192.168.0.152:12865 cannot be reached from VM1" in res.stderr
    assert "establish control" in res.stderr

    res = run_hvnet("suite", "report", str(tmp_path))
    assert res.returncode == 2 and "is not an hvnet run" in res.stderr
    res = run_hvnet("suite", "run", "quick", "--concurrency", "0")
    assert res.returncode == 2 and "concurrency values are 1..256" in res.stderr
    assert not netperf_pids(lab)
