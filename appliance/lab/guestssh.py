"""The lab's namespace guests reached like real VMs: an sshd in each, on a management link of its own.

``hvnet lab up --vm-access`` proves the "real VMs as suite endpoints" path on
the lab: each namespace guest gets a veth pair whose inner end (``mgmt0``) is
in the guest's namespace on a link-local /30 of :data:`MGMT_BLOCK` -- never the
data interface on the switch, so what is measured is not the way in -- and an
sshd there with its own host key, the one authorized key of the lab's client
key pair and the machine's ordinary ``PATH`` (a VM has netperf, iperf3, ip and
a shell).  The client's side is written beside it: the private key, a
``known_hosts`` with every guest's key (strict checking, never trust on first
use) and an ``ssh_config`` with a ``Host`` per guest.  QEMU guests get no sshd
(they are reached through their guest agent) but are listed too.

The inventory ``RUN/vms.yaml`` names every guest the way suites do: a
namespace guest by its VIF (it has no libvirt domain to find one from) and its
ssh_config ``Host``; a QEMU guest by its libvirt domain.  It holds no IP:
the address under test is found inside the VM, by the VIF's MAC.

Teardown is :func:`down`: each sshd by the PID file it wrote (checked against
its command line), then the files; the veths are recorded as the lab's
interfaces before they are made, so ``lab down`` deletes them with the rest.
"""

from __future__ import annotations

import ipaddress
import shutil
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from appliance.core import proc
from appliance.core.errors import LabError
from appliance.endpoints.topology import Topology
from appliance.lab import sshd
from appliance.lab.vm.labguests import domain_name
from appliance.lab.vm.libvirtd import URI

# Link-local, and apart from the lab hosts' management links (169.254.100.0 and up).
MGMT_BLOCK = ipaddress.ip_network("169.254.64.0/20")
MGMT_IFACE = "mgmt0"  # the inner end, in the guest: not eth0 (its data interface)
OUTER_PREFIX = "hvm"  # the outer end, in this machine's namespace: hvm1, hvm2 ...
PORT = 22
DIR = "vm-access"
INVENTORY_FILE = "vms.yaml"
IDENTITY = "id_ed25519"
# A VM's ordinary PATH: the tools a suite or a scenario runs inside one are all on it.
GUEST_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
GUEST_TOOLS = ("netperf", "netserver", "iperf3", "ip", "cat", "kill", "sh", "bash", "mkfifo", "date", "stat", "rm",
               "mkdir", "sleep")  # fmt: skip


@dataclass(frozen=True)
class MgmtLink:
    """One guest's management link: the outer end here, the inner end (sshd's address) in ``netns``."""

    guest: str
    netns: str
    outer: str
    peer: str  # the outer end's address, this machine's side
    address: str  # the guest's, where its sshd listens
    prefix: int = 30


# -- planning (pure) ----------------------------------------------------------------------


def plan(names: list[str], ns_of: Callable[[str], str]) -> list[MgmtLink]:
    """A management link per namespace guest, in topology order: the i-th gets the i-th /30 of the block.

    ``lab up``, ``status`` and a later ``lab up`` compute the same links from the same names.
    """
    if len(names) > MGMT_BLOCK.num_addresses // 4:
        raise LabError(f"--vm-access gives at most {MGMT_BLOCK.num_addresses // 4} guests a management link")
    links = []
    for i, (name, net) in enumerate(zip(names, MGMT_BLOCK.subnets(new_prefix=30)), start=1):
        links.append(MgmtLink(name, ns_of(name), f"{OUTER_PREFIX}{i}", str(net[1]), str(net[2])))
    return links


def netns_guests(t: Topology) -> list[str]:
    """The guests that get a management link: the namespace ones (a QEMU guest is reached by its agent)."""
    return [g.name for g in t.guests if g.kind == "netns"]


def clashes(t: Topology) -> list[str]:
    """Guests whose data address falls in the management block: the two links would be one subnet."""
    return [
        f"guest {g.name}'s address {g.ip} overlaps the management links' {MGMT_BLOCK}"
        for g in t.guests
        if ipaddress.ip_interface(g.ip).network.overlaps(MGMT_BLOCK)
    ]


def ssh_config_text(links: list[MgmtLink], files: ClientFiles) -> str:
    """The client's ``ssh_config``: one ``Host`` per guest, all with the lab's key and strict host keys."""
    head = "# The lab's guests reached like VMs: written by 'hvnet lab up --vm-access', removed by 'lab down'.\n"
    return head + "".join(
        sshd.ssh_config_block(ln.guest, ln.address, PORT, files.identity, files.known_hosts) for ln in links
    )


def inventory(t: Topology, links: list[MgmtLink], files: ClientFiles) -> dict[str, Any]:
    """The VM inventory: namespace guests by VIF and ssh Host, QEMU guests by libvirt domain (no IPs)."""
    by_guest = {ln.guest: ln for ln in links}
    vms: list[dict[str, Any]] = []
    for g in t.guests:
        if g.kind == "qemu":
            vms.append({"name": g.name, "vm": domain_name(g.name), "agent": "libvirt", "libvirt": URI})
        elif g.name in by_guest:
            vms.append({"name": g.name, "vif": g.vif, "ssh": g.name, "ssh_config": str(files.ssh_config),
                        "known_hosts": str(files.known_hosts), "identity": str(files.identity),
                        "user": "root"})  # fmt: skip
    return {"vms": vms}


def sshd_extra(home: Path) -> list[str]:
    """The guest sshd's session: a VM's PATH, and a home of its own inside the lab's directory."""
    env = " ".join(sshd.config_arg(f"{k}={v}") for k, v in (("PATH", GUEST_PATH), ("HOME", home)))
    return [
        # a suite opens many sessions at once (one per stream and per side); OpenSSH's default drops some at 10
        "MaxStartups 100:30:200",
        "MaxSessions 100",
        f"SetEnv {env}",
    ]


# -- files --------------------------------------------------------------------------------


@dataclass(frozen=True)
class ClientFiles:
    """Where the lab writes the guests' sshd files and the client's side, under its run directory."""

    run_dir: Path

    @property
    def dir(self) -> Path:
        return self.run_dir / DIR

    @property
    def identity(self) -> Path:
        return self.dir / IDENTITY

    @property
    def known_hosts(self) -> Path:
        return self.dir / "known_hosts"

    @property
    def ssh_config(self) -> Path:
        return self.dir / "ssh_config"

    @property
    def inventory(self) -> Path:
        return self.run_dir / INVENTORY_FILE

    def guest_dir(self, guest: str) -> Path:
        return self.dir / guest


def preflight(t: Topology) -> None:
    """Refuse before anything is made: a lab of several hosts, overlapping addresses, missing tools."""
    if t.hosts:
        raise LabError("--vm-access reaches the guests of a one-switch lab; this topology has hosts",
                       hint="bring the lab up without --vm-access")  # fmt: skip
    if found := clashes(t):
        raise LabError("; ".join(found), hint="give the guests addresses outside 169.254.0.0/16")
    for tool in ("ssh", "ssh-keygen"):
        proc.which(tool)
    sshd.sshd_binary()
    missing = [tool for tool in GUEST_TOOLS if shutil.which(tool, path=GUEST_PATH) is None]
    if missing:
        raise LabError(f"a guest reached like a VM needs {', '.join(missing)} on {GUEST_PATH}",
                       hint="install them (make setup does)")  # fmt: skip


def conflicts(t: Topology, ns_of: Callable[[str], str], recorded: list[str]) -> list[str]:
    """Management links that exist but are not this lab's."""
    return [
        f"interface {ln.outer}"
        for ln in plan(netns_guests(t), ns_of)
        if Path(f"/sys/class/net/{ln.outer}").exists() and ln.outer not in recorded
    ]


# -- up, status, down ---------------------------------------------------------------------


def up(run_dir: Path, t: Topology, ns_of: Callable[[str], str], record: Callable[[str, str], None]) -> list[str]:
    """Keys, client files, then each guest's link and sshd unless it answers already; the inventory last.

    Keys that exist are kept: a second ``lab up`` leaves a client's files valid.
    """
    files = ClientFiles(run_dir)
    links = plan(netns_guests(t), ns_of)
    files.dir.mkdir(parents=True, exist_ok=True)
    if not files.identity.exists():
        sshd.keygen(files.identity, "hvnet-lab-client")
    known = []
    for ln in links:
        d = files.guest_dir(ln.guest)
        d.mkdir(exist_ok=True)
        (d / "home").mkdir(exist_ok=True)
        if not (d / "host_key").exists():
            sshd.keygen(d / "host_key", f"hvnet-lab-{ln.guest}")
        (d / "authorized_keys").write_text(files.identity.with_name(IDENTITY + ".pub").read_text())
        known.append(sshd.known_hosts_line(ln.address, PORT, (d / "host_key.pub").read_text()))
    _write(files.known_hosts, "".join(known))
    _write(files.ssh_config, ssh_config_text(links, files))
    actions = []
    for ln in links:
        if _start(ln, files, record):
            actions.append(f"started sshd in guest {ln.guest} on {MGMT_IFACE} {ln.address}:{PORT} "
                           f"(management link {ln.outer})")  # fmt: skip
    _write(files.inventory, yaml.safe_dump(inventory(t, links, files), sort_keys=False))
    actions.append(f"wrote the VM inventory {files.inventory} and ssh_config {files.ssh_config}")
    return actions


def _start(ln: MgmtLink, files: ClientFiles, record: Callable[[str, str], None]) -> bool:
    """The guest's link and sshd, unless its sshd is ours and logs in; True if started now."""
    d = files.guest_dir(ln.guest)
    if sshd.pid(d) is not None and sshd.answers(files.ssh_config, ln.guest):
        return False
    sshd.kill(d)  # a half-started guest (a crash): its listener, if any, goes first
    record("interfaces", ln.outer)  # before it exists: 'lab down' deletes a half-made link too
    if Path(f"/sys/class/net/{ln.outer}").exists():  # half-made, maybe: made again, whole
        proc.run(["ip", "link", "del", ln.outer])
    _link(ln)
    config = sshd.sshd_config(ln.address, PORT, d, sshd_extra(d / "home"))
    sshd.start(ln.netns, d, config, lambda: sshd.answers(files.ssh_config, ln.guest),
               f"guest {ln.guest} ({ln.address}:{PORT})")  # fmt: skip
    return True


def _link(ln: MgmtLink) -> None:
    """Both ends made at once, the inner one directly in the guest's namespace."""
    inner = ["ip", "-n", ln.netns]
    steps = [
        ["ip", "link", "add", ln.outer, "type", "veth", "peer", "name", MGMT_IFACE, "netns", ln.netns],
        ["ip", "addr", "add", f"{ln.peer}/{ln.prefix}", "dev", ln.outer],
        ["ip", "link", "set", ln.outer, "up"],
        [*inner, "addr", "add", f"{ln.address}/{ln.prefix}", "dev", MGMT_IFACE],
        [*inner, "link", "set", MGMT_IFACE, "up"],
    ]
    for argv in steps:
        proc.run(argv)


def status(run_dir: Path, names: list[str], ns_of: Callable[[str], str], reach: bool = False) -> dict[str, Any]:
    """Each namespace guest's management address and sshd pid; with ``reach``, whether a login works now."""
    files = ClientFiles(run_dir)
    links = plan(names, ns_of)
    guests = {
        ln.guest: {
            "ssh": ln.guest,
            "address": ln.address,
            "port": PORT,
            "interface": MGMT_IFACE,
            "link": ln.outer,
            "sshd_pid": sshd.pid(files.guest_dir(ln.guest)),
        }
        for ln in links
    }
    if reach and names:

        def logs_in(name: str) -> bool:
            return guests[name]["sshd_pid"] is not None and sshd.answers(files.ssh_config, name)

        with ThreadPoolExecutor(max_workers=min(16, len(names))) as pool:
            for name, ok in zip(names, pool.map(logs_in, names)):
                guests[name]["reachable"] = ok
    return {
        "inventory": str(files.inventory) if files.inventory.exists() else None,
        "ssh_config": str(files.ssh_config),
        "known_hosts": str(files.known_hosts),
        "identity": str(files.identity),
        "guests": guests,
    }


def down(run_dir: Path) -> list[str]:
    """Every guest sshd by its PID file (and its connections), then the files; the links are the lab's to delete."""
    files = ClientFiles(run_dir)
    actions = []
    if files.dir.is_dir():
        for d in sorted(p for p in files.dir.iterdir() if p.is_dir()):
            stopped = sshd.kill(d)
            if stopped is not None:
                actions.append(f"stopped guest {d.name}'s sshd (pid {stopped})")
        shutil.rmtree(files.dir, ignore_errors=True)
        actions.append(f"removed {files.dir}")
    if files.inventory.exists():
        files.inventory.unlink()
        actions.append(f"removed {files.inventory}")
    return actions


def _write(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.replace(path)
