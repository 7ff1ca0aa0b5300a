"""Probe guest benchmark: boot-to-ready time of the probe image, plain QEMU under TCG.

"Ready" is the agent's hello arriving through the multiplexer: the moment
hvnet can run a command in the guest.  Median of three boots, one after
another, with one virtio NIC on QEMU's user-mode network (no host set-up); the
guest's own uptime at hello is shown beside it, which separates QEMU's
start-up from the guest's boot.  The cached-image lookup (what ``lab up``
pays every time) and one command's round trip through gexec are shown too.
"""

from __future__ import annotations

import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from appliance.lab.vm.gexec import gexec_argv  # noqa: E402
from appliance.lab.vm.image import build_image, default_cache_root  # noqa: E402
from tests.vm import plainqemu  # noqa: E402

BOOTS = 3


def bench_boot() -> list[str]:
    if shutil.which("qemu-system-x86_64") is None:
        return ["probe guest boot: not measured (qemu-system-x86_64 is not installed)"]
    image = build_image(default_cache_root())
    lookup = build_image(default_cache_root()).seconds
    ready, uptime, gexec = [], [], []
    with tempfile.TemporaryDirectory(prefix="hvi-bench-") as tmp:
        for i in range(BOOTS):
            g = plainqemu.boot(image, Path(tmp), f"bench{i}", ip="10.0.2.15/24", tap="user")
            try:
                ready.append(g.ready_s)
                uptime.append(g.boot_s)
                start = time.perf_counter()
                subprocess.run(gexec_argv(str(g.sock), ["true"]), check=True, stdin=subprocess.DEVNULL, timeout=60)
                gexec.append(time.perf_counter() - start)
            finally:
                plainqemu.stop(g)
    size = (image.kernel.stat().st_size + image.initrd.stat().st_size) / 1e6
    return [
        f"probe guest, plain QEMU under TCG (median of {BOOTS} boots; image {image.digest[:12]}, {size:.1f} MB)",
        f"  QEMU start -> agent ready     {statistics.median(ready):6.2f} s   "
        f"(all: {', '.join(f'{t:.2f}' for t in ready)})",
        f"  guest uptime at ready         {statistics.median(uptime):6.2f} s",
        f"  cached image lookup           {lookup * 1000:6.0f} ms",
        f"  gexec round trip ('true')     {statistics.median(gexec) * 1000:6.0f} ms",
    ]


RR_TOPOLOGY = """\
name: bench-vm
hypervisor: libvirt
bridges: [{name: brb, datapath_type: netdev}]
guests:
  - {name: NSA, ip: 10.9.0.1/24, tag: 10}
  - {name: NSB, ip: 10.9.0.2/24, tag: 10}
  - {name: VMA, kind: qemu, ip: 10.9.0.11/24, tag: 10}
"""
RR_SECONDS = 5
RR_ROUNDS = 3


def _rr(lab: Any, client: str, server_ip: str) -> float:
    argv = lab.exec_argv(client, ["netperf", "-H", server_ip, "-t", "TCP_RR", "-l", str(RR_SECONDS), "-P", "0",
                                  "--", "-o", "THROUGHPUT"])  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, timeout=RR_SECONDS + 60, check=True).stdout
    return float(out.strip().splitlines()[-1])


def bench_vm_rr() -> list[str]:
    """TCP_RR with a QEMU guest at one end against namespace<->namespace, measured alternately in one run.

    What a TCG guest costs, so nobody reads a VM's figures as the switch's: the same switch, VLAN and
    netperf, only the endpoint differs.
    """
    from appliance.endpoints.topology import load as load_topology
    from appliance.lab import Lab
    from appliance.lab.vm import libvirtd

    why = libvirtd.available()
    if why:
        return [f"QEMU guest TCP_RR: not measured ({why})"]
    with tempfile.TemporaryDirectory(prefix="hvnet-bench-vm-") as tmp:
        topo_file = Path(tmp) / "bench-vm.yaml"
        topo_file.write_text(RR_TOPOLOGY)
        lab = Lab(Path(tmp) / "lab")
        servers: list[subprocess.Popen] = []
        try:
            start = time.perf_counter()
            lab.up(load_topology(topo_file))
            up_s = time.perf_counter() - start
            accel = lab.state.get("accel", {}).get("domain_type", "?")
            for guest in ("NSB", "VMA"):
                servers.append(subprocess.Popen(lab.exec_argv(guest, ["netserver", "-D", "-4"]),
                                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL))  # fmt: skip
            time.sleep(1.0)
            ns_ns, ns_vm, vm_ns = [], [], []
            for _ in range(RR_ROUNDS):
                ns_ns.append(_rr(lab, "NSA", "10.9.0.2"))
                ns_vm.append(_rr(lab, "NSA", "10.9.0.11"))
                vm_ns.append(_rr(lab, "VMA", "10.9.0.2"))
        finally:
            for p in servers:
                p.terminate()
                p.wait(timeout=10)
            lab.down()
    a, b, c = (statistics.median(x) for x in (ns_ns, ns_vm, vm_ns))
    kind = {"qemu": "TCG", "kvm": "KVM"}.get(accel, "an unknown accelerator")
    return [
        f"QEMU guest vs namespace, TCP_RR {RR_SECONDS} s, median of {RR_ROUNDS} alternating rounds (guest under {kind})",
        f"  lab up with one QEMU guest (libvirt define+start, boot, ready)  {up_s:6.1f} s",
        f"  namespace -> namespace            {a:9.0f} trans/s   1.00x",
        f"  namespace -> QEMU guest netserver {b:9.0f} trans/s   {b / a:.2f}x",
        f"  QEMU guest netperf -> namespace   {c:9.0f} trans/s   {c / a:.2f}x",
        "  (the VM rows measure the emulated guest as much as the switch: compare switch changes ns<->ns)",
    ]


if __name__ == "__main__":
    for line in [*bench_boot(), "", *bench_vm_rr()]:
        print(line)
