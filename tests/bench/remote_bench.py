"""A hypervisor over SSH against the same switch read locally: ``status --json`` end to end.

The lab host (a namespace with its own OVS and sshd, see appliance.lab.sshhost)
holds the 1000-VIF bridge of the inventory benchmark; ``hvnet --db`` reads it
through its socket here, ``hvnet --host`` through a new SSH connection (the
master is opened, OVSDB forwarded, the kernel's counters read over it, the
master closed), alternated so both see the same machine load.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from appliance.core import ovsdb
from appliance.core.target import DbTarget
from appliance.lab.sshhost import SshHost
from appliance.switch.reader import COLUMNS

STARTS = 7


def bench_remote() -> list[str]:
    from run import N_PORTS, ROOT, populate

    if not os.path.exists("/usr/sbin/sshd"):
        return ["remote host over SSH: not measured (openssh-server is not installed; make setup installs it)"]
    with tempfile.TemporaryDirectory(prefix="hvnet-bench-remote-") as tmp:
        host = SshHost("hvb", Path(tmp), index=9)
        host.start()
        try:
            with ovsdb.Connection.open(DbTarget(host.switch.remote, "--db"), COLUMNS) as conn:
                populate(conn, N_PORTS)
            env = {**os.environ, **host.client_env, "HVNET_LAB_DIR": str(Path(tmp) / "no-lab"),
                   "HVNET_STATE_DIR": str(Path(tmp) / "state")}  # fmt: skip
            local = [sys.executable, "-m", "appliance", "--db", host.switch.remote, "status", "--json"]
            remote = [sys.executable, "-m", "appliance", "--host", host.name, "status", "--json"]
            times: dict[str, list[float]] = {"local": [], "remote": []}
            for _ in range(STARTS):
                for name, argv in (("local", local), ("remote", remote)):
                    started = time.perf_counter()
                    subprocess.run(argv, env=env, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)
                    times[name].append(time.perf_counter() - started)
        finally:
            host.stop()
    loc, rem = statistics.median(times["local"]), statistics.median(times["remote"])
    return [
        f"a hypervisor over SSH, one bridge with {N_PORTS} VIFs (median of {STARTS}, same switch, same run)",
        f"  hvnet status --json (local socket)       {loc * 1000:8.1f} ms",
        f"  hvnet --host H status --json (SSH)       {rem * 1000:8.1f} ms   ({rem / loc:.2f}x local; target <= 2x: "
        f"{'MET' if rem <= 2 * loc else 'NOT MET'}; a new SSH connection each run)",
    ]
