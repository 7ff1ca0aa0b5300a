"""Lab topologies: bridges and guests, read from YAML and validated whole.

A topology is checked completely before the lab creates anything: every
problem is reported with ``file:line``, the field and the allowed values, and
a bad file changes nothing on the host.
"""

from __future__ import annotations

import ipaddress
import re
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from appliance.core import validate, yamldoc
from appliance.core.errors import ConfigError, Problem
from appliance.core.vlan import vlan_id, vlan_list, vlan_mode

HYPERVISORS = ("xenserver", "libvirt")
DATAPATH_TYPES = ("netdev", "system")
KINDS = ("netns", "qemu")
# A lab host: a network namespace with its own OVS and sshd (the default), or a QEMU VM running OVS on the
# kernel datapath (appliance.lab.vmhost).
HOST_KINDS = ("netns", "vm")
MEMORY_MIB = (128, 4096)  # a QEMU guest's memory: the probe image needs ~100 MiB
# A QEMU guest's vCPUs.  KVM gives each a host thread; under TCG on a small host a vCPU sweep measures the
# emulator's threads, which the lab says when it boots such a guest.
VCPUS = (1, 16)

_GUEST_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,23}$")
# A lab host's name: its namespace, its veths' and its trunk links' names are built from it
_HOST_NAME = re.compile(r"^[a-z][a-z0-9-]{0,7}$")
MAX_HOSTS = 16
_TOP_KEYS = {"name", "description", "hypervisor", "hosts", "bridges", "guests", "ovn"}
_HOST_KEYS = {"name", "kind", "management"}
_OVN_KEYS = {"switches"}
# A logical switch's name: ovn-nbctl takes it as an argument and the lab names nothing else after it.
_LSWITCH_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_.-]{0,31}$")
OVN_BRIDGE = "br-int"  # ovn-controller's integration bridge: the only bridge of an OVN pool's hosts
_BRIDGE_KEYS = {"name", "datapath_type", "address"}
_GUEST_KEYS = {"name", "kind", "host", "bridge", "ip", "mac", "vif", "domid", "tag", "trunks", "vlan_mode", "memory",
               "vcpus", "switch"}  # fmt: skip

# Namespace for the lab's deterministic VM/VIF/network uuids: the same
# topology always produces the same ids, so re-running 'lab up' is stable.
_UUID_NS = uuid.UUID("5b0e6f4e-2f0a-4f7e-9a57-6876e6574000")

DEFAULT_TOPOLOGY = Path(__file__).resolve().parents[2] / "vlan-tests" / "topologies" / "seed-2010.yaml"


@dataclass(frozen=True)
class Bridge:
    """A lab bridge; ``address`` (address/prefix) goes on its own interface: a tunnel endpoint, where a
    GRE/ERSPAN mirror's packets leave from (the userspace datapath routes tunnels through a bridge with an IP)."""

    name: str
    datapath_type: str = "netdev"
    address: str | None = None


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
    vcpus: int = 1
    host: str | None = None  # the lab hypervisor it runs on, in a topology with ``hosts``
    lswitch: str | None = None  # the OVN logical switch it joins, in a topology with ``ovn``

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
class Link:
    """A trunk between two lab hosts: a veth whose ends are ports of ``bridge`` on each."""

    bridge: str
    a: str
    a_end: str
    b: str
    b_end: str

    def peer(self, host: str, port: str) -> tuple[str, str] | None:
        """The (host, port) at the other end of ``port`` on ``host``, if it is one of this link's ends."""
        if (host, port) == (self.a, self.a_end):
            return self.b, self.b_end
        if (host, port) == (self.b, self.b_end):
            return self.a, self.a_end
        return None


@dataclass(frozen=True)
class Topology:
    name: str
    file: str
    hypervisor: str
    bridges: tuple[Bridge, ...]
    guests: tuple[Guest, ...] = field(default_factory=tuple)
    # Lab hypervisors reached over SSH, each with every bridge, joined in this order by trunk links;
    # none: the guests share the lab's one switch.
    hosts: tuple[str, ...] = ()
    # (host, bridge): the host's management link (its SSH address) is a port of that bridge, the address on
    # the bridge's own interface -- as on a XenServer whose management interface is on xenbr0.
    management: tuple[tuple[str, str], ...] = ()
    # An OVN pool: the logical switches the guests join (the hosts are chassis joined by Geneve
    # over an underlay, not by trunks).  Empty: plain OVS.
    ovn_switches: tuple[str, ...] = ()
    # Hosts of ``kind: vm``: QEMU VMs whose OVS runs on the kernel datapath (every bridge ``system`` there).
    vm_hosts: tuple[str, ...] = ()

    @property
    def ovn(self) -> bool:
        return bool(self.ovn_switches)

    def links(self) -> list[Link]:
        """The trunk links between hosts: one per bridge and neighbouring pair, ``ethB-PEER`` on each side
        (bridge number B, the host at the other end).  A chain, not a mesh: without spanning tree a loop
        would flood forever.  An OVN pool has none: its chassis reach each other through tunnels."""
        if self.ovn:
            return []
        return [
            Link(br.name, a, f"eth{bi}-{b}", b, f"eth{bi}-{a}")
            for bi, br in enumerate(self.bridges)
            for a, b in zip(self.hosts, self.hosts[1:])
        ]

    def guests_on(self, host: str) -> tuple[Guest, ...]:
        return tuple(g for g in self.guests if g.host == host)

    def bridges_on(self, host: str | None) -> tuple[Bridge, ...]:
        """The bridges as ``host`` has them: a VM host's on the kernel datapath (the point of such a host),
        a namespaced host's as the file says (a mixed chain's userspace hosts keep ``netdev``)."""
        if host is not None and host in self.vm_hosts:
            return tuple(replace(b, datapath_type="system") for b in self.bridges)
        return self.bridges

    def tagged_vlans(self, guest: str) -> tuple[int, ...]:
        """The VLANs ``guest`` sends 802.1Q-tagged frames on: a guest of a VM host (whose kernel has 8021q)
        has a VLAN sub-interface ``eth0.V`` for each VLAN its port trunks explicitly, its native VLAN and
        VLAN 0 aside (those it sends untagged).  Elsewhere none: this machine's kernel has no 8021q, so a
        namespace guest here only ever sends untagged."""
        g = self.guest(guest)
        if g.host is None or g.host not in self.vm_hosts:
            return ()
        return tuple(sorted(set(g.trunks) - {0, g.tag}))

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
    """The topology a parsed document describes, or ConfigError listing every problem in it."""
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

    seen_ifnames: dict[str, yamldoc.PathKey] = {}  # bridges and VIFs share the kernel's interface names
    hosts, vm_hosts = _hosts(doc, data.get("hosts"), problems)
    managed = _management(doc, data.get("hosts"), hosts, data.get("bridges"), problems)
    switches = _ovn(doc, data, hosts, problems)
    raw_bridges = data.get("bridges")
    if switches and raw_bridges is None:
        raw_bridges = [{"name": OVN_BRIDGE}]
    bridges = _bridges(doc, raw_bridges, seen_ifnames, problems)
    if vm_hosts and vm_hosts == hosts:
        bridges = _kernel_bridges(doc, raw_bridges, bridges, problems)
    if vm_hosts and data.get("ovn") is not None:
        bad(("ovn",), "an OVN pool's chassis are namespaced hosts: no 'kind: vm' host")
    if switches and [b.name for b in bridges] not in ([OVN_BRIDGE], []):
        bad(("bridges",), f"an OVN pool's hosts have one bridge, {OVN_BRIDGE} (ovn-controller's): drop 'bridges'")
    for i, b in enumerate(bridges):
        if b.address and hosts:
            bad(("bridges", i, "address"), "a tunnel endpoint belongs to the one-switch lab: drop 'hosts' or it")
    reader = _GuestReader(doc, str(name), hypervisor, bridges, seen_ifnames, problems, hosts, switches)
    guests = reader.read_all(data.get("guests", []))
    if problems:
        raise ConfigError(problems)
    return Topology(name=name, file=doc.file, hypervisor=hypervisor, bridges=tuple(bridges), guests=tuple(guests),
                    hosts=tuple(hosts), ovn_switches=tuple(switches), management=tuple(managed),
                    vm_hosts=tuple(vm_hosts))  # fmt: skip


def _ovn(doc: yamldoc.Document, data: dict[str, Any], hosts: list[str], problems: list[Problem]) -> list[str]:
    """The logical switches of an OVN pool (``ovn: {switches: [...]}``), unique; [] without ``ovn``."""
    raw = data.get("ovn")
    if raw is None:
        return []
    path: yamldoc.PathKey = ("ovn",)
    if not isinstance(raw, dict):
        problems.append(doc.problem(path, "a mapping with 'switches': the logical switches guests join"))
        return []
    problems += doc.unknown_keys(raw, path, _OVN_KEYS)
    if not hosts:
        problems.append(doc.problem(path, "an OVN pool needs 'hosts' (its chassis)"))
    if data.get("hypervisor", "xenserver") != "libvirt":
        problems.append(doc.problem(path, "an OVN pool needs 'hypervisor: libvirt' (OVN binds a VIF by its "
                                    "external_ids:iface-id, which libvirt sets)"))  # fmt: skip
    switches = raw.get("switches")
    if not isinstance(switches, list) or not switches:
        problems.append(doc.problem((*path, "switches"), "required: a non-empty list of logical switch names"))
        return []
    names: list[str] = []
    for i, ls in enumerate(switches):
        if not isinstance(ls, str) or not _LSWITCH_NAME.match(ls):
            problems.append(doc.problem((*path, "switches", i), "1-32 characters, a letter first, then letters, "
                                        "digits, '_', '.' or '-'"))  # fmt: skip
        elif ls in names:
            problems.append(doc.problem((*path, "switches", i), f"duplicate logical switch {ls!r}"))
        else:
            names.append(ls)
    return names


def _hosts(doc: yamldoc.Document, raw: Any, problems: list[Problem]) -> tuple[list[str], list[str]]:
    """The lab hypervisors' names, unique, in the order the trunk links join them; and those of ``kind: vm``."""
    if raw is None:
        return [], []
    if not isinstance(raw, list) or not 1 <= len(raw) <= MAX_HOSTS:
        problems.append(doc.problem(("hosts",), f"a list of 1..{MAX_HOSTS} hosts, each a mapping with 'name'"))
        return [], []
    names: list[str] = []
    vms: list[str] = []
    for i, rh in enumerate(raw):
        path: yamldoc.PathKey = ("hosts", i)
        if not isinstance(rh, dict):
            problems.append(doc.problem(path, "each host is a mapping with 'name'"))
            continue
        problems += doc.unknown_keys(rh, path, _HOST_KEYS)
        kind = rh.get("kind", "netns")
        if kind not in HOST_KINDS:
            problems.append(doc.problem((*path, "kind"), f"unknown host kind {kind!r}; allowed: "
                                        f"{', '.join(HOST_KINDS)}"))  # fmt: skip
        hname = rh.get("name")
        if not isinstance(hname, str) or not _HOST_NAME.match(hname):
            problems.append(doc.problem((*path, "name"), "required: 1-8 characters, a lower-case letter first, then "
                                        "lower-case letters, digits or '-'"))  # fmt: skip
        elif hname in names:
            problems.append(doc.problem((*path, "name"), f"duplicate host name {hname!r}"))
        else:
            names.append(hname)
            if kind == "vm":
                vms.append(hname)
        if kind == "vm" and "management" in rh:
            problems.append(doc.problem((*path, "management"), "a VM host's management link is its own (a tap "
                                        "on this machine), never a bridge port: drop 'management'"))  # fmt: skip
    for a, b in zip(names, names[1:]):
        if a in vms and b in vms:  # each trunk is one VM's NIC, its outside end a port of a namespaced host
            at = next(i for i, rh in enumerate(raw) if isinstance(rh, dict) and rh.get("name") == b)
            problems.append(doc.problem(("hosts", at, "kind"), f"VM hosts {a} and {b} are neighbours in the "
                                        "chain: a trunk joins a VM host to a namespaced host, so put one "
                                        "between them"))  # fmt: skip
    return names, vms


def _kernel_bridges(
    doc: yamldoc.Document, raw_bridges: Any, bridges: list[Bridge], problems: list[Problem]
) -> list[Bridge]:
    """The bridges of a topology whose hosts are all VMs: on the kernel datapath (``system``), the point of
    such a host; ``netdev`` refused.  (With namespaced hosts too, ``datapath_type`` is theirs:
    :meth:`Topology.bridges_on` puts a VM host's on the kernel datapath whatever it says.)"""
    for i, rb in enumerate(raw_bridges if isinstance(raw_bridges, list) else []):
        if isinstance(rb, dict) and rb.get("datapath_type", "system") != "system":
            problems.append(doc.problem(("bridges", i, "datapath_type"), "a VM host's bridges are on the kernel "
                                        "datapath: 'system' (or leave it out)"))  # fmt: skip
    return [replace(b, datapath_type="system") for b in bridges]


def _management(
    doc: yamldoc.Document, raw: Any, hosts: list[str], raw_bridges: Any, problems: list[Problem]
) -> list[tuple[str, str]]:
    """Hosts whose management link is a port of one of the topology's bridges (``management: BRIDGE``)."""
    names = [b.get("name") for b in raw_bridges if isinstance(b, dict)] if isinstance(raw_bridges, list) else []
    out = []
    for i, rh in enumerate(raw if isinstance(raw, list) else []):
        if not isinstance(rh, dict) or "management" not in rh or rh.get("name") not in hosts:
            continue
        if rh["management"] not in names:
            problems.append(doc.problem(("hosts", i, "management"),
                                        f"one of the topology's bridges: {', '.join(map(str, names))}"))  # fmt: skip
        else:
            out.append((rh["name"], rh["management"]))
    return out


def _bridges(
    doc: yamldoc.Document, raw_bridges: Any, seen_ifnames: dict[str, yamldoc.PathKey], problems: list[Problem]
) -> list[Bridge]:
    """The bridges, each name unique and a legal interface name (recorded in ``seen_ifnames``)."""
    if not isinstance(raw_bridges, list) or not raw_bridges:
        problems.append(doc.problem(("bridges",), "required: a non-empty list of bridges, each with a 'name'"))
        return []
    bridges: list[Bridge] = []
    for i, rb in enumerate(raw_bridges):
        path: yamldoc.PathKey = ("bridges", i)
        if not isinstance(rb, dict):
            problems.append(doc.problem(path, "each bridge is a mapping with 'name' (and optional 'datapath_type')"))
            continue
        problems += doc.unknown_keys(rb, path, _BRIDGE_KEYS)
        try:
            bname = validate.ifname(rb.get("name"))
        except ValueError as exc:
            problems.append(doc.problem((*path, "name"), str(exc)))
            continue
        if bname in seen_ifnames:
            also = yamldoc.dotted(seen_ifnames[bname])
            problems.append(doc.problem((*path, "name"), f"duplicate name {bname!r} (also at {also})"))
            continue
        seen_ifnames[bname] = (*path, "name")
        dp = rb.get("datapath_type", "netdev")
        if dp not in DATAPATH_TYPES:
            allowed = ", ".join(DATAPATH_TYPES)
            problems.append(doc.problem((*path, "datapath_type"), f"unknown datapath type {dp!r}; allowed: {allowed}"))
        address = _bridge_address(doc, rb, path, problems) if "address" in rb else None
        bridges.append(Bridge(bname, dp, address))
    return bridges


def _bridge_address(doc: yamldoc.Document, rb: dict[str, Any], path: yamldoc.PathKey, problems: list[Problem]) -> Any:
    """A bridge's own address/prefix (a tunnel endpoint): an IPv4 host address of its network."""
    raw = rb.get("address")
    try:
        if not isinstance(raw, str) or "/" not in raw:
            raise ValueError("an IPv4 address with prefix length, e.g. 10.93.0.1/24 (the tunnel endpoint)")
        iface = ipaddress.ip_interface(raw)
        net = iface.network
        if iface.version != 4:
            raise ValueError("an IPv4 address with prefix length (OVS's tunnel neighbour table here is ARP)")
        if net.prefixlen < 31 and iface.ip in (net.network_address, net.broadcast_address):
            raise ValueError(f"{iface.ip} is the network or broadcast address of {net}")
        return str(iface)
    except ValueError as exc:
        problems.append(doc.problem((*path, "address"), str(exc)))
        return None


class _GuestReader:
    """Reads the guests one field at a time, remembering what earlier guests claimed.

    Names, IPs, MACs, domids and VIF names must be unique across guests; each
    reader method reports its field's problems and returns the value (or a
    fallback that lets the following fields still be checked).  A guest with
    any problem is reported whole and left out.
    """

    def __init__(
        self,
        doc: yamldoc.Document,
        topology: str,
        hypervisor: Any,
        bridges: list[Bridge],
        seen_ifnames: dict[str, yamldoc.PathKey],
        problems: list[Problem],
        hosts: list[str] | None = None,
        switches: list[str] | None = None,
    ) -> None:
        self.doc = doc
        self.hosts = hosts or []
        self.switches = switches or []
        self.topology = topology
        self.hypervisor = hypervisor
        self.bridges = bridges
        self.bridge_names = {b.name for b in bridges}
        self.problems = problems
        self.seen_ifnames = seen_ifnames
        self.seen_guest: dict[str, int] = {}
        self.seen_ip: dict[str, int] = {}
        self.seen_mac: dict[str, int] = {}
        self.seen_domid: dict[int, int] = {}

    def bad(self, path: yamldoc.PathKey, message: str) -> None:
        self.problems.append(self.doc.problem(path, message))

    def read_all(self, raw_guests: Any) -> list[Guest]:
        if not isinstance(raw_guests, list):
            self.bad(("guests",), "must be a list of guests")
            return []
        guests: list[Guest] = []
        for i, rg in enumerate(raw_guests):
            guest = self.read(i, rg)
            if guest is not None:
                guests.append(guest)
        return guests

    def read(self, i: int, rg: Any) -> Guest | None:
        """Guest ``i``, or None once its problems are reported (every field is still checked)."""
        path: yamldoc.PathKey = ("guests", i)
        if not isinstance(rg, dict):
            self.bad(path, "each guest is a mapping with 'name' and 'ip'")
            return None
        before = len(self.problems)
        self.problems += self.doc.unknown_keys(rg, path, _GUEST_KEYS)
        gname = self.name(i, rg, path)
        kind = self.kind(rg, path)
        host = self.host(rg, path, gname, kind)
        memory = self.memory(rg, path, kind)
        vcpus = self.vcpus(rg, path, kind)
        bridge = self.bridge(rg, path)
        ip = self.ip(i, rg, path)
        domid = self.domid(i, rg, path)
        vif = self.vif(rg, path, kind, domid)
        mac = self.mac(i, rg, path, gname)
        tag, trunks, mode = self.vlan(rg, path)
        lswitch = self.lswitch(rg, path)
        if len(self.problems) > before:
            return None
        return Guest(
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
            vcpus=vcpus,
            host=host,
            lswitch=lswitch,
        )

    def lswitch(self, rg: dict[str, Any], path: yamldoc.PathKey) -> str | None:
        """In an OVN pool, the logical switch the guest joins (required; it replaces VLAN tags)."""
        ls = rg.get("switch")
        if not self.switches:
            if ls is not None:
                self.bad((*path, "switch"), "only in a topology with 'ovn' (an OVN pool); use 'tag' for a VLAN")
            return None
        for key in ("tag", "trunks", "vlan_mode"):
            if rg.get(key) is not None:
                self.bad((*path, key), "in an OVN pool a guest joins a logical switch ('switch'), not a VLAN")
        if ls not in self.switches:
            allowed = ", ".join(self.switches)
            self.bad((*path, "switch"), f"required in an OVN pool: one of the logical switches {allowed}")
            return None
        return str(ls)

    def name(self, i: int, rg: dict[str, Any], path: yamldoc.PathKey) -> str:
        """The guest's name, unique; ``#i`` stands in for a bad one (it derives the MAC)."""
        gname = rg.get("name")
        if not isinstance(gname, str) or not _GUEST_NAME.match(gname):
            self.bad((*path, "name"), "required: 1-24 characters, a letter first, then letters, digits, '_' or '-'")
            return f"#{i}"
        if gname in self.seen_guest:
            self.bad((*path, "name"), f"duplicate guest name {gname!r} (also guests[{self.seen_guest[gname]}])")
        else:
            self.seen_guest[gname] = i
        return gname

    def kind(self, rg: dict[str, Any], path: yamldoc.PathKey) -> str:
        """netns or qemu (a QEMU guest needs libvirt to plug it); netns stands in for a bad one."""
        kind = rg.get("kind", "netns")
        if kind not in KINDS:
            self.bad((*path, "kind"), f"unknown guest kind {kind!r}; allowed: {', '.join(KINDS)}")
            return "netns"
        if kind == "qemu" and self.hypervisor != "libvirt":
            self.bad((*path, "kind"), "a qemu guest is plugged into OVS by libvirt: set 'hypervisor: libvirt'")
        return kind

    def host(self, rg: dict[str, Any], path: yamldoc.PathKey, gname: str, kind: str) -> str | None:
        """The lab host a guest runs on: one of ``hosts``, implied when there is one; none without hosts."""
        if not self.hosts:
            if "host" in rg:
                self.bad((*path, "host"), "the topology declares no 'hosts': drop 'host' or add a 'hosts' list")
            return None
        if kind == "qemu":
            self.bad((*path, "kind"), "a topology with 'hosts' has namespace guests only (kind: netns)")
        if gname in self.hosts:
            self.bad((*path, "name"), f"{gname!r} names a host too; a guest and a host need different names")
        host = rg.get("host", self.hosts[0] if len(self.hosts) == 1 else None)
        if host not in self.hosts:
            what = "required when there are several hosts" if host is None else f"unknown host {host!r}"
            self.bad((*path, "host"), f"{what}; one of: {', '.join(self.hosts)}")
            return None
        return str(host)

    def memory(self, rg: dict[str, Any], path: yamldoc.PathKey, kind: str) -> int:
        """A QEMU guest's memory in MiB; only a QEMU guest may give one."""
        memory = rg.get("memory", 256)
        if "memory" in rg and kind != "qemu":
            self.bad((*path, "memory"), "only a qemu guest has memory to size; drop it or set 'kind: qemu'")
        elif isinstance(memory, bool) or not isinstance(memory, int) or not MEMORY_MIB[0] <= memory <= MEMORY_MIB[1]:
            self.bad((*path, "memory"), f"must be an integer {MEMORY_MIB[0]}..{MEMORY_MIB[1]} (MiB)")
            return 256
        return memory

    def vcpus(self, rg: dict[str, Any], path: yamldoc.PathKey, kind: str) -> int:
        """A QEMU guest's vCPU count; only a QEMU guest may give one (a namespace shares the host's CPUs)."""
        vcpus = rg.get("vcpus", 1)
        if "vcpus" in rg and kind != "qemu":
            self.bad((*path, "vcpus"), "only a qemu guest has vCPUs to size; drop it or set 'kind: qemu'")
        elif isinstance(vcpus, bool) or not isinstance(vcpus, int) or not VCPUS[0] <= vcpus <= VCPUS[1]:
            self.bad((*path, "vcpus"), f"must be an integer {VCPUS[0]}..{VCPUS[1]}")
            return 1
        return vcpus

    def bridge(self, rg: dict[str, Any], path: yamldoc.PathKey) -> Any:
        """The guest's bridge: one of the topology's, implied when there is only one."""
        bridge = rg.get("bridge", self.bridges[0].name if len(self.bridges) == 1 else None)
        names = ", ".join(sorted(self.bridge_names))
        if bridge is None:
            self.bad((*path, "bridge"), f"required when there are several bridges; one of: {names}")
        elif bridge not in self.bridge_names:
            self.bad((*path, "bridge"), f"unknown bridge {bridge!r}; defined: {names or 'none'}")
        return bridge

    def ip(self, i: int, rg: dict[str, Any], path: yamldoc.PathKey) -> Any:
        """address/prefix, a usable host address of its network, unique across guests."""
        ip = rg.get("ip")
        try:
            if not isinstance(ip, str) or "/" not in ip:
                raise ValueError("required: an address with prefix length, e.g. 192.168.0.150/24")
            iface = ipaddress.ip_interface(ip)
            net = iface.network
            if net.prefixlen < net.max_prefixlen - 1 and iface.ip in (net.network_address, net.broadcast_address):
                raise ValueError(f"{iface.ip} is the network or broadcast address of {net}")
            key_ip = str(iface.ip)
            if key_ip in self.seen_ip:
                raise ValueError(f"duplicate IP {key_ip} (also guests[{self.seen_ip[key_ip]}])")
            self.seen_ip[key_ip] = i
            return str(iface)
        except ValueError as exc:
            self.bad((*path, "ip"), str(exc))
            return ip

    def domid(self, i: int, rg: dict[str, Any], path: yamldoc.PathKey) -> int:
        """The domain id, unique; by default the guest's position (1-based), which also stands in for a bad one."""
        domid = rg.get("domid", i + 1)
        if isinstance(domid, bool) or not isinstance(domid, int) or not 1 <= domid <= 32767:
            self.bad((*path, "domid"), "must be an integer 1..32767 (the guest's domain id)")
            return i + 1
        if domid in self.seen_domid:
            self.bad((*path, "domid"), f"duplicate domid {domid} (also guests[{self.seen_domid[domid]}])")
        else:
            self.seen_domid[domid] = i
        return domid

    def vif(self, rg: dict[str, Any], path: yamldoc.PathKey, kind: str, domid: int) -> Any:
        """A namespace guest's VIF name (``vifDOMID.0`` by default); libvirt names a QEMU guest's."""
        vif = rg.get("vif", f"vif{domid}.0")
        if kind == "qemu":
            if "vif" in rg:
                self.bad((*path, "vif"), "libvirt names a qemu guest's VIF (vnetN) when it plugs the VM: drop 'vif'")
            return ""
        try:
            vif = validate.ifname(vif)
            if vif in self.seen_ifnames:
                raise ValueError(f"name {vif!r} is already used (at {yamldoc.dotted(self.seen_ifnames[vif])})")
            self.seen_ifnames[vif] = (*path, "vif")
        except ValueError as exc:
            self.bad((*path, "vif"), str(exc))
        return vif

    def mac(self, i: int, rg: dict[str, Any], path: yamldoc.PathKey, gname: str) -> Any:
        """The guest's MAC, unique; derived from the topology and guest names when not given."""
        mac = rg.get("mac")
        if mac is None:
            mac = _derived_mac(self.topology, str(gname))
        else:
            try:
                mac = validate.mac(mac)
            except ValueError as exc:
                self.bad((*path, "mac"), str(exc))
        if isinstance(mac, str):
            if mac in self.seen_mac:
                self.bad((*path, "mac"), f"duplicate MAC {mac} (also guests[{self.seen_mac[mac]}])")
            self.seen_mac[mac] = i
        return mac

    def vlan(self, rg: dict[str, Any], path: yamldoc.PathKey) -> tuple[Any, list[int], Any]:
        """tag, trunks and vlan_mode, each valid on its own and consistent with each other."""
        tag = rg.get("tag")
        if tag is not None:
            try:
                tag = vlan_id(tag)
            except ValueError as exc:
                self.bad((*path, "tag"), str(exc))
        trunks: list[int] = []
        if rg.get("trunks") is not None:
            try:
                trunks = vlan_list(rg["trunks"])
            except ValueError as exc:
                self.bad((*path, "trunks"), str(exc))
        mode = rg.get("vlan_mode")
        if mode is not None:
            try:
                mode = vlan_mode(mode)
            except ValueError as exc:
                self.bad((*path, "vlan_mode"), str(exc))
        if mode == "access" and trunks:
            self.bad(
                (*path, "trunks"), "an access port carries one VLAN: drop 'trunks' or use vlan_mode trunk/native-*"
            )
        if mode in ("access", "native-tagged", "native-untagged") and tag is None:
            self.bad((*path, "tag"), f"vlan_mode {mode} needs a tag (0..4094)")
        return tag, trunks, mode


def with_vm_guests(topology: Topology, names: tuple[str, ...]) -> Topology:
    """``topology`` with real VMs among its guests (kind ``vm``), so that a file's endpoints and matrices
    name them as they name lab guests and probes; where each is -- its VIF, MAC and address -- is found
    when the VM inventory resolves it at run time."""
    vms = tuple(Guest(n, "", "", "", "", 0, kind="vm") for n in names)
    return replace(topology, guests=(*topology.guests, *vms))
