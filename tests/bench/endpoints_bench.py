"""Remote launch fidelity: netperf driven over a lab host's sshd against the same namespaces driven here.

A one-host lab (``hv2``: a namespace with its own OVS and an sshd whose PATH
has no Python) carries two guests, C and S, on its bridge.  The quick suite's
TCP_RR and TCP_STREAM steps run through the engine's suite runner with the
switch on hv2 (``--host hv2``), alternately with the guests' processes started
here (the local launchers) and started on hv2 through its sshd (one control
shell per group, released through a FIFO, stamped by hv2's clock) -- the same
namespaces, the same switch, in one run.  The figure per step is
median(remote) ÷ median(local) over every repetition of every run.  Then one
step of 70 TCP_RR instances for 10 s over SSH: the spread of their start
stamps, taken by hv2's clock.

``python tests/bench/endpoints_bench.py`` runs only this.
"""

from __future__ import annotations

import dataclasses
import os
import statistics
import sys
import tempfile
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from appliance.endpoints.guests import GuestEndpoint  # noqa: E402
from appliance.endpoints.topology import load as load_topology  # noqa: E402
from appliance.lab import Lab  # noqa: E402

ALTERNATIONS = 4
TARGET = 0.95
SPREAD_SECONDS = 10
TOPOLOGY = """\
name: bench-endpoints
hypervisor: xenserver
hosts: [{name: hv2}]
bridges: [{name: xenbr0, datapath_type: netdev}]
guests:
  - {name: C, host: hv2, ip: 10.97.0.1/24, tag: 5}
  - {name: S, host: hv2, ip: 10.97.0.2/24, tag: 5}
"""
# netperf-suites/quick.yaml's TCP_RR and TCP_STREAM, as they are there
QUICK = """\
name: {name}
topology: topo.yaml
endpoints: {{client: C, server: S}}
defaults: {{duration: 2, repetitions: 3, concurrency: [1, 4]}}
tests:
  - {{name: tcp-stream, type: TCP_STREAM, message_size: 10000}}
  - {{name: tcp-rr, type: TCP_RR, request_size: 1, response_size: 1}}
"""
SEVENTY = f"""\
name: seventy
topology: topo.yaml
endpoints: {{client: C, server: S}}
tests: [{{name: t, type: TCP_RR, duration: {SPREAD_SECONDS}, concurrency: [70], request_size: 1, response_size: 1}}]
"""


class OnHost:
    """The lab's guests as a probe source on ``--host`` hands them: namespaces of the driven host."""

    def __init__(self, lab: Lab) -> None:
        self.lab = lab

    def require(self, topology: Any, names: list[str]) -> dict[str, GuestEndpoint]:
        return {n: dataclasses.replace(g, remote=True) for n, g in self.lab.require(topology, names).items()}


def _run(host: Any, guests: Any, suite_file: Path, out: Path) -> Any:
    from appliance.netperf.define.suite import load as load_suite
    from appliance.netperf.run.recipe import Runner
    from appliance.switch.reader import COLUMNS

    with host.connect(COLUMNS) as conn:
        doc = Runner(load_suite(suite_file), host=host, guests=guests, conn=conn, out_dir=out).run()
    if doc.state != "complete":
        raise RuntimeError(f"suite {suite_file.name}: {doc.state} {doc.error or ''}")
    return doc


def bench_remote_launch() -> list[str]:
    if not os.path.exists("/usr/sbin/sshd"):
        return ["remote launch fidelity: not measured (openssh-server is not installed; make setup installs it)"]
    from appliance.frontdoor.hosts import build_host

    with tempfile.TemporaryDirectory(prefix="hvnet-bench-endpoints-") as tmp_s:
        tmp = Path(tmp_s)
        (tmp / "topo.yaml").write_text(TOPOLOGY)
        (tmp / "quick.yaml").write_text(QUICK.format(name="quick-rr-stream"))
        (tmp / "seventy.yaml").write_text(SEVENTY)
        old = os.environ.get("HVNET_LAB_DIR")
        os.environ["HVNET_LAB_DIR"] = str(tmp / "lab")
        lab = Lab(tmp / "lab")
        host = None
        try:
            lab.up(load_topology(tmp / "topo.yaml"))
            host = build_host(ssh_host="hv2")
            host.paths = dataclasses.replace(host.paths, endpoints_dir=tmp / "endpoints")
            sums: dict[str, dict[str, list[float]]] = {"local": {}, "remote": {}}
            units: dict[str, str] = {}
            for i in range(ALTERNATIONS):
                for side in ("local", "remote") if i % 2 == 0 else ("remote", "local"):
                    guests = lab if side == "local" else OnHost(lab)
                    doc = _run(host, guests, tmp / "quick.yaml", tmp / f"{side}-{i}")
                    for step in doc.steps:
                        units[step.key] = step.metric
                        sums[side].setdefault(step.key, []).extend(
                            r.aggregate.sum for r in step.repetitions if r.aggregate.sum is not None
                        )
            seventy = _run(host, OnHost(lab), tmp / "seventy.yaml", tmp / "seventy").steps[0].repetitions[0]
        finally:
            if host is not None:
                host.close()
            lab.down()
            if old is None:
                os.environ.pop("HVNET_LAB_DIR", None)
            else:
                os.environ["HVNET_LAB_DIR"] = old
    return _report(sums, units, seventy)


def _report(sums: dict[str, dict[str, list[float]]], units: dict[str, str], seventy: Any) -> list[str]:
    lines = [f"remote launch fidelity: lab host hv2's guests driven over its sshd vs here ({ALTERNATIONS} runs each "
             "of the quick suite's TCP_STREAM and TCP_RR, 3 repetitions of 2 s, alternated; same switch)"]  # fmt: skip
    for key in sums["local"]:
        loc, rem = statistics.median(sums["local"][key]), statistics.median(sums["remote"][key])
        ratio = rem / loc
        lines.append(
            f"  {key:<34} here {loc:10.1f}  over SSH {rem:10.1f} {units[key]:<14} ratio {ratio:.3f} "
            f"(target >= {TARGET}: {'MET' if ratio >= TARGET else 'NOT MET'})"
        )
    spread = seventy.start_spread_ms
    agg = seventy.aggregate
    if spread is None:
        lines.append("  70 x TCP_RR over SSH: start spread not measured (no stamps came back)")
    else:
        pct = spread / (SPREAD_SECONDS * 1000) * 100
        lines.append(
            f"  70 x TCP_RR for {SPREAD_SECONDS} s over SSH (one control shell; lost {agg.lost}, total "
            f"{agg.sum or 0:.0f} trans/s): start spread {spread:.1f} ms by hv2's clock = {pct:.2f}% of the test "
            f"(target < 2%: {'MET' if pct < 2 else 'NOT MET'})"
        )
    return lines


if __name__ == "__main__":
    for line in bench_remote_launch():
        print(line, flush=True)
