"""A lab of two hypervisors (vlan-tests/topologies/two-hosts.yaml): each a namespace with its own OVS and an
sshd whose PATH has no Python, joined by a trunk; hvnet reaches them by name, checks isolation and runs
netperf across them."""

from __future__ import annotations

import json
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.lab import Lab
from tests.conftest import ROOT, run_hvnet
from tests.lab.conftest import lab_up

pytestmark = pytest.mark.skipif(not os.path.exists("/usr/sbin/sshd"), reason="openssh-server (make setup installs it)")

TOPOLOGY = ROOT / "vlan-tests" / "topologies" / "two-hosts.yaml"
SCENARIO = ROOT / "vlan-tests" / "two-hosts.yaml"


@pytest.fixture(scope="module")
def two_hosts(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lab]:
    run_dir = tmp_path_factory.mktemp("two-hosts") / "run"
    with lab_up(TOPOLOGY, run_dir) as lab:
        pids = [h.sshd_pid() for h in lab._hosts().values()]
        yield lab
    # lab_up checked namespaces and links; the hosts' daemons and the run directory are gone too
    assert all(p is not None and _gone(p) for p in pids), pids
    assert not run_dir.exists()


def _gone(pid: int) -> bool:
    """Exited (a zombie no one has reaped yet counts: it runs nothing)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().split(") ", 1)[1].startswith("Z")
    except OSError:
        return True


def _env(lab: Lab) -> dict[str, str]:
    return {"HVNET_LAB_DIR": str(lab.run_dir)}


def test_each_host_is_reached_by_name_over_ssh_and_sees_only_its_own_vifs(two_hosts: Lab) -> None:
    res = run_hvnet("--host", "hv2", "status", "--json", env=_env(two_hosts))
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert [(v["port"], v["vm_name"]) for v in doc["vifs"] if v["is_vif"]] == [("vif2.0", "VM2")]
    assert doc["host"]["hostname"] == "hv2"
    # without --host: the lab's first host
    res = run_hvnet("status", "--json", env=_env(two_hosts))
    assert res.returncode == 0, res.stderr
    assert sorted(v["port"] for v in json.loads(res.stdout)["vifs"] if v["is_vif"]) == ["vif1.0", "vif3.0"]
    res = run_hvnet("hosts", "--json", env=_env(two_hosts))
    assert res.returncode == 0, res.stderr
    rows = {r["name"]: r for r in json.loads(res.stdout)["hosts"]}
    assert {n: (r["reachable"], r["vifs"], r["kind"]) for n, r in rows.items()} == {
        "hv1": (True, 2, "xenserver"), "hv2": (True, 1, "xenserver")}  # fmt: skip


def test_the_2010_table_holds_across_the_trunk_by_traffic_and_by_trace(two_hosts: Lab, tmp_path: Path) -> None:
    res = run_hvnet("isolation", "check", str(SCENARIO), "--json", "--out", str(tmp_path / "caps"),
                    env=_env(two_hosts), timeout=120)  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr
    doc = json.loads(res.stdout)
    for method in ("traffic", "trace"):
        cells = {(c["listener"], c["sender"]): c["value"] for c in doc["methods"][method]["observed"]}
        assert cells[("VM2", "VM1")] == "yes" and cells[("VM1", "VM2")] == "yes", (method, cells)
        assert cells[("VM2", "VM3")] == "no" and cells[("VM3", "VM1")] == "no", (method, cells)


def test_a_tag_changed_on_the_second_host_leaks_across_the_trunk(two_hosts: Lab, tmp_path: Path) -> None:
    env = {**_env(two_hosts), "HVNET_STATE_DIR": str(tmp_path / "state"), "HVNET_AUDIT_LOG": str(tmp_path / "a")}
    res = run_hvnet("--host", "hv2", "vif", "set", "vif2.0", "--tag", "2", env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    try:
        res = run_hvnet("isolation", "check", str(SCENARIO), "--json", "--out", str(tmp_path / "caps"),
                        env=env, timeout=120)  # fmt: skip
        assert res.returncode == 1, res.stdout[-3000:] + res.stderr
        doc = json.loads(res.stdout)
        for method in ("traffic", "trace"):
            cells = {(c["listener"], c["sender"]): c["value"] for c in doc["methods"][method]["observed"]}
            # VM2 (hv2) now shares VLAN 2 with VM3 (hv1): they hear each other; VM1 no longer hears VM2
            assert (cells[("VM2", "VM3")], cells[("VM3", "VM2")], cells[("VM1", "VM2")]) == ("yes", "yes", "no")
    finally:
        res = run_hvnet("--host", "hv2", "rollback", env=env)
        assert res.returncode == 0, res.stdout + res.stderr


def test_a_suite_runs_from_a_guest_on_one_host_to_a_guest_on_the_other(two_hosts: Lab, tmp_path: Path) -> None:
    out = tmp_path / "run"
    res = run_hvnet("suite", "run", "two-hosts", "--concurrency", "1", "--duration", "1", "--out", str(out),
                    "--json", env=_env(two_hosts), timeout=180)  # fmt: skip
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr
    doc = json.loads((out / "results.json").read_text())
    assert doc["meta"]["host"] == "hv1" and doc["state"] == "complete"
    assert len(doc["steps"]) == 4, [s["key"] for s in doc["steps"]]
    for step in doc["steps"]:
        rep = step["repetitions"][0]
        assert [i["returncode"] for i in rep["instances"]] == [0], (step["key"], rep["instances"])
        # hv1's end of the trunk carried the client's traffic towards hv2
        assert rep["counters"]["eth0-hv2"]["tx_packets"] > 50, (step["key"], rep["counters"])
        assert "host_pct" in rep["cpu"]  # hv1 is a namespace of this machine: its CPU is this machine's
    # the setup's policing was restored on hv1 afterwards
    res = run_hvnet("--host", "hv1", "status", "--json", env=_env(two_hosts))
    vif1 = next(v for v in json.loads(res.stdout)["vifs"] if v["port"] == "vif1.0")
    assert not vif1.get("ingress"), vif1


def test_a_second_lab_up_with_another_topology_is_refused_and_the_lab_is_untouched(two_hosts: Lab) -> None:
    res = run_hvnet("lab", "up", env=_env(two_hosts))
    assert res.returncode != 0 and "already set up" in res.stderr, res.stderr
    res = run_hvnet("lab", "status", "--json", env=_env(two_hosts))
    assert json.loads(res.stdout)["state"] == "up"


POLICY = """\
version: 1
policing: auto
vifs:
  - vm: VM2
    vlan: {mode: access, tag: 1}
    ingress: {rate: 8000, burst: 800}
    egress: {rate: 20000}
bridges:
  xenbr0:
    mirrors:
      span-vm2:
        select: {src: [vm:VM2], dst: [vm:VM2]}
        output: {gre: 192.0.2.10}
"""


def test_a_policy_with_policing_shaping_and_a_gre_mirror_over_ssh(two_hosts: Lab, tmp_path: Path) -> None:
    """Meters (ovs-ofctl), the tc/HTB queue, the mirror's tunnel port and the enforcement check, all on hv2
    through its SSH connection; verify, export and rollback likewise."""
    env = {**_env(two_hosts), "HVNET_STATE_DIR": str(tmp_path / "state"), "HVNET_AUDIT_LOG": str(tmp_path / "a")}
    policy = tmp_path / "p.yaml"
    policy.write_text(POLICY)
    res = run_hvnet("--host", "hv2", "apply", str(policy), "--json", env=env, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    doc = json.loads(res.stdout)
    assert doc["status"] == "applied" and not doc["problems"], doc
    ingress = [e for e in doc["enforcement"] if e["port"] == "vif2.0" and e["kind"] == "ingress"]
    assert ingress and ingress[0]["verified"] is True, doc["enforcement"]
    hv2 = two_hosts._hosts()["hv2"]
    meters = subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "dump-meters", "xenbr0"], capture_output=True,
                            text=True, env={**os.environ, **hv2.switch.env}, check=True).stdout  # fmt: skip
    assert "kbps" in meters and "rate=8000" in meters, meters
    (tunnel,) = set(hv2.switch.vsctl("list-ports", "xenbr0").split()) - {"vif2.0", "eth0-hv1"}
    assert hv2.switch.vsctl("get", "Interface", tunnel, "type").strip() == "gre"
    assert hv2.switch.vsctl("get", "Interface", tunnel, "options:remote_ip").strip() == '"192.0.2.10"'
    res = run_hvnet("--host", "hv2", "verify", str(policy), env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    res = run_hvnet("--host", "hv2", "export", env=env)
    assert res.returncode == 0 and "span-vm2" in res.stdout and "8000" in res.stdout, res.stdout + res.stderr
    # hv1 is untouched: the policy went to hv2 only
    assert two_hosts._hosts()["hv1"].switch.vsctl("--columns=name", "list", "Mirror").strip() == ""
    res = run_hvnet("--host", "hv2", "rollback", env=env, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    assert hv2.switch.vsctl("--columns=name", "list", "Mirror").strip() == ""
    assert sorted(hv2.switch.vsctl("list-ports", "xenbr0").split()) == ["eth0-hv1", "vif2.0"]
    assert "rate=8000" not in subprocess.run(["ovs-ofctl", "-O", "OpenFlow13", "dump-meters", "xenbr0"],
                                             capture_output=True, text=True, env={**os.environ, **hv2.switch.env},
                                             check=True).stdout  # fmt: skip


def test_an_unconfirmed_apply_over_ssh_is_rolled_back_by_its_watcher(two_hosts: Lab, tmp_path: Path) -> None:
    """The watcher runs on this machine and reaches hv2 over its own SSH connection."""
    env = {**_env(two_hosts), "HVNET_STATE_DIR": str(tmp_path / "state"), "HVNET_AUDIT_LOG": str(tmp_path / "a")}
    policy = tmp_path / "p.yaml"
    policy.write_text("version: 1\nvifs:\n  - vm: VM2\n    vlan: {tag: 9}\n")
    hv2 = two_hosts._hosts()["hv2"]
    res = run_hvnet("--host", "hv2", "apply", str(policy), "--no-commit", "--timeout", "5", env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    assert hv2.switch.vsctl("get", "Port", "vif2.0", "tag").strip() == "9"
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and hv2.switch.vsctl("get", "Port", "vif2.0", "tag").strip() != "1":
        time.sleep(0.2)
    assert hv2.switch.vsctl("get", "Port", "vif2.0", "tag").strip() == "1"
    audit = tmp_path / "a"
    deadline = time.monotonic() + 10  # the watcher audits after verifying the rollback
    while time.monotonic() < deadline and "automatic rollback" not in audit.read_text().splitlines()[-1]:
        time.sleep(0.1)
    assert "automatic rollback" in json.loads(audit.read_text().splitlines()[-1])["command"]


def test_a_xenserver_hosts_vms_are_named_by_its_pools_xapi(two_hosts: Lab, tmp_path: Path) -> None:
    """An inventory entry with the pool master's XAPI: the VMs of hv2 get the names XAPI gives them (a local
    XML-RPC server answering as XAPI does; XAPI itself runs only on XenServer)."""
    from appliance.endpoints.topology import load as load_topology
    from tests.unit.switch.test_names_xapi import FakeXapi

    vm2 = load_topology(TOPOLOGY).guest("VM2").vm_uuid("two-hosts")
    xapi = FakeXapi()
    try:
        xapi.vms = {"OpaqueRef:vm-2": {"uuid": vm2, "name_label": "db-primary", "is_a_template": False}}
        creds = tmp_path / "xapi-pool"
        creds.write_text("root:secret\n")
        hv2 = two_hosts._hosts()["hv2"]
        inventory = tmp_path / "hosts.yaml"
        inventory.write_text(
            f"hosts:\n  - name: hv2\n    kind: xenserver\n    group: pool-a\n    ovs_rundir: {hv2.switch.run_dir}\n"
            f"    xapi_url: {xapi.url}\n    xapi_credentials: {creds}\n"
        )
        env = {**_env(two_hosts), "HVNET_INVENTORY": str(inventory),
               "HVNET_SSH_CONFIG": str(two_hosts.run_dir / "ssh_config")}  # fmt: skip
        res = run_hvnet("--host", "hv2", "status", "--json", env=env)
        assert res.returncode == 0, res.stderr
        vifs = [v for v in json.loads(res.stdout)["vifs"] if v["is_vif"]]
        assert [(v["port"], v["vm_name"]) for v in vifs] == [("vif2.0", "db-primary")]
        assert xapi.logins() == 1
    finally:
        xapi.close()


def test_one_policy_for_the_pool_applies_each_rule_where_its_vm_runs(two_hosts: Lab, tmp_path: Path) -> None:
    """The 2010 policy names VM1, VM2 and VM3; with --hosts each host takes the rules of the VMs it runs.
    A rule no host matches refuses the apply on every host before any of them changes."""
    env = {**_env(two_hosts), "HVNET_STATE_DIR": str(tmp_path / "state"), "HVNET_AUDIT_LOG": str(tmp_path / "a")}
    hosts = two_hosts._hosts()
    bad = tmp_path / "typo.yaml"
    bad.write_text((ROOT / "policies" / "seed-2010.yaml").read_text().replace("vm: VM3", "vm: VM33"))
    res = run_hvnet("apply", str(bad), "--hosts", "two-hosts", env=env, timeout=120)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "vifs[2].vm: matches no VIF on any of the hosts" in res.stdout, res.stdout
    assert all(len(line) <= 80 for line in res.stdout.split("\n\n")[0].splitlines()), res.stdout
    assert hosts["hv1"].switch.vsctl("get", "Interface", "vif1.0", "ingress_policing_rate").strip() == "0"
    res = run_hvnet("apply", str(ROOT / "policies" / "seed-2010.yaml"), "--hosts", "two-hosts", "--json",
                    env=env, timeout=120)  # fmt: skip
    try:
        assert res.returncode == 0, res.stdout + res.stderr
        doc = json.loads(res.stdout)["hosts"]
        changed = {n: [(c["name"], c["kind"]) for c in h["result"]["changes"]] for n, h in doc.items()}
        assert changed == {"hv1": [("vif1.0", "ingress")], "hv2": [("vif2.0", "ingress")]}, doc  # VM3's tag holds
        res = run_hvnet("verify", str(ROOT / "policies" / "seed-2010.yaml"), "--hosts", "all", env=env)
        assert res.returncode == 0, res.stdout + res.stderr
    finally:
        for name in ("hv1", "hv2"):
            run_hvnet("--host", name, "rollback", env=env, timeout=60)
