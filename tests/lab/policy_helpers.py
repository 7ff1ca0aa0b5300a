"""Helpers for the policy tests: ovs-vsctl / ovs-ofctl as independent witnesses."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

from appliance.lab import Lab
from appliance.policy.apply.openflow import COOKIE

WITNESS_COLUMNS = {
    "Port": "name,tag,trunks,vlan_mode,qos,external_ids",
    "Interface": "name,ingress_policing_rate,ingress_policing_burst,external_ids",
    "QoS": "_uuid,type,other_config,queues,external_ids",
    "Queue": "_uuid,other_config,external_ids",
    "Mirror": "name,select_all,select_src_port,select_dst_port,select_vlan,output_port,output_vlan,external_ids",
    "Bridge": "name,ports,mirrors,protocols",
}


def vsctl(lab: Lab, *args: str) -> str:
    return lab.switch.vsctl(*args).strip()


def config(lab: Lab) -> dict[str, list[str]]:
    """Every column the policy engine may touch, as ovs-vsctl sees it (order-free)."""
    out = {}
    for table, cols in WITNESS_COLUMNS.items():
        data = json.loads(vsctl(lab, "--format=json", f"--columns={cols}", "list", table))["data"]
        out[table] = sorted(json.dumps(row, sort_keys=True) for row in data)
    out["OpenFlow"] = openflow(lab)
    return out


def ofctl(lab: Lab, command: str, *args: str, opts: tuple[str, ...] = ()) -> str:
    sock = f"unix:{lab.switch.run_dir / 'xenbr0.mgmt'}"
    argv = ["ovs-ofctl", "-O", "OpenFlow13", *opts, command, sock, *args]
    return subprocess.run(argv, capture_output=True, text=True, check=True, timeout=10).stdout


def openflow(lab: Lab) -> list[str]:
    flows = [line.strip() for line in ofctl(lab, "dump-flows", opts=("--no-stats",)).splitlines()[1:]]
    flows = [f for f in flows if f]
    meters = [line.strip() for line in ofctl(lab, "dump-meters").splitlines()[1:] if line.strip()]
    return sorted(flows) + meters


def reset(lab: Lab, tags: dict[str, int]) -> None:
    """Back to the topology's plain state, with ovs-vsctl/ofctl only (not the code under test)."""
    cmds: list[str] = []
    for port, tag in tags.items():
        cmds += ["--", "set", "port", port, f"tag={tag}", "vlan_mode=[]", "trunks=[]", "qos=[]"]
        cmds += ["--", "set", "interface", port, "ingress_policing_rate=0", "ingress_policing_burst=0"]
        cmds += ["--", "remove", "interface", port, "external_ids", "hvnet-police-rate-kbps"]
        cmds += ["--", "remove", "interface", port, "external_ids", "hvnet-police-burst-kbit"]
    cmds += ["--", "clear", "bridge", "xenbr0", "mirrors", "--", "set", "bridge", "xenbr0", "protocols=[]"]
    cmds += ["--", "--all", "destroy", "QoS", "--", "--all", "destroy", "Queue"]
    for port in vsctl(lab, "list-ports", "xenbr0").split():
        if port.startswith("mir"):
            cmds += ["--", "del-port", port]
    vsctl(lab, *cmds)
    ofctl(lab, "del-meters")
    ofctl(lab, "del-flows", f"cookie={COOKIE:#x}/-1")
    ofctl(lab, "del-groups")
    ofctl(lab, "add-flow", "priority=0,actions=NORMAL")  # the switch's default flow, gone while hvnet's pipeline was in


def write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)
