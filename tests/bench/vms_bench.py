"""Real VMs as suite endpoints: fidelity of each VM source against the lab's own, start spread, release skew.

Fidelity: the same two guests measured through the lab's own source and
through a VM source, single-instance TCP_RR and TCP_STREAM runs in pairs
back to back (AB then BA, so a drift of the machine favours neither); the
figure is median(VM source) ÷ median(lab source) with a 95% bootstrap
interval over the pairs (:func:`netperf_bench.fidelity_interval`).

* ``vms-ssh``: the lab's namespace guests, each with an sshd on a management
  link of its own (``lab up --vm-access``): the lab's fast local launcher
  against one shell per step in the guest over SSH.
* ``vms-agent``: the lab's QEMU guests running Debian's qemu-guest-agent:
  the lab's own channel agent against libvirt's guest agent.

Spread: one step of 10 concurrent TCP_RR instances for 10 s through each
source, the spread of their start stamps in the VM's own clock (target: 2%
of the test).  Release skew: one group held at the barrier in each of two
VMs, released one after the other as a run of two senders would be; the
skew is the time between their start stamps, each brought to this machine's
clock by its group's offset at the release.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from netperf_bench import _suite, fidelity_interval  # noqa: E402

from appliance.endpoints.topology import load as load_topology  # noqa: E402
from appliance.lab import Lab  # noqa: E402

HVNET = [sys.executable, "-m", "appliance"]
SECONDS = 3
RR_PAIRS = 10
STREAM_PAIRS = 5
TARGET = 0.95

NETNS_TOPOLOGY = """\
name: bench-vms
bridges: [{name: brvmb}]
guests:
  - {name: C, ip: 10.78.0.1/24, tag: 7, domid: 211}
  - {name: S, ip: 10.78.0.2/24, tag: 7, domid: 212}
"""


def _run(suite: Path, out: Path, env: dict[str, str], source: list[str]) -> dict[str, Any]:
    res = subprocess.run([*HVNET, *source, "suite", "run", str(suite), "--out", str(out)], capture_output=True,
                         text=True, env=env, cwd=ROOT, timeout=600, check=False)  # fmt: skip
    if res.returncode != 0:
        raise RuntimeError(f"hvnet {' '.join(source)} suite run failed: {res.stderr.strip()[-600:]}")
    return json.loads((out / "results.json").read_text())


def fidelity(tmp: Path, env: dict[str, str], vm: list[str], label: str) -> list[str]:
    """Pairs of runs through the lab's source and the VM source; each type's median ratio and interval."""
    lines = []
    for ttype, unit, pairs in (("TCP_RR", "trans/s", RR_PAIRS), ("TCP_STREAM", "Mbit/s", STREAM_PAIRS)):
        suite = _suite(tmp, ttype.lower().replace("_", "-"), ttype, SECONDS, 1)
        lab, via = [], []
        for i in range(pairs):
            for side in "ab" if i % 2 == 0 else "ba":
                source = ["--guests", "lab"] if side == "a" else vm
                doc = _run(suite, tmp / f"{label}-{ttype}-{i}-{side}", env, source)
                (lab if side == "a" else via).append(doc["steps"][0]["summary"]["sum"]["mean"])
        fid, lo, hi = fidelity_interval(via, lab)
        met = "MET" if fid >= TARGET else "NOT MET"
        lines += [
            f"  {ttype:<10} lab source {statistics.median(lab):10.1f} {unit:<8} {label} {statistics.median(via):10.1f}"
            f" {unit}",
            f"    ratio (median {label} ÷ median lab over {pairs} pairs) {fid:.3f}, 95% interval {lo:.3f}..{hi:.3f}"
            f" (target >= {TARGET}: {met})",
            f"    lab:   {' '.join(f'{x:.0f}' for x in lab)}",
            f"    {label}: {' '.join(f'{x:.0f}' for x in via)}",
        ]
    return lines


def spread(tmp: Path, env: dict[str, str], sources: list[tuple[str, list[str]]]) -> list[str]:
    """10 concurrent TCP_RR instances for 10 s through each source: their start spread."""
    suite = _suite(tmp, "ten", "TCP_RR", 10, 10)
    lines = []
    for label, source in sources:
        rep = _run(suite, tmp / f"ten-{label}", env, source)["steps"][0]["repetitions"][0]
        ms = rep["start_spread_ms"]
        pct = ms / 10_000 * 100
        lines.append(f"  10 x TCP_RR for 10 s, {label:<10} start spread {ms:7.1f} ms = {pct:.2f}% of the test "
                     f"(target < 2%: {'MET' if pct < 2 else 'NOT MET'}; lost {rep['aggregate']['lost']})")  # fmt: skip
    return lines


def release_skew(launchers: list[Any], rounds: int = 5) -> str:
    """Two groups, one per VM, each one ``sleep`` held at the barrier, released one after the other: the
    median time between their starts in this machine's clock."""
    from appliance.endpoints import Job

    skews = []
    for r in range(rounds):
        groups = [launcher.group(f"skew{r}") for launcher in launchers]
        try:
            for g in groups:
                g.start([Job("s", ("sleep", "1"))])
            for g in groups:
                g.release()
            for g in groups:
                g.fetch(Path(tempfile.mkdtemp(prefix="hvnet-skew-")))
            local = [g.results["s"].started_ns - (g.offset_ns or 0) for g in groups]
            if all(x is not None for x in local):
                skews.append(abs(local[1] - local[0]) / 1e6)
        finally:
            for g in groups:
                g.close()
    if not skews:
        return "  release skew between two VMs: not measured (no start stamps)"
    return (f"  release skew between two VMs (this machine's clock, median of {len(skews)}): "
            f"{statistics.median(skews):.1f} ms (all: {', '.join(f'{s:.1f}' for s in skews)})")  # fmt: skip


@contextmanager
def _lab(topology: str, prefix: str) -> Iterator[tuple[Lab, Path, dict[str, str]]]:
    """A lab of ``topology`` whose guests are reachable as VMs (``--vm-access``), gone afterwards."""
    with tempfile.TemporaryDirectory(prefix=prefix) as tmp_s:
        tmp = Path(tmp_s)
        (tmp / "topo.yaml").write_text(topology)
        lab = Lab(tmp / "lab")
        env = {**os.environ, "HVNET_LAB_DIR": str(tmp / "lab")}
        try:
            lab.up(load_topology(tmp / "topo.yaml"), vm_access=True)
            yield lab, tmp, env
        finally:
            lab.down()


QEMU_TOPOLOGY = """\
name: bench-vms-agent
hypervisor: libvirt
bridges: [{name: brvma, datapath_type: netdev}]
guests:
  - {name: C, kind: qemu, ip: 10.77.0.1/24, tag: 7}
  - {name: S, kind: qemu, ip: 10.77.0.2/24, tag: 7}
"""


def _agent_launchers(lab: Lab) -> list[Any]:
    from appliance.core.runner import LocalRunner
    from appliance.endpoints.agent import AgentChannel, AgentLauncher
    from appliance.lab.vm import libvirtd

    records = Path(tempfile.mkdtemp(prefix="hvnet-bench-records-"))
    return [AgentLauncher(AgentChannel(LocalRunner(), name, uri=libvirtd.URI), records=records) for name in ("C", "S")]


def bench_vms_agent() -> list[str]:
    from appliance.lab.vm import libvirtd

    why = libvirtd.available()
    if why:
        return [f"real VMs through the guest agent: not measured ({why})"]
    with _lab(QEMU_TOPOLOGY, "hvnet-bench-vms-agent-") as (lab, tmp, env):
        vm = ["--vms", str(lab.run_dir / "vms.yaml")]
        lines = fidelity(tmp, env, vm, "agent")
        lines += spread(tmp, env, [("lab", ["--guests", "lab"]), ("agent", vm)])
        lines.append(release_skew(_agent_launchers(lab)))
        kind = {"qemu": "TCG", "kvm": "KVM"}.get(lab.state.get("accel", {}).get("domain_type", ""), "?")
    return [f"real VMs through libvirt's guest agent: two QEMU guests under {kind}, the lab's channel vs "
            f"qemu-ga ({SECONDS} s runs)", *lines]  # fmt: skip


def _ssh_launchers(lab: Lab) -> tuple[list[Any], list[Any]]:
    from pathlib import PurePosixPath

    from appliance.core import vmlist
    from appliance.core.ssh import SshOptions, SshRunner, SshSession, SshTarget
    from appliance.endpoints.remote import RemoteLauncher

    inv = vmlist.load(lab.run_dir / "vms.yaml")
    sessions, launchers = [], []
    for name in ("C", "S"):
        e = inv.get(name)
        assert e is not None and e.ssh is not None
        s = SshSession(SshTarget(e.ssh, e.user, e.port), SshOptions(Path(e.known_hosts or ""), Path(e.identity or ""),
                                                                    Path(e.ssh_config or "")))  # fmt: skip
        sessions.append(s)
        launchers.append(RemoteLauncher(SshRunner(s), PurePosixPath("/var/tmp/hvnet-endpoints"), label=name))
    return sessions, launchers


def bench_vms_ssh() -> list[str]:
    with _lab(NETNS_TOPOLOGY, "hvnet-bench-vms-") as (lab, tmp, env):
        vm = ["--vms", str(lab.run_dir / "vms.yaml")]
        lines = fidelity(tmp, env, vm, "ssh")
        lines += spread(tmp, env, [("lab", ["--guests", "lab"]), ("ssh", vm)])
        sessions, launchers = _ssh_launchers(lab)
        try:
            lines.append(release_skew(launchers))
        finally:
            for s in sessions:
                s.close()
    return [f"real VMs over SSH: the lab's namespace guests, lab source vs SSH source ({SECONDS} s runs)", *lines]


if __name__ == "__main__":
    for line in bench_vms_agent() if sys.argv[1:2] == ["agent"] else bench_vms_ssh():
        print(line, flush=True)
