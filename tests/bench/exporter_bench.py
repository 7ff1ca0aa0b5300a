#!/usr/bin/env python3
"""What a scrape of ``hvnet exporter`` costs on a 1000-VIF switch, next to ``ovs-vsctl list Interface``.

A private ovsdb-server (no ovs-vswitchd) holds 1000 XenServer VIFs with
statistics and policing (tests/bench/run.py's ``populate``); the real exporter
serves it and urllib scrapes it.  Medians of interleaved repetitions, as in
``make bench``.  Run as root: ``python tests/bench/exporter_bench.py``.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from appliance.core import ovsdb  # noqa: E402
from appliance.core.target import DbTarget  # noqa: E402
from appliance.lab.switch import Switch  # noqa: E402
from appliance.switch.reader import COLUMNS  # noqa: E402
from tests.bench.run import N_PORTS, measure, populate  # noqa: E402


def main() -> None:
    with tempfile.TemporaryDirectory(prefix="hvnet-bench-") as tmp:
        sw = Switch(Path(tmp) / "ovs")
        sw.start(vswitchd=False)
        proc = None
        try:
            with ovsdb.Connection.open(DbTarget(sw.remote, "--db"), COLUMNS) as conn:
                populate(conn, N_PORTS)
            env = {**os.environ, **sw.env, "HVNET_LAB_DIR": str(Path(tmp) / "no-lab")}
            argv = [sys.executable, "-m", "appliance", "--db", sw.remote, "--libvirt", "none", "exporter",
                    "--listen", "127.0.0.1:0", "--policy", "none"]  # fmt: skip
            proc = subprocess.Popen(argv, env=env, cwd=ROOT, stdout=subprocess.PIPE, text=True)
            url = (proc.stdout.readline() if proc.stdout else "").split("serving ", 1)[1].split()[0]
            vsctl = ["ovs-vsctl", f"--db={sw.remote}", "--no-wait", "list", "Interface"]

            def scrape() -> object:
                with urllib.request.urlopen(url, timeout=30) as reply:
                    body = reply.read()
                assert body.count(b"hvnet_vif_rx_bytes_total{") == N_PORTS
                return body

            scrape()  # the first one fetches the schema
            t = measure({"vsctl": lambda: subprocess.run(vsctl, env=env, check=True, stdout=subprocess.DEVNULL),
                         "scrape": scrape})  # fmt: skip
            size = len(scrape())
        finally:
            if proc is not None:
                proc.terminate()
                proc.wait(timeout=10)
            sw.stop()
    print(f"hvnet exporter, {N_PORTS} VIFs (median of interleaved runs, {time.strftime('%Y-%m-%d')}):")
    print(f"  ovs-vsctl list Interface (reference)  {t['vsctl'] * 1000:8.1f} ms")
    print(f"  one scrape over HTTP                  {t['scrape'] * 1000:8.1f} ms   "
          f"({t['scrape'] / t['vsctl']:.1f}x the reference; {size / 1e6:.1f} MB of text)")  # fmt: skip


if __name__ == "__main__":
    main()
