"""Many hosts and a large remote apply (``make bench`` section).

(a) One policy applied to eight lab hypervisors at once with ``--hosts``
    against the same policy applied to one of them with ``--host``: the hosts
    run in parallel, one SSH master each, so eight should cost little more
    than one.
(b) A 1000-VIF policy applied over SSH (``hvnet --host H apply``) against the
    same policy applied through the switch's own socket (``hvnet --db``) on
    the same lab switch, so both see the same database and the same load.

Every call changes every VIF it covers (the values alternate) and is checked
with ovs-vsctl afterwards, outside the timing.  Cases are interleaved and the
median is kept.
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

from appliance.core import ovsdb  # noqa: E402
from appliance.core.target import DbTarget  # noqa: E402
from appliance.lab.sshhost import SshHost  # noqa: E402
from appliance.switch.reader import COLUMNS  # noqa: E402

N_HOSTS = 8
VIFS_PER_HOST = 4
REPEAT = 5
TAGS = (31, 32)


def _timed(argv: list[str], env: dict[str, str], root: Path) -> float:
    started = time.perf_counter()
    res = subprocess.run(argv, env=env, cwd=root, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - started
    if res.returncode != 0:
        raise RuntimeError(f"{' '.join(argv[3:])} exited {res.returncode}: {res.stdout[-1500:]}{res.stderr[-1500:]}")
    return elapsed


def _tags(host: SshHost) -> list[str]:
    out = subprocess.run(["ovs-vsctl", f"--db={host.switch.remote}", "--no-wait", "--format=csv", "--data=bare",
                          "--no-headings", "--columns=name,tag", "list", "Port"],
                         capture_output=True, text=True, check=True).stdout  # fmt: skip
    return sorted(line.split(",")[1] for line in out.splitlines() if line.startswith("vif"))


def _small_bridge(host: SshHost) -> None:
    cmds = ["--", "add-br", "xenbr0", "--", "set", "bridge", "xenbr0", "datapath_type=netdev"]
    for i in range(1, VIFS_PER_HOST + 1):
        cmds += ["--", "add-port", "xenbr0", f"vif{i}.0", "--", "set", "interface", f"vif{i}.0", "type=internal"]
    subprocess.run(["ovs-vsctl", f"--db={host.switch.remote}", *cmds], check=True, timeout=60,
                   env={**os.environ, **host.switch.env})  # fmt: skip


def bench_fleet() -> list[str]:
    if not os.path.exists("/usr/sbin/sshd"):
        return ["many hosts over SSH: not measured (openssh-server is not installed; make setup installs it)"]
    with tempfile.TemporaryDirectory(prefix="hvnet-bench-fleet-") as tmp:
        base = Path(tmp)
        hosts = [SshHost(f"fa{i}", base, index=40 + i) for i in range(1, N_HOSTS + 1)]
        try:
            for h in hosts:
                h.start()
                _small_bridge(h)
            (base / "ssh_config").write_text("".join(h.ssh_config.read_text() for h in hosts))
            inventory = ["hosts:"]
            for h in hosts:
                inventory += [f"  - name: {h.name}", "    group: bench", f"    ovs_rundir: {h.switch.run_dir}"]
            (base / "hosts.yaml").write_text("\n".join(inventory) + "\n")
            files = []
            for tag in TAGS:
                files.append(base / f"policy-{tag}.yaml")
                rules = "".join(f"  - port: vif{i}.0\n    vlan: {tag}\n" for i in range(1, VIFS_PER_HOST + 1))
                files[-1].write_text("version: 1\nvifs:\n" + rules)
            env = {**os.environ, "HVNET_INVENTORY": str(base / "hosts.yaml"), "HVNET_SSH_CONFIG": str(base / "ssh_config"),
                   "HVNET_STATE_DIR": str(base / "state"), "HVNET_AUDIT_LOG": str(base / "audit.jsonl"),
                   "HVNET_LAB_DIR": str(base / "no-lab")}  # fmt: skip
            hvnet = [sys.executable, "-m", "appliance"]
            cases: dict[str, Callable[[Path], list[str]]] = {
                "one": lambda f: [*hvnet, "--host", hosts[0].name, "apply", str(f)],
                "many": lambda f: [*hvnet, "apply", str(f), "--hosts", "bench"],
            }
            times: dict[str, list[float]] = {k: [] for k in cases}
            calls = 0
            for rep in range(REPEAT + 1):  # the first round warms caches (the tc probe, page cache)
                for name, argv in cases.items():
                    calls += 1
                    tag = TAGS[calls % 2]
                    elapsed = _timed(argv(files[calls % 2]), env, ROOT)
                    covered = hosts if name == "many" else hosts[:1]
                    assert all(_tags(h) == [str(tag)] * VIFS_PER_HOST for h in covered), f"{name}: tags did not land"
                    if rep:
                        times[name].append(elapsed)
        finally:
            for h in hosts:
                h.stop()
    one, many = statistics.median(times["one"]), statistics.median(times["many"])
    ratio = many / one
    return [
        f"one policy on {N_HOSTS} hosts over SSH (median of {REPEAT} after a warm-up, same run; "
        f"{VIFS_PER_HOST} VIFs per host, every call changes them all, applied, waited for and verified)",
        f"  hvnet --host H apply FILE                {one * 1000:8.1f} ms",
        f"  hvnet apply FILE --hosts (8 hosts)       {many * 1000:8.1f} ms   ({ratio:.2f}x one host; "
        f"target <= 2x: {'MET' if ratio <= 2 else 'NOT MET'})",
    ]


def bench_remote_apply() -> list[str]:
    from run import N_PORTS, POLICY_VALUES, _policy_text, _vsctl_values, populate

    if not os.path.exists("/usr/sbin/sshd"):
        return ["remote apply over SSH: not measured (openssh-server is not installed; make setup installs it)"]
    with tempfile.TemporaryDirectory(prefix="hvnet-bench-rapply-") as tmp:
        base = Path(tmp)
        host = SshHost("fa9", base, index=49)
        try:
            host.start()
            with ovsdb.Connection.open(DbTarget(host.switch.remote, "--db"), COLUMNS) as conn:
                populate(conn, N_PORTS)
            files = []
            for k, values in enumerate(POLICY_VALUES):
                files.append(base / f"policy-{k}.yaml")
                files[-1].write_text(_policy_text(N_PORTS, *values))
            env = {**os.environ, **host.client_env, "HVNET_STATE_DIR": str(base / "state"),
                   "HVNET_AUDIT_LOG": str(base / "audit.jsonl"), "HVNET_LAB_DIR": str(base / "no-lab")}  # fmt: skip
            hvnet = [sys.executable, "-m", "appliance"]
            tail = ["--no-wait", "--policing", "tc"]
            cases: dict[str, Callable[[Path], list[str]]] = {
                "local": lambda f: [*hvnet, "--db", host.switch.remote, "apply", str(f), *tail],
                "remote": lambda f: [*hvnet, "--host", host.name, "apply", str(f), *tail],
            }
            times: dict[str, list[float]] = {k: [] for k in cases}
            calls = 0
            for rep in range(REPEAT + 1):
                for name, argv in cases.items():
                    calls += 1
                    tag, rate, _burst = POLICY_VALUES[calls % 2]
                    elapsed = _timed(argv(files[calls % 2]), env, ROOT)
                    tags = _vsctl_values(host.switch.remote, env, "Port", "tag")
                    police = _vsctl_values(host.switch.remote, env, "Interface", "ingress_policing_rate")
                    assert len(tags) == N_PORTS and set(map(tuple, tags.values())) == {(str(tag),)}, name
                    assert set(map(tuple, police.values())) == {(str(rate),)}, name
                    if rep:
                        times[name].append(elapsed)
        finally:
            host.stop()
    loc, rem = statistics.median(times["local"]), statistics.median(times["remote"])
    ratio = rem / loc
    return [
        f"a {N_PORTS}-VIF policy applied over SSH (median of {REPEAT} after a warm-up, same switch, same run; "
        "--no-wait --policing tc, every call changes every VIF)",
        f"  hvnet --db SOCKET apply FILE (local)     {loc * 1000:8.1f} ms",
        f"  hvnet --host H apply FILE (SSH)          {rem * 1000:8.1f} ms   ({ratio:.2f}x local; target <= 1.5x: "
        f"{'MET' if ratio <= 1.5 else 'NOT MET'}; a new SSH connection each run)",
    ]


if __name__ == "__main__":  # one section alone: python tests/bench/fleet_bench.py [fleet|apply]
    which = sys.argv[1:] or ["fleet", "apply"]
    if "fleet" in which:
        print("\n".join(bench_fleet()) + "\n")
    if "apply" in which:
        print("\n".join(bench_remote_apply()))
