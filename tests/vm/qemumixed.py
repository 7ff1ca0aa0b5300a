"""The mixed lab with QEMU guests (``vlan-tests/topologies/mixed-qemu.yaml``: two namespace guests and two
libvirt/QEMU guests across VLANs 10 and 20), booted once for every module that uses it.

Its guests boot under TCG in about a minute, so the modules that need them (the guest agent's and the lab's own
QEMU tests) share one boot: ``tests/vm/conftest.py`` runs their tests one after the other and takes the lab down
after the last of them, checking that it left no domain, tap device, libvirt file or process behind.
"""

from __future__ import annotations

import os
import subprocess
from contextlib import AbstractContextManager
from pathlib import Path

import pytest

from appliance.lab import Lab
from appliance.lab.vm import libvirtd
from tests.conftest import ROOT
from tests.lab.conftest import lab_up

TOPOLOGY = ROOT / "vlan-tests" / "topologies" / "mixed-qemu.yaml"
VMS = ("VMQ1", "VMQ2")


def virsh(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(["virsh", "-q", "-c", libvirtd.URI, *args], capture_output=True, text=True, timeout=60,
                          check=check)  # fmt: skip


def leftovers() -> dict[str, list[str]]:
    """What a lab with QEMU guests could leave behind, as the host's own tools see it."""
    domains = []
    if libvirtd.reachable():
        domains = [d for d in virsh("list", "--all", "--name", check=False).stdout.split() if d in VMS]
    return {
        "domains": domains,
        "taps": sorted(n for n in os.listdir("/sys/class/net") if n.startswith("vnet")),
        "libvirt files": sorted(
            str(p)
            for d in ("/etc/libvirt/qemu", "/var/log/libvirt/qemu", "/run/libvirt/qemu")
            for p in Path(d).glob("VMQ*")
        ),
        "qemu": subprocess.run(["pgrep", "-f", "guest=VMQ"], capture_output=True, text=True).stdout.split(),
    }


class MixedLab:
    """The shared lab: up at the first test that asks for it, down when :meth:`close` is called."""

    def __init__(self, factory: pytest.TempPathFactory) -> None:
        self.factory = factory
        self._up: AbstractContextManager[Lab] | None = None
        self._lab: Lab | None = None

    def get(self) -> Lab:
        if self._lab is None:
            why = libvirtd.available()
            if why:
                pytest.skip(f"QEMU guests cannot run here: {why}")
            before = leftovers()
            assert not any(before.values()), f"left over before the test: {before}"
            self._up = lab_up(TOPOLOGY, self.factory.mktemp("mixed") / "run")
            self._lab = self._up.__enter__()
        return self._lab

    def close(self) -> None:
        """Down, and nothing left behind (raises when something is)."""
        up, self._up, self._lab = self._up, None, None
        if up is None:
            return
        try:
            up.__exit__(None, None, None)
        finally:
            after = leftovers()
            assert not any(after.values()), f"the lab left {after}"
