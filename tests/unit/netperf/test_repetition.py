"""A repetition's set-up is undone when one of its parts fails; the pure figures it is recorded with."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any, Optional

import pytest

from appliance.netperf.define import suite
from appliance.netperf.figures import verdict
from appliance.netperf.figures.counters import deltas
from appliance.netperf.run.fragments import CaseState
from appliance.netperf.run.launch import Endpoint
from appliance.netperf.run.repetition import Repetition
from appliance.netperf.run.rig import Rig


class Captures:
    """hvnet's capture service as the runner sees it: what was started and stopped, in order."""

    def __init__(self) -> None:
        self.log: list[tuple[str, str]] = []

    def start(self, port: str, name: str, snaplen: Optional[int], buffer_kib: Optional[int] = None) -> None:
        self.log.append(("start", name))

    def stop(self, name: str) -> dict[str, Any]:
        self.log.append(("stop", name))
        return {"captured": 0, "dropped": 0, "state": "stopped"}


class Switch:
    """A switch whose port counters cannot be read (a reading that raises, not one that says why)."""

    def client_port(self, vif: Optional[str]) -> tuple[Optional[str], Optional[int]]:
        return "br0", 1

    def port_counters(self, bridge: Optional[str]) -> dict[str, Any]:
        raise RuntimeError("ovs-ofctl vanished")


def test_a_part_that_fails_stops_the_captures_already_listening(tmp_path: Path) -> None:
    s = suite.load("capture-completeness-quick")
    step = next(st for st in s.steps() if st.case.capture is not None and len(st.case.capture.guests) == 2)
    captures = Captures()
    rig = Rig(SimpleNamespace(local_runner=None), Endpoint("VM1"), None, "10.0.0.2", 12865, "netperf", "iperf3",
              tmp_path, Switch(), captures)  # type: ignore[arg-type]  # fmt: skip
    case = CaseState(capture_vifs={"MON1": "vif3.0", "MON2": "vif4.0"})
    repetition = Repetition(rig, step, 1, case, None, lambda: None, warmup=False)
    with pytest.raises(RuntimeError, match="vanished"), repetition:
        pytest.fail("the body runs only once every part has started")
    started = [name for what, name in captures.log if what == "start"]
    assert len(started) == 2
    assert [name for what, name in captures.log if what == "stop"] == started  # both stopped; nothing spawned
    assert not (tmp_path / "raw").exists()


def test_counter_deltas_only_where_both_readings_have_the_counter() -> None:
    before = {"vif1.0": {"rx_packets": 10, "tx_packets": None}, "gone": {"rx_packets": 1}}
    after = {"vif1.0": {"rx_packets": 25, "tx_packets": 7}, "new": {"rx_packets": 3}}
    assert deltas(before, after) == {"vif1.0": {"rx_packets": 15}}


@pytest.mark.parametrize(
    ("test_type", "transactions", "noted"),
    [("TCP_CRR", 9_500, True), ("TCP_CRR", 8_000, False), ("TCP_CRR", 12_000, False), ("TCP_RR", 9_500, False)],
)
def test_crr_exhaustion_is_noted_only_near_the_ports_ceiling(test_type: str, transactions: int, noted: bool) -> None:
    notes = verdict.crr_exhaustion(test_type, 10, transactions, 10_000)  # 10 s: the ceiling is the ports themselves
    assert bool(notes) is noted
    assert not verdict.crr_exhaustion(test_type, 10, transactions, None)  # port range not read: nothing to say


def test_a_run_on_another_machine_says_which_cpu_it_still_measures() -> None:
    """A VM host's guests are namespaces inside it: netperf and netserver ran there, so nothing of their CPU is
    this machine's to report; a probe of this machine's against a remote server still has its netperf."""
    from appliance.endpoints.guests import GuestEndpoint
    from appliance.netperf.run.recipe import cpu_left

    def ep(name: str, remote: bool) -> Endpoint:
        return Endpoint.of(GuestEndpoint(name, "netns", "10.0.0.1/24", "02:00:00:00:00:01", "vif1.0",
                                         netns=f"hvl-{name}", remote=remote))  # fmt: skip

    assert cpu_left(ep("VA", True), ep("VB", True)) == "(nor are netperf's and netserver's: they ran there)"
    assert cpu_left(ep("VA", False), ep("VB", True)) == "(the CPU figures are this machine's netperf only)"
    assert cpu_left(ep("VA", False), None) == "(the CPU figures are this machine's netperf only)"
    assert cpu_left(ep("VA", False), ep("VB", False)) == (
        "(the CPU figures are this machine's netperf and netserver only)"
    )
