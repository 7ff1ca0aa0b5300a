"""Probe ports, as a suite or scenario names them, and the marks that make them hvnet's (pure).

A *probe* is a temporary port hvnet adds to a production bridge so that a
suite or an isolation check has endpoints where no lab exists: a network
namespace joined to the bridge by a veth pair.  Everything about a probe that
can be decided without touching the host is decided here -- its names, its
MAC, the ``external_ids`` that mark its port as hvnet's (probe name, owner,
expiry) and whether a port found on a switch is a probe left behind by a run
that is gone -- so it is unit tested without a switch.

Names are derived from the probe's name (checked here), never from anything
read from the switch: nothing outside hvnet decides which namespace or device
hvnet creates or deletes.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from dataclasses import dataclass
from typing import Any, Callable, Optional

from appliance.core import yamldoc
from appliance.core.errors import Problem
from appliance.core.validate import FieldError
from appliance.endpoints.topology import Bridge, Guest, Topology
from appliance.policy.plan.fields import egress_from_fields, ingress_from_fields
from appliance.policy.plan.model import Egress, Ingress
from appliance.switch.reader import PROBE_MARK

# The marks on a probe port's Interface (the veth's host end) and Port.
MARK = PROBE_MARK  # the probe's name: the port is hvnet's probe, whatever its device is called
OWNER = "hvnet-probe-owner"  # HOSTNAME:PID of the hvnet process that made it (the machine hvnet ran on)
EXPIRES = "hvnet-probe-expires"  # Unix time after which any hvnet run may remove it (renewed while in use)
NETNS = "hvnet-probe-netns"  # its namespace on the hypervisor (derived from the name; recorded for 'list')

NS_PREFIX = "hvnet-probe-"
DEV_PREFIX = "hvp-"  # the veth's host end (the port): 4 + 11 = 15 characters, the kernel's limit
PEER_PREFIX = "hvq-"  # the peer until it is moved into the namespace and renamed eth0
GUEST_IF = "eth0"
LEASE_S = 120  # a probe's expiry is renewed every LEASE_S / 4 while its run lasts
MAX_PROBES = 16
GUEST_KIND = "probe"  # a probe's kind among a topology's guests (the lab's are netns and qemu)

_NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,10}$")
_KEYS = {"name", "like", "bridge", "vlan", "ip", "mac", "limit"}
_LIMIT_KEYS = {"ingress", "egress"}
_RATE_KEYS = {"rate", "burst"}


@dataclass(frozen=True)
class ProbeSpec:
    """One probe as the file names it: like a VIF (its bridge and VLAN settings) or on a VLAN of a bridge."""

    name: str
    ip: str  # address/prefix, on the VLAN the probe joins (the operator knows it is free; DAD checks)
    like: Optional[str] = None  # a VIF whose bridge and VLAN settings the probe copies
    bridge: Optional[str] = None  # with ``vlan``: the bridge (default: the switch's only bridge)
    vlan: Optional[int] = None  # an access port on this VLAN (None with ``like``)
    mac: Optional[str] = None  # default: a locally administered MAC derived from the name
    ingress: Optional[Ingress] = None  # what the probe may send (tc policing on its port)
    egress: Optional[Egress] = None  # what it may receive (linux-htb max-rate on its port)

    @property
    def address(self) -> str:
        return self.ip.split("/")[0]

    @property
    def netns(self) -> str:
        return NS_PREFIX + self.name

    @property
    def dev(self) -> str:
        return DEV_PREFIX + self.name

    @property
    def peer(self) -> str:
        return PEER_PREFIX + self.name

    @property
    def hwaddr(self) -> str:
        return self.mac or derived_mac(self.name)


def derived_mac(name: str) -> str:
    """A stable, locally administered unicast MAC for a probe (``0a:`` + five bytes of a hash of the name)."""
    digest = hashlib.sha256(f"hvnet-probe/{name}".encode()).digest()
    return "0a:" + ":".join(f"{b:02x}" for b in digest[:5])


def marks(spec: ProbeSpec, owner: str, expires: float) -> dict[str, str]:
    """The external_ids of a probe's port and interface."""
    return {MARK: spec.name, OWNER: owner, EXPIRES: str(int(expires)), NETNS: spec.netns, "attached-mac": spec.hwaddr}


def is_probe(ids: Any) -> bool:
    """Whether a row's external_ids mark it as hvnet's probe (the agent, verify, status and the exporter
    leave such ports alone)."""
    try:
        return MARK in ids
    except TypeError:
        return False


@dataclass(frozen=True)
class FoundProbe:
    """A probe port found on a switch, read from its marks."""

    name: str
    bridge: str
    port: str
    owner: str
    expires: Optional[int]
    netns: Optional[str]

    def stale(self, now: float, this_machine: str, alive: Callable[[int, str], bool]) -> Optional[str]:
        """Why this probe may be removed by whoever finds it (None: it belongs to a run that is alive).

        ``alive(pid, start)`` says whether that process of this machine still runs: a probe made from here
        by a process that is gone (a SIGKILL) is removed at once; one made from another machine waits for
        its expiry, which its run renews while it lasts.
        """
        host, pid, start = owner_parts(self.owner)
        if host == this_machine and pid is not None and not alive(pid, start):
            return f"its owner (pid {pid} on {host}) is gone"
        if self.expires is None:
            return "it carries no expiry"
        if self.expires <= now:
            return f"it expired {int(now - self.expires)} s ago (owner {self.owner or 'unknown'})"
        return None

    def namespace(self) -> Optional[str]:
        """The namespace to delete with it: only one named as hvnet names probes' (never a name read
        from the switch that hvnet would not have chosen)."""
        name = self.name if _NAME.match(self.name) else None
        return NS_PREFIX + name if name else None

    def to_json(self) -> dict[str, Any]:
        return {"probe": self.name, "bridge": self.bridge, "port": self.port, "owner": self.owner,
                "expires": self.expires, "netns": self.netns}  # fmt: skip


def owner_parts(owner: str) -> tuple[str, Optional[int], str]:
    """``HOSTNAME:PID:START`` -> (hostname, pid, start); pid None when the mark is not one hvnet wrote."""
    parts = owner.rsplit(":", 2)
    if len(parts) != 3 or not parts[1].isdigit():
        return owner, None, ""
    return parts[0], int(parts[1]), parts[2]


def found_probe(bridge: str, port: str, ids: dict[str, str]) -> FoundProbe:
    """A probe port's marks, as read (an unreadable expiry is None: such a probe is stale)."""
    raw = ids.get(EXPIRES, "")
    expires = int(raw) if raw.isdigit() else None
    return FoundProbe(ids.get(MARK, ""), bridge, port, ids.get(OWNER, ""), expires, ids.get(NETNS))


def topology_of(specs: list[ProbeSpec], name: str, file: str) -> Topology:
    """The probes as a topology of guests (kind ``probe``), so that a suite's or scenario's endpoints and
    matrices name them as they name lab guests; their bridges are known once the switch is read."""
    bridges = sorted({s.bridge for s in specs if s.bridge})
    guests = tuple(Guest(s.name, s.bridge or "", s.ip, s.hwaddr, s.dev, 0, tag=s.vlan, kind=GUEST_KIND) for s in specs)
    return Topology(f"probes of {name}", file, "probes", tuple(Bridge(b) for b in bridges), guests)


# -- a suite's or scenario's ``probes:`` ------------------------------------------------------------


def parse(doc: yamldoc.Document, value: Any, path: yamldoc.PathKey) -> tuple[list[ProbeSpec], list[Problem]]:
    """``probes:`` validated whole: each problem names ``file:line: field`` and what is allowed."""
    problems: list[Problem] = []
    if not isinstance(value, list) or not value:
        return [], [doc.problem(path, "a list of probes: [{name: P1, like: VIF | vlan: N, ip: ADDR/PREFIX}, ...]")]
    if len(value) > MAX_PROBES:
        problems.append(doc.problem(path, f"{len(value)} probes; at most {MAX_PROBES}"))
    specs: list[ProbeSpec] = []
    for i, raw in enumerate(value):
        spec = _one(doc, raw, (*path, i), problems)
        if spec is not None:
            specs.append(spec)
    _unique(doc, specs, value, path, problems)
    return specs, problems


def _one(doc: yamldoc.Document, raw: Any, path: yamldoc.PathKey, problems: list[Problem]) -> Optional[ProbeSpec]:
    if not isinstance(raw, dict):
        problems.append(doc.problem(path, "a probe is a mapping: {name, like or vlan, ip}"))
        return None
    n = len(problems)
    problems += doc.unknown_keys(raw, path, _KEYS)
    name = raw.get("name")
    if not isinstance(name, str) or not _NAME.match(name):
        problems.append(doc.problem((*path, "name"), "1-11 letters, digits, '_' or '-', starting with a letter"))
    ip = _interface_address(doc, raw.get("ip"), (*path, "ip"), problems)
    like, vlan, bridge = raw.get("like"), raw.get("vlan"), raw.get("bridge")
    if (like is None) == (vlan is None):
        problems.append(doc.problem(path, "give exactly one of 'like: VIF' (copy its VLAN settings) or 'vlan: N'"))
    if like is not None and (not isinstance(like, str) or not re.match(r"^[A-Za-z0-9_][A-Za-z0-9_.:-]{0,62}$", like)):
        problems.append(doc.problem((*path, "like"), "a VIF's port name (vif3.0, tap3.0, vnet2)"))
    if like is not None and bridge is not None:
        problems.append(doc.problem((*path, "bridge"), "a probe 'like' a VIF joins that VIF's bridge: omit it"))
    if vlan is not None and (isinstance(vlan, bool) or not isinstance(vlan, int) or not 1 <= vlan <= 4094):
        problems.append(doc.problem((*path, "vlan"), f"a VLAN id 1..4094, not {vlan!r}"))
    if bridge is not None and (
        not isinstance(bridge, str) or not re.match(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,14}$", bridge)
    ):
        problems.append(doc.problem((*path, "bridge"), "a bridge name (letters, digits, '_', '.', '-'; 15 at most)"))
    mac = raw.get("mac")
    if mac is not None and not (isinstance(mac, str) and _unicast_mac(mac)):
        problems.append(doc.problem((*path, "mac"), "a unicast MAC address like 0a:00:00:00:00:01"))
    ingress, egress = _limits(doc, raw.get("limit"), (*path, "limit"), problems)
    if len(problems) > n:
        return None
    return ProbeSpec(name, ip, like, bridge, vlan, mac.lower() if mac else None, ingress, egress)


def _interface_address(doc: yamldoc.Document, value: Any, path: yamldoc.PathKey, problems: list[Problem]) -> str:
    try:
        iface = ipaddress.IPv4Interface(value) if isinstance(value, str) and "/" in value else None
    except ValueError:
        iface = None
    if (
        iface is None
        or iface.network.prefixlen > 30
        or iface.ip in (iface.network.network_address, iface.network.broadcast_address)
    ):
        problems.append(doc.problem(path, f"an IPv4 address with its prefix (10.0.0.201/24), free on the probe's "
                                          f"VLAN; not {value!r}"))  # fmt: skip
        return ""
    return str(iface)


def _unicast_mac(text: str) -> bool:
    return bool(re.match(r"^[0-9a-fA-F]{2}(:[0-9a-fA-F]{2}){5}$", text)) and not int(text[:2], 16) & 1


def _limits(
    doc: yamldoc.Document, value: Any, path: yamldoc.PathKey, problems: list[Problem]
) -> tuple[Optional[Ingress], Optional[Egress]]:
    """``limit: {ingress: {rate, burst}, egress: {rate, burst}}`` in the policy file's units and rules."""
    if value is None:
        return None, None
    if not isinstance(value, dict) or not value:
        problems.append(doc.problem(path, "a mapping with ingress and/or egress: {rate: 10mbit, burst: 8mbit}"))
        return None, None
    problems += doc.unknown_keys(value, path, _LIMIT_KEYS)
    out: dict[str, Any] = {}
    for key in ("ingress", "egress"):
        raw = value.get(key)
        if raw is None:
            continue
        if not isinstance(raw, dict):
            problems.append(doc.problem((*path, key), "a mapping: {rate: 10mbit, burst: 8mbit}"))
            continue
        problems += doc.unknown_keys(raw, (*path, key), _RATE_KEYS)
        try:
            out[key] = (ingress_from_fields(raw.get("rate"), raw.get("burst"), "tc", in_file=True) if key == "ingress"
                        else egress_from_fields(raw.get("rate"), raw.get("burst"), in_file=True))  # fmt: skip
        except FieldError as exc:
            problems.append(doc.problem((*path, key, exc.field), str(exc)))
    return out.get("ingress"), out.get("egress")


def _unique(
    doc: yamldoc.Document, specs: list[ProbeSpec], raw: list[Any], path: yamldoc.PathKey, problems: list[Problem]
) -> None:
    """Two probes may share neither a name nor an address nor a MAC."""
    for what, key in (("name", lambda s: s.name), ("address", lambda s: s.address), ("MAC", lambda s: s.hwaddr)):
        seen: dict[str, str] = {}
        for s in specs:
            k = key(s)
            if k in seen:
                i = next(j for j, r in enumerate(raw) if isinstance(r, dict) and r.get("name") == s.name)
                problems.append(doc.problem((*path, i), f"probe {s.name} has the same {what} as probe {seen[k]}"))
            seen.setdefault(k, s.name)
