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


def _isolation_files(tmp: Path, n: int, vlans: int) -> Path:
    topo = tmp / f"topo-{n}.yaml"
    lines = [f"name: bench-{n}", "bridges: [{name: brbench}]", "guests:"]
    lines += [f"  - {{name: g{i:02d}, ip: 10.77.0.{i}/24, tag: {100 + i % vlans}}}" for i in range(1, n + 1)]
    topo.write_text("\n".join(lines) + "\n")
    sc = tmp / f"scenario-{n}.yaml"
    sc.write_text(f"name: bench-{n}\ntopology: {topo.name}\nexpect: derive\n")
    return sc


def bench_isolation() -> list[str]:
    from appliance.isolation import check, scenario
    from appliance.lab import Lab

    times: dict[int, list[float]] = {}
    probes: dict[int, int] = {}
    with tempfile.TemporaryDirectory(prefix="hvnet-bench-iso-") as tmp:
        for n, vlans in ((6, 2), (24, 4)):
            sc = scenario.load(_isolation_files(Path(tmp), n, vlans))
            lab = Lab(Path(tmp) / f"lab{n}")
            try:
                lab.up(sc.topology)
                with ovsdb.Connection.open(DbTarget(lab.db, "lab"), COLUMNS) as conn:
                    for rep in range(4):
                        start = time.perf_counter()
                        res = check.run_check(conn, lab, sc, ("traffic",), Path(tmp) / f"out{n}-{rep}")
                        elapsed = time.perf_counter() - start
                        if rep:  # the first run warms caches (tcpdump, ARP tables, megaflows)
                            times.setdefault(n, []).append(elapsed)
                        assert res.exit_code == 0, f"bench scenario with {n} guests did not pass"
                        probes[n] = res.methods["traffic"].stats["probes_sent"]
            finally:
                lab.down()
        many = scenario.load(ROOT / "vlan-tests" / "many-vlans.yaml")
        lab = Lab(Path(tmp) / "lab-many")
        try:
            lab.up(many.topology)
            with ovsdb.Connection.open(DbTarget(lab.db, "lab"), COLUMNS) as conn:
                res = check.run_check(conn, lab, many, check.METHODS, Path(tmp) / "out-many")
        finally:
            lab.down()
        verdicts = [v for m in res.methods for v in res.verdicts(m).values()]
        many_line = (
            f"  many-vlans (12 guests / 4 VLANs, traffic + trace): {res.methods['traffic'].stats['probes_sent']} probes, "
            f"{verdicts.count('leak')} leaks, {verdicts.count('unknown')} unknown cells, {res.duration_s:.2f} s"
        )
    t6, t24 = statistics.median(times[6]), statistics.median(times[24])
    ratio = t24 / t6
    return [
        "isolation check, traffic method (median of 3 after a warm-up, one run)",
        f"  6 guests / 2 VLANs      {t6 * 1000:8.1f} ms   ({probes[6]} probes)",
        f"  24 guests / 4 VLANs     {t24 * 1000:8.1f} ms   ({probes[24]} probes; "
        f"{ratio:.2f}x the 6-guest time; target <= 3x: {'MET' if ratio <= 3 else 'NOT MET'})",
        many_line,
    ]


def main() -> int:
    if os.geteuid() != 0:
        print("bench: needs root (it starts a private ovsdb-server)", file=sys.stderr)
        return 1
    print("hvnet benchmarks\n")
    for line in bench_inventory():
        print(line)
    print()
    for line in bench_isolation():
        print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main())
