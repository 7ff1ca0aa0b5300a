"""netperf suite benchmarks: fidelity against bare netperf, runner overhead and start spread at 70 instances.

Fidelity: single-instance TCP_RR and TCP_STREAM measured through ``hvnet
suite run`` and by the bare ``netperf`` command, in pairs run back to back
(the order alternates, AB then BA, so a drift of the machine favours
neither; a netserver of its own serves the bare runs, on another port).
The figure is median(hvnet) ÷ median(bare) with a 95% bootstrap interval
resampling the pairs (and, beside it, the median of the per-pair ratios),
and hvnet's own CPU per run.
``python tests/bench/netperf_bench.py fidelity [PAIRS]`` runs only that.  Overhead and spread: one step of 70 TCP_RR instances for 10 s
through ``hvnet suite run``; hvnet's own CPU over the step and the spread of
the instances' start stamps come from the run's results.
"""

from __future__ import annotations

import json
import os
import random
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from appliance.endpoints.topology import load as load_topology  # noqa: E402
from appliance.lab import Lab  # noqa: E402

HVNET = [sys.executable, "-m", "appliance"]
ALTERNATIONS = 5
# TCP_RR: the figure the fidelity target is about.  On two shared cores one run scatters by +-40% (where
# the scheduler puts netperf, netserver and ovs-vswitchd): 12 pairs left the median to chance, 30 gave an
# interval of about +-2% here.
RR_PAIRS = 30
BOOTSTRAP = 4000
TARGET = 0.97
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


def _interval(stat: list[float], level: float) -> tuple[float, float]:
    stat = sorted(stat)
    return stat[int((1 - level) / 2 * len(stat))], stat[min(len(stat) - 1, int((1 + level) / 2 * len(stat)))]


def fidelity_interval(a: list[float], b: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """median(hvnet) ÷ median(bare) and its percentile-bootstrap interval, resampling whole pairs (fixed seed).

    The ratio of medians, not the median of per-pair ratios: on two cores one
    TCP_RR run lands in one of two placements (netperf and netserver sharing a
    core or not) that differ by up to 40%, so a single pair's ratio says more
    about the scheduler than about hvnet; both sides' medians are taken over
    the same pairs."""
    rng = random.Random(18)
    idx = range(len(a))
    boot = []
    for _ in range(BOOTSTRAP):
        pick = rng.choices(idx, k=len(a))
        boot.append(statistics.median(a[i] for i in pick) / statistics.median(b[i] for i in pick))
    return (statistics.median(a) / statistics.median(b), *_interval(boot, level))


def median_interval(xs: list[float], level: float = 0.95) -> tuple[float, float, float]:
    """The median of ``xs`` and its percentile-bootstrap interval (fixed seed)."""
    rng = random.Random(18)
    return (
        statistics.median(xs),
        *_interval([statistics.median(rng.choices(xs, k=len(xs))) for _ in range(BOOTSTRAP)], level),
    )


def fidelity(lab: Lab, tmp: Path, env: dict[str, str], ttype: str, unit: str, pairs: int) -> list[str]:
    """``pairs`` back-to-back runs through hvnet and bare, order alternating; the fidelity with its interval."""
    suite = _suite(tmp, ttype.lower().replace("_", "-"), ttype, SECONDS, 1)
    a, b, own = [], [], []
    for i in range(pairs):
        for side in "ab" if i % 2 == 0 else "ba":
            if side == "a":
                doc = _via_hvnet(suite, tmp / f"fid-{ttype}-{i}", env)
                a.append(doc["steps"][0]["summary"]["sum"]["mean"])
                own.append(doc["steps"][0]["repetitions"][0]["cpu"].get("hvnet_pct_of_core"))
            else:
                b.append(_bare(lab, ttype))
    fid, lo, hi = fidelity_interval(a, b)
    pmed, plo, phi = median_interval([x / y for x, y in zip(a, b)])
    met = "MET" if fid >= TARGET else "NOT MET"
    cpu = [c for c in own if c is not None]
    return [
        f"  {ttype:<10} via hvnet {statistics.median(a):10.1f} {unit:<8} bare {statistics.median(b):10.1f} {unit}",
        f"    fidelity (median hvnet ÷ median bare over {pairs} pairs) {fid:.3f}, 95% interval {lo:.3f}..{hi:.3f}"
        f" (target >= {TARGET}: {met})",
        f"    median of the per-pair ratios {pmed:.3f}, 95% interval {plo:.3f}..{phi:.3f}",
        f"    hvnet: {' '.join(f'{x:.0f}' for x in a)}",
        f"    bare:  {' '.join(f'{x:.0f}' for x in b)}",
        f"    hvnet's own CPU during the step: median {statistics.median(cpu):.2f}%, max {max(cpu):.2f}% of a core"
        if cpu
        else "    hvnet's own CPU during the step: not measured",
    ]


def bench_fidelity(pairs: int = RR_PAIRS) -> list[str]:
    """Only the TCP_RR fidelity figure (the focused form of the bench)."""
    with _bench_lab() as (lab, tmp, env):
        return [
            f"netperf fidelity ({SECONDS} s runs, one instance)",
            *fidelity(lab, tmp, env, "TCP_RR", "trans/s", pairs),
        ]


@contextmanager
def _bench_lab() -> Iterator[tuple[Lab, Path, dict[str, str]]]:
    """The bench's two-guest lab and a bare netserver in the server guest; both gone afterwards."""
    with tempfile.TemporaryDirectory(prefix="hvnet-bench-netperf-") as tmp_s:
        tmp = Path(tmp_s)
        (tmp / "topo.yaml").write_text(TOPOLOGY)
        lab = Lab(tmp / "lab")
        env = {**os.environ, "HVNET_LAB_DIR": str(tmp / "lab")}
        server = None
        try:
            lab.up(load_topology(tmp / "topo.yaml"))
            server = _bare_server(lab)
            yield lab, tmp, env
        finally:
            if server is not None:
                server.terminate()
                server.wait(timeout=10)
            lab.down()


def _bare_server(lab: Lab) -> subprocess.Popen:
    server = subprocess.Popen(["ip", "netns", "exec", lab.ns_of("S"), "netserver", "-D", "-4", "-p", str(BARE_PORT)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    time.sleep(0.3)
    return server


def bench_netperf() -> list[str]:
    lines = []
    with _bench_lab() as (lab, tmp, env):
        for ttype, unit, pairs in (("TCP_RR", "trans/s", RR_PAIRS), ("TCP_STREAM", "Mbit/s", ALTERNATIONS)):
            lines += fidelity(lab, tmp, env, ttype, unit, pairs)
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
    return [f"netperf suites (A/B pairs of {SECONDS} s runs, one instance)", *lines]


if __name__ == "__main__":
    if sys.argv[1:2] == ["fidelity"]:
        for line in bench_fidelity(int(sys.argv[2]) if len(sys.argv) > 2 else RR_PAIRS):
            print(line, flush=True)
    else:
        for line in bench_netperf():
            print(line, flush=True)
