"""A lab of several hypervisors: a topology with ``hosts:``.

Each host is an :class:`~appliance.lab.sshhost.SshHost` -- a network
namespace with its own ovsdb-server and ovs-vswitchd and its own sshd, whose
PATH holds no Python -- and carries every bridge of the topology.  Hosts are
joined in the order the topology lists them by veth "physical" links, one per
bridge and neighbouring pair, added to both bridges as plain trunk ports (no
tag, every VLAN: how XenServer attaches a PIF), so a guest's VLAN crosses
from one host to the next the way it crosses a physical trunk.  A chain, not
a mesh: without spanning tree a loop would flood forever.

Guests are network namespaces as in the one-switch lab; a guest's VIF lives
in its host's namespace, where that host's OVS can take it.  ``lab up``
writes what a client needs to reach the hosts agentlessly -- the inventory
(``hosts.yaml``), an ``ssh_config`` with each host's key and known_hosts --
so ``hvnet --host hv2 status`` works right after; ``lab down`` removes all of
it with the run directory.
"""

from __future__ import annotations

import json
from pathlib import Path

from appliance.core import proc
from appliance.core.errors import LabError
from appliance.endpoints.topology import Guest, Link, Topology
from appliance.lab.sshhost import SshHost

FIRST_INDEX = 10  # the first lab host's link is 169.254.110.0/30, the next .111.0/30 ...
INVENTORY_FILE = "hosts.yaml"
SSH_CONFIG_FILE = "ssh_config"
# XenServer gives every VIF's host side this MAC; the VM's own MAC is in external_ids:attached-mac.
XEN_VIF_HOST_MAC = "fe:ff:ff:ff:ff:ff"


def hosts_dir(run_dir: Path) -> Path:
    return run_dir / "hosts"


def lab_hosts(run_dir: Path, names: list[str] | tuple[str, ...]) -> dict[str, SshHost]:
    """The topology's hosts, in order, each with its own index (its management link's addresses)."""
    return {n: SshHost(n, hosts_dir(run_dir), index=FIRST_INDEX + i) for i, n in enumerate(names)}


def uplinks(t: Topology, host: str) -> list[tuple[str, str]]:
    """(bridge, port) of every trunk link end on ``host``."""
    out = []
    for ln in t.links():
        if ln.a == host:
            out.append((ln.bridge, ln.a_end))
        if ln.b == host:
            out.append((ln.bridge, ln.b_end))
    return out


def link_in(netns: str | None, name: str) -> bool:
    """Whether interface ``name`` exists in namespace ``netns`` (None: this machine's own)."""
    if netns is None:
        return Path(f"/sys/class/net/{name}").exists()
    return proc.run(["ip", "-n", netns, "link", "show", "dev", name], check=False).returncode == 0


def make_link(hosts: dict[str, SshHost], ln: Link) -> bool:
    """Create the link unless it is there; True if created."""
    a, b = hosts[ln.a].netns, hosts[ln.b].netns
    if link_in(a, ln.a_end):
        return False
    proc.run(["ip", "link", "add", ln.a_end, "netns", a, "type", "veth", "peer", "name", ln.b_end, "netns", b])
    for ns, end in ((a, ln.a_end), (b, ln.b_end)):
        proc.run(["ip", "-n", ns, "link", "set", end, "up"])
        # the userspace datapath sends TCP with bad checksums through a veth that offloads them
        proc.run(proc.in_netns(ns, ["ethtool", "-K", end, "tx", "off"]))
    return True


def plug_guest(g: Guest, guest_ns: str, host_ns: str | None = None) -> None:
    """The guest's namespace and its veth: ``eth0`` in the guest, the VIF in its host's namespace
    (None: this machine's, the one-switch lab's), carrying XenServer's VIF MAC on the host side."""
    ip_host = ["ip"] if host_ns is None else ["ip", "-n", host_ns]
    if not Path(f"/run/netns/{guest_ns}").exists():
        proc.run(["ip", "netns", "add", guest_ns])
    if link_in(host_ns, g.vif):
        proc.run([*ip_host, "link", "del", g.vif])
    # One command creates both ends, each directly in its namespace.
    where = [] if host_ns is None else ["netns", host_ns]
    proc.run(["ip", "link", "add", g.vif, *where, "type", "veth", "peer", "name", "eth0", "netns", guest_ns])
    ethtool_host = ["ethtool", "-K", g.vif, "tx", "off"]
    steps = [
        [*ip_host, "link", "set", g.vif, "address", XEN_VIF_HOST_MAC],
        ["ip", "-n", guest_ns, "link", "set", "lo", "up"],
        ["ip", "-n", guest_ns, "link", "set", "eth0", "address", g.mac],
        ["ip", "-n", guest_ns, "addr", "add", g.ip, "dev", "eth0"],
        ["ip", "-n", guest_ns, "link", "set", "eth0", "up"],
        [*ip_host, "link", "set", g.vif, "up"],
        # TCP through the userspace datapath hangs with TX checksum offload on.
        ethtool_host if host_ns is None else proc.in_netns(host_ns, ethtool_host),
        proc.in_netns(guest_ns, ["ethtool", "-K", "eth0", "tx", "off"]),
    ]
    for argv in steps:
        proc.run(argv)


def conflicts(hosts: dict[str, SshHost], recorded: list[str]) -> list[str]:
    """Host namespaces that exist but are not this lab's."""
    return [
        f"namespace {h.netns}" for n, h in hosts.items() if Path(f"/run/netns/{h.netns}").exists() and n not in recorded
    ]


def write_client_files(run_dir: Path, t: Topology, hosts: dict[str, tuple[str, Path]]) -> None:
    """The inventory and one ``ssh_config`` naming every host (each block with its key and known_hosts).

    ``hosts``: each host's OVS run directory (on the host) and its own ssh_config block's file -- a namespaced
    host's or a VM host's alike, so ``hvnet --host NAME`` reaches either the same way."""
    kind = "xenserver" if t.hypervisor == "xenserver" else "kvm"
    lines = [f"# The lab's hypervisors (topology {t.name}): written by 'hvnet lab up', removed by 'lab down'.",
             "hosts:"]  # fmt: skip
    for name, (rundir, _) in hosts.items():
        lines += [f"  - name: {name}", f"    kind: {kind}", f"    group: {t.name}",
                  f"    ovs_rundir: {rundir}"]  # fmt: skip
    if t.ovn:  # the pool its hosts are the chassis of: hvnet --pool NAME
        central = run_dir / "ovn"
        lines += ["pools:", f"  - name: {t.name}", f"    nb: {json.dumps(f'unix:{central}/nb.sock')}",
                  f"    sb: {json.dumps(f'unix:{central}/sb.sock')}", f"    chassis: {t.name}"]  # fmt: skip
    _write(run_dir / INVENTORY_FILE, "\n".join(lines) + "\n")
    _write(run_dir / SSH_CONFIG_FILE, "".join(config.read_text() for _, config in hosts.values()))


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)


def start_host(host: SshHost) -> bool:
    """Start ``host`` unless it runs; a half-started one (a crash, a reboot) is stopped and started again."""
    if host.running():
        return False
    host.stop()
    host.start()
    if not host.running():
        raise LabError(f"the lab host {host.name} did not start (see {host.dir})")
    return True


def manage_through_bridge(host: SshHost, bridge: str) -> bool:
    """Put ``host``'s management link on ``bridge``: the veth becomes a port, its address moves to the
    bridge's own interface (sshd, bound to the address, answers there).  True if moved now."""
    ns, veth = host.netns, host.veth[1]
    address = f"{host.address}/30"
    shown = proc.run(["ip", "-n", ns, "-o", "addr", "show", "dev", bridge], check=False).stdout
    if f" {address} " in shown:
        return False
    host.switch.vsctl("--may-exist", "add-port", bridge, veth)
    proc.run(["ip", "-n", ns, "addr", "del", address, "dev", veth], check=False)
    proc.run(["ip", "-n", ns, "addr", "add", address, "dev", bridge])
    proc.run(["ip", "-n", ns, "link", "set", bridge, "up"])
    # the userspace datapath sends TCP with bad checksums through devices that offload them
    for argv in (
        proc.in_netns(ns, ["ethtool", "-K", bridge, "tx", "off"]),
        proc.in_netns(ns, ["ethtool", "-K", veth, "tx", "off"]),
        ["ethtool", "-K", host.veth[0], "tx", "off"],
    ):
        proc.run(argv)  # fmt: skip
    return True
