"""A topology's ``kind: vm`` host in the lab: booted, its guests plugged over SSH, found again by its files.

The lab (:mod:`appliance.lab.core`) records a VM host in ``lab.json`` before
it boots it; everything else about it lives in ``<run>/hosts/<name>/`` (the
files :class:`~appliance.lab.vmhost.boot.VmHost` stops it by), so ``lab down``
after a killed ``lab up`` finds the QEMU, the tap and the overlay.  Its
management link is the ``index``-th of :data:`~appliance.lab.vmhost.boot.MGMT_BLOCK`,
the index being the host's place in the recorded list (recorded in the
topology's order before any boots), so ``down`` derives the same tap name.

Inside the VM every bridge is on the kernel datapath and each guest is a
network namespace with a veth on it, made over SSH by commands whose every
argument is quoted (:func:`guest_script`, pure).  Its switch is configured
by the lab's own transaction, through the VM's OVSDB socket forwarded over
SSH (:func:`ovsdb_forwarded`): the same VLANs, VIF external_ids and audit as
for any lab host.
"""

from __future__ import annotations

import shlex
import subprocess
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

from appliance.core import proc
from appliance.core.errors import LabError
from appliance.core.ssh import SshOptions, SshSession, SshTarget
from appliance.endpoints.topology import Guest
from appliance.lab import multihost, sshd
from appliance.lab.vmhost.boot import VCPUS, TrunkNic, VmHost, choose_accel, console_tail
from appliance.lab.vmhost.image import build_image

FIRST_INDEX = 1  # the lab's VM hosts take the block's first /30s (tests of the VM host alone take later ones)
OVS_RUNDIR = "/run/openvswitch"  # where the VM's init starts ovsdb-server (appliance.lab.vmhost.recipe)
# XenServer gives every VIF's host side this MAC (appliance.lab.multihost says the same for namespaced hosts).
XEN_VIF_HOST_MAC = "fe:ff:ff:ff:ff:ff"


def vm_hosts(
    hosts_dir: Path, names: list[str] | tuple[str, ...], trunks: dict[str, tuple[str, ...]] | None = None
) -> dict[str, VmHost]:
    """The lab's VM hosts, in the recorded order, each with its own management link (and a NIC per trunk
    link end ``trunks`` names for it, when it is to boot)."""
    return {n: VmHost(n, hosts_dir, FIRST_INDEX + i, trunks=(trunks or {}).get(n, ())) for i, n in enumerate(names)}


# -- trunk links ------------------------------------------------------------------------------


def trunk_inside_script(nic: TrunkNic) -> str:
    """One shell line for the VM: its NIC with ``nic.mac`` renamed ``nic.inside`` (unless it is already), up,
    transmit checksums computed by the VM (what leaves it crosses a userspace datapath, which would pass a
    checksum left to offload on unfilled).  Every value quoted."""
    q = shlex.quote
    mac, inside = q(nic.mac), q(nic.inside)
    return (f"set -e; dev=; for d in /sys/class/net/*; do a=; read -r a <\"$d/address\" || true; "
            f"if [ \"$a\" = {mac} ]; then dev=${{d##*/}}; fi; done; "
            f"[ -n \"$dev\" ] || {{ echo \"no NIC has the MAC \"{mac} >&2; exit 1; }}; "
            f"[ \"$dev\" = {inside} ] || ip link set \"$dev\" name {inside}; "
            f"ip link set {inside} up; ethtool -K {inside} tx off >/dev/null")  # fmt: skip


def join_trunk(vm: VmHost, nic: TrunkNic, netns: str, outside: str) -> bool:
    """The trunk NIC's tap moved into the neighbour host's namespace ``netns`` as the link end ``outside``
    (a port of that host's bridge, as a veth end is between namespaced hosts), its inside named and up.
    False when it was done already."""
    if multihost.link_in(netns, outside):
        return False
    proc.run(["ip", "link", "set", "dev", nic.tap, "netns", netns, "name", outside])
    proc.run(["ip", "-n", netns, "link", "set", outside, "up"])
    # the userspace datapath sends TCP with bad checksums through a device that offloads them
    proc.run(proc.in_netns(netns, ["ethtool", "-K", outside, "tx", "off"]))
    vm.ssh(trunk_inside_script(nic))
    return True


def conflicts(hosts: dict[str, VmHost], recorded: list[str]) -> list[str]:
    """Management taps that exist but are not this lab's."""
    return [f"tap {h.link.tap}" for n, h in hosts.items()
            if Path(f"/sys/class/net/{h.link.tap}").exists() and n not in recorded]  # fmt: skip


# -- guests (pure) ----------------------------------------------------------------------------


def guest_script(g: Guest, netns: str, tagged: tuple[int, ...] = ()) -> str:
    """One shell line for the VM: ``netns`` with ``eth0`` (the guest's MAC and address), the VIF on the VM's
    side with XenServer's host MAC.  Run under ``set -e``; every name and value quoted.

    ``tagged``: the VLANs the guest sends tagged on (a trunk's, see
    :meth:`~appliance.endpoints.topology.Topology.tagged_vlans`): each gets a sub-interface ``eth0.V``
    (this kernel has 8021q) carrying the guest's own address without a route of its own, so what the guest
    sends there is still its own (MAC and address) but leaves tagged, and plain traffic keeps ``eth0``."""
    q = shlex.quote
    ns, vif = q(netns), q(g.vif)
    steps = [
        f"ip netns add {ns}",
        f"ip link add {vif} type veth peer name eth0 netns {ns}",
        f"ip link set {vif} address {q(XEN_VIF_HOST_MAC)}",
        f"ip -n {ns} link set lo up",
        f"ip -n {ns} link set eth0 address {q(g.mac)}",
        f"ip -n {ns} addr add {q(g.ip)} dev eth0",
        f"ip -n {ns} link set eth0 up",
    ]
    for vlan in tagged:
        sub = q(f"eth0.{int(vlan)}")
        steps += [
            f"ip -n {ns} link add link eth0 name {sub} type vlan id {int(vlan)}",
            f"ip -n {ns} addr add {q(g.ip)} dev {sub} noprefixroute",
            f"ip -n {ns} link set {sub} up",
        ]
    steps += [f"ip link set {vif} up"]
    # what a killed 'lab up' left of this guest goes first: the VIF takes its peer with it
    return "; ".join([f"ip link del {vif} 2>/dev/null || true", f"ip netns del {ns} 2>/dev/null || true",
                      "set -e", *steps])  # fmt: skip


PRESENCE = "ip -o link show; echo '--'; ip netns list"


def parse_presence(text: str) -> tuple[set[str], set[str]]:
    """(interfaces, namespaces) from :data:`PRESENCE`'s output (``ip -o link`` lines, then ``ip netns list``)."""
    links_text, _, ns_text = text.partition("\n--\n")
    links = set()
    for line in links_text.splitlines():
        fields = line.split(": ", 2)
        if len(fields) >= 2:
            links.add(fields[1].split("@", 1)[0])
    return links, {line.split()[0] for line in ns_text.splitlines() if line.strip()}


@dataclass(frozen=True)
class Presence:
    """What a VM host shows now: whether SSH answered, and its interfaces and namespaces."""

    ssh: bool
    links: frozenset[str] = frozenset()
    namespaces: frozenset[str] = frozenset()


def presence(vm: VmHost) -> Presence:
    """Ask the VM (one SSH login); a VM that does not answer shows nothing."""
    if vm.qemu_pid() is None or not vm.ssh_config.exists():
        return Presence(False)
    try:
        res = vm.ssh(PRESENCE, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired):  # a VM that hangs answers nothing
        return Presence(False)
    if res.returncode != 0:
        return Presence(False)
    links, namespaces = parse_presence(res.stdout)
    return Presence(True, frozenset(links), frozenset(namespaces))


# -- life cycle -------------------------------------------------------------------------------


def boot(hosts: dict[str, VmHost]) -> list[str]:
    """Boot every VM host not already answering, in parallel; what was done, boot-to-SSH times included.

    The image is found in its cache (or built once) and the accelerator chosen as for the lab's guests.
    A host that fails is stopped by its own :meth:`VmHost.start`; the first failure is raised after all
    have finished (the caller's rollback stops the rest)."""
    todo = {n: h for n, h in hosts.items() if not (h.qemu_pid() is not None and sshd.answers(h.ssh_config, n))}
    if not todo:
        return []
    image = build_image()
    accel, why = choose_accel()
    done = [f"VM host image {image.digest[:12]} ({'built' if image.built else 'found'} in {image.seconds:.1f} s, "
            f"kernel {image.kernel_release}); accelerator {accel} ({why})"]  # fmt: skip
    with ThreadPoolExecutor(max_workers=len(todo)) as pool:
        futures = {n: pool.submit(h.start, image, accel) for n, h in todo.items()}
    errors = []
    for name, fut in futures.items():
        exc = fut.exception()
        if exc is not None:
            errors.append(exc)
            continue
        h = todo[name]
        done.append(f"booted VM host {name} ({accel}, {VCPUS} vCPUs, {h.memory_mb} MB; ssh {h.link.address}, "
                    f"tap {h.link.tap}): boot to SSH {h.boot_s:.1f} s")  # fmt: skip
    if errors:
        raise errors[0]
    return done


def plug_guests(
    vm: VmHost, guests: tuple[Guest, ...], ns_of: dict[str, str], tagged: dict[str, tuple[int, ...]] | None = None
) -> list[str]:
    """Each guest's namespace and VIF inside the VM (and its VLAN sub-interfaces, ``tagged``), unless both
    are there; what was created."""
    now = presence(vm)
    if not now.ssh:
        raise LabError(f"the VM host {vm.name} does not answer over SSH", hint="hvnet lab down && hvnet lab up")
    done = []
    for g in guests:
        ns = ns_of[g.name]
        if ns in now.namespaces and g.vif in now.links:
            continue
        vlans = (tagged or {}).get(g.name, ())
        vm.ssh(guest_script(g, ns, vlans))
        subs = f" (sends tagged from {', '.join(f'eth0.{v}' for v in vlans)})" if vlans else ""
        done.append(f"created guest {g.name} on {vm.name}: namespace {ns} in the VM, VIF {g.vif}{subs}")
    return done


@contextmanager
def ovsdb_forwarded(vm: VmHost, timeout: float = 20.0) -> Iterator[str]:
    """The VM's OVSDB as a ``unix:`` remote here, for as long as the block runs (one SSH master)."""
    options = SshOptions(config=vm.ssh_config, connect_timeout=timeout)
    session = SshSession(SshTarget.parse(vm.name, "the VM host"), options)
    try:
        session.open()
        local = session.work_dir / "db.sock"
        session.forward_unix(local, f"{OVS_RUNDIR}/db.sock")
        yield f"unix:{local}"
    finally:
        session.close()


def describe(vm: VmHost, now: Presence) -> dict[str, object]:
    """A VM host in ``lab status``."""
    return {"kind": "vm", "address": vm.link.address, "port": 22, "tap": vm.link.tap, "qemu_pid": vm.qemu_pid(),
            "ssh": now.ssh, "ovs_rundir": OVS_RUNDIR, "console": str(vm.console)}  # fmt: skip


def unanswered_console(vm: VmHost) -> str | None:
    """The console's last lines of a VM host whose QEMU runs but whose SSH does not answer (None otherwise):
    said before ``lab down`` removes it with its files, so a hung host leaves its evidence."""
    if vm.qemu_pid() is None or not vm.ssh_config.exists() or sshd.answers(vm.ssh_config, vm.name):
        return None
    return console_tail(vm.console_text())
