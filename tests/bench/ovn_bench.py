"""An OVN pool's apply: from the NB commit to every chassis' acknowledgement, over 50 applies.

The lab's pool (vlan-tests/topologies/ovn-pool.yaml: three chassis, ovn-northd
here) gets VM1's ingress limit changed back and forth through the service
layer, as ``hvnet --pool ovn-pool apply`` does: one NB transaction bumping
``nb_cfg``, then ``NB_Global.hv_cfg`` polled until every chassis has it in its
flows, then the meter checked on the chassis over SSH.  Printed: the
acknowledgement time and the whole apply, p50 and p95.
"""

from __future__ import annotations

import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from appliance.frontdoor import build_host  # noqa: E402
from appliance.hosts import load as load_inventory  # noqa: E402
from appliance.lab import Lab  # noqa: E402
from appliance.policy import document  # noqa: E402
from appliance.services import pools  # noqa: E402
from appliance.topology import load as load_topology  # noqa: E402

APPLIES = 50


def _pct(values: list[float], q: float) -> float:
    return statistics.quantiles(values, n=100, method="inclusive")[int(q) - 1] if len(values) > 1 else values[0]


def bench_ovn() -> list[str]:
    if not (shutil.which("ovn-northd") and shutil.which("ovn-controller")):
        return ["OVN pool: not measured (ovn-central and ovn-host are not installed; make setup installs them)"]
    import os

    with tempfile.TemporaryDirectory(prefix="hvnet-bench-ovn-") as tmp:
        run_dir = Path(tmp) / "run"
        old = os.environ.get("HVNET_LAB_DIR")
        os.environ["HVNET_LAB_DIR"] = str(run_dir)
        lab = Lab(run_dir)
        try:
            lab.up(load_topology(ROOT / "vlan-tests" / "topologies" / "ovn-pool.yaml"))
            inventory = load_inventory(run_dir / "hosts.yaml")
            entry = inventory.pool("ovn-pool")
            acks, whole = [], []
            for i in range(APPLIES):
                rate = 10000 if i % 2 == 0 else 20000
                policy = document.parse(f"version: 1\nvifs:\n  - vm: VM1\n    ingress: {{rate: {rate}}}\n", "bench")
                t0 = time.perf_counter()
                out = pools.apply_pool(entry, inventory, lambda e: build_host(ssh_host=e.name, timeout=10),
                                       policy, timeout=10, wait_s=30)  # fmt: skip
                whole.append(time.perf_counter() - t0)
                assert out.acks is not None and out.acks.complete, out.acks
                assert all(e.state == "enforced" for e in out.enforced), out.enforced
                acks.append(out.acks.seconds)
        finally:
            Lab(run_dir).down()
            if old is None:
                os.environ.pop("HVNET_LAB_DIR", None)
            else:
                os.environ["HVNET_LAB_DIR"] = old
    ms = [a * 1000 for a in acks]
    wms = [w * 1000 for w in whole]
    return [
        f"OVN pool (3 chassis, lab), {APPLIES} applies of one port's limit ({time.strftime('%Y-%m-%d')}):",
        f"  NB commit to every chassis acknowledged: p50 {statistics.median(ms):.0f} ms, p95 {_pct(ms, 95):.0f} ms",
        f"  whole apply (read NB+SB and chassis, commit, acks, meters checked over SSH): "
        f"p50 {statistics.median(wms):.0f} ms, p95 {_pct(wms, 95):.0f} ms",
    ]


if __name__ == "__main__":
    print("\n".join(bench_ovn()))
