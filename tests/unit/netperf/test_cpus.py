"""A case's ``cpus:``: its grammar at load time, taskset's output, the pinning and its undo, the report."""

from __future__ import annotations

import subprocess
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from appliance.core.errors import EXIT_USAGE, ConfigError, UsageError
from appliance.netperf.define import cpus, suite
from appliance.netperf.define.cpus import CpuPlacement
from appliance.netperf.parse import taskset
from appliance.netperf.report.text import cpus_note
from appliance.netperf.run import pinning

DATA = Path(__file__).resolve().parents[1] / "data" / "taskset"

SUITE = """\
endpoints: {client: VM1, server: VM2}
cases:
  - name: free
  - name: pinned
    cpus: CPUS
tests: [{type: TCP_RR, duration: 1}]
"""


def load(tmp_path: Path, value: str) -> suite.Suite:
    f = tmp_path / "s.yaml"
    f.write_text(SUITE.replace("CPUS", value))
    return suite.load(f)


def problems(tmp_path: Path, value: str) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        load(tmp_path, value)
    assert exc.value.exit_code == EXIT_USAGE
    return [str(p) for p in exc.value.problems]


def test_a_case_pins_what_it_names(tmp_path: Path) -> None:
    s = load(tmp_path, '{ovs-vswitchd: "0", guests: "1-2,4"}')
    assert s.cases[0].cpus is None
    assert s.cases[1].cpus == CpuPlacement("0", "1-2,4")
    assert s.cases[1].cpus.describe() == "ovs-vswitchd on CPU 0, guests on CPU 1-2,4"
    assert load(tmp_path, "{ovs-vswitchd: 3}").cases[1].cpus == CpuPlacement("3", None)  # a bare integer


@pytest.mark.parametrize(
    ("value", "field"),
    [
        ('{ovs-vswitchd: "0-"}', "cases[1].cpus.ovs-vswitchd"),
        ('{ovs-vswitchd: "3-1"}', "cases[1].cpus.ovs-vswitchd"),  # backwards
        ('{ovs-vswitchd: "4096"}', "cases[1].cpus.ovs-vswitchd"),  # past MAX_CPU
        ('{guests: "0;rm -rf /"}', "cases[1].cpus.guests"),
        ("{guests: [0, 1]}", "cases[1].cpus.guests"),
        ('{ovs-vswitchd: "0", netperf: "1"}', "cases[1].cpus.netperf"),
        ('"0"', "cases[1].cpus"),
        ("{}", "cases[1].cpus"),
    ],
)
def test_a_bad_cpu_list_is_refused_at_its_line(tmp_path: Path, value: str, field: str) -> None:
    out = problems(tmp_path, value)
    assert len(out) == 1 and out[0].startswith(f"{tmp_path / 's.yaml'}:5: {field}: "), out


def test_cpu_lists_in_tasksets_syntax() -> None:
    assert cpus.cpu_set("0") == {0}
    assert cpus.cpu_set("0-2,5") == {0, 1, 2, 5}
    assert cpus.cpu_set(" 1 , 3 ") == {1, 3}
    for bad in ("", "a", "1-", "-1", "2-1", "0x3", "1,,2", f"{cpus.MAX_CPU}", "0-99999"):
        assert cpus.cpu_set(bad) is None, bad


def test_tasksets_per_thread_output_is_read() -> None:
    """Captured from ``taskset -a -p -c PID`` of a four-thread process, one thread already pinned to CPU 1."""
    got = taskset.affinities((DATA / "read-threads.txt").read_text())
    assert got == {803: "0,1", 805: "1", 806: "0,1", 807: "0,1"}
    after = (DATA / "set-threads.txt").read_text()  # ``taskset -a -p -c 0 PID``: current then new, per thread
    assert taskset.affinities(after, "new") == {803: "0", 805: "0", 806: "0", 807: "0"}
    assert taskset.affinities(after)[805] == "1"
    assert taskset.affinities("taskset: failed to get pid 9's affinity: No such process\n") == {}


class FakeTaskset:
    """A host's taskset over threads kept in a dict: reads, sets with -a, restores one thread."""

    def __init__(self, threads: dict[int, str], fail_set: bool = False) -> None:
        self.threads, self.fail_set = dict(threads), fail_set
        self.calls: list[list[str]] = []

    def run(self, argv: list[str], check: bool = True, timeout: float = 0, **_: Any) -> subprocess.CompletedProcess:
        self.calls.append(list(argv))
        assert argv[0] == "taskset" and all(isinstance(a, str) for a in argv)
        if argv[1:3] == ["-a", "-p"] and len(argv) == 5:  # read every thread
            text = "".join(f"pid {t}'s current affinity list: {c}\n" for t, c in self.threads.items())
            return subprocess.CompletedProcess(argv, 0, text, "")
        if argv[1:3] == ["-a", "-p"]:  # set every thread
            if self.fail_set:
                raise KeyboardInterrupt
            for t in self.threads:
                self.threads[t] = argv[4]
            return subprocess.CompletedProcess(argv, 0, "", "")
        self.threads[int(argv[4])] = argv[3]  # -p -c LIST TID: one thread
        return subprocess.CompletedProcess(argv, 0, "", "")

    def exists(self, path: str) -> bool:
        return True


def test_a_case_pins_and_every_thread_gets_its_own_cpus_back() -> None:
    host = FakeTaskset({10: "0,1", 11: "1", 12: "0,1"})
    problems: list[str] = []
    pin = pinning.Pinning(CpuPlacement("0"), [("ovs-vswitchd", host, [10], "0")], problems.append)
    with pytest.raises(RuntimeError), pin as p:
        assert host.threads == {10: "0", 11: "0", 12: "0"}
        back = {"ovs-vswitchd": [{"pid": 10, "threads": 3, "affinity": ["0"]}]}
        assert p.record == {"asked": {"ovs-vswitchd": "0"}, "read_back": back}
        raise RuntimeError("a step failed")
    assert host.threads == {10: "0,1", 11: "1", 12: "0,1"} and problems == []
    assert ["taskset", "-a", "-p", "-c", "0", "10"] in host.calls


def test_an_interrupted_pinning_gives_back_what_it_read() -> None:
    host = FakeTaskset({10: "0,1", 11: "1"}, fail_set=True)
    with (
        pytest.raises(KeyboardInterrupt),
        pinning.Pinning(CpuPlacement("0"), [("ovs-vswitchd", host, [10], "0")], print),
    ):
        pass
    assert host.threads == {10: "0,1", 11: "1"}
    assert host.calls[-2:] == [["taskset", "-p", "-c", "0,1", "10"], ["taskset", "-p", "-c", "1", "11"]]


def _ep(name: str, **kw: Any) -> Any:
    """An endpoint as refusal sees it: a namespace guest of this machine unless ``kw`` says otherwise."""
    return SimpleNamespace(**{"name": name, "remote": False, "in_vm": False, "vm": None, "netns": f"ns-{name}", **kw})


def test_guests_are_pinned_only_where_hvnet_starts_them_on_this_machine(tmp_path: Path) -> None:
    cases = load(tmp_path, '{guests: "0"}').cases
    pinning.refusal(cases, [_ep("VM1"), _ep("VM2"), None])  # namespaces: fine
    for far in (_ep("VM2", in_vm=True), _ep("VM2", remote=True), _ep("VM2", vm="web1")):
        with pytest.raises(UsageError) as exc:
            pinning.refusal(cases, [_ep("VM1"), far])
        assert (
            exc.value.exit_code == EXIT_USAGE and "VM2" in str(exc.value) and "VM or on a remote host" in str(exc.value)
        )
    pinning.refusal(load(tmp_path, '{ovs-vswitchd: "0"}').cases, [_ep("VM2", in_vm=True)])  # the switch alone


def test_a_cpu_that_is_not_online_fails_preflight(tmp_path: Path) -> None:
    cases = load(tmp_path, '{ovs-vswitchd: "0-2", guests: "1"}').cases
    here = SimpleNamespace(which_optional=lambda p: "/usr/bin/taskset", read_text=lambda p: "0-1\n")
    out = pinning.failures(cases, here, here, "host")
    assert out == ["case pinned: cpus.ovs-vswitchd 0-2: CPU 2 is not online on host (online: 0-1)"]
    none = SimpleNamespace(which_optional=lambda p: None, read_text=lambda p: "0-1\n")
    assert len(pinning.failures(cases, none, here, "host")) == 1


def test_the_report_says_what_was_asked_and_what_the_kernel_reported() -> None:
    rec = {"asked": {"ovs-vswitchd": "0", "guests": "1"},
           "read_back": {"ovs-vswitchd": [{"pid": 5, "threads": 9, "affinity": ["0"]}], "guests": []}}  # fmt: skip
    assert cpus_note(rec) == ", ovs-vswitchd on CPU 0 (kernel: 0), guests on CPU 1"
    assert cpus_note(None) == ""


def test_guests_argv_run_under_taskset(tmp_path: Path) -> None:
    from appliance.netperf.run.rig import Rig

    s = load(tmp_path, '{guests: "1"}')
    rig = Rig.__new__(Rig)
    rig.pairs, rig.client, rig.address, rig.port, rig.netperf = [], SimpleNamespace(), "10.0.0.2", 12865, "netperf"
    rig.taskset = "/usr/bin/taskset"  # a path: the launcher execs argv[0] as one
    free, pinned = [st for st in s.steps()]
    assert rig.argvs(free, 1, False)[0][0] == "netperf"
    assert rig.argvs(pinned, 1, False)[0][:4] == ["/usr/bin/taskset", "-c", "1", "netperf"]


def test_a_pinned_case_is_its_own_monitoring_series() -> None:
    """monitoring-cost's sflow-1-pinned is not a second 1-in-1 point of the sFlow line."""
    from appliance.netperf.report.monitoring import monitoring_series
    from appliance.netperf.store.records import StepResult, SuiteResult, Summary

    def step(case: str, sampling: int, pinned: bool = False) -> StepResult:
        m = {"kind": "sflow", "variant": "sFlow", "sampling": sampling, "polling": 30, "header": 128}
        cpus = {"asked": {"ovs-vswitchd": "0"}, "read_back": {}} if pinned else None
        return StepResult(test="t", case=case, monitor=m, cpus=cpus, summary=Summary(repetitions=1))

    doc = SuiteResult(steps=[step("sflow-64", 64), step("sflow-1", 1), step("sflow-1-pinned", 1, pinned=True)])
    _, series = monitoring_series(doc, "t")
    assert {k: [s.case for s in v] for k, v in series.items()} == {
        "sFlow": ["sflow-64", "sflow-1"],
        "sFlow pinned ovs-vswitchd 0": ["sflow-1-pinned"],
    }
