"""Packet-rate suites end to end through ``hvnet suite run`` on the monitors lab (VM1 -> VM2, MON1, MON2):
iperf3 paced at fixed frame sizes, a port mirror, a flow TAP and a group TAP copying VM1's traffic to MON1
(the monitor port's counters), and captures on one and on two mirrored copies (captured ÷ offered).

The shape is asserted, not absolute rates: what arrived is at most what was offered, every copying case's
monitor port was sent copies and the case without copies has no monitor figure at all, and a capture kept
a share of what was offered in (0, 1.05].
"""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.lab import Lab
from tests.conftest import run_hvnet
from tests.lab.conftest import lab_up

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[2]
TOPOLOGY = ROOT / "netperf-suites" / "topologies" / "monitors.yaml"


@pytest.fixture(scope="module")
def lab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with lab_up(TOPOLOGY, tmp_path_factory.mktemp("pktlab") / "run") as the_lab:
        yield the_lab


def iperf3_pids(run: Path) -> list[int]:
    """iperf3 processes whose output goes to this run (the servers log there): none may outlive it."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmd = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
                fds = [os.readlink(f"/proc/{entry}/fd/{fd}") for fd in os.listdir(f"/proc/{entry}/fd")]
            except OSError:
                continue
            if cmd and cmd[0].endswith(b"iperf3") and any(f.startswith(str(run)) for f in fds):
                found.append(int(entry))
    return found


def run_suite(name: str, run: Path, env: dict[str, str] | None = None) -> tuple[dict, float]:
    t0 = time.monotonic()
    res = run_hvnet("suite", "run", name, "--out", str(run), env=env, timeout=180)
    took = time.monotonic() - t0
    assert res.returncode == 0, res.stdout + res.stderr
    assert "Traceback" not in res.stderr
    return json.loads((run / "results.json").read_text()), took


def test_tap_vs_mirror_quick(lab: Lab, tmp_path: Path) -> None:
    doc, took = run_suite("tap-vs-mirror-quick", tmp_path / "run")
    steps = {(s["case"], s["frame_size"]): s for s in doc["steps"]}
    assert list(dict.fromkeys(c for c, _ in steps)) == ["no-copy", "mirror", "tap-flows", "tap-group"]
    assert {f for _, f in steps} == {64, 1518}
    for (case, frame), s in steps.items():
        assert s["summary"]["lost"] == 0, (case, frame, s["summary"]["lost_reasons"])
        assert s["generator"].startswith("iperf3 ") and s["offered"]["pps"] == 20000
        agg = s["repetitions"][0]["aggregate"]
        assert 0 < agg["received_pps"] <= agg["sent_pps"] * 1.001, (case, frame, agg)
        assert 0 < agg["achieved_ratio"] <= 1.05 and 0 < agg["paced_ratio"] <= 1.05, (case, frame, agg)
        assert agg["received_mbps"] == pytest.approx(agg["received_pps"] * frame * 8 / 1e6, rel=1e-3)
        if case == "no-copy":
            assert "monitor_pps" not in agg and s["mirrors"] == []  # nothing copied: no figure, not 0
        else:
            # every datagram VM1 sent was copied to MON1 (the switch's tx counter of MON1's VIF)
            assert agg["monitor_pps"] >= 0.5 * agg["sent_pps"], (case, frame, agg)
            assert agg["monitor_ports"] == 1
    kinds = {c: [m.get("kind") for m in steps[(c, 64)]["mirrors"]] for c in ("mirror", "tap-flows", "tap-group")}
    assert kinds == {"mirror": [None], "tap-flows": ["tap-flows"], "tap-group": ["tap-group"]}
    report = run_hvnet("suite", "report", str(tmp_path / "run")).stdout
    for text in ("udp-pps: cases side by side", "tap-group: monitor pps", "achieved ÷ offered", "TAP (group)"):
        assert text in report, text
    assert (tmp_path / "run" / "plots" / "udp-pps.png").stat().st_size > 0
    assert "frame_size" in (tmp_path / "run" / "results.csv").read_text().splitlines()[0]
    assert iperf3_pids(tmp_path / "run") == []
    side = {s["case"]: s["summary"]["received_pps"]["mean"] for s in doc["steps"] if s["frame_size"] == 64}
    print(f"tap-vs-mirror-quick: {took:.0f} s; 64 B received pps {side}")


def test_capture_completeness_quick(lab: Lab, tmp_path: Path) -> None:
    pcap_dir = tmp_path / "captures"
    doc, took = run_suite("capture-completeness-quick", tmp_path / "run", {"HVNET_PCAP_DIR": str(pcap_dir)})
    ratios = {}
    for s in doc["steps"]:
        assert s["summary"]["lost"] == 0, s["summary"]["lost_reasons"]
        rep = s["repetitions"][0]
        agg = rep["aggregate"]
        want = 2 if s["case"] == "two-copies" else 1
        buffer = 65536 if s["case"] == "one-copy-64mib-buffer" else None
        assert len(rep["captures"]) == want and s["capture"]["guests"] == ["MON1", "MON2"][:want]
        assert s["capture"]["buffer_kib"] == buffer
        for c in rep["captures"]:
            assert c["state"] in ("stopped", "finished") and c["captured"] > 0 and c["dropped"] is not None, c
            assert c["offered"] >= agg["sent_pps"] * 0.5, c  # the mirror selected VM1's datagrams
            # tcpdump accounts for what its port was sent: each packet kept or counted as dropped
            assert c["captured"] + c["dropped"] >= 0.9 * c["sent_to_port"], c
            # the capture's own limits, as tcpdump reported them and as it was asked
            assert c["captured"] + c["dropped_by_kernel"] <= c["received"] <= c["sent_to_port"] + 50, c
            assert c["dropped"] == c["dropped_by_kernel"] + (c["dropped_by_interface"] or 0), c
            assert c["buffer_kib"] == buffer and c["snaplen"] is None, c
            cpu = c["tcpdump_cpu"]
            assert 0 < cpu["seconds"] <= cpu["lifetime_s"] and 0 < c["tcpdump_cpu_pct"] <= 100.5, cpu
        limits = s["capture"]["limits"]
        assert limits["captured"] == sum(c["captured"] for c in rep["captures"]), limits
        assert limits["dropped_by_kernel"] == sum(c["dropped_by_kernel"] for c in rep["captures"]), limits
        assert limits["buffer_kib"] == [buffer] and limits["tcpdump_cpu_pct"] is not None, limits
        assert limits["reading"].startswith(("nothing missing", f"{limits['offered'] - limits['captured']:,} of")), (
            limits
        )
        assert 0 < agg["captured_ratio"] <= agg["captured_port_ratio"] <= 1.05, agg
        ratios[(s["case"], s["frame_size"])] = (agg["captured_ratio"], limits["dropped_by_kernel"], limits["reading"])
    assert list(pcap_dir.iterdir()) == []  # the pcaps went once counted
    report = run_hvnet("suite", "report", str(tmp_path / "run")).stdout
    assert "captured ÷ offered" in report and "two-copies: captured ÷ sent to port" in report
    for text in ("dropped by kernel", "tcpdump % of a core", "capture at 64 B", "65536 KiB"):
        assert text in report, text
    print(f"capture-completeness-quick: {took:.0f} s; captured ÷ offered, kernel drops, reading: {ratios}")
