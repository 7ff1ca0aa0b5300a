"""The installed RPMs at work: hvnet and netperf from a scratch root, against the lab.

The scratch root holds what the RPMs install; the host's python3 runs the
installed launcher (it finds its prefix next to itself) and the host's
python3-openvswitch stands in for EL's.  Every process started here is
stopped by its PID.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from appliance.lab import Lab
from tests.conftest import ROOT
from tests.pkg.conftest import run

pytestmark = [pytest.mark.pkg, pytest.mark.lab]


def hvnet(root: Path, *args: str, timeout: float = 60) -> subprocess.CompletedProcess:
    return run([str(root / "usr" / "bin" / "hvnet"), *args], timeout=timeout)


def port_tag(lab: Lab, port: str) -> str:
    res = run(["ovs-vsctl", f"--db=unix:{lab.switch.db_sock}", "get", "Port", port, "tag"], timeout=10)
    assert res.returncode == 0, res.stderr
    return res.stdout.strip()


def wait_for(pred: Callable[[], bool], timeout: float) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.1)
    return False


@contextmanager
def started(argv: list[str], log: Path) -> Iterator[subprocess.Popen]:
    with open(log, "w") as f:
        proc = subprocess.Popen(argv, stdout=f, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        yield proc
    finally:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()


def man(root: Path, *args: str) -> str:
    """A page of the scratch root's manual as man(1) shows it (its own pages only: -M)."""
    env = {**os.environ, "MANWIDTH": "120", "LC_ALL": "C.UTF-8"}
    res = run(["man", "--warnings", "-M", str(root / "usr" / "share" / "man"), "-P", "cat", *args], env=env)
    assert res.returncode == 0 and not res.stderr, f"man {' '.join(args)}: {res.stderr}"
    return res.stdout


@pytest.mark.parametrize(
    ("args", "expected"),
    [
        (("hvnet",), "EXIT STATUS"),
        (("hvnet-apply",), "hvnet-apply - apply a policy"),
        (("hvnet-mirror",), "hvnet mirror add"),
        (("hvnet.conf",), "[exporter]"),
        (("5", "hvnet-suite"), "hvnet-suite - the netperf suite file"),
        (("8", "hvnet-suite"), "hvnet suite run"),
        (("hvnet-policy",), "ingress"),
    ],
)
def test_installed_man_pages_render(installed_root: Path, args: tuple[str, ...], expected: str) -> None:
    assert expected in man(installed_root, *args)


def test_the_units_documentation_is_installed(installed_root: Path) -> None:
    """Every unit's Documentation=man:PAGE(N) is a page the package installs."""
    for unit in ("hvnet-agent.service", "hvnet-exporter.service"):
        text = (installed_root / "usr/lib/systemd/system" / unit).read_text()
        pages = re.findall(r"man:([\w.-]+)\((\d)\)", text)
        assert pages, unit
        for name, section in pages:
            assert f"{name.upper()}({section})" in man(installed_root, section, name), (unit, name)


def test_installed_hvnet_sees_the_lab(lab: Lab, installed_root: Path) -> None:
    res = hvnet(installed_root, "status", "--json")
    assert res.returncode == 0, res.stderr
    vifs = {v["port"]: v for v in json.loads(res.stdout)["vifs"]}
    assert {"vif1.0", "vif2.0", "vif3.0"} <= set(vifs)
    assert vifs["vif1.0"]["vm_name"] == "VM1" and vifs["vif1.0"]["tag"] == 1


def test_installed_configuration_file_changes_no_default(installed_root: Path) -> None:
    conf = installed_root / "etc" / "hvnet" / "hvnet.conf"
    res = run([str(installed_root / "usr" / "bin" / "hvnet"), "--no-lab", "config", "show", "--json"],
              env={**os.environ, "HVNET_CONFIG": str(conf)}, timeout=60)  # fmt: skip
    assert res.returncode == 0, res.stderr
    doc = json.loads(res.stdout)
    assert doc["file"] == str(conf) and doc["file_present"]
    got = {s["name"]: s for s in doc["settings"]}
    assert {s["from"] for s in got.values()} <= {"default", "env"}  # every line of the shipped file is a comment
    assert got["data.runs_dir"]["value"] == "/var/lib/hvnet/runs" or got["data.runs_dir"]["from"] == "env"


def test_shipped_and_kickstart_policies_plan_nothing(lab: Lab, installed_root: Path, tmp_path: Path) -> None:
    ks = (ROOT / "kickstart" / "hvnet-kvm-host.ks").read_text(encoding="utf-8")
    m = re.search(r"cat >/etc/hvnet/policy\.yaml <<'EOF'\n(.*?)\nEOF\n", ks, re.S)
    assert m, "the kickstart writes /etc/hvnet/policy.yaml"
    ks_policy = tmp_path / "ks-policy.yaml"
    ks_policy.write_text(m.group(1) + "\n")
    for policy in (installed_root / "etc" / "hvnet" / "policy.yaml", ks_policy):
        res = hvnet(installed_root, "plan", "--json", str(policy))
        assert res.returncode == 0, f"{policy}: {res.stdout}{res.stderr}"
        assert not json.loads(res.stdout).get("changes"), res.stdout


def test_installed_agent_applies_and_reloads_a_policy(lab: Lab, installed_root: Path, tmp_path: Path) -> None:
    agent_applies_and_reloads(lab, installed_root / "usr" / "bin" / "hvnet", tmp_path)


def agent_applies_and_reloads(lab: Lab, launcher: Path, tmp_path: Path) -> None:
    """An installed ``hvnet agent`` puts a policy in force, re-reads it on SIGHUP and exits 0 on SIGTERM."""
    policy = tmp_path / "policy.yaml"
    policy.write_text("version: 1\nvifs:\n  - port: vif3.0\n    vlan: {mode: access, tag: 7}\n")
    assert port_tag(lab, "vif3.0") == "2"
    argv = [str(launcher), "agent", "--policy", str(policy)]
    with started(argv, tmp_path / "agent.log") as agent:
        assert wait_for(lambda: port_tag(lab, "vif3.0") == "7", 30), (tmp_path / "agent.log").read_text()
        # what the unit's ExecReload does
        policy.write_text("version: 1\nvifs:\n  - port: vif3.0\n    vlan: {mode: access, tag: 2}\n")
        os.kill(agent.pid, signal.SIGHUP)
        assert wait_for(lambda: port_tag(lab, "vif3.0") == "2", 30), (tmp_path / "agent.log").read_text()
        agent.send_signal(signal.SIGTERM)
        assert agent.wait(timeout=15) == 0, (tmp_path / "agent.log").read_text()


def test_installed_apply_no_commit_rolls_back_by_itself(lab: Lab, installed_root: Path, tmp_path: Path) -> None:
    """The rollback watcher is a second process ('python3 -m appliance'): it must find
    the installed prefix too."""
    policy = tmp_path / "policy.yaml"
    policy.write_text("version: 1\nvifs:\n  - port: vif3.0\n    vlan: {mode: access, tag: 9}\n")
    assert port_tag(lab, "vif3.0") == "2"
    res = hvnet(installed_root, "apply", "--no-commit", "--timeout", "5", str(policy))
    assert res.returncode == 0, res.stdout + res.stderr
    assert port_tag(lab, "vif3.0") == "9"
    assert wait_for(lambda: port_tag(lab, "vif3.0") == "2", 30), "the installed rollback watcher did not roll back"
    assert not list((installed_root / "usr/lib64/hvnet").rglob("__pycache__"))


def netperf_tcp_rr(lab: Lab, client: str, server: str, netperf: Path, netserver: Path, tmp_path: Path) -> float:
    """One second of TCP_RR from ``client`` to a netserver started in ``server``; transactions/s."""
    argv = ["ip", "netns", "exec", lab.ns_of(server), str(netserver), "-D", "-4", "-p", "12865"]
    with started(argv, tmp_path / f"netserver-{server}.log"):
        cmd = ["ip", "netns", "exec", lab.ns_of(client), str(netperf), "-H", "192.168.0.151"]
        cmd += ["-t", "TCP_RR", "-l", "1", "-P", "0", "--", "-k", "THROUGHPUT,THROUGHPUT_UNITS"]
        res = None
        for _ in range(50):  # the netserver needs a moment to listen
            res = run(cmd, timeout=30)
            if res.returncode == 0:
                break
            time.sleep(0.1)
        assert res is not None and res.returncode == 0, res and res.stdout + res.stderr
    found = dict(re.findall(r"^(\w+)=(.*)$", res.stdout, re.M))
    assert found.get("THROUGHPUT_UNITS") == "Trans/s", res.stdout
    return float(found["THROUGHPUT"])


def test_installed_netperf_runs_tcp_rr_in_the_lab(lab: Lab, installed_root: Path, tmp_path: Path) -> None:
    bindir = installed_root / "usr" / "bin"
    res = run([str(bindir / "netperf"), "-V"])
    assert res.returncode == 0 and "Netperf version 2.7" in res.stdout, res.stdout + res.stderr
    # installed client against Debian's netserver 2.7.0, and Debian's client against the installed server
    assert netperf_tcp_rr(lab, "VM1", "VM2", bindir / "netperf", Path("/usr/bin/netserver"), tmp_path) > 0
    assert netperf_tcp_rr(lab, "VM1", "VM2", Path("/usr/bin/netperf"), bindir / "netserver", tmp_path) > 0
