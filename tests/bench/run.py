#!/usr/bin/env python3
"""hvnet benchmarks (``make bench``): figures measured side by side in one run.

These machines are shared and noisy, so every figure is printed next to its
reference measured in the same run on the same database, and targets are
ratios, never absolute times.  Each measurement is the median of several
interleaved repetitions.
"""

from __future__ import annotations

import compileall
import importlib
import os
import shutil
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
from appliance.frontdoor.hosts import build_host  # noqa: E402
from appliance.lab.switch import Switch  # noqa: E402
from appliance.switch import api  # noqa: E402
from appliance.switch.host import Host  # noqa: E402
from appliance.switch.reader import COLUMNS  # noqa: E402

N_PORTS = 1000
REPEAT = 7
STATUS_TARGET = 2.5  # hvnet status --json over ovs-vsctl list Interface: start-up loads only what status uses


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


def measure(
    cases: dict[str, Callable[[], object]],
    repeat: int = REPEAT,
    *,
    before: Callable[[str], object] | None = None,
    after: Callable[[str], object] | None = None,
    once: dict[str, Callable[[], object]] | None = None,
) -> dict[str, float]:
    """Median seconds per case, repetitions interleaved so noise hits all alike.

    ``before(name)`` and ``after(name)`` run untimed around every call of a
    case (to let a replica catch up, to check the result).  ``once`` cases
    are too slow to repeat: each is timed a single time, without a warm-up,
    in the middle round among the others.
    """

    def sample(name: str, fn: Callable[[], object]) -> float:
        if before is not None:
            before(name)
        elapsed = median_time(fn)
        if after is not None:
            after(name)
        return elapsed

    samples: dict[str, list[float]] = {k: [] for k in cases}
    single: dict[str, float] = {}
    for name, fn in cases.items():
        sample(name, fn)  # warm-up (page cache, imports)
    for rep in range(repeat):
        if rep == repeat // 2:
            for name, fn in (once or {}).items():
                single[name] = sample(name, fn)
        for name, fn in cases.items():
            samples[name].append(sample(name, fn))
    return {k: statistics.median(v) for k, v in samples.items()} | single


def bench_inventory() -> list[str]:
    with tempfile.TemporaryDirectory(prefix="hvnet-bench-") as tmp:
        sw = Switch(Path(tmp) / "ovs")
        sw.start(vswitchd=False)
        try:
            target = DbTarget(sw.remote, "--db")
            host = Host(target)
            with ovsdb.Connection.open(target, COLUMNS) as conn:
                populate(conn, N_PORTS)
                conn.run_once()
                env = {**os.environ, **sw.env, "HVNET_LAB_DIR": str(Path(tmp) / "no-lab")}
                vsctl = ["ovs-vsctl", f"--db={sw.remote}", "--no-wait", "list", "Interface"]
                status = [sys.executable, "-m", "appliance", "--db", sw.remote, "status", "--json"]

                def run(argv: list[str], cwd: Path = ROOT, **extra: str) -> Callable[[], object]:
                    return lambda: subprocess.run(
                        argv, env={**env, **extra}, cwd=cwd, check=True, stdout=subprocess.DEVNULL
                    )

                def refresh() -> object:
                    inv = api.read_inventory(conn, host)
                    assert len(inv.vifs) == N_PORTS
                    return inv

                cached, uncached = _package_copies(Path(tmp))
                t = measure(
                    {
                        "vsctl": run(vsctl),
                        "status": run(status, cached, PYTHONPATH=str(cached)),
                        "status_uncached": run(status, uncached, PYTHONPATH=str(uncached), PYTHONDONTWRITEBYTECODE="1"),
                        "refresh": refresh,
                    }
                )
        finally:
            sw.stop()
    ratio = t["refresh"] / t["vsctl"]

    def status_line(what: str, key: str) -> str:
        r = t[key] / t["vsctl"]
        return (
            f"  {'hvnet status --json, ' + what:<45}{t[key] * 1000:8.1f} ms   "
            f"({r:.2f}x the reference; target <= {STATUS_TARGET}x: {'MET' if r <= STATUS_TARGET else 'NOT MET'})"
        )

    return [
        f"inventory, one bridge with {N_PORTS} VIFs (median of {REPEAT}, same database, same run)",
        f"  {'ovs-vsctl list Interface (reference)':<45}{t['vsctl'] * 1000:8.1f} ms",
        "  hvnet status end to end, Python start-up included, hvnet's bytecode cache present and absent:",
        status_line("bytecode cached", "status"),
        status_line("no bytecode cache", "status_uncached"),
        f"  {'in-process inventory refresh':<45}{t['refresh'] * 1000:8.1f} ms   "
        f"({ratio:.2f}x the reference; target <= 3x: {'MET' if ratio <= 3 else 'NOT MET'})",
        f"  C JSON parser in use: {'yes' if ovsdb.c_json_parser_in_use() else 'no'}",
    ]


def _package_copies(tmp: Path) -> tuple[Path, Path]:
    """Two copies of the ``appliance`` package for ``hvnet status`` to run from: one with its bytecode
    compiled (a host where hvnet ran before, or a package that ships .pyc files), one without any (the
    first run after an install that ships none, or a read-only tree: every module compiled at start-up).
    Copies, so that neither depends on what this checkout's ``__pycache__`` holds; the standard library
    and site-packages keep their own cache in both."""
    out = []
    for name in ("cached", "uncached"):
        root = tmp / name
        shutil.copytree(ROOT / "appliance", root / "appliance", ignore=shutil.ignore_patterns("__pycache__"))
        out.append(root)
    assert compileall.compile_dir(out[0] / "appliance", quiet=1), "the copy did not compile"
    return out[0], out[1]


# (VLAN tag, ingress rate kbit/s, burst kbit): the policy alternates between
# these so that every repetition changes every VIF.
POLICY_VALUES = ((10, 10000, 8000), (20, 20000, 16000))


def _policy_text(n: int, tag: int, rate: int, burst: int) -> str:
    lines = ["version: 1", "vifs:"]
    for i in range(1, n + 1):
        lines += [f"  - port: vif{i}.0", f"    vlan: {tag}", f"    ingress: {{rate: {rate}, burst: {burst}}}"]
    return "\n".join(lines) + "\n"


def _vsctl_commands(n: int, tag: int, rate: int, burst: int) -> list[list[str]]:
    out = []
    for i in range(1, n + 1):
        out.append(["set", "port", f"vif{i}.0", f"tag={tag}"])
        out.append(
            ["set", "interface", f"vif{i}.0", f"ingress_policing_rate={rate}", f"ingress_policing_burst={burst}"]
        )
    return out


def _vsctl_values(remote: str, env: dict[str, str], table: str, columns: str) -> dict[str, list[str]]:
    """``name -> [other columns]`` for the VIF rows of ``table``, as ovs-vsctl reports them."""
    out = subprocess.run(
        ["ovs-vsctl", f"--db={remote}", "--no-wait", "--format=csv", "--data=bare", "--no-headings",
         f"--columns=name,{columns}", "list", table],
        env=env, check=True, capture_output=True, text=True,
    ).stdout  # fmt: skip
    rows = (line.split(",") for line in out.splitlines() if line)
    return {r[0].strip('"'): r[1:] for r in rows if r[0].strip('"').startswith("vif")}


def _replica_matches(conn: ovsdb.Connection, values: tuple[int, int, int]) -> bool:
    tag, rate, burst = values
    ports = [p for p in conn.idl.tables["Port"].rows.values() if ovsdb.column(p, "name").startswith("vif")]
    ifaces = [i for i in conn.idl.tables["Interface"].rows.values() if ovsdb.column(i, "name").startswith("vif")]
    return (
        len(ports) == len(ifaces) == N_PORTS
        and all(ovsdb.column(p, "tag") == [tag] for p in ports)
        and all(
            ovsdb.column(i, "ingress_policing_rate") == rate and ovsdb.column(i, "ingress_policing_burst") == burst
            for i in ifaces
        )
    )


def bench_policy() -> list[str]:
    from appliance.policy import COLUMNS as POLICY_COLUMNS
    from appliance.policy import PolicyEngine
    from appliance.policy import parse as parse_policy

    with tempfile.TemporaryDirectory(prefix="hvnet-bench-policy-") as tmp:
        hvnet_env = {
            "HVNET_LAB_DIR": str(Path(tmp) / "no-lab"),
            "HVNET_AUDIT_LOG": str(Path(tmp) / "audit.jsonl"),
            "HVNET_STATE_DIR": str(Path(tmp) / "state"),
        }
        files = []
        for k, values in enumerate(POLICY_VALUES):
            files.append(Path(tmp) / f"policy-{k}.yaml")
            files[-1].write_text(_policy_text(N_PORTS, *values))
        sw = Switch(Path(tmp) / "ovs")
        sw.start(vswitchd=False)
        try:
            target = DbTarget(sw.remote, "--db")
            with ovsdb.Connection.open(target, COLUMNS) as conn:
                populate(conn, N_PORTS)
            env = {**os.environ, **sw.env, **hvnet_env}
            vsctl = ["ovs-vsctl", f"--db={sw.remote}", "--no-wait"]
            cmds = [_vsctl_commands(N_PORTS, *values) for values in POLICY_VALUES]
            parse_start = time.perf_counter()
            policies = [parse_policy(f.read_text(), str(f)) for f in files]
            parse_s = (time.perf_counter() - parse_start) / len(files)
            # Every call applies the other value set than the call before it, whichever case made it.
            last = -1  # index into POLICY_VALUES of what the previous call applied

            def values_for_call() -> int:
                nonlocal last
                last = 1 if last == 0 else 0
                return last

            def loop() -> None:
                for cmd in cmds[values_for_call()]:
                    subprocess.run([*vsctl, *cmd], env=env, check=True, stdout=subprocess.DEVNULL)

            def batch() -> None:
                argv = list(vsctl)
                for i, cmd in enumerate(cmds[values_for_call()]):
                    argv += ["--", *cmd] if i else cmd
                subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)

            def cli() -> None:
                f = files[values_for_call()]
                argv = [sys.executable, "-m", "appliance", "--db", sw.remote, "apply", str(f), "--no-wait",
                        "--policing", "tc"]  # fmt: skip
                subprocess.run(argv, env=env, cwd=ROOT, check=True, stdout=subprocess.DEVNULL)

            host = build_host(sw.remote, environ=hvnet_env)
            with ovsdb.Connection.open(target, POLICY_COLUMNS) as pconn:
                engine = PolicyEngine(pconn, host, command="hvnet bench")
                engine.force_policing = "tc"

                def in_process() -> None:
                    result = engine.apply(policies[values_for_call()], wait=False, verify=False)
                    assert result.status == "applied" and len(result.plan.changes) == 2 * N_PORTS, result.status

                def before(name: str) -> None:
                    # The agent's replica follows the server in the background; bring this one
                    # up to date with the previous case's change outside the timed part.
                    if name == "in_process" and last >= 0:
                        want = POLICY_VALUES[last]
                        assert pconn.wait_for(lambda: _replica_matches(pconn, want), 10), "replica did not catch up"

                def after(name: str) -> None:
                    tag, rate, burst = POLICY_VALUES[last]
                    tags = _vsctl_values(sw.remote, env, "Port", "tag")
                    police = _vsctl_values(sw.remote, env, "Interface", "ingress_policing_rate,ingress_policing_burst")
                    assert len(tags) == len(police) == N_PORTS, f"{name}: VIFs missing"
                    assert all(v == [str(tag)] for v in tags.values()), f"{name}: tags did not land"
                    assert all(v == [str(rate), str(burst)] for v in police.values()), f"{name}: policing did not land"

                t = measure(
                    {"batch": batch, "cli": cli, "in_process": in_process},
                    before=before,
                    after=after,
                    once={"loop": loop},
                )
        finally:
            sw.stop()
    n_cmds = 2 * N_PORTS
    loop_vs_cli = t["loop"] / t["cli"]
    inproc_vs_batch = t["in_process"] / t["batch"]
    (tag0, rate0, burst0), (tag1, rate1, burst1) = POLICY_VALUES
    return [
        f"policy apply, {N_PORTS} VIFs each given a VLAN tag and ingress policing "
        f"(median of {REPEAT} unless noted, same database, same run)",
        "  ovsdb-server only, so every case runs with --no-wait; policing by the tc mechanism, i.e. the Interface",
        f"  columns ingress_policing_rate/_burst, the same work ovs-vsctl does; every call changes all {N_PORTS} VIFs",
        f"  (tag/rate/burst alternate {tag0}/{rate0}/{burst0} and {tag1}/{rate1}/{burst1}) "
        "and is checked with ovs-vsctl afterwards",
        f"  (a) ovs-vsctl, one call per command          {t['loop'] * 1000:9.1f} ms   "
        f"({n_cmds} calls, {t['loop'] / n_cmds * 1000:.1f} ms each; measured once, in full, not extrapolated)",
        f"  (b) ovs-vsctl, one call with {n_cmds} commands  {t['batch'] * 1000:9.1f} ms",
        f"  (c) hvnet apply FILE --no-wait --policing tc {t['cli'] * 1000:9.1f} ms   "
        "(end to end: Python start-up, initial sync, parsing, plan, commit, audit)",
        f"  (d) in-process PolicyEngine.apply            {t['in_process'] * 1000:9.1f} ms   "
        "(connection open and in sync, as the agent/TUI hold it: plan, commit, audit;",
        f"      parsing the policy file beforehand, not included: {parse_s * 1000:.1f} ms)",
        f"  a/c = {loop_vs_cli:5.1f}x   (target >= 20x: {'MET' if loop_vs_cli >= 20 else 'NOT MET'})",
        f"  d/b = {inproc_vs_batch:5.2f}x   (target <= 2x: {'MET' if inproc_vs_batch <= 2 else 'NOT MET'})",
        "  meter policing (OpenFlow meters): see the OpenFlow pipeline figures below",
    ]


def bench_pipeline() -> list[str]:
    """1000 VIFs' meters and flows through hvnet's pipeline, beside the batched ovs-vsctl baseline.

    The baseline is (b) of the policy apply above, measured again here in the
    same rounds: one ovs-vsctl call setting 1000 tags and 1000 policing
    limits.  hvnet's case installs 1000 meters and their flows from nothing
    (the switch is cleared untimed before each call): one OpenFlow session
    for the meters, one bundle for the flows, and the reads before them.
    """
    from appliance.policy.apply.openflow import OpenFlow, Wanted

    with tempfile.TemporaryDirectory(prefix="hvnet-bench-of-") as tmp:
        db_sw = Switch(Path(tmp) / "db")
        of_sw = Switch(Path(tmp) / "of")
        db_sw.start(vswitchd=False)
        try:
            of_sw.start()
            of_sw.vsctl("add-br", "brof", "--", "set", "bridge", "brof", "datapath_type=netdev")
            with ovsdb.Connection.open(DbTarget(db_sw.remote, "--db"), COLUMNS) as conn:
                populate(conn, N_PORTS)
            env = {**os.environ, **db_sw.env}
            vsctl = ["ovs-vsctl", f"--db={db_sw.remote}", "--no-wait"]
            cmds = [_vsctl_commands(N_PORTS, *values) for values in POLICY_VALUES]
            of = OpenFlow(of_sw.run_dir)
            sock = f"unix:{of_sw.run_dir / 'brof.mgmt'}"
            ofctl = ["ovs-ofctl", "-O", "OpenFlow13"]
            calls = {"batch": 0, "meters": 0}

            def batch() -> None:
                argv = list(vsctl)
                for i, cmd in enumerate(cmds[calls["batch"] % 2]):
                    argv += ["--", *cmd] if i else cmd
                calls["batch"] += 1
                subprocess.run(argv, env=env, check=True, stdout=subprocess.DEVNULL)

            def want() -> dict[int, Wanted]:
                _, rate, burst = POLICY_VALUES[calls["meters"] % 2]
                return {i: Wanted(f"vif{i}.0", i, rate, burst) for i in range(1, N_PORTS + 1)}

            def meters() -> None:
                res = of.sync("brof", want())
                calls["meters"] += 1
                assert len(res.added) == N_PORTS and res.pipeline

            def one_per_meter() -> None:
                for ofport, w in want().items():
                    spec = (
                        f"meter={ofport},kbps,burst,stats,bands=type=drop,rate={w.rate_kbps},burst_size={w.burst_kbit}"
                    )
                    subprocess.run([*ofctl, "add-meter", sock, spec], env=of_sw.env | dict(os.environ), check=True)
                flows = "".join(f"in_port={i},actions=meter:{i},NORMAL\n" for i in range(1, N_PORTS + 1))
                subprocess.run([*ofctl, "add-flows", sock, "-"], input=flows, text=True, check=True)

            def clear(name: str) -> None:
                if name in ("meters", "one_per_meter"):
                    subprocess.run([*ofctl, "del-flows", sock], check=True)
                    subprocess.run([*ofctl, "del-meters", sock], check=True)

            def check(name: str) -> None:
                if name in ("meters", "one_per_meter"):
                    out = subprocess.run([*ofctl, "dump-meters", sock], capture_output=True, text=True, check=True)
                    assert out.stdout.count("meter=") == N_PORTS, f"{name}: meters missing"

            t = measure({"batch": batch, "meters": meters}, before=clear, after=check,
                        once={"one_per_meter": one_per_meter})  # fmt: skip
        finally:
            # a netdev bridge's tap outlives ovs-vswitchd unless the bridge is deleted first
            of_sw.vsctl("--if-exists", "del-br", "brof", check=False)
            of_sw.stop()
            db_sw.stop()
    ratio = t["meters"] / t["batch"]
    return [
        f"OpenFlow pipeline, {N_PORTS} VIFs' meters and flows installed from nothing "
        f"(median of {REPEAT} unless noted, same run)",
        f"  (b) ovs-vsctl, one call with {2 * N_PORTS} commands (baseline)  {t['batch'] * 1000:9.1f} ms",
        f"  (m) hvnet meters + pipeline bundle                    {t['meters'] * 1000:9.1f} ms   "
        f"(m/b = {ratio:.2f}x; target <= 2x: {'MET' if ratio <= 2 else 'NOT MET'})",
        f"  (o) ovs-ofctl add-meter, one call per meter           {t['one_per_meter'] * 1000:9.1f} ms   "
        "(the old way, measured once, in full)",
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
                host = Host(DbTarget(lab.db, "lab"))
                guests = lab.require(sc.topology, list(sc.guests))
                with ovsdb.Connection.open(DbTarget(lab.db, "lab"), COLUMNS) as conn:
                    for rep in range(4):
                        start = time.perf_counter()
                        res = check.run_check(conn, host, guests, sc, ("traffic",), Path(tmp) / f"out{n}-{rep}")
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
            host = Host(DbTarget(lab.db, "lab"))
            guests = lab.require(many.topology, list(many.guests))
            with ovsdb.Connection.open(DbTarget(lab.db, "lab"), COLUMNS) as conn:
                res = check.run_check(conn, host, guests, many, check.METHODS, Path(tmp) / "out-many")
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


def _sections() -> dict[str, Callable[[], list[str]]]:
    """Every section by name, in the order ``make bench`` runs them; a section's module is imported when it runs."""

    def beside(module: str, name: str) -> Callable[[], list[str]]:
        return lambda: getattr(importlib.import_module(module), name)()

    return {
        "inventory": bench_inventory,
        "policy": bench_policy,
        "pipeline": bench_pipeline,
        "agent": beside("agent_latency", "bench_agent"),
        "isolation": bench_isolation,
        "audit": beside("audit_bench", "bench_audit"),
        "remote": beside("remote_bench", "bench_remote"),
        "fleet": beside("fleet_bench", "bench_fleet"),
        "remote-apply": beside("fleet_bench", "bench_remote_apply"),
        "tui": beside("tui_bench", "bench_tui"),
        "netperf": beside("netperf_bench", "bench_netperf"),
        "remote-launch": beside("endpoints_bench", "bench_remote_launch"),
        "ovn": beside("ovn_bench", "bench_ovn"),
        "ovn-1000": beside("ovn_bench", "bench_ovn_1000"),
        "probes": beside("probes_bench", "bench_probes"),
        "vm-boot": beside("vm_bench", "bench_boot"),
        "vm-rr": beside("vm_bench", "bench_vm_rr"),
        "vms-ssh": beside("vms_bench", "bench_vms_ssh"),
        "vms-agent": beside("vms_bench", "bench_vms_agent"),
        "kernel-police": beside("kernel_police_bench", "bench_kernel_police"),
    }


def main(argv: list[str]) -> int:
    """``run.py`` runs every section; ``run.py inventory policy`` only those (``run.py --list`` names them)."""
    sections = _sections()
    if argv == ["--list"]:
        print("\n".join(sections))
        return 0
    unknown = [a for a in argv if a not in sections]
    if unknown:
        print(f"bench: no section {', '.join(unknown)} (run.py --list names them)", file=sys.stderr)
        return 2
    if os.geteuid() != 0:
        print("bench: needs root (it starts a private ovsdb-server)", file=sys.stderr)
        return 1
    print("hvnet benchmarks\n")
    for i, name in enumerate(argv or sections):
        if i:
            print()
        for line in sections[name]():
            print(line)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
