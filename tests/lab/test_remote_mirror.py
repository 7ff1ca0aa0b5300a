"""Remote mirroring end to end through ``hvnet suite run remote-mirror-quick`` on the remote-mirror lab:
VM1's traffic to VM2 mirrored over GRE and over ERSPAN to COL, whose VIF (the uplink) is shaped to
100 Mbit/s, offered 50 and 150 Mbit/s.

The shape is asserted, not absolute rates: something arrived over each tunnel, never more than was
mirrored, and above the uplink's rate what arrived flattens at about that rate while what was mirrored
keeps above it.  The lab's tunnel endpoint (br-phy's address, OVS's route through it, COL as a tunnel
neighbour) is checked to be there while the lab is up; the fixture checks it all went with the lab.
"""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.lab import Lab
from tests.conftest import run_hvnet
from tests.lab.conftest import lab_up

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[2]
TOPOLOGY = ROOT / "netperf-suites" / "topologies" / "remote-mirror.yaml"
UPLINK_MBPS = 100.0


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with lab_up(TOPOLOGY, tmp_path_factory.mktemp("remirlab") / "run") as the_lab:
        yield the_lab
    assert "10.93.0.1/" not in subprocess.run(["ip", "-o", "addr"], capture_output=True, text=True).stdout


def test_the_tunnel_endpoint_is_routed_in_ovs(lab: Lab) -> None:
    routes = lab.switch.appctl("ovs-vswitchd", "ovs/route/show")
    assert any("10.93.0.0/24" in line and "br-phy" in line for line in routes.splitlines()), routes
    neigh = lab.switch.appctl("ovs-vswitchd", "tnl/neigh/show")
    col = json.loads((lab.run_dir / "lab.json").read_text())["guests"]
    mac = next(g["mac"] for g in col if g["name"] == "COL")
    assert "10.93.0.2" in neigh and mac in neigh, neigh


def test_remote_mirror_quick(lab: Lab, tmp_path: Path) -> None:
    run = tmp_path / "run"
    t0 = time.monotonic()
    res = run_hvnet("suite", "run", "remote-mirror-quick", "--out", str(run), timeout=180)
    took = time.monotonic() - t0
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    doc = json.loads((run / "results.json").read_text())
    steps = {(s["case"], s["offered"]["value"]): s for s in doc["steps"]}
    assert set(steps) == {("gre", 50), ("gre", 150), ("erspan", 50), ("erspan", 150)}
    figures = {}
    for (case, offered), s in steps.items():
        assert s["summary"]["lost"] == 0, (case, offered, s["summary"]["lost_reasons"])
        assert s["collector_guest"] == "COL" and s["mirrors"][0]["tunnel"]["type"] == case
        rep = s["repetitions"][0]
        agg = rep["aggregate"]
        assert agg["arrived"] > 0 and rep["arrival"]["encapsulation"] == case, (case, offered, rep["arrival"])
        assert 0 < agg["arrived_ratio"] <= 1.05, (case, offered, agg)
        # the mirror selected what VM1 sent (and the little it received)
        assert agg["mirrored_pps"] >= 0.99 * agg["sent_pps"], (case, offered, agg)
        figures[(case, offered)] = (agg["received_mbps"], agg["mirrored_mbps"], agg["arrived_mbps"],
                                    agg["arrived_ratio"])  # fmt: skip
    for case in ("gre", "erspan"):
        _, mirrored, arrived, _ = figures[(case, 150)]
        # well above the uplink: what arrived flattens at its rate, what was mirrored does not
        assert arrived <= 1.15 * UPLINK_MBPS and mirrored > UPLINK_MBPS, (case, figures)
        assert figures[(case, 50)][3] >= 0.9, (case, figures)  # below the uplink's rate nearly all arrived
        assert figures[(case, 150)][3] < 0.85, (case, figures)  # above it, a share was lost
    text = run_hvnet("suite", "report", str(run)).stdout
    for needle in ("arrived ÷ mirrored", "offered: cases side by side", "gre: arrived Mbit/s", "COL's eth0"):
        assert needle in text, needle
    assert "arrived_ratio" in (run / "results.csv").read_text().splitlines()[0]
    print(f"remote-mirror-quick: {took:.0f} s; (received, mirrored, arrived Mbit/s, arrived ÷ mirrored) {figures}")
