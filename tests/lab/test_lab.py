"""The default lab on real OVS, with ovs-vsctl and the guests as witnesses."""

from __future__ import annotations

import json
import subprocess

import pytest

from appliance.core import documents
from appliance.endpoints.topology import DEFAULT_TOPOLOGY
from appliance.endpoints.topology import load as load_topology
from appliance.frontdoor.hosts import build_host
from appliance.lab import Lab
from appliance.switch import api
from tests import jsonschemas
from tests.conftest import run_hvnet

TOPO = load_topology(DEFAULT_TOPOLOGY)


def vsctl(lab: Lab, *args: str) -> str:
    return lab.switch.vsctl(*args).strip()


def ping(lab: Lab, src: str, dst_ip: str) -> bool:
    res = lab.guest_exec(src, ["ping", "-c", "2", "-i", "0.2", "-W", "1", dst_ip])
    return res.returncode == 0


def test_ports_tags_and_external_ids(lab: Lab) -> None:
    assert vsctl(lab, "list-br") == "xenbr0"
    assert vsctl(lab, "get", "Bridge", "xenbr0", "datapath_type") == "netdev"
    assert set(vsctl(lab, "list-ports", "xenbr0").split()) == {"vif1.0", "vif2.0", "vif3.0"}
    for g in TOPO.guests:
        assert vsctl(lab, "get", "Port", g.vif, "tag") == str(g.tag)
        ids = json.loads(vsctl(lab, "--format=json", "--columns=external_ids", "list", "Interface", g.vif))
        got = dict(ids["data"][0][0][1])
        assert got == {
            "xs-vm-uuid": g.vm_uuid(TOPO.name),
            "xs-vif-uuid": g.vif_uuid(TOPO.name),
            "xs-network-uuid": g.network_uuid(TOPO.name),
            "attached-mac": g.mac,
        }
        assert int(vsctl(lab, "get", "Interface", g.vif, "ofport")) > 0
        # the guest really has the MAC the hypervisor ids claim
        link = lab.guest_exec(g.name, ["cat", "/sys/class/net/eth0/address"]).stdout.strip()
        assert link == g.mac


def test_tx_checksum_offload_off_on_both_ends(lab: Lab) -> None:
    host = subprocess.run(["ethtool", "-k", "vif1.0"], capture_output=True, text=True, check=True).stdout
    guest = lab.guest_exec("VM1", ["ethtool", "-k", "eth0"]).stdout
    for out in (host, guest):
        assert "tx-checksumming: off" in out


def test_vlan_isolation_by_ping(lab: Lab) -> None:
    assert ping(lab, "VM1", "192.168.0.151"), "VM1 -> VM2 (both VLAN 1) must work"
    assert not ping(lab, "VM1", "192.168.0.152"), "VM1 -> VM3 (VLAN 2) must fail"


def hears_vlan1_arp(lab: Lab, listener: str) -> bool:
    """Does ``listener`` capture VM1's ARP broadcast (802.1Q tag 1)?"""
    cap = subprocess.Popen(
        proc_in(lab, listener, ["timeout", "5", "tcpdump", "-i", "eth0", "-nn", "-e", "-c", "1", "-l",
                                "--immediate-mode", "vlan 1 and arp"]),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    assert cap.stderr is not None
    cap.stderr.readline()  # "listening on eth0 ..." once the capture is armed
    lab.guest_exec("VM1", ["ip", "neigh", "flush", "all"])
    lab.guest_exec("VM1", ["ping", "-c", "1", "-W", "1", "192.168.0.151"])
    out, _ = cap.communicate(timeout=10)
    return "ARP" in out and "vlan 1" in out


def proc_in(lab: Lab, guest: str, argv: list[str]) -> list[str]:
    return ["ip", "netns", "exec", lab.ns_of(guest), *argv]


def test_status_json_reports_the_three_vifs(lab: Lab) -> None:
    res = run_hvnet("status", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    vifs = {v["port"]: v for v in out["vifs"]}
    assert set(vifs) == {"vif1.0", "vif2.0", "vif3.0"}
    for g in TOPO.guests:
        v = vifs[g.vif]
        assert (v["vm_name"], v["vm_name_source"], v["tag"], v["vlan_mode"]) == (g.name, "lab", g.tag, "access")
        assert v["mac"] == g.mac and v["hypervisor"] == "xenserver" and v["xen_domid"] == g.domid
        assert v["ingress_policing_rate_bits_per_s"] == 0 and "ingress_policing_burst_bits" in v
        assert v["counters_source"] == "kernel" and v["counters"]["rx_packets"] is not None
    assert out["host"]["ovs_version"] and out["host"]["bridge_datapath_types"] == ["netdev"]
    assert (out["schema"], out["version"]) == ("hvnet.status", 2)
    jsonschemas.check(documents.STATUS, out)  # the real output is what docs/reference/json.md publishes
    assert out["host"]["db_target"] == lab.db
    assert [b["name"] for b in out["bridges"]] == ["xenbr0"]


def test_status_human_table(lab: Lab) -> None:
    res = run_hvnet("status")
    assert res.returncode == 0, res.stderr
    lines = res.stdout.splitlines()
    assert any(line.startswith("VM1  ") and "vif1.0" in line and "access 1" in line for line in lines)
    assert any(line.startswith("VM3  ") and "access 2" in line for line in lines)
    assert max(len(line) for line in lines) <= 120


def test_rates_are_measured_not_invented(lab: Lab) -> None:
    flood = subprocess.Popen(
        ["ip", "netns", "exec", lab.ns_of("VM1"), "ping", "-i", "0.01", "-s", "1000", "-w", "4", "192.168.0.151"],
        stdout=subprocess.DEVNULL,
    )
    try:
        res = run_hvnet("status", "--json", "--rates", "1")
    finally:
        flood.wait()
    assert res.returncode == 0, res.stderr
    vifs = {v["port"]: v for v in json.loads(res.stdout)["vifs"]}
    r1 = vifs["vif1.0"]["rates"]
    assert r1 is not None and r1["rx_bits_per_s"] > 100_000  # ~100 pings/s of 1 kB
    assert vifs["vif3.0"]["rates"]["rx_bits_per_s"] < r1["rx_bits_per_s"] / 10


def test_external_change_and_trunk_all_warning(lab: Lab) -> None:
    """A change made with ovs-vsctl appears; a cleared tag is flagged as carrying every VLAN."""
    vsctl(lab, "clear", "Port", "vif3.0", "tag")
    try:
        res = run_hvnet("status", "--json")
        v3 = {v["port"]: v for v in json.loads(res.stdout)["vifs"]}["vif3.0"]
        assert v3["tag"] is None and v3["vlan_mode"] == "trunk" and v3["trunks_all_vlans"] is True
        human = run_hvnet("status").stdout
        assert "warning: vif3.0 has no tag and no trunks: it carries EVERY VLAN" in human
        # The warning is not cosmetic: VM3 now hears VLAN 1's broadcasts (tagged).
        assert hears_vlan1_arp(lab, "VM3"), "VM3 should receive VLAN 1 ARP once its tag is cleared"
    finally:
        vsctl(lab, "set", "Port", "vif3.0", "tag=2")
    assert not hears_vlan1_arp(lab, "VM3")


def test_xenserver_hvm_tap_port_is_grouped(lab: Lab) -> None:
    """An HVM guest has tapD.N next to vifD.N; inventory shows one VIF."""
    g = TOPO.guest("VM2")
    vsctl(
        lab, "add-port", "xenbr0", "tap2.0", "tag=1", "--", "set", "Interface", "tap2.0",
        f"external_ids:xs-vm-uuid={g.vm_uuid(TOPO.name)}", f"external_ids:attached-mac={g.mac}",
    )  # fmt: skip
    try:
        res = run_hvnet("status", "--json")
        vifs = json.loads(res.stdout)["vifs"]
        assert [v["port"] for v in vifs] == ["vif1.0", "vif2.0", "vif3.0"]
        assert vifs[1]["alias_ports"] == ["tap2.0"]
        assert "vif2.0+tap2.0" in run_hvnet("status").stdout
    finally:
        vsctl(lab, "del-port", "tap2.0")


def test_all_ports_and_bridge_filter(lab: Lab) -> None:
    out = json.loads(run_hvnet("status", "--json", "--all").stdout)
    bridge_port = next(v for v in out["vifs"] if v["port"] == "xenbr0")
    assert bridge_port["is_vif"] is False and bridge_port["type"] == "internal"
    res = run_hvnet("status", "--bridge", "nope")
    assert res.returncode == 1 and "no bridge named 'nope'" in res.stderr and "xenbr0" in res.stderr


def test_in_process_inventory_and_live_rates(lab: Lab) -> None:
    host = build_host()
    with api.connect(host) as conn:
        assert conn.target.source == "lab"
        live = api.LiveInventory(conn, host)
        first = live.refresh()
        assert all(v.rates is None for v in first.vifs)  # one reading: no rate yet
        lab.guest_exec("VM1", ["ping", "-c", "3", "-i", "0.1", "192.168.0.151"])
        second = live.refresh()
        v1 = second.vif_by_port("vif1.0")
        assert v1 is not None and v1.rates is not None and v1.rates.rx_pps > 0


def test_wait_for_vswitchd_applies_change(lab: Lab) -> None:
    with api.connect(build_host()) as conn:

        def set_tag(ctx):
            port = next(p for p in ctx.rows("Port") if p.name == "vif2.0")
            port.verify("tag")
            port.tag = [7]

        res = conn.transact(set_tag, wait_for_vswitchd=True)
        assert res.next_cfg is not None and conn.root().cur_cfg >= res.next_cfg
    try:
        assert vsctl(lab, "get", "Port", "vif2.0", "tag") == "7"
        assert not ping(lab, "VM1", "192.168.0.151")
    finally:
        vsctl(lab, "set", "Port", "vif2.0", "tag=1")


def test_lab_up_again_is_idempotent(lab: Lab) -> None:
    uuid_before = vsctl(lab, "get", "Port", "vif1.0", "_uuid")
    report = Lab(lab.run_dir).up(TOPO)
    assert report.actions == []  # nothing started, created or written
    assert vsctl(lab, "get", "Port", "vif1.0", "_uuid") == uuid_before
    res = run_hvnet("lab", "status", "--json")
    assert res.returncode == 0 and json.loads(res.stdout)["state"] == "up"
    jsonschemas.check(documents.LAB_STATUS, json.loads(res.stdout))


def test_different_topology_while_up_is_refused(lab: Lab, tmp_path) -> None:
    other = tmp_path / "other.yaml"
    other.write_text(DEFAULT_TOPOLOGY.read_text().replace("tag: 2", "tag: 3"))
    res = run_hvnet("lab", "up", "--topology", str(other))
    assert res.returncode == 1 and "already set up" in res.stderr and "lab down" in res.stderr
    assert vsctl(lab, "get", "Port", "vif3.0", "tag") == "2"


@pytest.mark.parametrize("mode", ["second-lab-dir"])
def test_second_lab_does_not_adopt_foreign_devices(lab: Lab, tmp_path, mode) -> None:
    res = run_hvnet("lab", "up", env={"HVNET_LAB_DIR": str(tmp_path / "lab2")})
    assert res.returncode == 1
    assert "namespace hvnet-VM1" in res.stderr and "not part of the lab" in res.stderr
    assert not (tmp_path / "lab2").exists()


def test_qos_policing_and_mirrors_in_inventory(lab: Lab) -> None:
    """Egress QoS, ingress policing and mirrors set by another tool are all reported, with units."""
    vsctl(lab, "set", "Interface", "vif1.0", "ingress_policing_rate=10240", "ingress_policing_burst=1024")
    vsctl(
        lab, "set", "Port", "vif2.0", "qos=@q", "--", "--id=@q", "create", "QoS", "type=linux-htb",
        "other-config:max-rate=20000000",
    )  # fmt: skip
    vsctl(
        lab, "--", "--id=@src", "get", "Port", "vif1.0", "--", "--id=@out", "get", "Port", "vif3.0",
        "--", "--id=@m", "create", "Mirror", "name=m1", "select-src-port=@src", "output-port=@out",
        "--", "add", "Bridge", "xenbr0", "mirrors", "@m",
    )  # fmt: skip
    try:
        out = json.loads(run_hvnet("status", "--json").stdout)
        vifs = {v["port"]: v for v in out["vifs"]}
        assert (vifs["vif1.0"]["ingress_policing_rate_bits_per_s"], vifs["vif1.0"]["ingress_policing_burst_bits"]) == (
            10240000,
            1024000,
        )
        assert vifs["vif2.0"]["egress_qos_type"] == "linux-htb"
        assert vifs["vif2.0"]["egress_max_rate_bits_per_s"] == 20000000
        assert vifs["vif1.0"]["mirrors"] == [{"mirror": "m1", "role": "source"}]
        assert vifs["vif3.0"]["mirrors"] == [{"mirror": "m1", "role": "output"}]
        (m,) = out["mirrors"]
        assert (m["name"], m["select_src_ports"], m["output_port"], m["bridge"]) == (
            "m1",
            ["vif1.0"],
            "vif3.0",
            "xenbr0",
        )
        human = run_hvnet("status").stdout
        assert "10240 kbit/s burst 1024 kbit" in human
        assert "20000 kbit/s" in human
        assert "vif1.0 ingress policing is configured (tc); enforcement has not been verified" in human
        assert "mirror m1 on xenbr0 -> vif3.0" in human
    finally:
        vsctl(lab, "--", "--id=@m", "get", "Mirror", "m1", "--", "remove", "Bridge", "xenbr0", "mirrors", "@m")
        vsctl(lab, "clear", "Port", "vif2.0", "qos")
        vsctl(lab, "set", "Interface", "vif1.0", "ingress_policing_rate=0", "ingress_policing_burst=0")
