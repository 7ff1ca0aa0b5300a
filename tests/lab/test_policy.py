"""Policy plan/apply/verify/export/rollback on the 2010 study's lab, ovs-vsctl as the witness."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path

import pytest

from appliance.core import documents
from appliance.lab import Lab
from tests import jsonschemas
from tests.conftest import HVNET, ROOT, run_hvnet
from tests.lab.policy_helpers import config, ofctl, reset, vsctl, write

TAGS = {"vif1.0": 1, "vif2.0": 1, "vif3.0": 2}

POLICY = """\
version: 1
vifs:
  - vm: VM1
    vlan: {tag: 1}
    ingress: {rate: 10240, burst: 1024}
  - vm: VM3
    vlan: {mode: native-untagged, tag: 2, trunks: "20-22"}
    egress: {rate: 20mbit}
bridges:
  xenbr0:
    mirrors:
      span1:
        select: {src: [vm:VM1], vlans: "1"}
        output: {vlan: 999}
"""


@pytest.fixture(autouse=True)
def clean(lab: Lab):
    reset(lab, TAGS)
    yield
    reset(lab, TAGS)


def hv(*args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    res = run_hvnet(*args, timeout=timeout)
    assert "Traceback" not in res.stderr, res.stderr
    return res


def test_plan_changes_nothing_apply_verify_export_round_trip(lab: Lab, tmp_path: Path) -> None:
    f = write(tmp_path / "p.yaml", POLICY)
    before = config(lab)
    res = hv("plan", f, "--json")
    assert res.returncode == 0, res.stderr
    plan = json.loads(res.stdout)
    kinds = sorted((c["name"], c["kind"]) for c in plan["changes"])
    assert kinds == [("span1", "mirror"), ("vif1.0", "ingress"), ("vif3.0", "egress"), ("vif3.0", "vlan")]
    assert config(lab) == before  # plan touched nothing

    res = hv("apply", f, "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    out = json.loads(res.stdout)
    assert out["status"] == "applied"
    enf = {(e["port"], e["kind"]): e for e in out["enforcement"]}
    assert enf[("vif1.0", "ingress")]["mechanism"] == "meter" and enf[("vif1.0", "ingress")]["verified"] is True
    assert enf[("vif3.0", "egress")]["mechanism"] == "htb" and enf[("vif3.0", "egress")]["verified"] is True

    # The independent witnesses.
    assert vsctl(lab, "get", "port", "vif3.0", "vlan_mode") == "native-untagged"
    assert vsctl(lab, "get", "port", "vif3.0", "trunks") == "[20, 21, 22]"
    assert vsctl(lab, "get", "interface", "vif1.0", "external_ids:hvnet-police-rate-kbps") == '"10240"'
    assert vsctl(lab, "get", "interface", "vif1.0", "ingress_policing_rate") == "0"  # meters, not tc, here
    qos = vsctl(lab, "get", "port", "vif3.0", "qos")
    assert vsctl(lab, "get", "qos", qos, "type") == "linux-htb"
    assert vsctl(lab, "get", "qos", qos, "other_config:max-rate") == '"20000000"'
    assert vsctl(lab, "get", "qos", qos, "external_ids:hvnet-owner") == "hvnet"
    assert vsctl(lab, "get", "mirror", "span1", "output_vlan") == "999"
    assert vsctl(lab, "get", "mirror", "span1", "select_vlan") == "[1]"
    ofport = vsctl(lab, "get", "interface", "vif1.0", "ofport")
    flows = ofctl(lab, "dump-flows", opts=("--no-stats",))
    assert f"in_port={ofport} actions=meter:" in flows
    assert "rate=10240 burst_size=1024" in ofctl(lab, "dump-meters")

    assert hv("verify", f).returncode == 0
    assert json.loads(hv("plan", f, "--json").stdout)["changes"] == []

    # export -> apply -> plan shows nothing (and apply changed nothing)
    exported = tmp_path / "export.yaml"
    assert hv("export", "--out", str(exported)).returncode == 0
    applied = config(lab)
    res = hv("apply", str(exported), "--json")
    assert res.returncode == 0 and json.loads(res.stdout)["status"] == "unchanged", res.stdout
    assert json.loads(hv("plan", str(exported), "--json").stdout)["changes"] == []
    assert config(lab) == applied
    as_json = tmp_path / "export.json"  # the JSON export validates and is a policy file too
    as_json.write_text(hv("export", "--json").stdout)
    jsonschemas.check(documents.POLICY, json.loads(as_json.read_text()))
    assert json.loads(hv("plan", str(as_json), "--json").stdout)["changes"] == []

    # Drift made behind hvnet's back is reported, with a non-zero exit.
    vsctl(lab, "set", "port", "vif1.0", "tag=7")
    res = hv("verify", f, "--json")
    assert res.returncode == 1
    jsonschemas.check(documents.POLICY_VERIFY, json.loads(res.stdout))
    drift = json.loads(res.stdout)["drift"]
    assert drift == [{"target": "vif1.0 (VM1)", "setting": "vlan", "expected": "access tag 1", "found": "access tag 7"}]
    # A meter lost from the switch is drift too.
    ofctl(lab, "del-meters")
    res = hv("verify", f, "--json")
    assert res.returncode == 1 and any(d["setting"] == "meters" for d in json.loads(res.stdout)["drift"])

    # Rollback undoes the last apply (the tag changed by hand since is left alone and reported).
    vsctl(lab, "set", "port", "vif1.0", "tag=1")
    res = hv("rollback", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    assert config(lab) == before


def test_audit_log_records_each_change(lab: Lab, tmp_path: Path) -> None:
    f = write(tmp_path / "p.yaml", "vifs:\n  - vm: VM2\n    vlan: {tag: 3}\n")
    audit = Path(lab.switch.run_dir) / "audit.jsonl"
    n = len(audit.read_text().splitlines()) if audit.exists() else 0
    assert hv("apply", f).returncode == 0
    lines = audit.read_text().splitlines()
    assert len(lines) == n + 1
    entry = json.loads(lines[-1])
    assert set(entry) >= {"time", "user", "command", "target", "before", "after", "result"}
    assert entry["result"] == "applied" and entry["command"].startswith("hvnet apply")
    assert entry["before"] == [{"kind": "vlan", "bridge": "xenbr0", "name": "vif2.0", "value": "access tag 1"}]
    assert entry["after"][0]["value"] == "access tag 3"


BAD_POLICIES = {
    "tag-range": ("vifs:\n  - vm: VM1\n    vlan: {tag: 5000}\n", "p.yaml:3: vifs[0].vlan.tag"),
    "tag-4095": ("vifs:\n  - vm: VM1\n    vlan: {tag: 4095}\n", "reserved"),
    "trunks": ("vifs:\n  - vm: VM1\n    vlan: {trunks: '10-'}\n", "vifs[0].vlan.trunks: malformed"),
    "negative-rate": ("vifs:\n  - vm: VM1\n    ingress: {rate: -5}\n", "vifs[0].ingress.rate"),
    "text-rate": ("vifs:\n  - vm: VM1\n    ingress: {rate: fast}\n", "vifs[0].ingress.rate"),
    "burst-0": ("vifs:\n  - vm: VM1\n    ingress: {rate: 10000, burst: 0}\n", "8000 kbit"),
    "unknown-key": ("vifs:\n  - vm: VM1\n    vlans: {tag: 3}\n", "vifs[0].vlans: unknown key"),
    "wrong-type": ("vifs: {vm: VM1}\n", "vifs: must be a list"),
    "syntax": ("vifs:\n  - vm: [VM1\n", "YAML syntax error"),
    "no-match": ("vifs:\n  - vm: VM9\n    vlan: {tag: 3}\n", "p.yaml:2: vifs[0].vm: vm VM9 matches no VIF"),
    "glob-no-match": ("vifs:\n  - port: 'tap*'\n    vlan: {tag: 3}\n", "matches no VIF"),
    "two-outputs": (
        "bridges:\n  xenbr0:\n    mirrors:\n      m: {select: all, output: {vlan: 5, gre: 10.0.0.1}}\n",
        "exactly one of port, vlan, gre, erspan",
    ),
    "no-output": ("bridges:\n  xenbr0:\n    mirrors:\n      m: {select: all}\n", "mirrors.m.output: required"),
    "output-selected": (
        "bridges:\n  xenbr0:\n    mirrors:\n      m: {select: {src: [vif1.0]}, output: {port: vif1.0}}\n",
        "also a selected port",
    ),
    "output-tenant": (
        "bridges:\n  xenbr0:\n    mirrors:\n      m: {select: {src: [vif1.0]}, output: {port: vif3.0}}\n",
        "isolation exception",
    ),
    "dup-mirror": (
        "bridges:\n  xenbr0:\n    mirrors:\n      m: {select: all, output: {vlan: 5}}\n      m: remove\n",
        "duplicate key",
    ),
    "33-mirrors": (
        "bridges:\n  xenbr0:\n    mirrors:\n"
        + "".join(f"      m{i}: {{select: {{vlans: '{i + 1}'}}, output: {{vlan: 999}}}}\n" for i in range(33)),
        "OVS allows at most 32",
    ),
    "bad-ifname": ("vifs:\n  - port: 'bad/name'\n    vlan: {tag: 3}\n", "invalid interface name"),
    "no-bridge": (
        "bridges:\n  br9:\n    mirrors:\n      m: {select: all, output: {vlan: 5}}\n",
        "bridge br9 does not exist",
    ),
    "conflict": ("vifs:\n  - vm: VM1\n    vlan: {tag: 3}\n  - port: vif1.0\n    vlan: {tag: 4}\n", "conflicts with"),
}


@pytest.mark.parametrize("case", sorted(BAD_POLICIES))
def test_bad_policy_is_refused_and_changes_nothing(lab: Lab, tmp_path: Path, case: str) -> None:
    text, expected = BAD_POLICIES[case]
    f = write(tmp_path / "p.yaml", text)
    before = config(lab)
    for command in ("plan", "apply"):
        res = hv(command, f)
        assert res.returncode == 2, (command, res.stdout, res.stderr)
        assert expected in res.stderr, res.stderr
        assert str(tmp_path / "p.yaml") in res.stderr
    assert config(lab) == before


BAD_COMMANDS = {
    "tag-4095": (["vif", "set", "vif1.0", "--tag", "4095"], "--tag: VLAN 4095 is reserved"),
    "tag-text": (["vif", "set", "vif1.0", "--tag", "ten"], "VLAN tag must be an integer"),
    "trunks": (["vif", "set", "vif1.0", "--trunks", "5-2"], "--trunks: VLAN range '5-2' runs backwards"),
    "trunk-all-by-accident": (["vif", "set", "vif1.0", "--vlan-mode", "trunk"], "--trunks"),
    "bad-vif": (["vif", "set", "bad/name", "--tag", "3"], "invalid interface name"),
    "no-vif": (["vif", "set", "vm:VM9", "--tag", "3"], "matches 0 VIFs"),
    "several-vifs": (["vif", "set", "vif*", "--tag", "3"], "matches 3 VIFs"),
    "rate": (["qos", "set", "vif1.0", "--ingress-rate", "-1"], "--ingress-rate: rate must not be negative"),
    "burst-0": (["qos", "set", "vif1.0", "--ingress-rate", "1000", "--ingress-burst", "0"], "default"),
    "mirror-no-output": (["mirror", "add", "m", "--bridge", "xenbr0", "--src", "vif1.0"], "exactly one of"),
    "mirror-self": (
        ["mirror", "add", "m", "--bridge", "xenbr0", "--src", "vif1.0", "--output-port", "vif1.0"],
        "also a selected port",
    ),
    "mirror-tenant": (
        ["mirror", "add", "m", "--bridge", "xenbr0", "--src", "vif1.0", "--output-port", "vif2.0"],
        "--allow-isolation-exception",
    ),
    "mirror-bad-ip": (["mirror", "add", "m", "--bridge", "xenbr0", "--all", "--output-gre", "10.0.0"], "IP address"),
}


@pytest.mark.parametrize("case", sorted(BAD_COMMANDS))
def test_bad_command_is_refused_and_changes_nothing(lab: Lab, case: str) -> None:
    argv, expected = BAD_COMMANDS[case]
    before = config(lab)
    res = hv(*argv)
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert expected in res.stderr, res.stderr
    assert config(lab) == before


def test_imperative_commands(lab: Lab) -> None:
    res = hv("vif", "set", "vm:VM2", "--vlan-mode", "native-tagged", "--tag", "5", "--trunks", "10,20-21", "--json")
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["changes"][0]["after_text"] == "native-tagged tag 5 trunks 10,20-21"
    assert vsctl(lab, "get", "port", "vif2.0", "vlan_mode") == "native-tagged"
    assert vsctl(lab, "get", "port", "vif2.0", "trunks") == "[10, 20, 21]"
    assert hv("vif", "set", "vif2.0", "--tag", "1", "--vlan-mode", "access").returncode == 0
    assert vsctl(lab, "get", "port", "vif2.0", "trunks") == "[]"

    res = hv("qos", "set", "vif2.0", "--ingress-rate", "5mbit", "--egress-rate", "30000", "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    out = json.loads(res.stdout)
    assert {(e["kind"], e["verified"]) for e in out["enforcement"]} == {("ingress", True), ("egress", True)}
    assert vsctl(lab, "get", "interface", "vif2.0", "external_ids:hvnet-police-burst-kbit") == '"4000"'
    assert hv("qos", "clear", "vif2.0").returncode == 0
    assert vsctl(lab, "get", "port", "vif2.0", "qos") == "[]"
    assert vsctl(lab, "list", "qos") == ""  # the owned QoS was deleted with its last user
    assert "meter" not in ofctl(lab, "dump-flows")

    # GRE output: hvnet creates (and owns) the tunnel port, and removes it with the mirror.
    res = hv("mirror", "add", "toremote", "--bridge", "xenbr0", "--src", "vm:VM1", "--dst", "vm:VM1",
             "--output-gre", "192.0.2.10", "--key", "7", "--json")  # fmt: skip
    assert res.returncode == 0, res.stdout + res.stderr
    tunnel = vsctl(lab, "get", "mirror", "toremote", "output_port")
    assert vsctl(lab, "get", "port", tunnel, "external_ids:hvnet-owner") == "hvnet"
    name = vsctl(lab, "get", "port", tunnel, "name")
    assert vsctl(lab, "get", "interface", name, "type") == "gre"
    assert vsctl(lab, "get", "interface", name, "options:remote_ip") == '"192.0.2.10"'
    doc = json.loads(hv("mirror", "list", "--json").stdout)
    jsonschemas.check(documents.MIRROR_LIST, doc)  # the real output is what docs/reference/json.md publishes
    listing = doc["mirrors"]
    assert [m["name"] for m in listing] == ["toremote"] and listing[0]["owner"] == "hvnet"
    assert "tx_packets" in listing[0]
    assert hv("mirror", "add", "toremote", "--bridge", "xenbr0", "--all", "--output-vlan", "9").returncode == 2
    assert hv("mirror", "del", "toremote").returncode == 0
    assert vsctl(lab, "list", "mirror") == ""
    assert name.strip('"') not in vsctl(lab, "list-ports", "xenbr0").split()


def test_33rd_mirror_is_refused(lab: Lab, tmp_path: Path) -> None:
    mirrors = "".join(f"      m{i}: {{select: {{vlans: '{i + 1}'}}, output: {{vlan: 999}}}}\n" for i in range(32))
    f = write(tmp_path / "p.yaml", "bridges:\n  xenbr0:\n    mirrors:\n" + mirrors)
    assert hv("apply", f).returncode == 0
    assert len(vsctl(lab, "--columns=name", "list", "mirror").splitlines()) >= 32
    before = config(lab)
    res = hv("mirror", "add", "one-more", "--bridge", "xenbr0", "--vlan", "40", "--output-vlan", "999")
    assert res.returncode == 2 and "mirror number 33" in res.stderr, res.stderr
    assert config(lab) == before


def test_meter_failure_after_commit_restores_everything(lab: Lab, tmp_path: Path) -> None:
    """OpenFlow is unreachable after the OVSDB commit: the OVSDB part is undone, exactly."""
    f = write(tmp_path / "p.yaml", POLICY)
    before = config(lab)
    mgmt = Path(lab.switch.run_dir) / "xenbr0.mgmt"
    hidden = mgmt.with_name("xenbr0.mgmt.hidden")
    mgmt.rename(hidden)
    try:
        res = hv("apply", f, "--json")
    finally:
        hidden.rename(mgmt)
    assert res.returncode == 1, res.stdout + res.stderr
    out = json.loads(res.stdout)
    assert out["status"] == "rolled back"
    assert any("meter installation failed" in p for p in out["problems"])
    assert config(lab) == before


def test_no_commit_rolls_back_unless_committed(lab: Lab, tmp_path: Path) -> None:
    f = write(tmp_path / "p.yaml", "vifs:\n  - vm: VM3\n    vlan: {tag: 9}\n")
    before = config(lab)
    res = hv("apply", f, "--no-commit", "--timeout", "5")
    assert res.returncode == 0, res.stdout + res.stderr
    assert "rolls back automatically" in res.stdout
    assert vsctl(lab, "get", "port", "vif3.0", "tag") == "9"
    assert hv("apply", f, "--no-commit").returncode == 2  # one pending change at a time
    deadline = time.monotonic() + 15
    while time.monotonic() < deadline and vsctl(lab, "get", "port", "vif3.0", "tag") != "2":
        time.sleep(0.2)
    assert vsctl(lab, "get", "port", "vif3.0", "tag") == "2"
    assert config(lab) == before
    audit = Path(lab.switch.run_dir) / "audit.jsonl"
    deadline = time.monotonic() + 10  # the watcher audits after verifying the rollback
    while time.monotonic() < deadline and "automatic rollback" not in audit.read_text().splitlines()[-1]:
        time.sleep(0.1)
    assert "automatic rollback" in json.loads(audit.read_text().splitlines()[-1])["command"]

    # Committed in time: the change stays, and the watcher is gone.
    res = hv("apply", f, "--no-commit", "--timeout", "5")
    assert res.returncode == 0
    pending = json.loads((Path(lab.switch.run_dir) / "pending.json").read_text())
    res = hv("commit", "--json")
    assert res.returncode == 0 and json.loads(res.stdout)["committed"] is True
    time.sleep(6)
    assert vsctl(lab, "get", "port", "vif3.0", "tag") == "9"
    assert (
        not Path(f"/proc/{pending['watcher_pid']}").exists()
        or b"rollback" not in Path(f"/proc/{pending['watcher_pid']}/cmdline").read_bytes()
    )


def test_concurrent_applies_never_mix(lab: Lab, tmp_path: Path) -> None:
    a = write(tmp_path / "a.yaml", "vifs:\n" + "".join(f"  - port: {p}\n    vlan: {{tag: 10}}\n" for p in TAGS))
    b = write(tmp_path / "b.yaml", "vifs:\n" + "".join(f"  - port: {p}\n    vlan: {{tag: 20}}\n" for p in TAGS))
    for _ in range(4):
        procs = [
            subprocess.Popen([*HVNET, "apply", x], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            for x in (a, b)
        ]
        for p in procs:
            _, err = p.communicate(timeout=60)
            assert p.returncode == 0, err
        tags = {vsctl(lab, "get", "port", p, "tag") for p in TAGS}
        assert tags in ({"10"}, {"20"}), tags
        reset(lab, TAGS)


def test_vif_the_switch_cannot_take_is_isolated(lab: Lab) -> None:
    """Fail closed: a VIF whose VLAN setting ovs-vswitchd could not apply ends in the dead VLAN."""
    vsctl(lab, "add-port", "xenbr0", "vif9.0", "--", "set", "interface", "vif9.0",
          "external_ids:attached-mac=02:00:00:00:09:01", "external_ids:xs-vm-uuid=0000-9")  # fmt: skip
    try:
        res = hv("vif", "set", "vif9.0", "--tag", "3", "--json")
        assert res.returncode == 1, res.stdout + res.stderr
        out = json.loads(res.stdout)
        assert "vif9.0" in out["isolated"] and "dead VLAN 4095" in out["isolated"]["vif9.0"]
        assert any("vif9.0" in p for p in out["problems"])
        assert vsctl(lab, "get", "port", "vif9.0", "vlan_mode") == "trunk"
        assert vsctl(lab, "get", "port", "vif9.0", "trunks") == "[4095]"
        assert vsctl(lab, "get", "port", "vif9.0", "tag") == "[]"
        text = hv("vif", "set", "vif9.0", "--tag", "3").stdout
        assert "ISOLATED vif9.0" in text
    finally:
        vsctl(lab, "--if-exists", "del-port", "vif9.0")
