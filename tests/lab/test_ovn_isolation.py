"""Isolation and suites across the lab's OVN pool (vlan-tests/topologies/ovn-pool.yaml): the study's matrix
proven with real ARP broadcasts between guests on different chassis and with ovn-trace against the pool's SB,
the two methods compared; a moved port is a leak both see; a quick suite through the Geneve tunnel."""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.endpoints.topology import load
from appliance.lab import Lab, ovn
from tests.conftest import ROOT, run_hvnet
from tests.lab.conftest import lab_up

pytestmark = pytest.mark.skipif(
    not (os.path.exists("/usr/sbin/sshd") and shutil.which("ovn-controller") and shutil.which("ovn-trace")),
    reason="openssh-server, ovn-central and ovn-host (make setup installs them)",
)

TOPOLOGY = ROOT / "vlan-tests" / "topologies" / "ovn-pool.yaml"
SCENARIO = ROOT / "vlan-tests" / "ovn-pool.yaml"
STUDY = {("VM1", "VM2"): "yes", ("VM2", "VM1"): "yes", ("VM1", "VM3"): "no",
         ("VM3", "VM1"): "no", ("VM2", "VM3"): "no", ("VM3", "VM2"): "no"}  # fmt: skip


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    with lab_up(TOPOLOGY, tmp_path_factory.mktemp("ovn-iso") / "run") as lab:
        yield lab


def _env(lab: Lab) -> dict[str, str]:
    return {"HVNET_LAB_DIR": str(lab.run_dir)}


def _cells(doc: dict, method: str) -> dict[tuple[str, str], str]:
    return {(c["listener"], c["sender"]): c["value"] for c in doc["methods"][method]["observed"]}


def test_the_studys_matrix_holds_across_chassis_by_traffic_and_by_ovn_trace(pool: Lab, tmp_path: Path) -> None:
    res = run_hvnet("isolation", "check", str(SCENARIO), "--out", str(tmp_path / "pcaps"), "--json",
                    env=_env(pool), timeout=120)  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr
    doc = json.loads(res.stdout)
    assert _cells(doc, "traffic") == STUDY and _cells(doc, "trace") == STUDY
    assert doc["methods"]["traffic"]["stats"]["tunnels_unresolved"] == {}  # hv1 <-> hv2 resolved before probing
    # VM2 on hv2 heard VM1 on hv1: its frame is in VM2's own capture
    (ev,) = [e for e in doc["methods"]["traffic"]["evidence"] if (e["listener"], e["sender"]) == ("VM2", "VM1")]
    assert ev["src_ip"] == "192.168.0.150" and ev["pcap"].endswith("VM2.pcap")
    trace = doc["methods"]["trace"]["stats"]
    assert trace["engine"] == "ovn-trace"
    assert trace["logical"]["VM1"]["VM2"].startswith("delivered to VM2's port")
    assert "VM3's port is on vlan2" in trace["logical"]["VM1"]["VM3"]
    # the text report puts each logical verdict beside the traffic method's observation
    res = run_hvnet("isolation", "check", str(SCENARIO), "--method", "trace", env=_env(pool))
    assert res.returncode == 0 and "VM1 -> VM2: delivered to VM2's port" in res.stdout, res.stdout + res.stderr


def test_a_port_moved_onto_the_other_switch_is_a_leak_both_methods_see(pool: Lab, tmp_path: Path) -> None:
    c = ovn.central(pool.run_dir)
    t = load(TOPOLOGY)
    vm3 = ovn.port_name(t, t.guest("VM3"))
    c.nbctl("--wait=hv", "lsp-del", vm3, "--", "lsp-add", "vlan1", vm3, "--", "lsp-set-addresses", vm3,
            f"{t.guest('VM3').mac} 192.168.0.152", "--", "set", "Logical_Switch_Port", vm3,
            "external_ids:hvnet-vm=VM3")  # fmt: skip
    try:
        res = run_hvnet("isolation", "check", str(SCENARIO), "--out", str(tmp_path / "pcaps"), "--json",
                        env=_env(pool), timeout=120)  # fmt: skip
        assert res.returncode == 1, res.stdout[-3000:] + res.stderr
        doc = json.loads(res.stdout)
        for method in ("traffic", "trace"):
            assert _cells(doc, method)[("VM3", "VM1")] == "yes", (method, doc["methods"][method])
        res = run_hvnet("isolation", "report", _save(tmp_path, doc))
        assert "trace: LEAK: VM3 hears VM1: ovn-trace: delivered to VM3's port" in res.stdout, res.stdout
    finally:
        c.nbctl("--wait=hv", "lsp-del", vm3)
        ovn.make_logical_network(c, t)
        ovn.wait_bound(c, t)


def _save(tmp_path: Path, doc: dict) -> str:
    f = tmp_path / "result.json"
    f.write_text(json.dumps(doc))
    return str(f)


def test_the_inventorys_pool_by_name_and_its_faults(pool: Lab, tmp_path: Path) -> None:
    res = run_hvnet("--pool", "ovn-pool", "isolation", "check", str(SCENARIO), "--method", "trace", "--json",
                    env=_env(pool))  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    assert _cells(json.loads(res.stdout), "trace") == STUDY
    # a pool whose SB cannot be reached: exit 3, nothing traced
    central = ovn.central(pool.run_dir)
    inv = tmp_path / "hosts.yaml"
    inv.write_text(f"hosts: []\npools:\n  - {{name: nosb, nb: '{central.remote('nb')}', "
                   f"sb: 'unix:{tmp_path}/sb.sock'}}\n")  # fmt: skip
    res = run_hvnet("--pool", "nosb", "isolation", "check", str(SCENARIO), "--method", "trace",
                    env={**_env(pool), "HVNET_INVENTORY": str(inv)})  # fmt: skip
    assert res.returncode == 3 and "cannot reach OVSDB" in res.stderr and "Traceback" not in res.stderr, res.stderr
    # ovn-trace missing: exit 4, before the pool is read
    res = run_hvnet("isolation", "check", str(SCENARIO), "--method", "trace",
                    env={**_env(pool), "PATH": str(tmp_path)})  # fmt: skip
    assert res.returncode == 4 and "ovn-trace" in res.stderr and "Traceback" not in res.stderr, res.stderr
    # a guest the pool does not have: exit 2 at the scenario's line
    bad = tmp_path / "bad.yaml"
    bad.write_text(f"topology: {TOPOLOGY}\nguests:\n  - VM1\n  - VM2\nexpect: derive\n")
    c = central
    t = load(TOPOLOGY)
    vm2 = ovn.port_name(t, t.guest("VM2"))
    c.nbctl("lsp-del", vm2)
    try:
        res = run_hvnet("isolation", "check", str(bad), "--method", "trace", env=_env(pool))
        assert res.returncode == 2, res.stdout + res.stderr
        assert f"{bad}:4: guests: pool ovn-pool has no port for VM2" in res.stderr, res.stderr
    finally:
        ovn.make_logical_network(c, t)
        ovn.wait_bound(c, t)


def test_a_quick_suite_runs_between_chassis_through_geneve(pool: Lab, tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = run_hvnet("suite", "run", "ovn-pool", "--out", str(out), env=_env(pool), timeout=180)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr
    doc = json.loads((out / "results.json").read_text())
    assert doc["state"] == "complete" and doc["meta"]["host"] == "hv1"
    by_test = {s["key"].split("/")[0]: s for s in doc["steps"]}
    assert set(by_test) == {"tcp-stream", "tcp-rr"}, list(by_test)
    for step in doc["steps"]:
        assert step["repetitions"][0]["aggregate"]["sum"] > 0, step["repetitions"][0]["aggregate"]
    path = doc["meta"]["path"]
    assert (path["client_chassis"], path["server_chassis"], path["encap"]) == ("hv1", "hv2", "geneve"), path
    assert (path["underlay_dev"], path["underlay_mtu"]) == ("brphy", ovn.UNDERLAY_MTU), path
    assert path["client_mtu"] == path["server_mtu"] == 1500, path
    res = run_hvnet("suite", "report", str(out))
    line = "path: VM1 on chassis hv1 -> VM2 on chassis hv2, geneve 10.254.0.1 -> 10.254.0.2; MTU: guests 1500/1500"
    assert line in res.stdout and "underlay 9000 (brphy)" in res.stdout, res.stdout
