"""Suites on real VMs over SSH: the lab's namespace guests, each with an sshd on a management link of its
own (``lab up --vm-access``), reached through the VM inventory the lab writes -- the same SSH code as
remote hosts, the address under test found inside the VM by its VIF's MAC, nothing left running after a
run, a SIGKILL or a bad inventory."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.endpoints.topology import DEFAULT_TOPOLOGY
from appliance.endpoints.topology import load as load_topology
from appliance.lab import Lab
from tests.conftest import HVNET, ROOT, links, netns_list, run_hvnet
from tests.lab.conftest import _require_root_and_ovs

DATA = Path(__file__).parent / "data"
ENDPOINTS_DIR = Path("/var/tmp/hvnet-endpoints")  # the VMs' work dirs (a namespace guest shares this file system)

pytestmark = pytest.mark.lab


@pytest.fixture(scope="module")
def vlab(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    """The default lab with every namespace guest reachable over SSH, torn down and checked gone."""
    _require_root_and_ovs()
    before_ns, before_links = netns_list(), links()
    run_dir = tmp_path_factory.mktemp("vlab") / "run"
    old = os.environ.get("HVNET_LAB_DIR")
    os.environ["HVNET_LAB_DIR"] = str(run_dir)
    the_lab = Lab(run_dir)
    try:
        the_lab.up(load_topology(DEFAULT_TOPOLOGY), vm_access=True)
        yield the_lab
    finally:
        Lab(run_dir).down()
        if old is None:
            os.environ.pop("HVNET_LAB_DIR", None)
        else:
            os.environ["HVNET_LAB_DIR"] = old
        assert not (netns_list() - before_ns) and not (links() - before_links)


def guest_programs(lab: Lab, names: tuple[str, ...] = ("netperf", "netserver")) -> dict[int, str]:
    """Processes of ``names`` in the lab's guests' namespaces (none may outlive a run)."""
    found = {}
    for guest in ("VM1", "VM2", "VM3"):
        out = subprocess.run(["ip", "netns", "pids", lab.ns_of(guest)], capture_output=True, text=True, check=False)
        for pid in out.stdout.split():
            try:
                comm = Path(f"/proc/{pid}/comm").read_text().strip()
            except OSError:
                continue
            if comm in names:
                found[int(pid)] = comm
    return found


def work_dirs() -> list[Path]:
    return sorted(ENDPOINTS_DIR.glob("*")) if ENDPOINTS_DIR.exists() else []


def test_a_suite_runs_between_two_vms_over_ssh(vlab: Lab, tmp_path: Path) -> None:
    vms = vlab.run_dir / "vms.yaml"
    out = tmp_path / "run"
    res = run_hvnet("--vms", str(vms), "suite", "run", str(DATA / "suite-vms.yaml"), "--out", str(out), timeout=300)
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads((out / "results.json").read_text())
    meta = doc["meta"]
    assert meta["client"]["runs_in"] == meta["server"]["runs_in"] == "vm-ssh"
    # the address under test was found inside each VM on the interface with its VIF's MAC: the data link's
    guests = {g.name: g for g in load_topology(DEFAULT_TOPOLOGY).guests}
    assert meta["client"]["address"] == guests["VM1"].ip.split("/")[0] and meta["client"]["vif"] == "vif1.0"
    assert meta["server"]["address"] == guests["VM2"].ip.split("/")[0] and meta["server"]["netserver_pid"]
    assert [(s["type"], s["concurrency"]) for s in doc["steps"]] == [
        ("TCP_RR", 1),
        ("TCP_RR", 4),
        ("TCP_STREAM", 1),
        ("TCP_STREAM", 4),
    ]
    for step in doc["steps"]:
        for rep in step["repetitions"]:
            assert rep["aggregate"]["lost"] == 0, rep["aggregate"]["lost_reasons"]
            assert rep["aggregate"]["sum"] > 0
            assert rep["start_spread_ms"] is not None and rep["start_spread_ms"] < 200  # the VM's own clock
            assert rep["counters"]["vif1.0"]["rx_packets"] > 0  # measured on the VM's VIF of the switch
            cpu = rep["cpu"]
            assert cpu["netperf_pct_of_core"] is None and "cpu.vms" in cpu["netperf_cpu_measured_in"]
            assert 0 < cpu["vms"]["client"]["busy_pct_of_vm"] <= 100 and cpu["vms"]["server"]["vcpus"] >= 1
    report = run_hvnet("suite", "report", str(out))
    assert "real VMs" in report.stdout and "VM CPU client/server" in report.stdout
    assert guest_programs(vlab) == {} and work_dirs() == []


def test_hvnet_killed_mid_suite_leaves_nothing_running_in_the_vms(vlab: Lab, tmp_path: Path) -> None:
    vms = vlab.run_dir / "vms.yaml"
    out = tmp_path / "killed"
    p = subprocess.Popen([*HVNET, "--vms", str(vms), "suite", "run", str(DATA / "suite-long.yaml"), "--out",
                          str(out)], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)  # fmt: skip
    try:
        deadline = time.monotonic() + 120  # mid-step: netperf instances running in VM1
        while time.monotonic() < deadline and p.poll() is None:
            if "netperf" in guest_programs(vlab).values():
                break
            time.sleep(0.1)
        assert "netserver" in guest_programs(vlab).values(), p.stdout.read() if p.poll() is not None else ""
        p.send_signal(signal.SIGKILL)
        p.wait(timeout=10)
    finally:
        if p.poll() is None:
            p.kill()
            p.wait()
    # the VM's shell read end-of-file when hvnet's SSH connection closed: it stopped what it had started
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and (guest_programs(vlab) or work_dirs()):
        time.sleep(0.2)
    assert guest_programs(vlab) == {} and work_dirs() == []
    # and the next run on those VMs runs
    res = run_hvnet("--vms", str(vms), "suite", "run", str(DATA / "suite-vms-tiny.yaml"), "--out", str(tmp_path / "next"),
                    timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr


def test_a_suite_mixing_a_probe_and_a_vm(vlab: Lab, tmp_path: Path) -> None:
    out = tmp_path / "mixed"
    res = run_hvnet("--vms", str(vlab.run_dir / "vms.yaml"), "suite", "run", str(DATA / "suite-probe-vm.yaml"),
                    "--out", str(out), timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    meta = json.loads((out / "results.json").read_text())["meta"]
    assert meta["client"]["runs_in"] == "probe" and meta["server"]["runs_in"] == "vm-ssh"
    assert meta["client"]["address"] == "192.168.0.160" and meta["server"]["address"] == "192.168.0.151"
    assert "hvp-P1" not in subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout
    assert guest_programs(vlab) == {} and work_dirs() == []


def test_the_2010_isolation_scenario_runs_on_vms_over_ssh_both_methods(vlab: Lab, tmp_path: Path) -> None:
    """Senders and listeners inside the VMs: tcpdump on the interface with the VIF's MAC, probes from a raw
    socket there, the pcaps read back; the same verdicts as the lab's own source, and a leak still caught."""
    vms = str(vlab.run_dir / "vms.yaml")
    scenario = str(ROOT / "vlan-tests" / "seed-three-vm.yaml")
    res = run_hvnet("--vms", vms, "isolation", "check", scenario, "--json", "--out", str(tmp_path / "ok"),
                    timeout=300)  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    out = json.loads(res.stdout)
    for method in ("traffic", "trace"):
        obs = {(c["listener"], c["sender"]): c["value"] for c in out["methods"][method]["observed"]}
        assert obs[("VM2", "VM1")] == obs[("VM1", "VM2")] == "yes", (method, obs)
        assert obs[("VM3", "VM1")] == obs[("VM1", "VM3")] == obs[("VM3", "VM2")] == "no", (method, obs)
    stats = out["methods"]["traffic"]["stats"]
    assert stats["dropped"] == {"VM1": 0, "VM2": 0, "VM3": 0}  # each VM's tcpdump's own counts came back
    assert {p.name for p in (tmp_path / "ok").iterdir()} == {"VM1.pcap", "VM2.pcap", "VM3.pcap"}
    vlab.switch.vsctl("clear", "Port", "vif3.0", "tag")  # a leak, made by another tool
    try:
        res = run_hvnet("--vms", vms, "isolation", "check", scenario, "--json", "--method", "traffic", "--out",
                        str(tmp_path / "leak"), timeout=300)  # fmt: skip
    finally:
        vlab.switch.vsctl("set", "Port", "vif3.0", "tag=2")
    assert res.returncode == 1, res.stdout + res.stderr
    verdicts = {(c["listener"], c["sender"]): c["value"] for c in json.loads(res.stdout)["methods"]["traffic"]
                ["verdicts"]}  # fmt: skip
    assert verdicts[("VM3", "VM1")] == "leak" and verdicts[("VM1", "VM2")] == "ok"
    assert guest_programs(vlab, ("tcpdump", "python3")) == {} and work_dirs() == []


def _inventory(tmp_path: Path, vlab: Lab, **vm1: object) -> Path:
    import yaml

    doc = yaml.safe_load((vlab.run_dir / "vms.yaml").read_text())
    doc["vms"][0].update(vm1)
    doc["vms"][0] = {k: v for k, v in doc["vms"][0].items() if v is not None}
    f = tmp_path / "vms.yaml"
    f.write_text(yaml.safe_dump(doc))
    return f


def test_bad_vms_are_refused_by_name_and_change_nothing(vlab: Lab, tmp_path: Path) -> None:
    suite = str(DATA / "suite-vms.yaml")
    # a VM name holding shell text, unknown to the switch: data, shown as given (exit 2); one holding a
    # terminal control character: refused where the file says it, before anything is contacted
    bad = _inventory(tmp_path, vlab, vif=None, vm="x'; touch /tmp/hvnet-owned; $(id)")
    res = run_hvnet("--vms", str(bad), "suite", "run", suite, "--out", str(tmp_path / "a"))
    assert res.returncode == 2 and "VM VM1" in res.stderr and "x'; touch /tmp/hvnet-owned; $(id)" in res.stderr
    assert not Path("/tmp/hvnet-owned").exists()
    res = run_hvnet("--vms", str(_inventory(tmp_path, vlab, vm="evil\u202e-1")), "suite", "run", suite)
    assert res.returncode == 2 and "vms[0].vm" in res.stderr and "U+202E" in res.stderr and "\u202e" not in res.stderr
    # a changed host key: refused with its fingerprint (exit 3)
    known = tmp_path / "known_hosts"
    real = (vlab.run_dir / "vm-access" / "known_hosts").read_text().splitlines()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "other")], check=True)
    other = (tmp_path / "other.pub").read_text().split()[:2]
    known.write_text("\n".join(f"{ln.split()[0]} {' '.join(other)}" for ln in real if ln.strip()) + "\n")
    res = run_hvnet("--vms", str(_inventory(tmp_path, vlab, known_hosts=str(known))), "suite", "run", suite,
                    "--out", str(tmp_path / "b"))  # fmt: skip
    assert res.returncode == 3 and "VM VM1" in res.stderr and "SHA256:" in res.stderr, res.stderr
    # unreachable: exit 3 naming the VM
    res = run_hvnet("--vms", str(_inventory(tmp_path, vlab, ssh="192.0.2.1", ssh_config=None)), "suite", "run",
                    suite, "--out", str(tmp_path / "c"), timeout=120)  # fmt: skip
    assert res.returncode == 3 and "VM VM1" in res.stderr, res.stderr
    # a name the suite uses that the inventory lacks: exit 2 listing what it has
    only = tmp_path / "only-vm1.yaml"
    only.write_text((vlab.run_dir / "vms.yaml").read_text().split("- name: VM2")[0])
    res = run_hvnet("--vms", str(only), "suite", "run", suite, "--out", str(tmp_path / "d"))
    assert res.returncode == 2 and "'VM2' is not a VM of the VM inventory" in res.stderr, res.stderr
    # an invalid inventory: file:line and field, before any VM is contacted
    broken = tmp_path / "broken.yaml"
    broken.write_text("vms:\n  - name: VM1\n    ssh: 'a;reboot'\n")
    res = run_hvnet("--vms", str(broken), "suite", "run", suite, "--out", str(tmp_path / "e"))
    assert res.returncode == 2 and f"{broken}:3" in res.stderr and "vms[0].ssh" in res.stderr, res.stderr
    assert guest_programs(vlab) == {} and work_dirs() == []
    for d in "abcde":
        assert not (tmp_path / d / "results.json").exists()
