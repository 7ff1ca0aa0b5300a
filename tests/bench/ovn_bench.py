"""An OVN pool's apply: from the NB commit to every chassis' acknowledgement, over 50 applies; and a
1000-port policy on the pool beside the same policy on one host.

The lab's pool (vlan-tests/topologies/ovn-pool.yaml: three chassis, ovn-northd
here) gets VM1's ingress limit changed back and forth through the service
layer, as ``hvnet --pool ovn-pool apply`` does: one NB transaction bumping
``nb_cfg``, then ``NB_Global.hv_cfg`` polled until every chassis has it in its
flows, then the meter checked on the chassis over SSH.  Printed: the
acknowledgement time and the whole apply, p50 and p95.

The 1000-port figure (:func:`bench_ovn_1000`) adds 1000 logical ports to the
pool's ``vlan1`` (unbound: no VM behind them, as the NB of a pool whose
VMs are not all running) and applies a policy giving each an ingress limit,
the values alternating between applies so each one rewrites 1000 QoS rules;
the same policy on one host is 1000 VIFs' ingress policing on one
ovsdb-server (the setup of ``run.py``'s policy figure, tc mechanism,
``--no-wait``: a host has no chassis to wait for).
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

from appliance.core.hostlist import load as load_inventory  # noqa: E402
from appliance.endpoints.topology import load as load_topology  # noqa: E402
from appliance.frontdoor.hosts import build_host  # noqa: E402
from appliance.lab import Lab  # noqa: E402
from appliance.policy.plan import document  # noqa: E402
from appliance.services.ovn import pool as pools  # noqa: E402

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


N_PORTS = 1000
VALUES = ((10000, 8000), (20000, 16000))


def _policy(name: str, n: int, rate: int, burst: int) -> str:
    """Port ``name.format(i)`` for i in 1..n gets the ingress limit."""
    lines = ["version: 1", "vifs:"]
    for i in range(1, n + 1):
        lines += [f"  - port: {name.format(i)}", f"    ingress: {{rate: {rate}, burst: {burst}}}"]
    return "\n".join(lines) + "\n"


def _add_ports(run_dir: Path, n: int) -> None:
    """``n`` logical ports on vlan1, in one NB transaction (bound to no chassis)."""
    from appliance.lab import ovn

    args: list[str] = []
    for i in range(1, n + 1):
        args += ["--", "lsp-add", "vlan1", f"bench{i}", "--", "lsp-set-addresses", f"bench{i}",
                 f"02:be:00:00:{i >> 8 & 255:02x}:{i & 255:02x}"]  # fmt: skip
    ovn.central(run_dir).nbctl(*args[1:], timeout=120)


def _pool_applies(run_dir: Path) -> tuple[list[float], list[float], list[float]]:
    """Acknowledgement, NB commit and whole-apply seconds of APPLIES 1000-port applies on the lab's pool."""
    inventory = load_inventory(run_dir / "hosts.yaml")
    entry = inventory.pool("ovn-pool")
    policies = [document.parse(_policy("bench{}", N_PORTS, *v), f"pool-{k}") for k, v in enumerate(VALUES)]
    acks, commits, whole = [], [], []
    for i in range(APPLIES + 1):  # the first adds the 1000 rules: a warm-up, not counted
        t0 = time.perf_counter()
        out = pools.apply_pool(entry, inventory, lambda e: build_host(ssh_host=e.name, timeout=10),
                               policies[i % 2], timeout=30, wait_s=60)  # fmt: skip
        elapsed = time.perf_counter() - t0
        assert out.acks is not None and out.acks.complete, out.acks
        assert len(out.plan.modify if i else out.plan.add) == N_PORTS, out.plan.lines()[:3]
        if i:
            whole.append(elapsed)
            acks.append(out.acks.seconds)
            commits.append(out.commit_s or 0.0)
    return acks, commits, whole


def _host_applies() -> list[float]:
    """Seconds of APPLIES in-process applies of the same policy to 1000 VIFs of one host's OVSDB."""
    from run import populate

    from appliance.core import ovsdb
    from appliance.core.target import DbTarget
    from appliance.lab.switch import Switch
    from appliance.policy import COLUMNS as POLICY_COLUMNS
    from appliance.policy import PolicyEngine
    from appliance.switch.reader import COLUMNS

    with tempfile.TemporaryDirectory(prefix="hvnet-bench-host-") as tmp:
        env = {"HVNET_LAB_DIR": f"{tmp}/no-lab", "HVNET_AUDIT_LOG": f"{tmp}/audit.jsonl", "HVNET_STATE_DIR": tmp}
        policies = [document.parse(_policy("vif{}.0", N_PORTS, *v), f"host-{k}") for k, v in enumerate(VALUES)]
        sw = Switch(Path(tmp) / "ovs")
        sw.start(vswitchd=False)
        try:
            target = DbTarget(sw.remote, "--db")
            with ovsdb.Connection.open(target, COLUMNS) as conn:
                populate(conn, N_PORTS)
            host = build_host(sw.remote, environ=env)
            with ovsdb.Connection.open(target, POLICY_COLUMNS) as pconn:
                engine = PolicyEngine(pconn, host, command="hvnet bench")
                engine.force_policing = "tc"
                out = []
                for i in range(APPLIES + 1):
                    if i:  # the replica caught up with the previous apply, outside the timed part
                        rate = VALUES[(i - 1) % 2][0]
                        assert pconn.wait_for(lambda r=rate: _host_rates(pconn) == {r}, 10), "replica behind"
                    t0 = time.perf_counter()
                    result = engine.apply(policies[i % 2], wait=False, verify=False)
                    elapsed = time.perf_counter() - t0
                    assert result.status == "applied" and len(result.plan.changes) == N_PORTS, result.status
                    if i:
                        out.append(elapsed)
        finally:
            sw.stop()
    return out


def _host_rates(conn: object) -> set[int]:
    from appliance.core.ovsdb import column

    rows = conn.idl.tables["Interface"].rows.values()  # type: ignore[attr-defined]
    return {column(r, "ingress_policing_rate") for r in rows if column(r, "name").startswith("vif")}


def bench_ovn_1000() -> list[str]:
    if not (shutil.which("ovn-northd") and shutil.which("ovn-controller")):
        return [f"OVN pool, {N_PORTS} ports: not measured (ovn-central and ovn-host are not installed)"]
    import os

    with tempfile.TemporaryDirectory(prefix="hvnet-bench-ovn1000-") as tmp:
        run_dir = Path(tmp) / "run"
        old = os.environ.get("HVNET_LAB_DIR")
        os.environ["HVNET_LAB_DIR"] = str(run_dir)
        try:
            Lab(run_dir).up(load_topology(ROOT / "vlan-tests" / "topologies" / "ovn-pool.yaml"))
            _add_ports(run_dir, N_PORTS)
            acks, commits, whole = _pool_applies(run_dir)
        finally:
            Lab(run_dir).down()
            if old is None:
                os.environ.pop("HVNET_LAB_DIR", None)
            else:
                os.environ["HVNET_LAB_DIR"] = old
    host = _host_applies()

    def p(values: list[float]) -> str:
        ms = [v * 1000 for v in values]
        return f"p50 {statistics.median(ms):7.0f} ms, p95 {_pct(ms, 95):7.0f} ms"

    return [
        f"{N_PORTS}-port policy (each port's ingress limit, the values alternating), {APPLIES} applies each "
        f"({time.strftime('%Y-%m-%d')}):",
        f"  OVN pool (3 chassis, lab; {N_PORTS} QoS rules rewritten per apply, one NB transaction):",
        f"    NB commit (the transaction)                        {p(commits)}",
        f"    NB commit to every chassis acknowledged (hv_cfg)   {p(acks)}",
        f"    whole apply (read NB, SB, the chassis' VMs over SSH; plan, commit, acks) {p(whole)}",
        f"  one host (ovsdb-server, {N_PORTS} VIFs' ingress policing, tc columns, no vswitchd to wait for):",
        f"    in-process apply (plan, commit, audit)             {p(host)}",
    ]


if __name__ == "__main__":
    print("\n".join(bench_ovn()))
    print("\n".join(bench_ovn_1000()))
