"""A case's pinned CPUs survive nothing: a run killed mid-case leaves a ledger, and the next run gives every
thread its own CPUs back -- also a thread started during the case.  Real processes, real taskset, this
machine's scheduler; no switch is involved."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.core.errors import HvnetError
from appliance.core.runner import LocalRunner
from appliance.netperf.define.cpus import CpuPlacement
from appliance.netperf.parse import taskset
from appliance.netperf.run import pinning

ROOT = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="pinning needs two CPUs to be seen")


def affinity(pid: int) -> dict[int, str]:
    out = subprocess.run(["taskset", "-a", "-p", "-c", str(pid)], capture_output=True, text=True, check=True)
    return taskset.affinities(out.stdout)


@pytest.fixture
def worker() -> Iterator[subprocess.Popen[str]]:
    """A process with two threads, standing in for ovs-vswitchd (started and stopped here, by its pid)."""
    code = "import threading,time; threading.Thread(target=time.sleep, args=(60,)).start(); time.sleep(60)"
    proc = subprocess.Popen([sys.executable, "-c", code], text=True)
    try:
        for _ in range(100):
            if len(affinity(proc.pid)) >= 2:
                break
            threading.Event().wait(0.02)
        yield proc
    finally:
        proc.kill()
        proc.wait()


def test_a_run_killed_mid_case_is_settled_by_the_next(tmp_path: Path, worker: subprocess.Popen[str]) -> None:
    before = affinity(worker.pid)
    ledger = tmp_path / pinning.LEDGER
    # the run that pins, killed with SIGKILL while pinned: no exit of its own gives anything back
    killed = subprocess.run([sys.executable, "-c", textwrap.dedent(f"""
        import os, signal
        from pathlib import Path
        from appliance.core.runner import LocalRunner
        from appliance.netperf.define.cpus import CpuPlacement
        from appliance.netperf.run.pinning import Pinning
        p = Pinning(CpuPlacement(vswitchd="0"), [("ovs-vswitchd", LocalRunner(), [{worker.pid}], "0")],
                    print, Path({str(ledger)!r}))
        p.__enter__()
        os.kill(os.getpid(), signal.SIGKILL)
    """)], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)}, check=False)  # fmt: skip
    assert killed.returncode == -signal.SIGKILL
    assert set(affinity(worker.pid).values()) == {"0"}  # left pinned
    assert json.loads(ledger.read_text())["pinned"][0]["pid"] == worker.pid
    (said,) = pinning.settle_left(ledger, LocalRunner(), LocalRunner())
    assert said.startswith(f"cpus: a run that did not finish had left ovs-vswitchd (pid {worker.pid}) pinned")
    assert affinity(worker.pid) == before and not ledger.exists()
    assert pinning.settle_left(ledger, LocalRunner(), LocalRunner()) == []  # settled once


def test_a_ledger_of_a_run_still_running_is_left_alone(tmp_path: Path, worker: subprocess.Popen[str]) -> None:
    ledger = tmp_path / pinning.LEDGER
    problems: list[str] = []
    with pinning.Pinning(CpuPlacement(vswitchd="0"), [("ovs-vswitchd", LocalRunner(), [worker.pid], "0")],
                         problems.append, ledger):  # fmt: skip
        assert pinning.settle_left(ledger, LocalRunner(), LocalRunner()) == []  # its owner (this test) runs
        assert set(affinity(worker.pid).values()) == {"0"} and ledger.exists()
    assert not ledger.exists() and problems == []


def test_a_thread_started_during_the_case_gets_the_main_threads_cpus(tmp_path: Path) -> None:
    code = ("import sys,threading,time\nsys.stdin.readline()\n"
            "threading.Thread(target=time.sleep, args=(60,)).start()\nprint('started', flush=True)\ntime.sleep(60)")  # fmt: skip
    proc = subprocess.Popen([sys.executable, "-c", code], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        before = affinity(proc.pid)
        assert len(before) == 1
        with pinning.Pinning(CpuPlacement(vswitchd="1"), [("ovs-vswitchd", LocalRunner(), [proc.pid], "1")],
                             print, tmp_path / pinning.LEDGER):  # fmt: skip
            assert proc.stdin and proc.stdout
            proc.stdin.write("go\n")
            proc.stdin.flush()
            assert proc.stdout.readline().strip() == "started"  # a new thread, born on the case's CPU
            assert len(affinity(proc.pid)) == 2
        after = affinity(proc.pid)
        assert len(after) == 2 and set(after.values()) == set(before.values())
    finally:
        proc.kill()
        proc.wait()


def test_a_recycled_pid_is_not_touched_and_a_hand_edited_ledger_is_refused(tmp_path: Path) -> None:
    ledger = tmp_path / pinning.LEDGER
    ledger.write_text(
        json.dumps(
            {
                "owner": {"pid": 1, "start": "x"},
                "pinned": [
                    {"label": "ovs-vswitchd", "local": False, "pid": os.getpid(), "start": "1", "threads": {"1": "0"}}
                ],
            }
        )
    )
    (said,) = pinning.settle_left(ledger, LocalRunner(), LocalRunner())
    assert "that process is gone" in said and not ledger.exists()
    ledger.write_text("{not json")
    (said,) = pinning.settle_left(ledger, LocalRunner(), LocalRunner())
    assert said.startswith("cpus: an unreadable record of pinned CPUs was removed") and not ledger.exists()


def test_a_planted_ledger_never_reaches_taskset_with_text_that_is_not_a_cpu_list(
    tmp_path: Path, worker: subprocess.Popen[str]
) -> None:
    before = affinity(worker.pid)
    stat = Path(f"/proc/{worker.pid}/stat").read_text()
    start = stat.rpartition(")")[2].split()[19]
    ledger = tmp_path / pinning.LEDGER
    ledger.write_text(json.dumps({"pinned": [{"label": "[red]x", "local": False, "pid": worker.pid, "start": start,
                                              "threads": {str(worker.pid): "0; touch /tmp/x", "1": "--help"}}]}))  # fmt: skip
    assert pinning.settle_left(ledger, LocalRunner(), LocalRunner()) == []
    assert affinity(worker.pid) == before and not ledger.exists()


def test_a_second_run_pinning_while_the_first_holds_the_ledger_is_refused(
    tmp_path: Path, worker: subprocess.Popen[str]
) -> None:
    ledger = tmp_path / pinning.LEDGER
    stat = Path("/proc/1/stat").read_text()
    ledger.write_text(json.dumps({"owner": {"pid": 1, "start": stat.rpartition(")")[2].split()[19]}, "pinned": []}))
    before = affinity(worker.pid)
    pin = pinning.Pinning(
        CpuPlacement(vswitchd="0"), [("ovs-vswitchd", LocalRunner(), [worker.pid], "0")], print, ledger
    )
    with pytest.raises(HvnetError, match=r"another hvnet run \(pid 1\) has this host's CPUs pinned"):
        pin.__enter__()
    assert affinity(worker.pid) == before  # nothing was pinned
    assert json.loads(ledger.read_text())["owner"]["pid"] == 1  # and its ledger is left as it was


def test_an_unwritable_ledger_is_an_error_before_anything_is_pinned(
    tmp_path: Path, worker: subprocess.Popen[str]
) -> None:
    blocked = tmp_path / "file"
    blocked.write_text("")
    before = affinity(worker.pid)
    pin = pinning.Pinning(CpuPlacement(vswitchd="0"), [("ovs-vswitchd", LocalRunner(), [worker.pid], "0")], print,
                          blocked / "sub" / pinning.LEDGER)  # fmt: skip
    with pytest.raises(HvnetError, match="cannot record the CPUs to give back"):
        pin.__enter__()
    assert affinity(worker.pid) == before
