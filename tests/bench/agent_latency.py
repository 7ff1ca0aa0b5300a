"""Agent re-apply latency after a VIF's port is re-created (``make bench`` section).

A lab with the 2010 study's three guests, ``hvnet agent`` running as a real
process on a policy giving VM1 a tag and a meter.  Fifty times, VM1's port is
deleted and re-added in one transaction, the way libvirt and the XenServer
hotplug scripts do; the clock runs from that commit until the tag is back
(seen through a monitor update) and until the meter's flow is back (seen with
ovs-ofctl, polled every few milliseconds).
"""

from __future__ import annotations

import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from appliance.core import ovsdb  # noqa: E402
from appliance.core.target import DbTarget  # noqa: E402
from appliance.endpoints.topology import DEFAULT_TOPOLOGY  # noqa: E402
from appliance.endpoints.topology import load as load_topology  # noqa: E402
from appliance.lab import Lab  # noqa: E402
from appliance.policy import COLUMNS  # noqa: E402

RE_ADDS = 50
POLICY = "vifs:\n  - vm: VM1\n    vlan: {tag: 5}\n    ingress: {rate: 10240, burst: 1024}\n"


def _percentile(values: list[float], q: float) -> float:
    values = sorted(values)
    k = (len(values) - 1) * q
    lo, hi = int(k), min(int(k) + 1, len(values) - 1)
    return values[lo] + (values[hi] - values[lo]) * (k - lo)


def _replug(conn: ovsdb.Connection, ids: dict[str, str]) -> None:
    def build(ctx: ovsdb.TxnContext) -> None:
        br = next(b for b in ctx.rows("Bridge") if b.name == "xenbr0")
        old = next(p for p in ctx.rows("Port") if p.name == "vif1.0")
        br.delvalue("ports", old)
        old.delete()
        iface = ctx.insert("Interface")
        iface.name = "vif1.0"
        iface.external_ids = ids
        port = ctx.insert("Port")
        port.name = "vif1.0"
        port.interfaces = [iface]
        br.addvalue("ports", port)

    conn.transact(build, timeout=10)


def _meter_flow(lab: Lab, ofport: int) -> bool:
    out = subprocess.run(
        ["ovs-ofctl", "-O", "OpenFlow13", "--no-stats", "dump-flows", f"unix:{lab.switch.run_dir / 'xenbr0.mgmt'}"],
        capture_output=True, text=True, check=False,
    ).stdout  # fmt: skip
    return f"in_port={ofport} actions=meter:" in out


def bench_agent() -> list[str]:
    if os.geteuid() != 0:
        return ["agent re-apply latency: skipped (needs root for the lab)"]
    with tempfile.TemporaryDirectory(prefix="hvnet-bench-agent-") as tmp:
        run_dir = Path(tmp) / "lab"
        env = {**os.environ, "HVNET_LAB_DIR": str(run_dir)}
        os.environ["HVNET_LAB_DIR"] = str(run_dir)
        lab = Lab(run_dir)
        agent = None
        try:
            lab.up(load_topology(DEFAULT_TOPOLOGY))
            policy = Path(tmp) / "policy.yaml"
            policy.write_text(POLICY)
            log = open(Path(tmp) / "agent.log", "w")  # noqa: SIM115 - closed below
            agent = subprocess.Popen(
                [sys.executable, "-m", "appliance", "agent", "--policy", str(policy)],
                cwd=ROOT, env=env, stdout=log, stderr=log,
            )  # fmt: skip
            with ovsdb.Connection.open(DbTarget(lab.db, "bench"), COLUMNS) as conn:

                def port_row() -> object | None:
                    return next((p for p in conn.idl.tables["Port"].rows.values() if p.name == "vif1.0"), None)

                def tagged() -> bool:
                    p = port_row()
                    return p is not None and list(p.tag) == [5]

                assert conn.wait_for(tagged, 15), "agent did not apply the policy"
                iface = next(i for i in conn.idl.tables["Interface"].rows.values() if i.name == "vif1.0")
                ids = {k: v for k, v in iface.external_ids.items() if not k.startswith("hvnet-")}
                tag_s, meter_s = [], []
                for _ in range(RE_ADDS):
                    _replug(conn, ids)
                    t0 = time.perf_counter()
                    assert conn.wait_for(tagged, 5), "tag did not come back"
                    tag_s.append(time.perf_counter() - t0)
                    conn.wait_for(
                        lambda: any(i.name == "vif1.0" and i.ofport and i.ofport[0] > 0
                                    for i in conn.idl.tables["Interface"].rows.values()), 5)  # fmt: skip
                    ofport = next(i.ofport[0] for i in conn.idl.tables["Interface"].rows.values() if i.name == "vif1.0")
                    deadline = time.perf_counter() + 5
                    while not _meter_flow(lab, ofport) and time.perf_counter() < deadline:
                        time.sleep(0.003)
                    meter_s.append(time.perf_counter() - t0)
                    time.sleep(0.05)
        finally:
            if agent is not None:
                agent.send_signal(signal.SIGTERM)
                agent.wait(timeout=10)
            lab.down()
            os.environ.pop("HVNET_LAB_DIR", None)
    p95 = _percentile(meter_s, 0.95)
    return [
        f"agent re-apply after a port re-add (del-port + add-port in one transaction), {RE_ADDS} re-adds",
        f"  tag back (monitor update)        p50 {statistics.median(tag_s) * 1000:7.1f} ms   "
        f"p95 {_percentile(tag_s, 0.95) * 1000:7.1f} ms",
        f"  tag + meter flow back (ofctl)    p50 {statistics.median(meter_s) * 1000:7.1f} ms   "
        f"p95 {p95 * 1000:7.1f} ms   (target p95 < 1 s: {'MET' if p95 < 1 else 'NOT MET'})",
    ]


if __name__ == "__main__":
    print("\n".join(bench_agent()))
