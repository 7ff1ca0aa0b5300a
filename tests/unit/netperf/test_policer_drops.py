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
