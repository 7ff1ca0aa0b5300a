"""netperf suite benchmarks: fidelity against bare netperf, runner overhead and start spread at 70 instances.

Fidelity: single-instance TCP_RR and TCP_STREAM measured through ``hvnet
suite run`` and by the bare ``netperf`` command, alternated A/B in one run
(a netserver of its own serves the bare runs, on another port), medians
compared.  Overhead and spread: one step of 70 TCP_RR instances for 10 s
through ``hvnet suite run``; hvnet's own CPU over the step and the spread of
the instances' start stamps come from the run's results.
"""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from appliance.lab import Lab  # noqa: E402
from appliance.topology import load as load_topology  # noqa: E402

HVNET = [sys.executable, "-m", "appliance"]
ALTERNATIONS = 5
SECONDS = 5
BARE_PORT = 12866

TOPOLOGY = """\
name: bench-netperf
bridges: [{name: brnpb}]
guests:
  - {name: C, ip: 10.79.0.1/24, tag: 7, domid: 201}
  - {name: S, ip: 10.79.0.2/24, tag: 7, domid: 202}
"""


def _suite(tmp: Path, name: str, ttype: str, seconds: int, concurrency: int) -> Path:
    p = tmp / f"{name}.yaml"
    p.write_text(
        f"name: {name}\ntopology: topo.yaml\nendpoints: {{client: C, server: S}}\n"
        f"tests: [{{name: t, type: {ttype}, duration: {seconds}, concurrency: [{concurrency}]}}]\n"
    )
    return p


def _via_hvnet(suite: Path, out: Path, env: dict[str, str]) -> dict:
    res = subprocess.run([*HVNET, "suite", "run", str(suite), "--out", str(out), "--json"], capture_output=True,
                         text=True, env=env, cwd=ROOT, timeout=300, check=False)  # fmt: skip
    if res.returncode != 0:
        raise RuntimeError(f"hvnet suite run failed: {res.stderr.strip()}")
    return json.loads((out / "results.json").read_text())


def _bare(lab: Lab, ttype: str) -> float:
    argv = ["ip", "netns", "exec", lab.ns_of("C"), "netperf", "-H", "10.79.0.2", "-p", str(BARE_PORT), "-t", ttype,
            "-l", str(SECONDS), "-P", "0", "--", "-k", "THROUGHPUT"]  # fmt: skip
    out = subprocess.run(argv, capture_output=True, text=True, timeout=SECONDS + 30, check=True).stdout
    return float(out.split("THROUGHPUT=")[1].split()[0])


def bench_netperf() -> list[str]:
    lines = []
    with tempfile.TemporaryDirectory(prefix="hvnet-bench-netperf-") as tmp_s:
        tmp = Path(tmp_s)
        (tmp / "topo.yaml").write_text(TOPOLOGY)
        lab = Lab(tmp / "lab")
        env = {**os.environ, "HVNET_LAB_DIR": str(tmp / "lab")}
        server = None
        try:
            lab.up(load_topology(tmp / "topo.yaml"))
            server = subprocess.Popen(["ip", "netns", "exec", lab.ns_of("S"), "netserver", "-D", "-4", "-p",
                                       str(BARE_PORT)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
            time.sleep(0.3)
            for ttype, unit in (("TCP_RR", "trans/s"), ("TCP_STREAM", "Mbit/s")):
                suite = _suite(tmp, ttype.lower().replace("_", "-"), ttype, SECONDS, 1)
                a, b = [], []
                for i in range(ALTERNATIONS):
                    doc = _via_hvnet(suite, tmp / f"fid-{ttype}-{i}", env)
                    a.append(doc["steps"][0]["summary"]["sum"]["mean"])
                    b.append(_bare(lab, ttype))
                ratio = statistics.median(a) / statistics.median(b)
                lines.append(
                    f"  {ttype:<10} via hvnet {statistics.median(a):10.1f} {unit:<8} bare {statistics.median(b):10.1f}"
                    f" {unit:<8} ratio {ratio:.3f} (target >= 0.95: {'MET' if ratio >= 0.95 else 'NOT MET'})"
                )
            doc = _via_hvnet(_suite(tmp, "seventy", "TCP_RR", 10, 70), tmp / "seventy", env)
            rep = doc["steps"][0]["repetitions"][0]
            own = rep["cpu"]["hvnet_pct_of_core"]
            spread = rep["start_spread_ms"]
            spread_pct = spread / 10_000 * 100
            lines += [
                "  70 x TCP_RR for 10 s through hvnet suite run "
                f"(lost {rep['aggregate']['lost']}, total {rep['aggregate']['sum']:.0f} trans/s):",
                f"    hvnet's own CPU {own:.2f}% of one core (target < 5%: {'MET' if own < 5 else 'NOT MET'}); "
                f"netperf clients {rep['cpu']['netperf_pct_of_core']:.0f}%, ovs-vswitchd "
                f"{rep['cpu']['vswitchd_pct_of_core']:.0f}% of a core",
                f"    start spread {spread:.1f} ms = {spread_pct:.2f}% of the test length "
                f"(target < 2%: {'MET' if spread_pct < 2 else 'NOT MET'})",
            ]
        finally:
            if server is not None:
                server.terminate()
                server.wait(timeout=10)
            lab.down()
    return [f"netperf suites (median of {ALTERNATIONS} alternated A/B runs of {SECONDS} s, one instance)", *lines]


if __name__ == "__main__":
    for line in bench_netperf():
        print(line)
