"""Helpers shared by the lab tests of hypervisors over SSH and of fault drills."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from appliance.lab.sshhost import SshHost
from tests.conftest import HVNET, ROOT


@contextmanager
def xen_ssh_host(name: str, base: Path, index: int, vifs: int) -> Iterator[SshHost]:
    """A lab hypervisor (:class:`SshHost`) with bridge ``xenbr0`` and XenServer VIFs ``vif1.0`` ..
    (MAC ``02:00:00:00:INDEX:0N``, VM ``vm-N``); stopped afterwards, its namespace checked gone."""
    host = SshHost(name, base, index=index)
    host.start()
    try:
        cmds = ["--", "add-br", "xenbr0", "--", "set", "bridge", "xenbr0", "datapath_type=netdev"]
        for i in range(1, vifs + 1):
            cmds += ["--", "add-port", "xenbr0", f"vif{i}.0", "--", "set", "interface", f"vif{i}.0", "type=internal",
                     f"external_ids:attached-mac=02:00:00:00:{index:02d}:0{i}", f"external_ids:xs-vm-uuid=vm-{i}"]  # fmt: skip
        host.switch.vsctl(*cmds)
        yield host
    finally:
        host.stop()
    assert not Path(f"/run/netns/{host.netns}").exists()


def process_state(pid: int) -> str:
    """The process's state letter from /proc (``T`` stopped, ``Z`` zombie), or ``gone``."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(") ", 1)[1][0]
    except OSError:
        return "gone"


def apply_stopped_at(args: list[str], step: str, env: dict[str, str]) -> subprocess.Popen:
    """``hvnet ARGS`` (an apply) started with ``HVNET_STOP_AT=step``, returned once it has stopped there."""
    proc = subprocess.Popen([*HVNET, *args], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, **env, "HVNET_STOP_AT": step})  # fmt: skip
    deadline = time.monotonic() + 30
    while process_state(proc.pid) != "T":
        if proc.poll() is not None or time.monotonic() > deadline:
            out, err = proc.communicate(timeout=5)
            pytest.fail(f"hvnet never stopped at {step}: exit {proc.returncode}\n{out}\n{err}")
        time.sleep(0.02)
    return proc
