"""Two client -> server pairs in one step through ``hvnet suite run`` on the shared-receiver lab (three guests
on one VLAN): VM1 -> VM3 and VM2 -> VM3 at once (``shared-receiver-quick``, TCP_STREAM 2 s, concurrency 1
per pair).

Asserted: the step ran two instances, one from each client, started together (one batch: their start
spread is that of one batch); each instance names its pair; each pair's figures are its own instance's
and the pairs' sums add up to the step's total; one netserver served both; the report shows both pairs
under the total; nothing outlives the run.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.lab import Lab
from tests.conftest import ROOT, run_hvnet
from tests.lab.conftest import lab_up

pytestmark = pytest.mark.lab

TOPOLOGY = ROOT / "netperf-suites" / "topologies" / "shared-receiver.yaml"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with lab_up(TOPOLOGY, tmp_path_factory.mktemp("pairslab") / "run") as the_lab:
        yield the_lab


def netperf_pids(lab: Lab) -> set[int]:
    """netperf/netserver processes in the three guests (none may outlive a run)."""
    pids: set[int] = set()
    for guest in ("VM1", "VM2", "VM3"):
        out = subprocess.run(["ip", "netns", "pids", lab.ns_of(guest)], capture_output=True, text=True, check=False)
        for pid in out.stdout.split():
            try:
                if Path(f"/proc/{pid}/comm").read_text().strip() in ("netperf", "netserver"):
                    pids.add(int(pid))
            except OSError:
                continue
    return pids


def test_two_senders_into_one_receiver(lab: Lab, tmp_path: Path) -> None:
    run = tmp_path / "run"
    res = run_hvnet("suite", "run", "shared-receiver-quick", "--out", str(run), timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    doc = json.loads((run / "results.json").read_text())
    (step,) = doc["steps"]
    assert step["key"] == "tcp-stream/default/m10000/c1" and step["concurrency"] == 1
    assert step["pairs"] == [{"client": "VM1", "server": "VM3"}, {"client": "VM2", "server": "VM3"}]
    (rep,) = step["repetitions"]
    agg = rep["aggregate"]
    assert agg["instances"] == 2 and agg["lost"] == 0, agg
    assert [i["pair"] for i in rep["instances"]] == [0, 1]
    assert all(i["throughput"] > 0 for i in rep["instances"])
    assert rep["start_spread_ms"] is not None and rep["start_spread_ms"] < 500  # one batch, released together
    first, second = agg["pairs"]
    for k, (pair, inst) in enumerate(zip(agg["pairs"], rep["instances"])):
        assert (pair["client"], pair["server"]) == (f"VM{k + 1}", "VM3")
        assert pair["instances"] == 1 and pair["lost"] == 0 and pair["sum"] == pytest.approx(inst["throughput"])
    assert first["sum"] + second["sum"] == pytest.approx(agg["sum"], abs=0.01)
    summary = step["summary"]["pairs"]
    assert [p["sum"]["mean"] for p in summary] == [first["sum"], second["sum"]]
    # one netserver in VM3 served both pairs: it is the one the run recorded
    assert doc["meta"]["server"]["guest"] == "VM3" and doc["meta"]["server"]["netserver_pid"]
    assert "netserver_pids" not in doc["meta"]["server"]  # no other server guest
    assert not (run / "netserver-VM3.log").exists()
    report = run_hvnet("suite", "report", str(run)).stdout
    assert "2 pairs, each running a step's concurrency, all at once: VM1 -> VM3, VM2 -> VM3" in report
    for pair in ("VM1 -> VM3", "VM2 -> VM3"):
        assert f"pair {pair}: total (Mbit/s)" in report and f"pair {pair}: lost" in report
    assert netperf_pids(lab) == set()
    print(f"shared-receiver-quick: VM1 {first['sum']:.0f} + VM2 {second['sum']:.0f} = {agg['sum']:.0f} Mbit/s")


def test_pairs_into_two_servers_get_a_netserver_each(lab: Lab, tmp_path: Path) -> None:
    """VM1 -> VM2 and VM3 -> VM1: two server guests, each its own netserver, both stopped after the run."""
    suite = tmp_path / "two-servers.yaml"
    suite.write_text(f"topology: {TOPOLOGY}\nendpoints:\n  pairs:\n    - {{client: VM1, server: VM2}}\n"
                     "    - {client: VM3, server: VM1}\n"
                     "tests: [{type: TCP_RR, duration: 2, concurrency: 2}]\n")  # fmt: skip
    run = tmp_path / "run"
    res = run_hvnet("suite", "run", str(suite), "--out", str(run), timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads((run / "results.json").read_text())
    (step,) = doc["steps"]
    (rep,) = step["repetitions"]
    assert [i["pair"] for i in rep["instances"]] == [0, 0, 1, 1] and rep["aggregate"]["lost"] == 0
    server = doc["meta"]["server"]  # both netservers hvnet started are on record, each by its guest
    assert server["guest"] == "VM2" and server["netserver_pid"] and list(server["netserver_pids"]) == ["VM1"]
    assert server["netserver_pids"]["VM1"] != server["netserver_pid"]
    for pair in rep["aggregate"]["pairs"]:
        assert pair["instances"] == 2 and pair["lost"] == 0 and pair["sum"] > 0, pair
    assert (run / "netserver-VM1.log").exists()  # the second server guest's netserver, beside the first's
    assert netperf_pids(lab) == set()
