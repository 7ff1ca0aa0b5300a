"""A lab OVN pool (vlan-tests/topologies/ovn-pool.yaml): central NB/SB and ovn-northd here, a chassis
(ovn-controller) in each of three lab hosts, the 2010 study's VLANs as two logical switches, Geneve
between the chassis; 'lab down' stops every daemon it started and leaves nothing behind."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.core import documents
from appliance.lab import Lab, ovn
from tests import jsonschemas
from tests.conftest import ROOT, run_hvnet
from tests.lab.conftest import lab_up

pytestmark = pytest.mark.skipif(
    not (os.path.exists("/usr/sbin/sshd") and shutil.which("ovn-controller") and shutil.which("ovn-northd")),
    reason="openssh-server, ovn-central and ovn-host (make setup installs them)",
)

TOPOLOGY = ROOT / "vlan-tests" / "topologies" / "ovn-pool.yaml"


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    run_dir = tmp_path_factory.mktemp("ovn-pool") / "run"
    with lab_up(TOPOLOGY, run_dir) as lab:
        daemons = lab.status()["daemons"]
        pids = [pid for name, pid in daemons.items() if "ovn" in name]
        yield lab
    assert len(pids) == 6 and all(pid is not None for pid in pids), daemons
    assert all(not Path(f"/proc/{pid}").exists() or _zombie(pid) for pid in pids), pids
    assert not run_dir.exists()


def _zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except OSError:
        return True


def _ping(guest: str, address: str) -> int:
    """Replies to five pings (the first may go while the chassis installs the flow)."""
    out = subprocess.run(["ip", "netns", "exec", f"hvnet-{guest}", "ping", "-c", "5", "-i", "0.2", "-W", "1",
                          address], capture_output=True, text=True, check=False).stdout  # fmt: skip
    for line in out.splitlines():
        if "received" in line:
            return int(line.split(",")[1].split()[0])
    raise AssertionError(out)


def test_guests_on_one_logical_switch_meet_across_chassis_and_no_one_else(pool: Lab) -> None:
    assert _ping("VM1", "192.168.0.151") >= 3  # VM1 on hv1 to VM2 on hv2, both on vlan1
    assert _ping("VM2", "192.168.0.150") >= 3
    assert _ping("VM1", "192.168.0.152") == 0  # VM3 on hv3 is alone on vlan2
    assert _ping("VM3", "192.168.0.151") == 0


def test_each_port_is_bound_to_its_hosts_chassis_and_the_chassis_are_tunnelled(pool: Lab) -> None:
    c = ovn.central(pool.run_dir)
    chassis = {r["name"]: r for r in _rows(c.sbctl("--format=json", "list", "Chassis"))}
    assert sorted(chassis) == ["hv1", "hv2", "hv3"]
    bindings = {r["logical_port"]: r["chassis"][1] for r in _rows(c.sbctl("--format=json", "list", "Port_Binding"))}
    by_uuid = {r["_uuid"][1]: name for name, r in chassis.items()}
    t = pool.state
    want = {g["vm_uuid"]: g["host"] for g in t["guests"]}
    names = {r["name"]: r["external_ids"] for r in _rows(c.nbctl("--format=json", "list", "Logical_Switch_Port"))}
    assert len(names) == 3
    for lsp, ids in names.items():
        vm = dict(ids[1])["hvnet-vm"]
        host = next(g["host"] for g in t["guests"] if g["name"] == vm)
        assert by_uuid[bindings[lsp]] == host, (lsp, vm)
    assert len(want) == 3
    for name, h in pool._hosts().items():
        tunnels = h.switch.vsctl("--bare", "--columns=options", "find", "Interface", "type=geneve").split("\n")
        remotes = sorted(o.split("remote_ip=")[1].split(",")[0].strip('"}') for o in tunnels if "remote_ip" in o)
        others = [ovn.underlay_address(i) for i, n in enumerate(pool._hosts(), start=1) if n != name]
        assert remotes == others, (name, tunnels)


def test_the_lab_reports_the_pools_daemons_and_hvnet_reaches_each_chassis(pool: Lab) -> None:
    env = {"HVNET_LAB_DIR": str(pool.run_dir)}
    res = run_hvnet("lab", "status", "--json", env=env)
    assert res.returncode == 0, res.stderr
    daemons = json.loads(res.stdout)["daemons"]
    assert all(daemons[k] for k in ("ovn nb", "ovn sb", "ovn northd", "hv3 ovn-controller")), daemons
    res = run_hvnet("--host", "hv3", "status", "--json", env=env)
    assert res.returncode == 0, res.stderr
    vifs = [v for v in json.loads(res.stdout)["vifs"] if v["is_vif"]]
    assert [(v["port"], v["vm_name"]) for v in vifs] == [("vif3.0", "VM3")]
    lsp = ovn.central(pool.run_dir).nbctl("--bare", "--columns=name", "find", "Logical_Switch_Port",
                                          "external_ids:hvnet-vm=VM3").strip()  # fmt: skip
    assert vifs[0]["ovn_port"] == lsp and lsp, (vifs[0]["ovn_port"], lsp)
    # OVN, not the port's (absent) tag, decides what the VIF reaches: no "carries EVERY VLAN" warning
    res = run_hvnet("--host", "hv3", "status", env=env)
    assert res.returncode == 0, res.stderr
    assert "EVERY VLAN" not in res.stdout and " OVN " in res.stdout, res.stdout


def _rows(text: str) -> list[dict]:
    doc = json.loads(text)
    return [dict(zip(doc["headings"], row)) for row in doc["data"]]


def test_the_pool_status_names_each_ports_vm_and_chassis(pool: Lab) -> None:
    res = run_hvnet("--pool", "ovn-pool", "status", "--json", env={"HVNET_LAB_DIR": str(pool.run_dir)})
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    jsonschemas.check(documents.POOL_STATUS, doc)  # the real output is what docs/reference/json.md publishes
    seen = {p["vm"]: (s["name"], p["chassis"], p["up"]) for s in doc["switches"] for p in s["ports"]}
    assert seen == {"VM1": ("vlan1", "hv1", True), "VM2": ("vlan1", "hv2", True), "VM3": ("vlan2", "hv3", True)}
    assert doc["behind"] == [] and doc["notes"] == [] and doc["nb_cfg"] == doc["hv_cfg"]


def test_a_pool_whose_nb_is_unreachable_exits_3(tmp_path: Path) -> None:
    inv = tmp_path / "hosts.yaml"
    inv.write_text(
        f"hosts: []\npools:\n  - {{name: gone, nb: 'unix:{tmp_path}/nb.sock', sb: 'unix:{tmp_path}/sb.sock'}}\n"
    )
    res = run_hvnet("--pool", "gone", "status", env={"HVNET_INVENTORY": str(inv)})
    assert res.returncode == 3, res.stdout + res.stderr
    assert "cannot reach OVSDB" in res.stderr and "Traceback" not in res.stderr


POLICY = """\
version: 1
vifs:
  - vm: VM1
    ingress: {rate: 10000, burst: 1000}
  - vm: VM2
    egress: {rate: 20000}
"""


def _stream_mbps(pool: Lab) -> float:
    """TCP_STREAM from VM1 (hv1) to VM2 (hv2) through Geneve, Mbit/s."""
    server = subprocess.Popen(["ip", "netns", "exec", "hvnet-VM2", "netserver", "-D", "-p", "12866"],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)  # fmt: skip
    try:
        for _ in range(50):  # until netserver listens
            ss = subprocess.run(["ip", "netns", "exec", "hvnet-VM2", "ss", "-ltnH", "sport", "=", ":12866"],
                                capture_output=True, text=True, check=False).stdout  # fmt: skip
            if ss.strip():
                break
            time.sleep(0.1)
        out = subprocess.run(["ip", "netns", "exec", "hvnet-VM1", "netperf", "-H", "192.168.0.151", "-p", "12866",
                              "-l", "3", "-t", "TCP_STREAM", "-P", "0"], capture_output=True, text=True,
                             timeout=30, check=True).stdout  # fmt: skip
    finally:
        server.terminate()
        server.wait(timeout=10)
    return float(out.split()[-1])


def test_policing_applies_as_qos_rules_acknowledged_and_metered_on_the_binding_chassis(
    pool: Lab, tmp_path: Path
) -> None:
    env = {"HVNET_LAB_DIR": str(pool.run_dir)}
    before = _stream_mbps(pool)
    policy = tmp_path / "pool.yaml"
    policy.write_text(POLICY)
    res = run_hvnet("--pool", "ovn-pool", "apply", str(policy), "--json", env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    jsonschemas.check(documents.POOL_OUTCOME, doc)
    assert doc["behind"] == [] and doc["nb_cfg"] and len(doc["changes"]) == 2
    assert {(e["vm"], e["chassis"], e["state"]) for e in doc["enforced"]} == {
        ("VM1", "hv1", "enforced"), ("VM2", "hv2", "enforced")}  # fmt: skip
    # the meter is real: VM1's stream is held near 10 Mbit/s
    after = _stream_mbps(pool)
    assert after < 13.0 < before, (before, after)
    res = run_hvnet("--pool", "ovn-pool", "verify", str(policy), env=env)
    assert res.returncode == 0 and "already matches" in res.stdout, res.stdout + res.stderr
    # no change twice: nothing committed
    res = run_hvnet("--pool", "ovn-pool", "apply", str(policy), "--json", env=env)
    assert res.returncode == 0 and json.loads(res.stdout)["nb_cfg"] is None, res.stdout


def test_what_a_pool_cannot_take_is_refused_with_file_line_and_nothing_changes(pool: Lab, tmp_path: Path) -> None:
    env = {"HVNET_LAB_DIR": str(pool.run_dir)}
    c = ovn.central(pool.run_dir)
    before = c.nbctl("--bare", "--columns=_uuid", "list", "QoS")
    bad = tmp_path / "bad.yaml"
    bad.write_text("version: 1\nvifs:\n  - vm: VM1\n    vlan: {tag: 5}\n  - vm: VMX\n    ingress: {rate: 1000}\n")
    res = run_hvnet("--pool", "ovn-pool", "apply", str(bad), env=env)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "bad.yaml:4: vifs[0].vlan: VLAN 5: no logical switch of pool ovn-pool stands for it" in res.stderr
    assert "bad.yaml:5: vifs[1]: vm VMX selects no port of pool ovn-pool" in res.stderr
    assert c.nbctl("--bare", "--columns=_uuid", "list", "QoS") == before


def test_a_chassis_down_while_applying_is_named_and_its_limit_is_not_claimed(pool: Lab, tmp_path: Path) -> None:
    env = {"HVNET_LAB_DIR": str(pool.run_dir)}
    hv2 = pool._hosts()["hv2"]
    assert ovn.stop_chassis(hv2) is not None
    try:
        policy = tmp_path / "pool.yaml"
        policy.write_text(POLICY.replace("rate: 20000", "rate: 30000"))
        res = run_hvnet("--pool", "ovn-pool", "--pool-wait", "3", "apply", str(policy), "--json", env=env)
        assert res.returncode == 1, res.stdout + res.stderr
        doc = json.loads(res.stdout)
        assert doc["behind"] == ["hv2"], doc
        states = {e["vm"]: e["state"] for e in doc["enforced"]}
        assert states == {"VM1": "enforced", "VM2": "missing"}, doc["enforced"]
    finally:
        ovn.start_chassis(hv2, 2)
    ovn.wait_bound(ovn.central(pool.run_dir), _topology(pool))
    res = run_hvnet("--pool", "ovn-pool", "verify", str(policy), env=env)
    assert res.returncode == 0, res.stdout + res.stderr


def _topology(pool: Lab):
    from appliance.endpoints.topology import load

    return load(TOPOLOGY)
