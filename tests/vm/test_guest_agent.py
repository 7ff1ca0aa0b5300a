"""Programs inside a QEMU guest through libvirt's guest agent (``virsh qemu-agent-command``), for real:
the lab's guests run Debian's qemu-ga on their ``org.qemu.guest_agent.0`` channel.

The mixed lab (``vlan-tests/topologies/mixed-qemu.yaml``, shared with ``test_lab_vm``); the tests that stop or
restrict qemu-ga do it in VMQ2 and restart it through the lab's own channel agent.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.core.errors import CommandTimedOut, HvnetError
from appliance.core.runner import LocalRunner
from appliance.endpoints import spread_ms, wait_all
from appliance.endpoints.agent import (
    AgentChannel,
    AgentLauncher,
    AgentRunner,
    AgentUnavailable,
    DomainNotFound,
    boot_id,
)
from appliance.endpoints.agentshell import EL_HINT
from appliance.endpoints.jobs import Job
from appliance.lab import Lab
from appliance.lab.vm import libvirtd
from tests.conftest import ROOT

pytestmark = pytest.mark.vm

HOSTILE = ["a;b", "$(touch /tmp/pwned)", "`id`", 'it\'s "quoted"', "two\nlines", "\x1b[2J", "-n", "*", ""]
KILL_QGA = 'for p in /proc/[0-9]*; do [ "$(cat $p/comm 2>/dev/null)" = qemu-ga ] && kill ${p#/proc/}; done; true'
QGA = ["qemu-ga", "-m", "virtio-serial", "-t", "/run/qemu-ga"]


def channel(domain: str, timeout: float = 10.0) -> AgentChannel:
    return AgentChannel(LocalRunner(), domain, uri=libvirtd.URI, timeout=timeout)


def wait_agent(ch: AgentChannel, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while True:
        try:
            ch.command("guest-ping", timeout=2)
            return
        except AgentUnavailable:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.5)


@pytest.fixture(scope="module")
def vm(mixed: Lab) -> Iterator[AgentRunner]:
    ch = channel("VMQ1")
    wait_agent(ch)
    yield AgentRunner(ch)


def alive(runner: AgentRunner, pids: list[int]) -> list[int]:
    """Of ``pids``, those that are processes (not zombies) in the guest."""
    script = 'for p; do s=$(cut -d")" -f2 /proc/$p/stat 2>/dev/null) && case $s in " Z"*) ;; *) echo $p ;; esac; done; exit 0'
    out = runner.run(["sh", "-c", script, "alive", *map(str, pids)]).stdout
    return [int(w) for w in out.split()]


def test_run_exit_codes_output_and_hostile_argv(vm: AgentRunner) -> None:
    res = vm.run(["sh", "-c", "echo out; echo err >&2; exit 7"], check=False)
    assert (res.returncode, res.stdout, res.stderr) == (7, "out\n", "err\n")
    with pytest.raises(HvnetError, match="exit 7"):
        vm.run(["sh", "-c", "exit 7"])
    res = vm.run(["printf", "%s|", *HOSTILE])
    assert res.stdout == "|".join(HOSTILE) + "|"
    assert not vm.exists("/tmp/pwned")
    assert vm.run(["cat"], input_text="line\x1b\n").stdout == "line\x1b\n"
    assert vm.run(["sh", "-c", 'echo "$X"'], env={"X": "a b;c"}).stdout == "a b;c\n"
    assert vm.run(["sh", "-c", "kill -TERM $$"], check=False).returncode == -15
    assert vm.which("sh").startswith("/")
    assert vm.which_optional("bash") == "/usr/bin/bash"
    assert vm.which_optional("no-such-program;id") is None and vm.which_optional("-x") is None
    assert vm.read_text("/proc/sys/kernel/hostname") == "VMQ1\n"
    assert vm.read_text("/no/such/file") is None
    assert vm.exists("/run/qemu-ga") and not vm.exists("/no/such/file")
    bid = boot_id(vm)
    assert bid and len(bid) == 36
    with pytest.raises(HvnetError, match="not through the guest agent"):
        vm.popen(["true"])


def test_run_timeout_kills_the_program(vm: AgentRunner) -> None:
    with pytest.raises(CommandTimedOut):
        vm.run(["sleep", "77"], timeout=1.0)
    out = vm.run(["sh", "-c", "for f in /proc/[0-9]*/cmdline; do tr '\\0' ' ' <$f; echo; done"]).stdout
    assert "sleep 77" not in out


def test_group_barrier_release_outputs_signal_close(vm: AgentRunner, tmp_path: Path) -> None:
    launcher = AgentLauncher(vm.channel, records=tmp_path / "records")
    assert launcher.sweep() == []
    group = launcher.group("g")
    jobs = [Job(f"s{i:02d}", ("sleep", "1")) for i in range(10)]
    jobs += [Job("fail", ("sh", "-c", "echo to-out; echo to-err >&2; exit 3")),
             Job("echo", ("printf", "%s\\n", *HOSTILE)),
             Job("long", ("sleep", "100"))]  # fmt: skip
    try:
        t0 = time.monotonic()
        group.start(jobs, hold=True)
        started_s = time.monotonic() - t0
        assert group.ready == len(jobs)
        record = json.loads(launcher.record.read_text())
        assert group.id in record["groups"] and "VMQ1" not in launcher.record.name
        pids = group.pids()
        assert len(pids) == len(jobs)
        # held: nothing ran yet (no stamp, no output)
        assert group.read_text("s00.stamp") is None
        assert group.release() is not None and group.offset_ns is not None
        results = wait_all(group, [j.name for j in jobs if j.name != "long"], 20.0, lambda: False)
        assert all(results[f"s{i:02d}"].returncode == 0 for i in range(10))
        assert results["fail"].returncode == 3 and results["echo"].returncode == 0
        spread = spread_ms(group)
        print(f"start {started_s:.2f} s, spread of {len(results)} starts {spread:.1f} ms, "
              f"offset {group.offset_ns / 1e6:.0f} ms")  # fmt: skip
        assert spread is not None and spread < 200
        assert min(r.started_ns for r in results.values() if r.started_ns) >= group.released_ns
        assert alive(vm, [pids["long"]]) == [pids["long"]]
        group.signal(["long"], "TERM")
        deadline = time.monotonic() + 10
        while results["long"].returncode is None and time.monotonic() < deadline:
            group.poll()
            time.sleep(0.2)
        assert results["long"].returncode == 128 + signal.SIGTERM
        group.fetch(tmp_path / "out")
        assert (tmp_path / "out" / "fail.out").read_text() == "to-out\n"
        assert (tmp_path / "out" / "fail.err").read_text() == "to-err\n"
        assert (tmp_path / "out" / "echo.out").read_text() == "".join(f"{w}\n" for w in HOSTILE)
    finally:
        group.close()
    group.close()  # idempotent
    assert not vm.exists(group.dir)
    assert alive(vm, list(pids.values())) == []
    assert not launcher.record.exists()


def test_group_close_stops_what_runs(vm: AgentRunner, tmp_path: Path) -> None:
    launcher = AgentLauncher(vm.channel, records=tmp_path)
    group = launcher.group("c")
    group.start([Job(f"l{i}", ("sleep", "100")) for i in range(3)], hold=False)
    pids = list(group.pids().values())
    assert len(alive(vm, pids)) == 3
    group.close()
    assert alive(vm, pids) == [] and not vm.exists(group.dir)


def test_the_vm_ends_a_group_whose_lease_ran_out(vm: AgentRunner, tmp_path: Path) -> None:
    group = AgentLauncher(vm.channel, records=tmp_path, lease_s=2).group("lease")
    group.start([Job("held", ("sleep", "100")), Job("run", ("sleep", "100"))], hold=True)
    pids = list(group.pids().values())
    assert len(alive(vm, pids)) == 2
    deadline = time.monotonic() + 20
    while (alive(vm, pids) or vm.exists(group.dir)) and time.monotonic() < deadline:
        time.sleep(1)
    assert alive(vm, pids) == [] and not vm.exists(group.dir)
    group.close()


CHILD = """
import json, sys, time
from pathlib import Path
from appliance.core.runner import LocalRunner
from appliance.endpoints.agent import AgentChannel, AgentLauncher
from appliance.endpoints.jobs import Job
ch = AgentChannel(LocalRunner(), "VMQ1", uri=sys.argv[2])
g = AgentLauncher(ch, records=Path(sys.argv[1])).group("killed")
g.start([Job(f"k{i}", ("sleep", "300")) for i in range(3)], hold=False)
print(json.dumps({"dir": g.dir, "pids": g.pids()}), flush=True)
time.sleep(600)
"""


def test_sweep_after_hvnet_was_killed(vm: AgentRunner, tmp_path: Path) -> None:
    records = tmp_path / "records"
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen([sys.executable, "-c", CHILD, str(records), libvirtd.URI], stdout=subprocess.PIPE,
                             text=True, env=env)  # fmt: skip
    try:
        line = child.stdout.readline() if child.stdout else ""
    finally:
        child.send_signal(signal.SIGKILL)
        child.wait()
    info = json.loads(line)
    pids = list(info["pids"].values())
    assert len(alive(vm, pids)) == 3 and vm.exists(info["dir"])
    done = AgentLauncher(vm.channel, records=records).sweep()
    assert f"removed {info['dir']}" in done and all(f"stopped {p}" in done for p in pids)
    assert alive(vm, pids) == [] and not vm.exists(info["dir"])
    assert not list(records.glob("*.json"))
    assert AgentLauncher(vm.channel, records=records).sweep() == []


@pytest.mark.usefixtures("mixed")  # libvirtd up, as the lab runs it: its own "no such domain"
def test_absent_domain_is_a_clear_error() -> None:
    for name in ("no-such-domain", "-x\x1b[2J"):
        with pytest.raises(DomainNotFound) as err:
            channel(name).command("guest-ping")
        print("domain not found:", repr(err.value.message))
        assert repr(name) in str(err.value) and "\x1b" not in str(err.value)
        assert err.value.exit_code == 3


def restart_qga(lab: Lab, *flags: str) -> None:
    """(Re)start VMQ2's qemu-ga through the lab's own channel agent, with ``flags``."""
    script = (KILL_QGA + '; sleep 0.3; '
              'for f in /sys/class/virtio-ports/*/name; do [ "$(cat $f)" = org.qemu.guest_agent.0 ] && '
              'p=${f%/name} && GA=/dev/${p##*/}; done; '
              'setsid "$@" -p "$GA" </dev/null >/run/qemu-ga.log 2>&1 &')  # fmt: skip
    lab.guest_exec("VMQ2", ["sh", "-c", script, "qga", *QGA, *flags], check=True)


def test_stopped_or_restricted_agent_is_a_clear_error(mixed: Lab) -> None:
    ch = channel("VMQ2", timeout=5)
    wait_agent(ch)
    try:
        mixed.guest_exec("VMQ2", ["sh", "-c", KILL_QGA], check=True)
        time.sleep(1)
        left = mixed.guest_exec("VMQ2", ["sh", "-c", "cat /proc/[0-9]*/comm"]).stdout.split()
        assert "qemu-ga" not in left
        with pytest.raises(AgentUnavailable) as err:
            AgentRunner(ch).run(["true"])
        print("agent stopped:", repr(err.value.message))
        assert err.value.exit_code == 4 and "qemu-guest-agent" in (err.value.hint or "")
        restart_qga(mixed, "-b", "guest-exec,guest-file-open")
        wait_agent(ch)
        for call in (lambda: AgentRunner(ch).run(["true"]), lambda: AgentRunner(ch).read_text("/etc/hosts")):
            with pytest.raises(AgentUnavailable) as err:
                call()
            print("disabled:", repr(err.value.message))
            assert err.value.hint == EL_HINT
    finally:
        restart_qga(mixed)
        wait_agent(ch)
    assert AgentRunner(ch).run(["true"]).returncode == 0
