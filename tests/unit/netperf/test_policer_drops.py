"""The policer's drops a repetition records: tc's police counter for tc policing, read from real output of the
lab's kernel-datapath VM host; nothing (never a zero) where the mechanism keeps no count here."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from appliance.netperf.run.rig import SwitchReadings
from appliance.netperf.store.records import Policing

DATA = Path(__file__).resolve().parents[1] / "data"


class TcRunner:
    """A host whose ``tc`` shows the captured police action on vif1.0's ingress and no htb."""

    local = False

    def __init__(self, tc: bool = True) -> None:
        self.tc = tc
        self.ran: list[list[str]] = []

    def which_optional(self, name: str) -> str | None:
        return f"/usr/sbin/{name}" if self.tc else None

    def run(self, argv: list[str], **_: Any) -> subprocess.CompletedProcess[str]:
        self.ran.append(list(argv))
        if argv[:3] == ["tc", "-s", "filter"] and argv[-2:] == ["vif1.0", "ingress"]:
            return subprocess.CompletedProcess(argv, 0, (DATA / "tc-filter-matchall-police-after.txt").read_text())
        if argv[:3] == ["tc", "-s", "filter"]:
            return subprocess.CompletedProcess(argv, 1, "", "Cannot find device")
        return subprocess.CompletedProcess(argv, 0, "")


def readings(runner: TcRunner) -> SwitchReadings:
    engine = SimpleNamespace(host=SimpleNamespace(runner=runner))
    return SwitchReadings(engine, None, lambda _: None)  # type: ignore[arg-type]


def test_tc_policing_records_the_police_actions_drop_count() -> None:
    runner = TcRunner()
    pol = Policing(port="vif1.0", rate_bits_per_s=10240000, burst_bits=1024000, mechanism="tc", verified=True)
    assert readings(runner).policer_drops(pol, "xenbr0", 2) == 1105
    assert ["tc", "-s", "filter", "show", "dev", "vif1.0", "ingress"] in runner.ran


def test_no_count_is_none_not_zero() -> None:
    tc = Policing(port="vif9.0", rate_bits_per_s=10240000, burst_bits=1024000, mechanism="tc", verified=True)
    assert readings(TcRunner()).policer_drops(tc, "xenbr0", 9) is None  # tc could not read that interface
    assert readings(TcRunner(tc=False)).policer_drops(tc, "xenbr0", 9) is None  # no tc on the host
    meter = Policing(port="vif1.0", rate_bits_per_s=10240000, burst_bits=1024000, mechanism="meter", verified=True)
    assert readings(TcRunner()).policer_drops(meter, "xenbr0", 2) is None  # no OpenFlow access: not read


class Of:
    """An OpenFlow reader whose counters must not be asked for on a switch too old for ``--names``."""

    def __init__(self) -> None:
        self.asked = 0

    def available(self, bridge: str) -> bool:
        return True

    def port_counters(self, bridge: str) -> dict[str, Any]:
        self.asked += 1
        return {}


def test_port_counters_are_not_measured_on_ovs_2_5_and_that_is_said_once() -> None:
    said: list[str] = []
    snapshots = []
    engine = SimpleNamespace(snapshot=lambda: snapshots.append(1) or SimpleNamespace(ovs_version="2.5.3"))
    of = Of()
    rig = SwitchReadings(engine, of, said.append)  # type: ignore[arg-type]
    assert rig.port_counters("xenbr0") == {} and rig.port_counters("xenbr0") == {}
    assert of.asked == 0 and len(snapshots) == 1
    assert said == [
        "port counters not measured: Open vSwitch 2.5.3 has no ovs-ofctl --names/--no-names "
        "(the form hvnet reads flows and ports in): it needs 2.8 or later"
    ]
    new = SwitchReadings(SimpleNamespace(snapshot=lambda: SimpleNamespace(ovs_version="2.17.7")), of, said.append)  # type: ignore[arg-type]
    assert new.port_counters("xenbr0") == {} and of.asked == 1 and len(said) == 1
