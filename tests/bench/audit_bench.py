"""``hvnet isolation audit`` of 10 and 100 real veth VIFs, on the host itself and over ``--host``.

One lab hypervisor (a namespace with its own OVS and sshd, appliance.lab.sshhost)
gets N veth pairs: each host end ``vifN.0`` is a XenServer-style VIF on
``xenbr0`` (access port of one of 10 VLANs, MAC and VM uuid in external_ids),
the other end stays up in the namespace as the VM's side.  "Locally" runs
hvnet inside that namespace against its switch's socket (hvnet on the
hypervisor); "--host" runs it here over SSH.  Both see the same switch, alternated.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from appliance.lab.sshhost import SshHost

ROOT = Path(__file__).resolve().parents[2]
REPS = 3
VLANS = 5


def add_vifs(host: SshHost, start: int, stop: int) -> None:
    """VIFs ``vif{start}.0`` .. ``vif{stop-1}.0``: real veths inside the host, ports of xenbr0."""
    script = "".join(
        f"link add vif{i}.0 type veth peer name vm{i}\nlink set vif{i}.0 up\nlink set vm{i} up\n"
        for i in range(start, stop)
    )
    subprocess.run(["ip", "-n", host.netns, "-batch", "-"], input=script, text=True, check=True)
    cmds: list[str] = []
    for i in range(start, stop):
        cmds += ["--", "add-port", "xenbr0", f"vif{i}.0", f"tag={100 + i % VLANS}",
                 "--", "set", "interface", f"vif{i}.0", f"external_ids:attached-mac=02:00:00:00:{i >> 8:02x}:{i & 255:02x}",
                 f"external_ids:xs-vm-uuid=00000000-0000-4000-8000-{i:012d}"]  # fmt: skip
    host.switch.vsctl(*cmds)


@contextmanager
def audit_host(base: Path, n: int) -> Iterator[SshHost]:
    host = SshHost("hva", base, index=8)
    host.start()
    try:
        host.switch.vsctl("--", "add-br", "xenbr0", "--", "set", "bridge", "xenbr0", "datapath_type=netdev")
        add_vifs(host, 1, n + 1)
        yield host
    finally:
        host.stop()


def timed(argv: list[str], env: dict[str, str]) -> tuple[float, dict]:
    started = time.perf_counter()
    res = subprocess.run(argv, env=env, cwd=ROOT, capture_output=True, text=True, timeout=300)
    elapsed = time.perf_counter() - started
    if res.returncode not in (0, 1, 7):
        raise RuntimeError(f"{' '.join(argv[-6:])}: exit {res.returncode}: {res.stderr[-500:]}")
    return elapsed, json.loads(res.stdout)


COMBOS = (("local", "trace"), ("local", "traffic"), ("--host", "trace"), ("--host", "traffic"))


def measure(host: SshHost, tmp: Path, n: int, combos=COMBOS) -> dict[tuple[str, str], float]:
    env = {**os.environ, **host.client_env, "HVNET_LAB_DIR": str(tmp / "no-lab"), "HVNET_STATE_DIR": str(tmp / "state"),
           "HVNET_CAPTURES_DIR": str(tmp / "captures"), "PYTHONPATH": str(ROOT)}  # fmt: skip
    local = ["ip", "netns", "exec", host.netns, sys.executable, "-m", "appliance", "--db", host.switch.remote]
    remote = [sys.executable, "-m", "appliance", "--host", host.name]
    out: dict[tuple[str, str], list[float]] = {}
    for rep in range(REPS + 1):
        for where, prefix in (("local", local), ("--host", remote)):
            for method in ("trace", "traffic"):
                if (where, method) not in combos:
                    continue
                elapsed, doc = timed([*prefix, "isolation", "audit", "--method", method, "--json"], env)
                verdicts = [c["value"] for c in doc["methods"][method]["verdicts"]]
                if doc["exit_code"] != 0 or len(verdicts) != n * (n - 1):
                    raise RuntimeError(f"audit of {n} VIFs {where} by {method}: exit {doc['exit_code']}, "
                                       f"{len(verdicts)} cells, unknown: {verdicts.count('unknown')}")  # fmt: skip
                if rep:  # the first round warms caches (Python imports, the SSH master, megaflows)
                    out.setdefault((where, method), []).append(elapsed)
    return {k: statistics.median(v) for k, v in out.items()}


def bench_audit() -> list[str]:
    if not os.path.exists("/usr/sbin/sshd"):
        return ["isolation audit: not measured (openssh-server is not installed)"]
    figures: dict[int, dict[tuple[str, str], float]] = {}
    with tempfile.TemporaryDirectory(prefix="hvnet-bench-audit-") as tmp, audit_host(Path(tmp), 10) as host:
        figures[10] = measure(host, Path(tmp), 10)
        add_vifs(host, 11, 101)
        figures[100] = measure(host, Path(tmp), 100)
    lines = [f"isolation audit of real veth VIFs on {VLANS} VLANs (median of {REPS} after a warm-up, one run)"]
    targets = {("--host", "trace"): 5.0, ("--host", "traffic"): 15.0}
    for where in ("local", "--host"):
        for method in ("trace", "traffic"):
            a, b = figures[10][(where, method)], figures[100][(where, method)]
            target = targets.get((where, method))
            met = f"; target <= {target:g} s: {'MET' if b <= target else 'NOT MET'}" if target else ""
            lines.append(f"  {where:7} {method:8} 10 VIFs {a:6.2f} s   100 VIFs {b:6.2f} s   "
                         f"({b / a:.1f}x; target <= 10x: {'MET' if b / a <= 10 else 'NOT MET'}{met})")  # fmt: skip
    return lines


if __name__ == "__main__":
    for line in bench_audit():
        print(line)
