"""A lab with a kernel-datapath VM host, as the tests/vm modules bring it up through the real CLI (``hvnet lab up``),
and nothing of it left on this machine after ``hvnet lab down``.

One lab at a time (the VM's management tap, hvk1, is the same in every lab): :class:`Labs` keeps the one up and
hands it to each module that asks for the same topology, so the modules on :data:`GUESTS_TOPOLOGY` boot it once
between them; each test there undoes what it changed (policy cleared, mirrors deleted), so their order does not
matter.  A module on another topology takes the lab down and brings its own up.

Needs root (taps, namespaces, debootstrap for a first image build) and QEMU; run under
``flock /tmp/hvnet-lab.lock``.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterable, Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest

from appliance.lab import Lab
from appliance.lab.vmhost import labhost
from appliance.lab.vmhost.boot import VmHost
from tests.conftest import run_hvnet


def vm(run_dir: Path, host: str) -> VmHost:
    """The lab's first VM host as its files describe it (the one every tests/vm lab has)."""
    return VmHost(host, run_dir / "hosts", labhost.FIRST_INDEX)


HOST = "kvm1"
# The guests the modules on one VM host share: VM1 and VM2 (the names the shipped suites and their setup policies
# use) on VLAN 10, MON alone on VLAN 30 (a monitor: it hears only what a mirror or a TAP copies to it), VC on VLAN 20
GUESTS_TOPOLOGY = f"""\
name: vmhost-guests
hosts:
  - name: {HOST}
    kind: vm
bridges:
  - name: xenbr0
guests:
  - {{name: VM1, ip: 10.77.0.1/24, tag: 10}}
  - {{name: VM2, ip: 10.77.0.2/24, tag: 10}}
  - {{name: MON, ip: 10.77.0.9/24, tag: 30}}
  - {{name: VC, ip: 10.77.0.3/24, tag: 20}}
"""


def in_vm(
    lab: Lab, host: str, command: str, timeout: float = 60, check: bool = True
) -> subprocess.CompletedProcess[str]:
    """``command`` (one shell line, quoted by the caller) in the VM host, over its management link."""
    return vm(lab.run_dir, host).ssh(command, timeout=timeout, check=check)


def leftovers(run_dir: Path, host: str, pid: int | None, namespaces: Iterable[str] = ()) -> list[str]:
    """What of the lab this machine still has: the VM's QEMU, its management and trunk taps, a trunk's end here
    (``eth0-*``), the ``namespaces`` named, the run directory."""
    found = []
    if (
        pid is not None
        and Path(f"/proc/{pid}").exists()
        and b"qemu-system" in Path(f"/proc/{pid}/cmdline").read_bytes()
    ):
        found.append(f"QEMU pid {pid}")
    tap = vm(run_dir, host).link.tap
    found += [f"interface {t}" for t in os.listdir("/sys/class/net")
              if t == tap or t.startswith(f"{tap}t") or t.startswith("eth0-")]  # fmt: skip
    netns = set(os.listdir("/run/netns")) if os.path.isdir("/run/netns") else set()
    found += [f"namespace {n}" for n in sorted(netns & set(namespaces))]
    if run_dir.exists():
        found.append(f"directory {run_dir}: {sorted(p.name for p in run_dir.rglob('*'))[:10]}")
    return found


def require_qemu_and_root() -> None:
    if shutil.which("qemu-system-x86_64") is None or shutil.which("qemu-img") is None:
        pytest.skip("QEMU is not installed (packages qemu-system-x86 and qemu-utils; .ci/setup-host installs them)")
    if os.geteuid() != 0:
        pytest.fail("the VM host lab tests need root (taps, namespaces, debootstrap)")


@contextmanager
def lab_up(base: Path, topology: str, host: str, *, said: Iterable[str] = (),
           namespaces: Iterable[str] = ()) -> Iterator[Lab]:  # fmt: skip
    """``hvnet lab up`` on ``topology`` (YAML text) in ``base``; its output must say the VM booted (and each of
    ``said``); ``lab down`` afterwards, whatever happened, must leave nothing (``namespaces``: those of the
    topology's namespaced hosts and guests on this machine)."""
    require_qemu_and_root()
    topo = base / "topology.yaml"
    topo.write_text(topology)
    run_dir = base / "run"
    env = {"HVNET_LAB_DIR": str(run_dir)}
    pid = None
    try:
        started = time.monotonic()
        up = run_hvnet("lab", "up", "--topology", str(topo), env=env, timeout=900)
        print(f"\nlab up: {time.monotonic() - started:.1f} s\n{up.stdout}")
        assert up.returncode == 0, up.stdout + up.stderr
        assert re.search(rf"booted VM host {host} \(\w+, 4 vCPUs, \d+ MB; .*\): boot to SSH \d+\.\d s", up.stdout)
        for line in said:
            assert line in up.stdout, up.stdout
        pid = vm(run_dir, host).qemu_pid()
        assert pid is not None
        yield Lab(run_dir)
    finally:
        down = run_hvnet("lab", "down", env=env, timeout=120)
        assert down.returncode == 0, down.stdout + down.stderr
        assert leftovers(run_dir, host, pid, namespaces) == []


def answers(lab: Lab, host: str) -> bool:
    """Whether the lab's VM host still answers over SSH (a test may have wrecked it)."""
    try:
        return in_vm(lab, host, "true", timeout=30, check=False).returncode == 0
    except subprocess.TimeoutExpired:
        return False


class Labs:
    """The VM-host lab that is up, kept for the next module that asks for the same topology (a session's).

    A lab whose VM no longer answers over SSH is not handed on: it is taken down and a new one brought up, so one
    test that wrecks the VM fails alone."""

    def __init__(self, tmp: pytest.TempPathFactory) -> None:
        self.tmp = tmp
        self.key: tuple[str, str] | None = None
        self.lab: Lab | None = None
        self.stack = ExitStack()

    def get(self, topology: str, host: str, *, said: Iterable[str] = (), namespaces: Iterable[str] = ()) -> Lab:
        """The lab up on ``topology`` (see :func:`lab_up`), brought up unless it already is."""
        lab = self.lab if self.key == (topology, host) else None
        if lab is not None and answers(lab, host):
            return lab
        self.close()
        self.lab = self.stack.enter_context(lab_up(self.tmp.mktemp("vmlab"), topology, host, said=said,
                                                   namespaces=namespaces))  # fmt: skip
        self.key = (topology, host)
        return self.lab

    @contextmanager
    def last(self, topology: str, host: str) -> Iterator[Lab]:
        """The lab on ``topology`` for a test that ends it (stops its VM, takes it down): no test gets it after;
        it is taken down (again) and checked to be gone when the test is done."""
        lab = self.get(topology, host)
        stack, self.stack, self.lab, self.key = self.stack, ExitStack(), None, None
        with stack:
            yield lab

    def close(self) -> None:
        """The lab that is up, taken down (and checked to be gone); nothing when none is."""
        stack, self.stack, self.lab, self.key = self.stack, ExitStack(), None, None
        stack.close()


def isolation_check(lab: Lab, host: str, scenario: Path, out: Path) -> tuple[subprocess.CompletedProcess, dict]:
    """``hvnet --host HOST --guests lab isolation check``, both methods; its exit and its JSON. The lab's hosts
    stand for real hypervisors: a measurement there says --guests lab, as one on a real host would have to."""
    started = time.monotonic()
    res = run_hvnet("--host", host, "--guests", "lab", "isolation", "check", str(scenario), "--method", "both",
                    "--json", "--out", str(out), env={"HVNET_LAB_DIR": str(lab.run_dir)}, timeout=400)  # fmt: skip
    print(f"\n{scenario.name}: {time.monotonic() - started:.1f} s")
    try:
        return res, json.loads(res.stdout)
    except ValueError:
        pytest.fail(f"not JSON (exit {res.returncode}): {res.stdout[-2000:]} {res.stderr[-2000:]}")


def cells(rows: list[dict]) -> dict[tuple[str, str], str]:
    """An isolation matrix's rows as {(listener, sender): value}."""
    return {(r["listener"], r["sender"]): r["value"] for r in rows}
