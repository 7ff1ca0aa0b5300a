#!/usr/bin/env python3
"""hvnet benchmarks (``make bench``): figures measured side by side in one run.

These machines are shared and noisy, so every figure is printed next to its
reference measured in the same run on the same database, and targets are
ratios, never absolute times.  Each measurement is the median of several
interleaved repetitions.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from appliance import api, ovsdb  # noqa: E402
from appliance.inventory import COLUMNS  # noqa: E402
from appliance.switch import Switch  # noqa: E402
from appliance.target import DbTarget  # noqa: E402

N_PORTS = 1000
REPEAT = 7


def populate(conn: ovsdb.Connection, n: int) -> None:
    """A bridge with ``n`` XenServer VIFs carrying the columns a real switch fills in."""

    def build(ctx: ovsdb.TxnContext) -> None:
        ports = []
        for i in range(1, n + 1):
            iface = ctx.insert("Interface")
            iface.name = f"vif{i}.0"
            iface.external_ids = {
                "xs-vm-uuid": f"00000000-0000-4000-8000-{i:012d}",
                "xs-vif-uuid": f"00000000-0000-4000-9000-{i:012d}",
                "xs-network-uuid": "00000000-0000-4000-a000-000000000001",
                "attached-mac": f"02:00:00:{i >> 16 & 255:02x}:{i >> 8 & 255:02x}:{i & 255:02x}",
            }
            iface.statistics = {
                "rx_bytes": 1000 * i, "rx_packets": 10 * i, "rx_dropped": 0, "rx_errors": 0,
                "tx_bytes": 2000 * i, "tx_packets": 20 * i, "tx_dropped": 0, "tx_errors": 0,
                "collisions": 0, "rx_crc_err": 0, "rx_frame_err": 0, "rx_over_err": 0,
            }  # fmt: skip
            iface.ofport = [i]
            iface.link_state = ["up"]
            iface.admin_state = ["up"]
            iface.mtu = [1500]
            iface.mac_in_use = ["fe:ff:ff:ff:ff:ff"]
            iface.ingress_policing_rate = 10240
            iface.ingress_policing_burst = 8192
            port = ctx.insert("Port")
            port.name = iface.name
            port.interfaces = [iface]
            port.tag = [1 + i % 100]
            ports.append(port)
        br = ctx.insert("Bridge")
        br.name = "xenbr0"
        br.datapath_type = "netdev"
        br.ports = ports
        root = ctx.root()
        root.bridges = [*root.bridges, br]

    conn.transact(build, timeout=60)


def median_time(fn: Callable[[], object]) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def measure(cases: dict[str, Callable[[], object]], repeat: int = REPEAT) -> dict[str, float]:
    """Median seconds per case, repetitions interleaved so noise hits all alike."""
    samples: dict[str, list[float]] = {k: [] for k in cases}
    for fn in cases.values():
        fn()  # warm-up (page cache, imports)
    for _ in range(repeat):
        for name, fn in cases.items():
            samples[name].append(median_time(fn))
    return {k: statistics.median(v) for k, v in samples.items()}


def bench_inventory() -> list[str]:
    with tempfile.TemporaryDirectory(prefix="hvnet-bench-") as tmp:
        sw = Switch(Path(tmp) / "ovs")
        sw.start(vswitchd=False)
        try:
            target = DbTarget(sw.remote, "--db")
            with ovsdb.Connection.open(target, COLUMNS) as conn:
                populate(conn, N_PORTS)
                conn.run_once()
                env = {**os.environ, **sw.env, "HVNET_LAB_DIR": str(Path(tmp) / "no-lab")}
                vsctl = ["ovs-vsctl", f"--db={sw.remote}", "--no-wait", "list", "Interface"]
                status = [sys.executable, "-m", "appliance", "--db", sw.remote, "status", "--json"]

                def run(argv: list[str]) -> Callable[[], object]:
                    return lambda: subprocess.run(argv, env=env, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)

                def refresh() -> object:
                    inv = api.read_inventory(conn)
                    assert len(inv.vifs) == N_PORTS
                    return inv

                t = measure({"vsctl": run(vsctl), "status": run(status), "refresh": refresh})
        finally:
            sw.stop()
    ratio = t["refresh"] / t["vsctl"]
    return [
        f"inventory, one bridge with {N_PORTS} VIFs (median of {REPEAT}, same database, same run)",
        f"  ovs-vsctl list Interface (reference)     {t['vsctl'] * 1000:8.1f} ms",
        f"  hvnet status --json, end to end          {t['status'] * 1000:8.1f} ms   "
        f"({t['status'] / t['vsctl']:.1f}x the reference; includes Python start-up and the initial sync)",
        f"  in-process inventory refresh             {t['refresh'] * 1000:8.1f} ms   "
        f"({ratio:.2f}x the reference; target <= 3x: {'MET' if ratio <= 3 else 'NOT MET'})",
        f"  C JSON parser in use: {'yes' if ovsdb.c_json_parser_in_use() else 'no'}",
    ]


def main() -> int:
    if os.geteuid() != 0:
        print("bench: needs root (it starts a private ovsdb-server)", file=sys.stderr)
        return 1
    print("hvnet benchmarks\n")
    for line in bench_inventory():
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
