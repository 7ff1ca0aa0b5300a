"""Probe ports: set-up and teardown of two probes, on this machine's switch and on a host over SSH.

Two private switches in one run: one on this machine (hvnet drives it through
its socket and runs ``ip``/``ethtool``/``arping`` here), one in a lab host
namespace reached with ``--host`` (the same programs go over the SSH master).
Each repetition adds two probes on a VLAN of a userspace bridge (OVSDB rows
with their marks, namespaces and veths, duplicate-address detection, the
addresses) and removes them again; the two targets alternate so both see the
same machine load.  Duplicate-address detection waits for answers (two ARP
probes, ~2 s) and is most of the set-up: its share is printed too.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import time
from pathlib import Path

from appliance.frontdoor.hosts import build_host
from appliance.lab.sshhost import SshHost
from appliance.lab.switch import Switch
from appliance.probes.spec import ProbeSpec
from appliance.services.probes import ProbeSource
from appliance.switch.host import Host

REPEAT = 5
PROBES = [
    ProbeSpec("B1", "10.99.0.1/24", vlan=10, bridge="br0"),
    ProbeSpec("B2", "10.99.0.2/24", vlan=10, bridge="br0"),
]


def _bridge(sw: Switch) -> None:
    sw.vsctl("--may-exist", "add-br", "br0", "--", "set", "bridge", "br0", "datapath_type=netdev")


def _cycle(host: Host) -> tuple[float, float]:
    src = ProbeSource(host, PROBES, tools=())
    started = time.perf_counter()
    src.up()
    up = time.perf_counter() - started
    started = time.perf_counter()
    src.down()
    return up, time.perf_counter() - started


def bench_probes() -> list[str]:
    if not os.path.exists("/usr/sbin/sshd"):
        return ["probe set-up and teardown: not measured (openssh-server is not installed; make setup installs it)"]
    saved = dict(os.environ)  # the benches after this one run with the environment they were given
    with tempfile.TemporaryDirectory(prefix="hvnet-bench-probes-") as tmp:
        local_sw = Switch(Path(tmp) / "local")
        remote = SshHost("hvpb", Path(tmp), index=7)
        hosts: list[Host] = []
        try:
            local_sw.start()
            _bridge(local_sw)
            remote.start()
            _bridge(remote.switch)
            os.environ.update(remote.client_env)
            os.environ["HVNET_LAB_DIR"] = str(Path(tmp) / "no-lab")
            os.environ["HVNET_STATE_DIR"] = str(Path(tmp) / "state")
            hosts = [build_host(local_sw.remote, discover_lab=False), build_host(ssh_host=remote.name)]
            times: dict[str, list[tuple[float, float]]] = {"local": [], "remote": []}
            for host in hosts:
                _cycle(host)  # warm-up: tool lookups, the SSH master, page cache
            for _ in range(REPEAT):
                for name, host in zip(("local", "remote"), hosts):
                    times[name].append(_cycle(host))
        finally:
            for h in hosts:
                h.close()
            remote.stop()
            # the netdev bridge's tap outlives ovs-vswitchd unless the bridge is deleted first
            local_sw.vsctl("--if-exists", "del-br", "br0", check=False)
            local_sw.stop()
            os.environ.clear()
            os.environ.update(saved)
    lines = [f"probe ports: 2 probes added (set-up incl. DAD) and removed (median of {REPEAT}, alternated, one run)"]
    for name, label in (("local", "this machine's switch  "), ("remote", "--host H (over SSH)    ")):
        up = statistics.median(t[0] for t in times[name])
        down = statistics.median(t[1] for t in times[name])
        lines.append(f"  {label} set-up {up * 1000:8.1f} ms   teardown {down * 1000:7.1f} ms")
    lines.append("  (set-up waits ~2 s for duplicate-address detection's answers: two ARP probes per address, "
                 "the probes checked in parallel)")  # fmt: skip
    return lines


if __name__ == "__main__":
    for line in bench_probes():
        print(line)
