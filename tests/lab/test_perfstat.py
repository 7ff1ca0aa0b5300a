"""A suite's perf_stat on the built-in lab: perf stat counts the lab's ovs-vswitchd in every measured repetition.

Software events are counted everywhere; hardware ones are a count on a host that exposes a PMU, and on one that
does not (this project's machines) "not measured" with perf's own <not supported> -- never a number."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from appliance.lab import Lab
from appliance.netperf.define.perfstat import HARDWARE_EVENTS
from appliance.netperf.parse.perfstat import HARDWARE_NOTE
from appliance.netperf.run.perfstat import RAW_NAME
from tests.conftest import ROOT, run_hvnet

pytestmark = pytest.mark.lab

SOFTWARE = ["task-clock", "context-switches", "page-faults"]
HARDWARE = ["cycles", "instructions", "cache-misses"]
SUITE = f"""\
version: 1
name: perf-stat
topology: {ROOT / "vlan-tests" / "topologies" / "seed-2010.yaml"}
endpoints: {{client: VM1, server: VM2}}
perf_stat:
  events: [{", ".join(SOFTWARE + HARDWARE)}]
defaults: {{duration: 2, repetitions: 2, concurrency: [1]}}
tests:
  - {{name: ts, type: TCP_STREAM, message_size: 1400}}
  - {{name: rr, type: TCP_RR, warmup: 1}}
"""


def perf_processes(pid: int) -> list[str]:
    """perf processes attached to ``pid`` (none may outlive a run)."""
    out = subprocess.run(["pgrep", "-a", "-x", "perf"], capture_output=True, text=True, check=False).stdout
    return [line for line in out.splitlines() if f"-p {pid} " in f"{line} "]


def test_perf_stat_counts_the_labs_vswitchd_in_every_repetition(lab: Lab, tmp_path: Path) -> None:
    suite_file = tmp_path / "perf-stat.yaml"
    suite_file.write_text(SUITE)
    out = tmp_path / "run"
    res = run_hvnet("suite", "run", str(suite_file), "--out", str(out), timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    vswitchd = int((lab.run_dir / "ovs-vswitchd.pid").read_text())
    assert perf_processes(vswitchd) == []

    doc = json.loads((out / "results.json").read_text())
    assert doc["state"] == "complete" and len(doc["steps"]) == 2
    for step in doc["steps"]:
        assert len(step["repetitions"]) == 2  # the warm-up is not measured: no record of its own
        for rep in step["repetitions"]:
            got = rep["perf_stat"]
            assert got["target"] == f"ovs-vswitchd (pid {vswitchd}) on this machine"
            assert list(got["events"]) == SOFTWARE + HARDWARE
            assert got["events"]["task-clock"]["count"] > 0 and got["events"]["task-clock"]["unit"] == "msec"
            assert got["events"]["context-switches"]["count"] > 0
            assert got["events"]["page-faults"]["count"] >= 0  # a count (a busy switch may fault no page)
            for event in HARDWARE:
                ev = got["events"][event]
                # a host with counters: a count; without: perf's own reason, and no number
                assert (ev["count"] is not None and ev["count"] > 0) or (
                    ev["count"] is None and ev["not_measured"].startswith("perf: <not supported>")
                ), ev
            counted = all(got["events"][e]["count"] is not None for e in ("cycles", "instructions"))
            assert (got["cpi"] is not None) == counted and (got["cpi"] is None or got["cpi"] > 0)
            # the userspace datapath switches in the main thread (or pmd threads): where the time went
            assert got["threads"] and sum(g.get("task-clock", 0) for g in got["threads"].values()) > 0
            assert "task-clock" in (out / rep["raw"] / RAW_NAME).read_text()

    report = run_hvnet("suite", "report", str(out))
    assert report.returncode == 0, report.stderr
    assert (
        "perf task-clock (msec), ovs-vswitchd" in report.stdout and "perf CPI (cycles ÷ instructions)" in report.stdout
    )
    not_measured = any(
        rep["perf_stat"]["events"][e]["count"] is None
        for s in doc["steps"]
        for rep in s["repetitions"]
        for e in HARDWARE
    )
    assert (HARDWARE_NOTE in report.stdout) == not_measured
    assert set(HARDWARE) <= set(HARDWARE_EVENTS)
