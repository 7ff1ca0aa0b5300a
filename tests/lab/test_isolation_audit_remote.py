"""``hvnet --host H isolation audit``: a lab hypervisor over SSH whose VIFs are real veths in its namespace."""

from __future__ import annotations

import json
import os
import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.lab.sshhost import SshHost
from tests.conftest import run_hvnet

VIFS = {"vif1.0": 10, "vif2.0": 10, "vif3.0": 20, "vif4.0": 10}  # port -> access VLAN


@pytest.fixture(scope="module")
def hv(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SshHost]:
    if not os.path.exists("/usr/sbin/sshd"):
        pytest.skip("openssh-server is not installed")
    host = SshHost("hvau", tmp_path_factory.mktemp("audit-remote"), index=7)
    host.start()
    try:
        host.switch.vsctl("--", "add-br", "xenbr0", "--", "set", "bridge", "xenbr0", "datapath_type=netdev")
        cmds: list[str] = []
        for i, (port, tag) in enumerate(VIFS.items(), 1):
            for argv in (["link", "add", port, "type", "veth", "peer", "name", f"vm{i}"], ["link", "set", port, "up"],
                         ["link", "set", f"vm{i}", "up"]):  # fmt: skip
                subprocess.run(["ip", "-n", host.netns, *argv], check=True)
            cmds += ["--", "add-port", "xenbr0", port, f"tag={tag}", "--", "set", "interface", port,
                     f"external_ids:attached-mac=02:00:00:00:07:0{i}", f"external_ids:xs-vm-uuid=vm-{i}"]  # fmt: skip
        # A userspace tap (a QEMU guest's on the netdev datapath): what the switch hands it shows as inbound.
        cmds += ["--", "add-port", "xenbr0", "tap5.0", "tag=10", "--", "set", "interface", "tap5.0", "type=tap",
                 "external_ids:attached-mac=02:00:00:00:07:05", "external_ids:xs-vm-uuid=vm-5"]  # fmt: skip
        host.switch.vsctl(*cmds)
        subprocess.run(["ip", "-n", host.netns, "link", "set", "tap5.0", "up"], check=True)
        yield host
    finally:
        host.stop()
    assert not Path(f"/run/netns/{host.netns}").exists()


def audit(hv: SshHost, tmp: Path, *args: str) -> tuple[int, dict]:
    env = {**hv.client_env, "HVNET_LAB_DIR": str(tmp / "no-lab"), "HVNET_STATE_DIR": str(tmp / "state")}
    res = run_hvnet("--host", hv.name, "isolation", "audit", *args, "--json", env=env)
    return res.returncode, json.loads(res.stdout) if res.stdout.strip() else {"stderr": res.stderr}


def test_trace_over_ssh(hv: SshHost, tmp_path: Path) -> None:
    code, out = audit(hv, tmp_path, "--method", "trace")
    assert code == 0, out
    trace = out["methods"]["trace"]
    observed = {(c["listener"], c["sender"]): c["value"] for c in trace["observed"]}
    assert observed[("vif2.0", "vif1.0")] == "yes" and observed[("vif3.0", "vif1.0")] == "no"
    assert trace["stats"]["traces"] == 1 + 5 + 5  # dpif/show, a probe and a control per VIF: one shell


def test_traffic_over_ssh(hv: SshHost, tmp_path: Path) -> None:
    code, out = audit(hv, tmp_path, "--method", "traffic")
    assert code == 0, out
    traffic = out["methods"]["traffic"]
    observed = {(c["listener"], c["sender"]): c["value"] for c in traffic["observed"]}
    assert observed[("vif4.0", "vif2.0")] == "yes" and observed[("vif3.0", "vif2.0")] == "no"
    assert observed[("tap5.0", "vif2.0")] == "yes" and observed[("tap5.0", "vif3.0")] == "no"  # captured inbound
    assert traffic["stats"]["captures"] == 5 and traffic["stats"]["probes_sent"] == 5
    # Nothing left on the host: the endpoint group's work dir went with it.
    left = subprocess.run(["ip", "netns", "exec", hv.netns, "sh", "-c", "ls /var/lib/hvnet/endpoints 2>/dev/null"],
                          capture_output=True, text=True).stdout.split()  # fmt: skip
    assert left == []
