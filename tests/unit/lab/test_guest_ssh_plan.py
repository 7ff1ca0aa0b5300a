"""The pure parts of reaching lab guests like VMs: management addressing, the client's ssh_config
(read back by the real ``ssh -G``), the sshd configuration (checked by the real ``sshd -T``), the
known_hosts line and the VM inventory."""

from __future__ import annotations

import ipaddress
import subprocess
from pathlib import Path

import pytest
import yaml

from appliance.core.errors import LabError
from appliance.endpoints import topology
from appliance.endpoints.topology import DEFAULT_TOPOLOGY
from appliance.lab import guestssh, sshd

ROOT = Path(__file__).resolve().parents[3]
MIXED = ROOT / "vlan-tests" / "topologies" / "mixed-qemu.yaml"


def ns_of(name: str) -> str:
    return f"hvnet-{name}"


def test_each_namespace_guest_gets_its_own_link_local_slash30_apart_from_the_lab_hosts() -> None:
    links = guestssh.plan(["VM1", "VM2", "VM3"], ns_of)
    assert [(ln.guest, ln.netns, ln.outer, ln.peer, ln.address) for ln in links] == [
        ("VM1", "hvnet-VM1", "hvm1", "169.254.64.1", "169.254.64.2"),
        ("VM2", "hvnet-VM2", "hvm2", "169.254.64.5", "169.254.64.6"),
        ("VM3", "hvnet-VM3", "hvm3", "169.254.64.9", "169.254.64.10"),
    ]
    link_local = ipaddress.ip_network("169.254.0.0/16")
    hosts = ipaddress.ip_network("169.254.100.0/22")  # SshHost's first indices; they go up from there
    assert guestssh.MGMT_BLOCK.subnet_of(link_local)
    assert guestssh.MGMT_BLOCK.broadcast_address < hosts.network_address


def test_the_largest_plan_keeps_names_short_and_every_subnet_distinct() -> None:
    n = guestssh.MGMT_BLOCK.num_addresses // 4
    links = guestssh.plan([f"G{i}" for i in range(n)], ns_of)
    assert len({ln.outer for ln in links}) == n and len({ln.address for ln in links}) == n
    for ln in links:
        assert len(ln.outer) <= 15 and ln.outer != "eth0"
        net = ipaddress.ip_interface(f"{ln.address}/{ln.prefix}").network
        assert ipaddress.ip_address(ln.peer) in net and net.subnet_of(guestssh.MGMT_BLOCK)
        assert ln.address not in (str(net.network_address), str(net.broadcast_address))
    assert len(guestssh.MGMT_IFACE) <= 15 and guestssh.MGMT_IFACE != "eth0"
    with pytest.raises(LabError, match="at most"):
        guestssh.plan([f"G{i}" for i in range(n + 1)], ns_of)


def test_a_guest_address_inside_the_management_block_is_refused(tmp_path: Path) -> None:
    assert guestssh.clashes(topology.load(DEFAULT_TOPOLOGY)) == []
    f = tmp_path / "t.yaml"
    f.write_text("name: t\nhypervisor: xenserver\nbridges: [{name: br0}]\n"
                 "guests:\n  - {name: A, ip: 169.254.70.1/16}\n  - {name: B, ip: 10.0.0.2/24}\n")  # fmt: skip
    assert guestssh.clashes(topology.load(f)) == [
        "guest A's address 169.254.70.1/16 overlaps the management links' 169.254.64.0/20"
    ]


def _ssh_g(config: Path, host: str) -> dict[str, str]:
    out = subprocess.run(["ssh", "-G", "-F", str(config), host], capture_output=True, text=True, check=True).stdout
    return dict(line.split(" ", 1) for line in out.splitlines() if " " in line)


def test_ssh_reads_the_written_config_as_meant_even_from_a_directory_with_a_space_and_a_percent(
    tmp_path: Path,
) -> None:
    files = guestssh.ClientFiles(tmp_path / "lab 100%d")
    files.dir.mkdir(parents=True)
    links = guestssh.plan(["VM1", "VM2"], ns_of)
    files.ssh_config.write_text(guestssh.ssh_config_text(links, files))
    for ln in links:
        got = _ssh_g(files.ssh_config, ln.guest)
        assert got["hostname"] == ln.address and got["port"] == "22" and got["user"] == "root"
        assert got["stricthostkeychecking"] == "true" and got["identitiesonly"] == "yes"
        assert got["userknownhostsfile"] == str(files.known_hosts)  # ssh -G shows this one expanded
        assert got["identityfile"] == str(files.identity).replace("%", "%%")  # and this one as written
    # another name is not one of the lab's guests: ssh's defaults, not the lab's key
    assert _ssh_g(files.ssh_config, "VM3")["hostname"] == "vm3"


def test_a_path_openssh_cannot_hold_is_refused() -> None:
    for bad in ('/tmp/a"b', "/tmp/a\nb"):
        with pytest.raises(LabError, match="cannot be written"):
            sshd.config_arg(bad)
    assert sshd.config_arg("/tmp/a b%c", tokens=True) == '"/tmp/a b%%c"'
    assert sshd.config_arg("/tmp/plain") == "/tmp/plain"


def test_sshd_accepts_the_guest_configuration_with_a_vm_path_and_its_own_home(tmp_path: Path) -> None:
    d = tmp_path / "vm access" / "VM1"
    d.mkdir(parents=True)
    sshd.keygen(d / "host_key", "test")
    text = sshd.sshd_config("169.254.64.2", 22, d, guestssh.sshd_extra(d / "home"))
    (d / "sshd_config").write_text(text)
    out = subprocess.run([sshd.sshd_binary(), "-T", "-f", str(d / "sshd_config")], capture_output=True, text=True,
                         check=True).stdout  # fmt: skip
    got = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in out.splitlines() if " " in line}
    assert got["listenaddress"] == "169.254.64.2:22"
    assert got["hostkey"] == str(d / "host_key")
    assert got["passwordauthentication"] == "no" and got["permitrootlogin"] == "without-password"
    # one line per variable, the quoted one whole: a VM's PATH, and a HOME inside the lab whatever its path
    setenv = [line.split(" ", 1)[1] for line in out.splitlines() if line.startswith("setenv ")]
    assert setenv == [f"PATH={guestssh.GUEST_PATH}", f"HOME={d / 'home'}"]


def test_known_hosts_line_is_bare_on_port_22_and_bracketed_elsewhere() -> None:
    pub = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ0 hvnet-lab-VM1\n"
    assert sshd.known_hosts_line("169.254.64.2", 22, pub) == "169.254.64.2 ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIJ0\n"
    assert sshd.known_hosts_line("169.254.110.2", 2222, pub).startswith("[169.254.110.2]:2222 ssh-ed25519 ")
    with pytest.raises(LabError, match="not an OpenSSH public key"):
        sshd.known_hosts_line("169.254.64.2", 22, "")


def test_the_inventory_names_namespace_guests_by_vif_and_ssh_and_qemu_guests_by_domain(tmp_path: Path) -> None:
    t = topology.load(MIXED)
    files = guestssh.ClientFiles(tmp_path)
    links = guestssh.plan(guestssh.netns_guests(t), ns_of)
    assert [ln.guest for ln in links] == ["NS1", "NS2"]  # no management link for a QEMU guest
    doc = guestssh.inventory(t, links, files)
    ssh = {"ssh_config": str(tmp_path / "vm-access" / "ssh_config"),
           "known_hosts": str(tmp_path / "vm-access" / "known_hosts"),
           "identity": str(tmp_path / "vm-access" / "id_ed25519"), "user": "root"}  # fmt: skip
    assert doc == {
        "vms": [
            {"name": "NS1", "vif": "vif1.0", "ssh": "NS1", **ssh},
            {"name": "NS2", "vif": "vif2.0", "ssh": "NS2", **ssh},
            {"name": "VMQ1", "vm": "VMQ1", "agent": "libvirt", "libvirt": "qemu:///system"},
            {"name": "VMQ2", "vm": "VMQ2", "agent": "libvirt", "libvirt": "qemu:///system"},
        ]
    }
    assert yaml.safe_load(yaml.safe_dump(doc, sort_keys=False)) == doc
    assert not any("ip" in vm for vm in doc["vms"])  # the address under test is found inside the VM
