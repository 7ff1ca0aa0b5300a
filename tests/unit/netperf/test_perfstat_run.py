"""perf stat run for real on a process of this test's own: counts over its window, stopped early by SIGINT with
its counts kept, and "not measured" with the reason when perf, the pid or the process is missing."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.core.ovsdb import DbTarget
from appliance.core.runner import LocalRunner
from appliance.netperf.define.perfstat import PerfStatSpec
from appliance.netperf.run.perfstat import RAW_NAME, PerfStat
from appliance.switch.host import Host

pytestmark = pytest.mark.skipif(shutil.which("perf") is None, reason="perf is not installed (Debian: linux-perf)")

SPEC = PerfStatSpec(("task-clock", "context-switches", "cycles", "instructions"))
BUSY = "import threading\ndef spin():\n    while True: sum(range(1000))\nthreading.Thread(target=spin, daemon=True).start()\nspin()"


class NoPerf(LocalRunner):
    """This machine, as a host where perf is not installed."""

    def which_optional(self, program: str) -> str | None:
        return None if program == "perf" else super().which_optional(program)


def host(runner: LocalRunner | None = None, label: str | None = None) -> Host:
    return Host(DbTarget("unix:/nonexistent/db.sock", "--db"), runner=runner, label=label)


@pytest.fixture
def busy() -> Iterator[int]:
    """A two-thread process that keeps a core busy (stopped by its PID)."""
    p = subprocess.Popen([sys.executable, "-c", BUSY])
    try:
        yield p.pid
    finally:
        p.kill()
        p.wait()


def hardware_ok(ev: dict) -> bool:
    """A hardware event is a count (a host with a PMU) or perf's own <not supported> -- never a made-up number."""
    if ev["count"] is not None:
        return ev["count"] > 0 and "not_measured" not in ev
    return ev["not_measured"].startswith("perf: <not supported>")


def test_counts_a_process_over_its_window(tmp_path: Path, busy: int) -> None:
    perf = PerfStat(host(), busy, SPEC, 0.5, tmp_path / "raw")
    perf.start()
    time.sleep(1.0)  # past perf's own timeout: it ended by itself
    got = perf.stop()
    assert got["target"] == f"ovs-vswitchd (pid {busy}) on this machine" and "stopped_early" not in got
    ev = got["events"]
    assert ev["task-clock"]["unit"] == "msec" and 0 < ev["task-clock"]["count"] < 1500  # at most 0.5 s of 2 cores
    assert hardware_ok(ev["cycles"]) and hardware_ok(ev["instructions"])
    assert (got["cpi"] is None) == (ev["cycles"]["count"] is None or ev["instructions"]["count"] is None)
    assert got["threads"] and all("task-clock" in g for g in got["threads"].values())  # grouped by thread name
    assert "task-clock" in (tmp_path / "raw" / RAW_NAME).read_text()  # perf's own output kept
    assert perf.stop() is got  # idempotent


def test_a_batch_that_ends_first_stops_perf_with_sigint_and_keeps_its_counts(tmp_path: Path, busy: int) -> None:
    perf = PerfStat(host(), busy, SPEC, 60.0, tmp_path)
    perf.start()
    time.sleep(0.5)
    began = time.monotonic()
    got = perf.stop()
    assert time.monotonic() - began < 5.0  # not the 60 s window
    assert got["stopped_early"] is True and got["events"]["task-clock"]["count"] > 0


@pytest.mark.parametrize(
    ("runner", "pid", "reason"),
    [
        (NoPerf(), 1, "perf is not installed on hv1 (Debian: linux-perf; EL: perf)"),
        (None, None, "ovs-vswitchd's pid is not known on hv1 (no pidfile in its run directory)"),
    ],
)
def test_what_cannot_be_measured_says_why(tmp_path: Path, runner, pid, reason: str) -> None:
    perf = PerfStat(host(runner, "hv1"), pid, SPEC, 1.0, tmp_path)
    perf.start()
    got = perf.stop()
    assert got["events"] == {e: {"count": None, "not_measured": reason} for e in SPEC.events}
    assert got["cpi"] is None and got["cpi_not_measured"] == reason


def test_a_process_that_is_gone_is_said(tmp_path: Path) -> None:
    p = subprocess.Popen(["true"])
    p.wait()
    perf = PerfStat(host(), p.pid, SPEC, 1.0, tmp_path)
    perf.start()
    time.sleep(1.0)  # perf gave up by itself
    got = perf.stop()
    assert "stopped_early" not in got
    assert got["events"]["task-clock"] == {
        "count": None,
        "not_measured": f"ovs-vswitchd (pid {p.pid}) is gone on this machine",
    }
