"""The policy vocabulary on the lab's OVN pool beyond limits: a VLAN intent moves a VM's logical port between
logical switches (proven with traffic across chassis), a GRE mirror becomes NB Mirror rows that ovn-controller
turns into an OVS mirror on the binding chassis (copies reach a collector), export round-trips, rollback undoes
the last apply, and every apply is audited."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.lab import Lab, ovn
from tests.conftest import HVNET, ROOT, run_hvnet
from tests.lab.conftest import lab_up

pytestmark = pytest.mark.skipif(
    not (os.path.exists("/usr/sbin/sshd") and shutil.which("ovn-controller") and shutil.which("ovn-northd")),
    reason="openssh-server, ovn-central and ovn-host (make setup installs them)",
)

TOPOLOGY = ROOT / "vlan-tests" / "topologies" / "ovn-pool.yaml"
COLLECTOR = ovn.underlay_address(2)  # hv2's underlay address: GRE copies from hv1 arrive at its brphy


@pytest.fixture(scope="module")
def pool(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    run_dir = tmp_path_factory.mktemp("ovn-pool-policy") / "run"
    with lab_up(TOPOLOGY, run_dir) as lab:
        yield lab
    assert not run_dir.exists()  # the pool's records and audit log went with the lab


def _hvnet(pool: Lab, *args: str) -> subprocess.CompletedProcess:
    return run_hvnet("--pool", "ovn-pool", *args, env={"HVNET_LAB_DIR": str(pool.run_dir)})


def _apply(pool: Lab, tmp_path: Path, text: str, name: str = "pool.yaml") -> dict:
    policy = tmp_path / name
    policy.write_text(text)
    res = _hvnet(pool, "apply", str(policy), "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    return json.loads(res.stdout)


def _switch_of(pool: Lab) -> dict[str, tuple[str, str, bool]]:
    res = _hvnet(pool, "status", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    return {p["vm"]: (s["name"], p["chassis"], p["up"]) for s in doc["switches"] for p in s["ports"]}


def _replies(guest: str, address: str) -> int:
    out = subprocess.run(["ip", "netns", "exec", f"hvnet-{guest}", "ping", "-c", "5", "-i", "0.2", "-W", "1",
                          address], capture_output=True, text=True, check=False).stdout  # fmt: skip
    line = next(ln for ln in out.splitlines() if "received" in ln)
    return int(line.split(",")[1].split()[0])


def test_a_vlan_intent_moves_a_port_between_logical_switches_and_rollback_moves_it_back(
    pool: Lab, tmp_path: Path
) -> None:
    c = ovn.central(pool.run_dir)
    lsp = c.nbctl("--bare", "--columns=name", "find", "Logical_Switch_Port", "external_ids:hvnet-vm=VM3").strip()
    row = c.nbctl("--format=json", "--columns=_uuid,addresses,external_ids", "list", "Logical_Switch_Port", lsp)
    assert _replies("VM1", "192.168.0.152") == 0  # VM3 (hv3, vlan2) is alone
    doc = _apply(pool, tmp_path, "version: 1\nvifs:\n  - vm: VM3\n    vlan: {tag: 1}\n")
    assert doc["moves"] == [{"port": lsp, "vm": "VM3", "from": "vlan2", "to": "vlan1", "vlan": 1}], doc
    assert doc["behind"] == [] and doc["nb_cfg"]
    assert _switch_of(pool)["VM3"] == ("vlan1", "hv3", True)
    # the same row (uuid, addresses, external_ids), now a port of vlan1: ovn-controller on hv3 rebinds it
    assert c.nbctl("--format=json", "--columns=_uuid,addresses,external_ids", "list", "Logical_Switch_Port",
                   lsp) == row  # fmt: skip
    assert _replies("VM3", "192.168.0.150") >= 3  # across chassis, hv3 -> hv1, through Geneve
    res = _hvnet(pool, "rollback", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    back = json.loads(res.stdout)
    assert back["moves"][0]["to"] == "vlan2" and back["undone"] and back["behind"] == [], back
    assert _switch_of(pool)["VM3"] == ("vlan2", "hv3", True)
    assert _replies("VM1", "192.168.0.152") == 0
    res = _hvnet(pool, "rollback")
    assert res.returncode == 1 and "nothing to roll back" in res.stderr, res.stdout + res.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text(
        'version: 1\nvifs:\n  - vm: VM3\n    vlan: {tag: 3}\n  - vm: VM1\n    vlan: {mode: trunk, trunks: "1,2"}\n'
    )
    res = _hvnet(pool, "apply", str(bad))
    assert res.returncode == 2, res.stdout + res.stderr
    assert "bad.yaml:4: vifs[0].vlan: VLAN 3: no logical switch of pool ovn-pool stands for it; the pool's VLANs: " \
           "1 (vlan1), 2 (vlan2)" in res.stderr  # fmt: skip
    assert "bad.yaml:6: vifs[1].vlan: trunk has no meaning on an OVN pool" in res.stderr
    assert _switch_of(pool)["VM3"] == ("vlan2", "hv3", True)


MIRROR = f"""\
version: 1
bridges:
  br-int:
    mirrors:
      span1:
        select: {{src: [vm:VM1]}}
        output: {{gre: {COLLECTOR}, key: 7}}
"""


def test_a_gre_mirror_reaches_the_binding_chassis_and_its_copies_the_collector(pool: Lab, tmp_path: Path) -> None:
    hosts = pool._hosts()
    doc = _apply(pool, tmp_path, MIRROR)
    assert [m["state"] for m in doc["mirrored"]] == ["present"], doc["mirrored"]
    assert doc["mirrored"][0]["chassis"] == "hv1" and doc["mirrored"][0]["vm"] == "VM1"
    # hv1's own OVSDB, read through its SSH host: the OVS mirror and the GRE port ovn-controller made
    hv1 = hosts["hv1"].switch
    assert hv1.vsctl("--bare", "--columns=name", "list", "Mirror").split() == ["span1-from"]
    port = hv1.vsctl("--bare", "--columns=options", "list", "Interface", "ovn-span1-from")
    assert f'remote_ip="{COLLECTOR}"' in port or f"remote_ip={COLLECTOR}" in port, port
    assert hv1.vsctl("get", "Interface", "ovn-span1-from", "type").strip() == "gre"
    heard = _gre_at_collector(hosts["hv2"].netns, lambda: _replies("VM1", "192.168.0.151"))
    assert heard >= 3, heard  # VM1's echo requests, copied on hv1 and sent to the collector in GRE
    doc = _apply(pool, tmp_path, "version: 1\nbridges:\n  br-int:\n    mirrors:\n      span1: remove\n")
    assert doc["changes"] == ["- mirror span1-from"] and doc["mirrored"] == [], doc
    # ovn-controller takes the OVS mirror and its GRE port away once the NB row is gone
    deadline = time.monotonic() + 10
    while "span1-from" in hv1.vsctl("--bare", "--columns=name", "list", "Mirror") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert "span1-from" not in hv1.vsctl("--bare", "--columns=name", "list", "Mirror")
    bad = tmp_path / "bad.yaml"
    bad.write_text(MIRROR.replace(f"{{gre: {COLLECTOR}, key: 7}}", "{port: eth9}"))
    res = _hvnet(pool, "plan", str(bad))
    assert res.returncode == 2 and "bad.yaml:7: bridges.br-int.mirrors.span1.output: port eth9: the pool's OVN " \
           "(NB schema 7.0.0) mirrors to erspan, gre only" in res.stderr, res.stderr  # fmt: skip


def _gre_at_collector(netns: str, traffic) -> int:
    """GRE packets from hv1's underlay address heard on the collector's brphy while ``traffic`` runs."""
    cap = subprocess.Popen(["ip", "netns", "exec", netns, "tcpdump", "-i", ovn.UNDERLAY_BRIDGE, "-n", "-l", "-p",
                            "ip proto 47 and src host " + ovn.underlay_address(1)],
                           stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        time.sleep(1.0)  # tcpdump listening
        traffic()
        time.sleep(0.5)
    finally:
        cap.send_signal(signal.SIGINT)
        out, _ = cap.communicate(timeout=10)
    return sum(1 for ln in out.splitlines() if "GREv0" in ln)


POLICY = f"""\
version: 1
vifs:
  - vm: VM1
    ingress: {{rate: 10000, burst: 1000}}
  - vm: VM3
    vlan: {{tag: 1}}
    egress: {{rate: 20000, burst: 16000}}
bridges:
  br-int:
    mirrors:
      span2:
        select: {{src: [vm:VM2], dst: [vm:VM1, vm:VM2]}}
        output: {{erspan: {COLLECTOR}, idx: 5}}
"""


def test_export_round_trips_rollback_undoes_and_applies_are_audited(pool: Lab, tmp_path: Path) -> None:
    before = _hvnet(pool, "export", "--by", "port")
    assert before.returncode == 0, before.stderr
    doc = _apply(pool, tmp_path, POLICY)
    assert {(m["vm"], m["row"], m["state"]) for m in doc["mirrored"]} == {
        ("VM2", "span2-from", "present"), ("VM1", "span2-to", "present"), ("VM2", "span2-to", "present")}  # fmt: skip
    assert {(e["vm"], e["state"]) for e in doc["enforced"]} == {("VM1", "enforced"), ("VM3", "enforced")}
    exported = tmp_path / "exported.yaml"
    res = _hvnet(pool, "export", "--out", str(exported))
    assert res.returncode == 0, res.stderr
    text = exported.read_text()
    assert "vlan: {tag: 1}" in text and "erspan: " + COLLECTOR in text, text
    res = _hvnet(pool, "plan", str(exported))
    assert res.returncode == 0 and "the NB already matches the policy" in res.stdout, res.stdout + res.stderr
    res = _hvnet(pool, "verify", str(exported))
    assert res.returncode == 0, res.stdout + res.stderr
    res = _hvnet(pool, "rollback")
    assert res.returncode == 0, res.stdout + res.stderr
    after = _hvnet(pool, "export", "--by", "port")
    assert _body(after.stdout) == _body(before.stdout)  # the pool as it was before the apply
    assert _switch_of(pool)["VM3"] == ("vlan2", "hv3", True)
    lines = [json.loads(ln) for ln in (pool.run_dir / "audit.jsonl").read_text().splitlines()]
    mine = [ln for ln in lines if ln["target"] == "ovn-pool:ovn-pool"]
    assert [ln["command"].split()[3] for ln in mine][-2:] == ["apply", "rollback"], mine
    assert mine[-2]["result"].startswith("applied (nb_cfg ") and mine[-2]["record"]
    assert any("mirror span2-to" in c for c in mine[-2]["plan"]) and mine[-1]["user"]


def _body(text: str) -> str:
    """An export without its first line (the time it was made)."""
    return text.split("\n", 1)[1]


def test_an_apply_killed_after_its_nb_commit_is_settled_and_rolled_back(pool: Lab, tmp_path: Path) -> None:
    policy = tmp_path / "move.yaml"
    policy.write_text("version: 1\nvifs:\n  - vm: VM3\n    vlan: {tag: 1}\n")
    env = {**os.environ, "HVNET_LAB_DIR": str(pool.run_dir), "HVNET_STOP_AT": "committed"}
    proc = subprocess.Popen([*HVNET, "--pool", "ovn-pool", "apply", str(policy)], env=env, cwd=ROOT,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)  # fmt: skip
    try:
        assert proc.stderr is not None
        line = proc.stderr.readline()
        assert "stopped at committed" in line, line
    finally:
        proc.kill()  # killed between its NB commit and its record and audit line
        proc.wait(timeout=10)
    assert _switch_of(pool)["VM3"][0] == "vlan1"  # committed
    assert list((pool.run_dir / "pools" / "ovn-pool").glob("applying.*.json"))  # its intent was left behind
    res = _hvnet(pool, "rollback", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    assert len(doc["settled"]) == 1 and "applied (hvnet process" in doc["settled"][0], doc
    assert doc["moves"][0]["to"] == "vlan2" and doc["undone"] == doc["settled"][0].split(":")[0], doc
    assert _switch_of(pool)["VM3"][0] == "vlan2"
    assert not list((pool.run_dir / "pools" / "ovn-pool").glob("applying.*.json"))
    lines = [json.loads(ln) for ln in (pool.run_dir / "audit.jsonl").read_text().splitlines()]
    settled = [ln for ln in lines if ln.get("settled_by")]
    assert settled and settled[-1]["result"].startswith("applied (hvnet process"), settled
