"""Endpoints on a lab hypervisor over SSH (no Python there): one control shell per group starts every job.

A one-host lab (``hv2``: a namespace with its own OVS and sshd whose PATH has no
Python) carries two guests, C and S, on its bridge.  Their namespaces are driven
once through this machine's fast path and once through hv2's sshd: netperf
batches released together through the remote FIFO, stamped by hv2's clock,
read back and parsed by the omni parser; 70 instances on one channel; hostile
arguments arrive as data; a SIGKILLed hvnet leaves no job and no work dir; a
suite run by the engine with its guests on the remote host completes.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.core.ovsdb import Connection
from appliance.endpoints import Group, Job, launcher_for, spread_ms, wait_all
from appliance.endpoints.guests import GuestEndpoint
from appliance.frontdoor.hosts import build_host
from appliance.lab import Lab
from appliance.netperf.define.suite import load as load_suite
from appliance.netperf.define.tests import Test as NetperfTest
from appliance.netperf.parse import omni
from appliance.netperf.run.recipe import Runner
from appliance.switch.host import Host
from tests.conftest import ROOT
from tests.lab.conftest import lab_up

pytestmark = pytest.mark.skipif(not os.path.exists("/usr/sbin/sshd"), reason="openssh-server (make setup installs it)")

TOPOLOGY = """\
name: endpoints-one-host
hypervisor: xenserver
hosts: [{name: hv2}]
bridges: [{name: xenbr0, datapath_type: netdev}]
guests:
  - {name: C, host: hv2, ip: 10.96.0.1/24, tag: 5}
  - {name: S, host: hv2, ip: 10.96.0.2/24, tag: 5}
"""
PORT = 12871


class OnHost:
    """The lab's guests, as a probe source on ``--host`` would hand them: namespaces of the driven host."""

    def __init__(self, lab: Lab) -> None:
        self.lab = lab

    def require(self, topology: object, names: list[str]) -> dict[str, GuestEndpoint]:
        return {n: dataclasses.replace(g, remote=True) for n, g in self.lab.require(topology, names).items()}  # type: ignore[arg-type]


@pytest.fixture(scope="module")
def hv2(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Lab, Host]]:
    tmp = tmp_path_factory.mktemp("endpoints")
    (tmp / "topo.yaml").write_text(TOPOLOGY)
    with lab_up(tmp / "topo.yaml", tmp / "run") as lab:
        host = build_host(ssh_host="hv2")
        host.paths = dataclasses.replace(host.paths, endpoints_dir=tmp / "endpoints")
        try:
            yield lab, host
        finally:
            host.close()


def _ns(lab: Lab, guest: str) -> str:
    return lab.ns_of(guest)


def _ours_in(lab: Lab) -> set[int]:
    """Processes an endpoint shell started in the guests' namespaces (held or running: its mark is in
    their environment)."""
    pids = set()
    for guest in ("C", "S"):
        out = subprocess.run(["ip", "netns", "pids", _ns(lab, guest)], capture_output=True, text=True, check=False)
        for pid in out.stdout.split():
            try:
                if b"HVNET_ENDPOINT=" in Path(f"/proc/{pid}/environ").read_bytes():
                    pids.add(int(pid))
            except OSError:
                continue
    return pids


def _rr_test(n: int, seconds: int) -> NetperfTest:
    return NetperfTest(name="rr", type="TCP_RR", duration=seconds, concurrency=(n,), request_size=1, response_size=1)


def _rr_jobs(lab: Lab, n: int, seconds: int) -> list[Job]:
    argv = omni.argv("netperf", _rr_test(n, seconds), "10.96.0.2", PORT, message_size=None, seconds=seconds,
                     confidence=False, interim_s=None)  # fmt: skip
    return [Job(f"i{i:03d}", tuple(argv), netns=_ns(lab, "C")) for i in range(n)]


def _netserver(lab: Lab, host: Host) -> Group:
    group = launcher_for(host).group("netserver")
    group.start([Job("netserver", ("netserver", "-D", "-4", "-p", str(PORT)), netns=_ns(lab, "S"))], hold=False)
    time.sleep(0.5)
    return group


@pytest.mark.parametrize("count,seconds", [(4, 2), (70, 3)])
def test_a_batch_over_ssh_is_released_together_stamped_by_the_host_and_read_back(
    hv2: tuple[Lab, Host], tmp_path: Path, count: int, seconds: int
) -> None:
    lab, host = hv2
    server = _netserver(lab, host)
    try:
        group = launcher_for(host).group("rr")
        assert group.clock == "realtime" and group.dir.startswith(str(host.paths.endpoints_dir))
        jobs = _rr_jobs(lab, count, seconds)
        group.start(jobs)
        assert group.ready == count and len(group.pids()) == count
        assert all(_pid_in_ns(pid, _ns(lab, "C")) for pid in group.pids().values())
        assert group.release() is not None
        results = wait_all(group, [j.name for j in jobs], seconds + 30, lambda: False, quiet_s=seconds)
        group.fetch(tmp_path)
        spread = spread_ms(group)
        group.close()
    finally:
        server.close()
    assert all(r.returncode == 0 and r.started_ns is not None and r.cpu_s is None for r in results.values()), results
    # the stamps are hv2's clock, after the release; the spread is within one clock
    assert all(r.started_ns >= group.released_ns for r in results.values())  # type: ignore[operator]
    assert spread is not None and spread < 200, spread  # the target: under 2% of a 10 s test
    test = _rr_test(count, seconds)
    parsed = [omni.parse(i, test, (tmp_path / f"{j.name}.out").read_text(), (tmp_path / f"{j.name}.err").read_text(),
                         0, None) for i, j in enumerate(jobs)]  # fmt: skip
    assert all(p.ok and p.throughput and p.throughput > 0 for p in parsed), parsed[:2]
    assert not _ours_in(lab)
    assert not list(host.paths.endpoints_dir.iterdir())  # every work dir removed


def _pid_in_ns(pid: int, ns: str) -> bool:
    return os.stat(f"/proc/{pid}/ns/net").st_ino == os.stat(f"/run/netns/{ns}").st_ino


def test_arguments_reach_the_program_as_data_and_names_are_checked(hv2: tuple[Lab, Host], tmp_path: Path) -> None:
    lab, host = hv2
    hostile = "a b;$(touch /tmp/hvnet-pwned) `id` 'q\" \\ \n*"
    group = launcher_for(host).group("quote")
    group.start([Job("echo", ("printf", "%s", hostile), netns=_ns(lab, "C")),
                 Job("env", ("sh", "-c", 'printf %s "$X"'), env={"X": hostile})], hold=False)  # fmt: skip
    wait_all(group, ["echo", "env"], 10, lambda: False)
    assert group.read_text("echo.out") == hostile and group.read_text("env.out") == hostile
    group.close()
    assert not os.path.exists("/tmp/hvnet-pwned")
    from appliance.core.errors import UsageError

    for bad in ("../x", "a b", "$(id)", "", ".hidden"):
        with pytest.raises(UsageError):
            Job(bad, ("true",))


def test_a_killed_hvnet_leaves_no_job_and_no_work_dir(hv2: tuple[Lab, Host], tmp_path: Path) -> None:
    """SIGKILL: ssh's stdin closes, the control shell reads end-of-file, stops its jobs, removes its dir."""
    lab, host = hv2
    base = host.paths.endpoints_dir
    code = textwrap.dedent(f"""
        import dataclasses, sys, time
        from pathlib import Path
        from appliance.endpoints import Job, launcher_for
        from appliance.frontdoor.hosts import build_host
        host = build_host(ssh_host="hv2")
        host.paths = dataclasses.replace(host.paths, endpoints_dir=Path({str(base)!r}))
        held = launcher_for(host).group("held")
        held.start([Job(f"h{{i}}", ("sleep", "300"), netns={_ns(lab, "C")!r}) for i in range(3)])
        running = launcher_for(host).group("running")
        running.start([Job(f"r{{i}}", ("sleep", "301"), netns={_ns(lab, "C")!r}) for i in range(3)], hold=False)
        print("started", flush=True)
        time.sleep(600)
    """)
    proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(ROOT)})  # fmt: skip
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == "started"
        deadline = time.monotonic() + 10
        while len(_ours_in(lab)) < 6 and time.monotonic() < deadline:  # 'ip netns exec' may not have entered yet
            time.sleep(0.1)
        assert len(_ours_in(lab)) == 6 and len(list(base.iterdir())) == 2
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        deadline = time.monotonic() + 15
        while (_ours_in(lab) or list(base.iterdir())) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not _ours_in(lab) and not list(base.iterdir())
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_suite_with_its_guests_on_the_remote_host_runs_over_ssh(hv2: tuple[Lab, Host], tmp_path: Path) -> None:
    """The engine's runner: netserver and instances on hv2 through one shell each, figures as locally."""
    lab, host = hv2
    suite_file = tmp_path / "rr.yaml"
    topo = tmp_path / "topo.yaml"
    topo.write_text(TOPOLOGY)
    suite_file.write_text(
        textwrap.dedent(f"""\
        name: remote-rr
        topology: {topo}
        endpoints: {{client: C, server: S}}
        netserver_port: {PORT + 1}
        defaults: {{duration: 2, repetitions: 1}}
        tests:
          - {{name: rr, type: TCP_RR, request_size: 1, response_size: 1, concurrency: [3]}}
          - {{name: stream, type: TCP_STREAM, message_size: 10000, concurrency: [1]}}
    """)
    )
    from appliance.switch.reader import COLUMNS

    with host.connect(COLUMNS) as conn:
        assert isinstance(conn, Connection)
        doc = Runner(load_suite(suite_file), host=host, guests=OnHost(lab), conn=conn, out_dir=tmp_path / "run").run()
    assert doc.state == "complete", doc.error
    for step in doc.steps:
        (rep,) = step.repetitions
        assert rep.aggregate.ok == step.concurrency and rep.aggregate.lost == 0, rep.aggregate
        assert rep.start_spread_ms is not None and rep.start_spread_ms < 40
        assert rep.cpu["netperf_pct_of_core"] is None  # not ours to read there: unknown, not 0
    assert doc.meta.server.netserver_pid is not None
    assert not _ours_in(lab) and not list(host.paths.endpoints_dir.iterdir())


def test_a_shell_killed_on_the_host_is_swept_by_the_next_group_there(hv2: tuple[Lab, Host]) -> None:
    """The control shell itself SIGKILLed (its job runs on, its dir stays): the next group stops and removes them."""
    lab, host = hv2
    orphan = launcher_for(host).group("orphan")
    orphan.start([Job("run", ("sleep", "302"), netns=_ns(lab, "C"))], hold=False)
    shell = int((Path(orphan.dir) / "shell").read_text().split()[0])  # the lab host's files are this machine's
    os.kill(shell, signal.SIGKILL)
    deadline = time.monotonic() + 10
    while (not _ours_in(lab) or Path(f"/proc/{shell}").exists()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert len(_ours_in(lab)) == 1 and Path(orphan.dir).is_dir()  # left behind, as a crash would
    nxt = launcher_for(host).group("next")
    nxt.start([Job("t", ("true",))], hold=False)
    try:
        assert not Path(orphan.dir).exists() and not _ours_in(lab)
    finally:
        nxt.close()
        orphan.close()  # its channel is gone: nothing to do, no error
    assert not list(host.paths.endpoints_dir.iterdir())
