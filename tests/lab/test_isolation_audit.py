"""``hvnet isolation audit`` on the lab's namespace guests as real VMs: their veths' host ends are the VIFs."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

import pytest

from appliance.core.target import DbTarget
from appliance.isolation.audit import traffic as audittraffic
from appliance.services import isolation_audit
from appliance.switch.host import Host
from tests.conftest import ROOT, run_hvnet
from tests.lab.conftest import lab_up

TOPOLOGY = ROOT / "vlan-tests" / "topologies" / "trunk-and-native.yaml"


@pytest.fixture(scope="module")
def tn(tmp_path_factory: pytest.TempPathFactory):
    with lab_up(TOPOLOGY, tmp_path_factory.mktemp("audit") / "lab") as lab:
        yield lab


def audit(lab, *args: str) -> tuple[int, dict]:
    res = run_hvnet("--db", lab.db, "isolation", "audit", *args, "--json")
    return res.returncode, json.loads(res.stdout) if res.stdout.strip() else {"stderr": res.stderr}


def test_both_methods_agree_with_the_ports_vlan_settings(tn) -> None:
    code, out = audit(tn)
    assert code == 0, out
    assert "trunk@vlan10" in out["senders"] and "nt20@vlan30" in out["senders"]
    for method in ("trace", "traffic"):
        verdicts = [c["value"] for c in out["methods"][method]["verdicts"]]
        assert verdicts and set(verdicts) == {"ok"}, method
    traffic = out["methods"]["traffic"]
    assert traffic["stats"]["probes_sent"] == len(out["senders"])
    assert any("tc ingress policing is not crossed" in n for n in traffic["stats"]["notes"])
    observed = {(c["listener"], c["sender"]): c["value"] for c in traffic["observed"]}
    # The trunk's tagged VLAN-10 probe reaches the access-10 ports; its untagged one (VLAN 0) reaches no one.
    assert observed[("a10", "trunk@vlan10")] == "yes" and observed[("a10", "trunk")] == "no"
    assert observed[("d30", "nt20@vlan30")] == "yes" and observed[("c20", "d30")] == "no"


def test_a_given_matrix_that_the_switch_contradicts_is_a_leak(tn, tmp_path: Path) -> None:
    expect = tmp_path / "expect.yaml"
    expect.write_text("matrix:\n  vif1.0: {b10: no}\n  b10: {vif1.0: no}\n")  # by port or VM name
    res = run_hvnet("--db", tn.db, "isolation", "audit", "vif1.0", "vif2.0", "--expect", str(expect))
    assert res.returncode == 1, res.stdout + res.stderr
    assert "traffic: LEAK: b10 hears a10" in res.stdout and "trace: LEAK: a10 hears b10" in res.stdout


def test_bad_input_exits_2_and_touches_nothing(tn, tmp_path: Path) -> None:
    res = run_hvnet("--db", tn.db, "isolation", "audit", "vif1.0")
    assert res.returncode == 2 and "at least two VIFs; 1 selected" in res.stderr
    res = run_hvnet("--db", tn.db, "isolation", "audit", "vm:nobody", "vif1.0")
    assert res.returncode == 2 and "'nobody' matches no VIF" in res.stderr
    expect = tmp_path / "bad.yaml"
    expect.write_text("matrix:\n  vif1.0: {vif2.0: perhaps}\n")
    res = run_hvnet("--db", tn.db, "isolation", "audit", "vif1.0", "vif2.0", "--expect", str(expect))
    assert res.returncode == 2 and f"{expect}:2: matrix.vif1.0.vif2.0" in res.stderr, res.stderr
    assert "Traceback" not in res.stderr


def test_kept_pcaps_are_private_and_hold_only_probes(tn, tmp_path: Path) -> None:
    keep = tmp_path / "pcaps"
    code, out = audit(tn, "vif1.0", "vif2.0", "vif5.0", "--method", "traffic", "--keep-pcaps", str(keep))
    assert code == 0, out
    assert stat.S_IMODE(keep.stat().st_mode) == 0o700
    pcaps = sorted(keep.iterdir())
    assert len(pcaps) == 3 and all(stat.S_IMODE(p.stat().st_mode) == 0o600 for p in pcaps)
    for p in pcaps:
        shown = subprocess.run(["tcpdump", "-r", str(p), "-nn"], capture_output=True, text=True).stdout
        assert shown and all("who-has 192.0.2." in line and "tell 0.0.0.0" in line for line in shown.splitlines())
    # By default nothing is left behind.
    before = set(Path(os.environ.get("HVNET_CAPTURES_DIR", "/var/lib/hvnet/isolation")).glob("audit-*"))
    code, _ = audit(tn, "vif1.0", "vif2.0", "--method", "traffic")
    assert code == 0
    assert set(Path(os.environ.get("HVNET_CAPTURES_DIR", "/var/lib/hvnet/isolation")).glob("audit-*")) == before


def test_a_vif_replugged_mid_audit_has_its_cells_unknown_and_named(tn, monkeypatch) -> None:
    """The real thing: vif3.0's veth is deleted and made again while the captures run."""
    real = audittraffic.run_hosts

    def run_with_replug(*args, **kwargs):
        original = audittraffic._controls

        def controls_then_replug(host, ports, labels, run, kind):
            got = original(host, ports, labels, run, kind)
            if kind == audittraffic.inject.KIND_CONTROL:
                subprocess.run(["ip", "link", "del", "vif3.0"], check=True)
                subprocess.run(["ip", "link", "add", "vif3.0", "type", "veth", "peer", "name", "hvnet-rp"], check=True)
                subprocess.run(["ip", "link", "set", "vif3.0", "up"], check=True)
            return got

        monkeypatch.setattr(audittraffic, "_controls", controls_then_replug)
        return real(*args, **kwargs)

    monkeypatch.setattr(audittraffic, "run_hosts", run_with_replug)
    host = Host(DbTarget(tn.db, "lab"))  # no name source: the VIFs are labelled by port
    try:
        result = isolation_audit.run_audit(host, ["vif1.0", "vif2.0", "vif3.0"], method="traffic")
    finally:
        subprocess.run(["ip", "link", "del", "vif3.0"], check=False)
    t = result.methods["traffic"]
    assert t.cells[("vif3.0", "vif1.0")] == "unknown" and "vif3.0 was replugged" in t.reasons[("vif3.0", "vif1.0")]
    assert t.cells[("vif2.0", "vif3.0")] == "unknown"
    assert t.cells[("vif2.0", "vif1.0")] == "yes"
    assert result.exit_code == 7


def test_a_locked_vifs_dropped_probes_are_unknown_not_no(tn) -> None:
    """XenServer's VIF locking mode on a10's port: its ARP is allowed only from its own address, so the
    audit's probe (sender 0.0.0.0) is dropped in table 0 and no listener can hear it.  Those cells are
    unknown, naming the sender and the rule, not a "No" that would read as isolation holding."""
    sock = f"unix:{tn.switch.run_dir / 'br-tn.mgmt'}"
    locking = ["priority=200,in_port=vif1.0,arp,arp_spa=10.30.0.1,actions=NORMAL",
               "priority=199,in_port=vif1.0,arp,actions=drop"]  # fmt: skip
    for flow in locking:
        subprocess.run(["ovs-ofctl", "add-flow", sock, flow], check=True, timeout=10)
    try:
        code, out = audit(tn, "vif1.0", "vif2.0", "vif3.0", "--method", "both")
    finally:
        for flow in locking:
            match = flow.rpartition(",actions=")[0]
            subprocess.run(["ovs-ofctl", "--strict", "del-flows", sock, match], check=True, timeout=10)
    assert code == 7, out
    t = out["methods"]["traffic"]
    observed = {(c["listener"], c["sender"]): c["value"] for c in t["observed"]}
    reasons = {(c["listener"], c["sender"]): c["value"] for c in t["unknown_reasons"]}
    for listener in ("b10", "c20"):
        assert observed[(listener, "a10")] == "unknown"
        why = reasons[(listener, "a10")]
        assert "vif1.0's probe does not reach the switch's forwarding decision" in why
        assert "table 0 rule 'arp,in_port=" in why and ", priority 199' (drop)" in why, why
    assert "a10" in t["stats"]["senders_not_reaching_forwarding"]
    # The other senders are measured as before: b10 heard by a10, c20 by no one.
    assert observed[("a10", "b10")] == "yes" and observed[("a10", "c20")] == observed[("b10", "c20")] == "no"
    # The trace method meets the same drop: its cells for a10 are unknown too, not a traced "No".
    tr = out["methods"]["trace"]
    traced = {(c["listener"], c["sender"]): c["value"] for c in tr["observed"]}
    why = {(c["listener"], c["sender"]): c["value"] for c in tr["unknown_reasons"]}
    for listener in ("b10", "c20"):
        assert traced[(listener, "a10")] == "unknown", tr
        assert "stops before the switch's forwarding" in why[(listener, "a10")], why
    assert traced[("a10", "b10")] == "yes" and traced[("a10", "c20")] == "no", tr
