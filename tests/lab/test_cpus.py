"""A case's ``cpus:`` on the built-in lab: ovs-vswitchd pinned to CPU 0 and netperf/netserver to CPU 1 during
that case, and every ovs-vswitchd thread's own affinity back afterwards (the case without the key changes
nothing)."""

from __future__ import annotations

import json
import textwrap
import threading
import time
from pathlib import Path

import pytest

from appliance.lab import Lab
from tests.conftest import run_hvnet

pytestmark = pytest.mark.lab

SUITE = """\
name: pinned
endpoints: {client: VM1, server: VM2}
cases:
  - name: free
  - name: pinned
    cpus: {ovs-vswitchd: "0", guests: "1"}
tests:
  - {type: TCP_RR, duration: 3, concurrency: 1}
"""


def affinities(pid: int) -> dict[int, str]:
    """Every thread of ``pid`` and its Cpus_allowed_list, from /proc."""
    out: dict[int, str] = {}
    for task in Path(f"/proc/{pid}/task").iterdir():
        try:
            status = (task / "status").read_text()
        except OSError:
            continue  # a thread that ended meanwhile
        line = next(x for x in status.splitlines() if x.startswith("Cpus_allowed_list:"))
        out[int(task.name)] = line.split(":", 1)[1].strip()
    return out


def test_a_pinned_case_pins_ovs_vswitchd_and_gives_every_thread_back(lab: Lab, tmp_path: Path) -> None:
    pid = int((lab.run_dir / "ovs-vswitchd.pid").read_text())
    before = affinities(pid)
    assert before and next(iter(before.values())) != "0", f"the machine has one CPU: nothing to pin: {before}"
    suite = tmp_path / "pinned.yaml"
    suite.write_text(textwrap.dedent(SUITE))
    out = tmp_path / "run"

    seen: list[dict[int, str]] = []  # /proc while the run goes: the pinned case shows every thread on CPU 0
    done = threading.Event()

    def watch() -> None:
        while not done.is_set():
            seen.append(affinities(pid))
            time.sleep(0.1)

    t = threading.Thread(target=watch, daemon=True)
    t.start()
    try:
        res = run_hvnet("suite", "run", str(suite), "--out", str(out), timeout=300)
    finally:
        done.set()
        t.join(5)
    assert res.returncode == 0, res.stdout + res.stderr

    doc = json.loads((out / "results.json").read_text())
    by_case = {s["case"]: s for s in doc["steps"]}
    assert "cpus" not in by_case["free"] or by_case["free"]["cpus"] is None
    cpus = by_case["pinned"]["cpus"]
    assert cpus["asked"] == {"ovs-vswitchd": "0", "guests": "1"}
    (got,) = cpus["read_back"]["ovs-vswitchd"]
    assert got["pid"] == pid and got["threads"] == len(before) and got["affinity"] == ["0"], cpus
    (netserver,) = cpus["read_back"]["guests"]
    assert netserver["pid"] == doc["meta"]["server"]["netserver_pid"] and netserver["affinity"] == ["1"], cpus
    for s in doc["steps"]:  # both cases measured: the pinned netperf ran under taskset as in the free case
        assert s["repetitions"] and all(r["aggregate"]["lost"] == 0 for r in s["repetitions"]), s
    assert any(snap and set(snap.values()) == {"0"} for snap in seen), "never saw ovs-vswitchd on CPU 0 alone"
    assert "case pinned, ovs-vswitchd on CPU 0 (kernel: 0), guests on CPU 1 (kernel: 1)" in res.stdout, res.stdout

    assert not (lab.run_dir / "cpus-pinned.json").exists()  # the ledger of what was pinned goes with the case
    after = affinities(pid)
    assert {tid: after[tid] for tid in before if tid in after} == {tid: before[tid] for tid in before if tid in after}
    assert set(after.values()) == set(before.values())
