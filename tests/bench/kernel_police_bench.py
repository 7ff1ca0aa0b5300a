"""Policing fidelity, kernel datapath beside userspace: achieved ÷ configured at the 2010 study's rate.

The 2010 study policed each VIF at 10240 kbit/s with a 1024 kbit burst.  In one run this section brings up
the lab's kernel-datapath VM host (QEMU; under TCG on a machine without KVM) and measures netperf
TCP_STREAM (one flow, then four at once: a single flow backs off at every drop of a small bucket) and
UDP_STREAM (``-m 1400``: one frame per datagram, what netserver received) from VM1 to VM2
through each way hvnet enforces a rate there -- tc's police action (what ``policing: auto`` chooses where
the probe finds tc works), an OpenFlow meter on the kernel datapath, and htb egress shaping into VM2 --
then the built-in userspace lab (netdev datapath, where tc policing cannot work and hvnet uses meters),
measured the same way.

Each figure is printed twice: against the rate, and against the rate plus what the burst adds over the
test (the bucket starts full: ``burst / seconds``; 1024 kbit over 15 s is 0.07 Mbit/s, under 1%), so
nothing of the burst is hidden in the fidelity.  The policer's own drop count is printed beside it.
Targets from the issue: TCP >= 0.80 of the rate, UDP received within 5% of it.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from appliance.lab import Lab  # noqa: E402
from appliance.lab.vmhost import labhost  # noqa: E402
from appliance.lab.vmhost.boot import VmHost  # noqa: E402
from appliance.policy.apply import openflow, tcpolice  # noqa: E402

HVNET = [sys.executable, "-m", "appliance"]
RATE_KBPS = 10240
BURST_KBIT = 1024
SECONDS = 15
PORT = 12867
VM_HOST = "kvm1"
VM_TOPOLOGY = f"""\
name: bench-kernel-police
hosts:
  - name: {VM_HOST}
    kind: vm
bridges:
  - name: xenbr0
guests:
  - {{name: VM1, ip: 10.81.0.1/24, tag: 10}}
  - {{name: VM2, ip: 10.81.0.2/24, tag: 10}}
"""
USERSPACE_TOPOLOGY = ROOT / "tests" / "lab" / "data" / "policy-traffic.yaml"  # VM1 10.80.0.1 -> VM2 10.80.0.2

Shell = Callable[[str, float], str]  # runs a shell command where the guests are, returns its stdout


@dataclass
class Row:
    datapath: str
    mechanism: str
    tcp: float  # Mbit/s netserver received: one TCP flow
    tcp4: float  # four TCP flows at once, in all
    udp: float
    drops: tuple[int | None, ...]  # the policer's own count over each test (None: it keeps none)


def _hvnet(env: dict[str, str], *args: str, timeout: float = 300) -> subprocess.CompletedProcess[str]:
    res = subprocess.run([*HVNET, *args], capture_output=True, text=True, env={**os.environ, **env}, cwd=ROOT,
                         timeout=timeout, check=False)  # fmt: skip
    if res.returncode != 0:
        raise RuntimeError(f"hvnet {' '.join(args)}: {res.stdout[-1500:]}{res.stderr[-1500:]}")
    return res


def _netperf(shell: Shell, ns: str, address: str, test: str, flows: int = 1) -> float:
    """Mbit/s netserver received in all: ``flows`` netperfs at once, each its own connection."""
    argv = ["ip", "netns", "exec", ns, "netperf", "-H", address, "-p", str(PORT), "-t", test, "-l", str(SECONDS),
            "-P", "0", "--", "-m", "1400", "-k", "REMOTE_RECV_THROUGHPUT,THROUGHPUT_UNITS"]  # fmt: skip
    one = " ".join(map(shlex.quote, argv))
    out = shell(one if flows == 1 else f"for i in {' '.join(map(str, range(flows)))}; do {one} & done; wait",
                SECONDS + 60)  # fmt: skip
    got = [line.split("=", 1)[1] for line in out.split() if line.startswith("REMOTE_RECV_THROUGHPUT=")]
    if len(got) != flows or out.count("THROUGHPUT_UNITS=10^6bits/s") != flows:
        raise RuntimeError(f"netperf {test} x {flows}: {out!r}")
    return sum(float(g) for g in got)


def _measure(shell: Shell, ns: str, address: str, drops: Callable[[], int | None]) -> Row:
    """TCP (one flow, then four), then UDP, each with the policer's drops counted around it."""
    got, counted = [], []
    for test, flows in (("TCP_STREAM", 1), ("TCP_STREAM", 4), ("UDP_STREAM", 1)):
        before = drops()
        got.append(_netperf(shell, ns, address, test, flows))
        after = drops()
        counted.append(None if before is None or after is None else after - before)
    return Row("", "", got[0], got[1], got[2], tuple(counted))


@contextmanager
def _netserver(shell: Shell, ns: str) -> Iterator[None]:
    argv = ["ip", "netns", "exec", ns, "netserver", "-D", "-4", "-p", str(PORT)]
    pid = int(shell(" ".join(map(shlex.quote, argv)) + " </dev/null >/dev/null 2>&1 & echo $!", 30).strip())
    time.sleep(1.0)
    try:
        yield
    finally:
        shell(f"kill {pid}", 30)


def _policy(tmp: Path, body: str) -> str:
    path = tmp / "policy.yaml"
    path.write_text(f"version: 1\n{body}")
    return str(path)


def _ingress(policing: str) -> str:
    return f"policing: {policing}\nvifs:\n  - vm: VM1\n    ingress: {{rate: {RATE_KBPS}, burst: {BURST_KBIT}}}\n"


def _applied(res: subprocess.CompletedProcess[str], kind: str) -> str:
    (e,) = [e for e in json.loads(res.stdout)["enforcement"] if e["kind"] == kind]
    if not e["verified"]:
        raise RuntimeError(f"{kind} not enforced: {e['detail']}")
    return str(e["mechanism"])


def _kernel(tmp: Path) -> tuple[str, list[Row]]:
    """The VM host's rows: tc police, OpenFlow meter, htb; and how the VM ran (accelerator, vCPUs)."""
    topo = tmp / "vmhost.yaml"
    topo.write_text(VM_TOPOLOGY)
    env = {"HVNET_LAB_DIR": str(tmp / "vmlab")}
    rows: list[Row] = []
    try:
        up = _hvnet(env, "lab", "up", "--topology", str(topo), timeout=900).stdout
        m = re.search(rf"booted VM host {VM_HOST} \((\w+), (\d+) vCPUs", up)
        how = f"QEMU {m.group(1).upper()}, {m.group(2)} vCPUs" if m else "QEMU"
        vm = VmHost(VM_HOST, tmp / "vmlab" / "hosts", labhost.FIRST_INDEX)
        shell: Shell = lambda cmd, timeout: vm.ssh(cmd, timeout=timeout, check=True).stdout  # noqa: E731
        label = f"kernel (VM host, {how})"

        def police() -> int | None:
            found = tcpolice.parse_police(shell("tc -s filter show dev vif1.0 ingress", 30))
            return sum(a.dropped for a in found) if found else None

        def meter() -> int | None:
            return sum(openflow.parse_meter_stats(shell("ovs-ofctl -O OpenFlow13 meter-stats xenbr0", 30)).values())

        def htb() -> int | None:
            found = tcpolice.parse_htb(shell("tc -s qdisc show dev vif2.0", 30))
            return found.dropped if found else None

        with _netserver(shell, "hvnet-VM2"):
            for body, kind, drops, clear in (
                (_ingress("auto"), "ingress", police, "vm:VM1"),
                (_ingress("meter"), "ingress", meter, "vm:VM1"),
                (f"vifs:\n  - vm: VM2\n    egress: {{rate: {RATE_KBPS}}}\n", "egress", htb, "vm:VM2"),
            ):
                res = _hvnet(env, "--host", VM_HOST, "apply", _policy(tmp, body), "--json")
                try:
                    mechanism = _applied(res, kind)
                    row = _measure(shell, "hvnet-VM1", "10.81.0.2", drops)
                finally:
                    _hvnet(env, "--host", VM_HOST, "qos", "clear", clear, "--json")
                rows.append(replace(row, datapath=label, mechanism=_NAMES[mechanism]))
    finally:
        _hvnet(env, "lab", "down", timeout=120)
    return how, rows


def _userspace(tmp: Path) -> list[Row]:
    """The built-in lab's row: OpenFlow meter on the netdev datapath (this machine's kernel)."""
    env = {"HVNET_LAB_DIR": str(tmp / "uslab")}

    def shell(cmd: str, timeout: float) -> str:
        return subprocess.run(["sh", "-c", cmd], capture_output=True, text=True, timeout=timeout, check=True).stdout

    try:
        _hvnet(env, "lab", "up", "--topology", str(USERSPACE_TOPOLOGY), timeout=300)

        ovs = {**os.environ, **Lab(tmp / "uslab").switch.env}  # the lab's private OVS

        def meter() -> int | None:
            out = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "meter-stats", "br-pol"], capture_output=True,
                                 text=True, env=ovs, timeout=30, check=True).stdout  # fmt: skip
            return sum(openflow.parse_meter_stats(out).values())

        with _netserver(shell, "hvnet-VM2"):
            res = _hvnet(env, "apply", _policy(tmp, _ingress("auto")), "--json")
            try:
                mechanism = _applied(res, "ingress")
                row = _measure(shell, "hvnet-VM1", "10.80.0.2", meter)
            finally:
                _hvnet(env, "qos", "clear", "vm:VM1", "--json")
    finally:
        _hvnet(env, "lab", "down", timeout=120)
    return [replace(row, datapath="userspace (built-in lab, netdev)", mechanism=_NAMES[mechanism])]


_NAMES = {"tc": "tc police", "meter": "OpenFlow meter", "htb": "htb (egress into VM2)"}


def bench_kernel_police() -> list[str]:
    with tempfile.TemporaryDirectory(prefix="hvnet-bench-kpol-") as tmp:
        how, rows = _kernel(Path(tmp))
        rows += _userspace(Path(tmp))
    rate = RATE_KBPS / 1000.0
    fed = (RATE_KBPS * SECONDS + BURST_KBIT) / 1000.0 / SECONDS  # what may pass on average: rate + burst / T

    def drops(row: Row) -> str:
        return "/".join("-" if d is None else f"{d:,}" for d in row.drops)

    out = [
        f"policing fidelity at {RATE_KBPS} kbit/s, burst {BURST_KBIT} kbit: achieved ÷ configured, netperf VM1 -> "
        f"VM2, {SECONDS} s each (TCP_STREAM one flow and four at once; UDP_STREAM -m 1400, what netserver received)",
        f"  {'':<40} {'':<22} {'÷ rate':^17}   {'÷ (rate + burst)':^17}".rstrip(),
        f"  {'datapath':<40} {'enforced by':<22} {'TCP':>5} {'TCPx4':>5} {'UDP':>5}   {'TCP':>5} {'TCPx4':>5} "
        f"{'UDP':>5}   drops TCP/TCPx4/UDP (its own count)",
    ]
    for r in rows:
        out.append(
            f"  {r.datapath:<40} {r.mechanism:<22} {r.tcp / rate:5.2f} {r.tcp4 / rate:5.2f} {r.udp / rate:5.2f}   "
            f"{r.tcp / fed:5.2f} {r.tcp4 / fed:5.2f} {r.udp / fed:5.2f}   {drops(r)}"
        )
    out += [
        f"  targets: TCP >= 0.80, UDP within 5% of the rate (0.95-1.05); rate + burst = {fed:.3f} Mbit/s: the full "
        f"bucket's {BURST_KBIT} kbit over {SECONDS} s",
        f"  (kernel rows: guests are namespaces inside the VM, netperf and the datapath share its vCPUs under {how};"
        " htb queues rather than drops, so its count is mostly 0)",
    ]
    return out


if __name__ == "__main__":
    for line in bench_kernel_police():
        print(line)
