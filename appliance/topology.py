"""Lab topologies: bridges and guests, read from YAML and validated whole.

A topology is checked completely before the lab creates anything: every
problem is reported with ``file:line``, the field and the allowed values, and
a bad file changes nothing on the host.
"""

from __future__ import annotations

import ipaddress
import re
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from . import validate, yamldoc
from .errors import ConfigError, Problem

HYPERVISORS = ("xenserver", "libvirt")
DATAPATH_TYPES = ("netdev", "system")
KINDS = ("netns", "qemu")
MEMORY_MIB = (128, 4096)  # a QEMU guest's memory: the probe image needs ~100 MiB

_GUEST_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,23}$")
_TOP_KEYS = {"name", "description", "hypervisor", "bridges", "guests"}
_BRIDGE_KEYS = {"name", "datapath_type"}
_GUEST_KEYS = {"name", "kind", "bridge", "ip", "mac", "vif", "domid", "tag", "trunks", "vlan_mode", "memory"}

# Namespace for the lab's deterministic VM/VIF/network uuids: the same
# topology always produces the same ids, so re-running 'lab up' is stable.
_UUID_NS = uuid.UUID("5b0e6f4e-2f0a-4f7e-9a57-6876e6574000")

DEFAULT_TOPOLOGY = Path(__file__).resolve().parent.parent / "vlan-tests" / "topologies" / "seed-2010.yaml"


@dataclass(frozen=True)
class Bridge:
    name: str
    datapath_type: str = "netdev"


@dataclass(frozen=True)
class Guest:
    """A lab guest: a network namespace (``kind: netns``) or a libvirt/QEMU VM (``kind: qemu``).

    A QEMU guest's VIF is named by libvirt when it plugs the VM (``vnetN``,
    a new port on every start), so its ``vif`` is empty here and resolved
    from OVSDB by MAC while the lab runs.
    """

    name: str
    bridge: str
    ip: str  # address/prefix
    mac: str
    vif: str
    domid: int
    tag: int | None = None
    trunks: tuple[int, ...] = ()
    vlan_mode: str | None = None
    kind: str = "netns"
    memory_mib: int = 256

    @property
    def address(self) -> str:
        return self.ip.split("/")[0]

    def vm_uuid(self, topology: str) -> str:
        return str(uuid.uuid5(_UUID_NS, f"{topology}/vm/{self.name}"))

    def vif_uuid(self, topology: str) -> str:
        return str(uuid.uuid5(_UUID_NS, f"{topology}/vif/{self.name}/{self.vif}"))

    def network_uuid(self, topology: str) -> str:
        return str(uuid.uuid5(_UUID_NS, f"{topology}/network/{self.bridge}"))


@dataclass(frozen=True)
class Topology:
    name: str
    file: str
    hypervisor: str
    bridges: tuple[Bridge, ...]
    guests: tuple[Guest, ...] = field(default_factory=tuple)

    def guest(self, name: str) -> Guest:
        for g in self.guests:
            if g.name == name:
                return g
        raise KeyError(name)


def _derived_mac(topology: str, guest: str) -> str:
    """A stable locally administered unicast MAC for a guest without one."""
    h = uuid.uuid5(_UUID_NS, f"{topology}/mac/{guest}").bytes
    return "02:" + ":".join(f"{b:02x}" for b in h[:5])


def load(path: str | Path) -> Topology:
    """Read and validate a topology file; raise :class:`ConfigError` listing every problem."""
    return from_document(yamldoc.load(path))


def from_document(doc: yamldoc.Document) -> Topology:
    problems: list[Problem] = []

    def bad(path: yamldoc.PathKey, message: str) -> None:
        problems.append(doc.problem(path, message))

    data = doc.data
    if not isinstance(data, dict):
        raise ConfigError([doc.problem((), "a topology is a mapping with 'bridges' and 'guests'")])
    problems += doc.unknown_keys(data, (), _TOP_KEYS)

    name = data.get("name", Path(doc.file).stem)
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
        bad(("name",), "must be 1-64 characters from letters, digits, '_', '.', '-'")
        name = "invalid"
    hypervisor = data.get("hypervisor", "xenserver")
    if hypervisor not in HYPERVISORS:
        bad(("hypervisor",), f"unknown hypervisor {hypervisor!r}; allowed: {', '.join(HYPERVISORS)}")

    bridges: list[Bridge] = []
    raw_bridges = data.get("bridges")
    if not isinstance(raw_bridges, list) or not raw_bridges:
        bad(("bridges",), "required: a non-empty list of bridges, each with a 'name'")
        raw_bridges = []
    seen_ifnames: dict[str, yamldoc.PathKey] = {}
    for i, rb in enumerate(raw_bridges):
        path: yamldoc.PathKey = ("bridges", i)
        if not isinstance(rb, dict):
            bad(path, "each bridge is a mapping with 'name' (and optional 'datapath_type')")
            continue
        problems += doc.unknown_keys(rb, path, _BRIDGE_KEYS)
        try:
            bname = validate.ifname(rb.get("name"))
        except ValueError as exc:
            bad((*path, "name"), str(exc))
            continue
        if bname in seen_ifnames:
            bad((*path, "name"), f"duplicate name {bname!r} (also at {yamldoc.dotted(seen_ifnames[bname])})")
            continue
        seen_ifnames[bname] = (*path, "name")
        dp = rb.get("datapath_type", "netdev")
        if dp not in DATAPATH_TYPES:
            bad((*path, "datapath_type"), f"unknown datapath type {dp!r}; allowed: {', '.join(DATAPATH_TYPES)}")
        bridges.append(Bridge(bname, dp))
    bridge_names = {b.name for b in bridges}

    guests: list[Guest] = []
    raw_guests = data.get("guests", [])
    if not isinstance(raw_guests, list):
        bad(("guests",), "must be a list of guests")
        raw_guests = []
    seen_guest: dict[str, int] = {}
    seen_ip: dict[str, int] = {}
    seen_mac: dict[str, int] = {}
    seen_domid: dict[int, int] = {}
    for i, rg in enumerate(raw_guests):
        path = ("guests", i)
        if not isinstance(rg, dict):
            bad(path, "each guest is a mapping with 'name' and 'ip'")
            continue
        unknown = doc.unknown_keys(rg, path, _GUEST_KEYS)
        problems += unknown
        ok = not unknown
        gname = rg.get("name")
        if not isinstance(gname, str) or not _GUEST_NAME.match(gname):
            bad((*path, "name"), "required: 1-24 characters, a letter first, then letters, digits, '_' or '-'")
            ok, gname = False, f"#{i}"
        elif gname in seen_guest:
            bad((*path, "name"), f"duplicate guest name {gname!r} (also guests[{seen_guest[gname]}])")
            ok = False
        else:
            seen_guest[gname] = i

        kind = rg.get("kind", "netns")
        if kind not in KINDS:
            bad((*path, "kind"), f"unknown guest kind {kind!r}; allowed: {', '.join(KINDS)}")
            ok, kind = False, "netns"
        elif kind == "qemu" and hypervisor != "libvirt":
            bad((*path, "kind"), "a qemu guest is plugged into OVS by libvirt: set 'hypervisor: libvirt'")
            ok = False
        memory = rg.get("memory", 256)
        if "memory" in rg and kind != "qemu":
            bad((*path, "memory"), "only a qemu guest has memory to size; drop it or set 'kind: qemu'")
            ok = False
        elif isinstance(memory, bool) or not isinstance(memory, int) or not MEMORY_MIB[0] <= memory <= MEMORY_MIB[1]:
            bad((*path, "memory"), f"must be an integer {MEMORY_MIB[0]}..{MEMORY_MIB[1]} (MiB)")
            ok, memory = False, 256

        bridge = rg.get("bridge", bridges[0].name if len(bridges) == 1 else None)
        if bridge is None:
            bad(
                (*path, "bridge"), f"required when there are several bridges; one of: {', '.join(sorted(bridge_names))}"
            )
            ok = False
        elif bridge not in bridge_names:
            bad((*path, "bridge"), f"unknown bridge {bridge!r}; defined: {', '.join(sorted(bridge_names)) or 'none'}")
            ok = False

        ip = rg.get("ip")
        try:
            if not isinstance(ip, str) or "/" not in ip:
                raise ValueError("required: an address with prefix length, e.g. 192.168.0.150/24")
            iface = ipaddress.ip_interface(ip)
            net = iface.network
            if net.prefixlen < net.max_prefixlen - 1 and iface.ip in (net.network_address, net.broadcast_address):
                raise ValueError(f"{iface.ip} is the network or broadcast address of {net}")
            key_ip = str(iface.ip)
            if key_ip in seen_ip:
                raise ValueError(f"duplicate IP {key_ip} (also guests[{seen_ip[key_ip]}])")
            seen_ip[key_ip] = i
            ip = str(iface)
        except ValueError as exc:
            bad((*path, "ip"), str(exc))
            ok = False

        domid = rg.get("domid", i + 1)
        if isinstance(domid, bool) or not isinstance(domid, int) or not 1 <= domid <= 32767:
            bad((*path, "domid"), "must be an integer 1..32767 (the guest's domain id)")
            ok, domid = False, i + 1
        elif domid in seen_domid:
            bad((*path, "domid"), f"duplicate domid {domid} (also guests[{seen_domid[domid]}])")
            ok = False
        else:
            seen_domid[domid] = i

        vif = rg.get("vif", f"vif{domid}.0")
        if kind == "qemu":
            if "vif" in rg:
                bad((*path, "vif"), "libvirt names a qemu guest's VIF (vnetN) when it plugs the VM: drop 'vif'")
                ok = False
            vif = ""
        else:
            try:
                vif = validate.ifname(vif)
                if vif in seen_ifnames:
                    raise ValueError(f"name {vif!r} is already used (at {yamldoc.dotted(seen_ifnames[vif])})")
                seen_ifnames[vif] = (*path, "vif")
            except ValueError as exc:
                bad((*path, "vif"), str(exc))
                ok = False

        mac = rg.get("mac")
        if mac is None:
            mac = _derived_mac(str(name), str(gname))
        else:
            try:
                mac = validate.mac(mac)
            except ValueError as exc:
                bad((*path, "mac"), str(exc))
                ok = False
        if isinstance(mac, str):
            if mac in seen_mac:
                bad((*path, "mac"), f"duplicate MAC {mac} (also guests[{seen_mac[mac]}])")
                ok = False
            seen_mac[mac] = i

        tag = rg.get("tag")
        if tag is not None:
            try:
                tag = validate.vlan_id(tag)
            except ValueError as exc:
                bad((*path, "tag"), str(exc))
                ok = False
        trunks: list[int] = []
        if rg.get("trunks") is not None:
            try:
                trunks = validate.vlan_list(rg["trunks"])
            except ValueError as exc:
                bad((*path, "trunks"), str(exc))
                ok = False
        mode = rg.get("vlan_mode")
        if mode is not None:
            try:
                mode = validate.vlan_mode(mode)
            except ValueError as exc:
                bad((*path, "vlan_mode"), str(exc))
                ok = False
        if mode == "access" and trunks:
            bad((*path, "trunks"), "an access port carries one VLAN: drop 'trunks' or use vlan_mode trunk/native-*")
            ok = False
        if mode in ("access", "native-tagged", "native-untagged") and tag is None:
            bad((*path, "tag"), f"vlan_mode {mode} needs a tag (0..4094)")
            ok = False
        if ok:
            guests.append(
                Guest(
                    name=gname,
                    bridge=bridge,
                    ip=ip,
                    mac=mac,
                    vif=vif,
                    domid=domid,
                    tag=tag,
                    trunks=tuple(trunks),
                    vlan_mode=mode,
                    kind=kind,
                    memory_mib=memory,
                )
            )
    if problems:
        raise ConfigError(problems)
    return Topology(name=name, file=doc.file, hypervisor=hypervisor, bridges=tuple(bridges), guests=tuple(guests))
