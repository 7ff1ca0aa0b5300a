"""The host inventory: the hypervisors hvnet reaches over SSH, read from YAML and validated whole.

``/etc/hvnet/hosts.yaml`` (``$HVNET_INVENTORY``)::

    hosts:
      - name: xs01                 # what --host and --hosts call it
        address: 192.0.2.11        # else the name (resolved by ssh and ~/.ssh/config)
        user: root
        port: 22
        kind: xenserver            # or kvm
        group: pool-a              # --hosts pool-a
        ovs_rundir: /var/run/openvswitch
        xapi_url: https://192.0.2.11
        xapi_credentials: /etc/hvnet/xapi-pool-a
        xapi_fingerprint: 3A:...:9C    # XAPI's self-signed certificate (or xapi_ca: a CA file)
        policy: policies/pool-a.yaml  # what `hvnet hosts` checks it against (relative: to this file)

An OVN pool is named beside its hosts (``hvnet --pool NAME``)::

    pools:
      - name: pool-a
        nb: ssl:192.0.2.5:6641     # the northbound database: unix:PATH, tcp:HOST:PORT or ssl:HOST:PORT
        sb: ssl:192.0.2.5:6642     # the southbound database
        via: central1              # optional: an inventory host whose unix sockets nb/sb are, over SSH
        chassis: pool-a            # the inventory hosts (names or a group) that are its chassis

Every problem is reported with ``file:line``, the field and what is allowed,
before any host is contacted; the YAML is read with hvnet's bounded loader.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from appliance.core import validate, yamldoc
from appliance.core.errors import ConfigError, Problem, UsageError

DEFAULT_INVENTORY = Path("/etc/hvnet/hosts.yaml")
KINDS = ("xenserver", "kvm")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_ADDRESS = re.compile(r"^[A-Za-z0-9_.:-]{1,253}$")
_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}$")
_KEYS = {"name", "address", "user", "port", "kind", "group", "ovs_rundir", "xapi_url", "xapi_credentials", "xapi_ca",
         "xapi_fingerprint", "policy"}  # fmt: skip
_PATH = re.compile(r"^[^\0\n]{1,400}$")
_POOL_KEYS = {"name", "nb", "sb", "via", "chassis"}
_DB_REMOTE = re.compile(r"^(unix:/[^\0\n,]{1,300}|(tcp|ssl):[A-Za-z0-9_.:\[\]-]{1,260}:[0-9]{1,5})$")


@dataclass(frozen=True)
class InventoryHost:
    """One hypervisor of the inventory."""

    name: str
    address: str
    user: str | None = None
    port: int | None = None
    kind: str = "kvm"
    group: str | None = None
    ovs_rundir: str = "/var/run/openvswitch"
    xapi_url: str | None = None
    xapi_credentials: str | None = None
    policy: str | None = None  # the policy file this host should match (absolute once loaded)
    xapi_ca: str | None = None  # CA file for XAPI's https certificate
    xapi_fingerprint: str | None = None  # or its SHA-256 fingerprint (64 lowercase hex digits)

    @property
    def ssh(self) -> str:
        """``[USER@]ADDRESS[:PORT]`` for :class:`~appliance.core.ssh.SshTarget`."""
        address = f"[{self.address}]" if ":" in self.address else self.address
        return f"{self.user + '@' if self.user else ''}{address}{':' + str(self.port) if self.port else ''}"


@dataclass(frozen=True)
class InventoryPool:
    """An OVN pool: its central databases and the inventory hosts that are its chassis."""

    name: str
    nb: str
    sb: str
    via: str | None = None  # an inventory host whose unix sockets ``nb`` and ``sb`` are (over SSH)
    chassis: str | None = None  # names or a group, as --hosts takes them


@dataclass(frozen=True)
class Inventory:
    file: str
    hosts: tuple[InventoryHost, ...]
    pools: tuple[InventoryPool, ...] = ()

    def get(self, name: str) -> InventoryHost | None:
        return next((h for h in self.hosts if h.name == name), None)

    def pool(self, name: str) -> InventoryPool:
        """The pool called ``name``; an unknown one is a usage error naming the known ones."""
        found = next((p for p in self.pools if p.name == name), None)
        if found is None:
            known = ", ".join(p.name for p in self.pools) or "none"
            raise UsageError(f"--pool: no pool {name!r} in {self.file}", hint=f"known pools: {known}")
        return found

    def select(self, spec: str) -> list[InventoryHost]:
        """``all``, a group, or names separated by commas; an unknown one is a usage error naming it."""
        if spec == "all":
            return list(self.hosts)
        chosen: list[InventoryHost] = []
        for word in (w.strip() for w in spec.split(",")):
            group = [h for h in self.hosts if h.group == word]
            found = group or [h for h in self.hosts if h.name == word]
            if not found:
                known = ", ".join(sorted({h.name for h in self.hosts} | {h.group for h in self.hosts if h.group}))
                raise UsageError(f"--hosts: no host or group {word!r} in {self.file}", hint=f"known: {known}")
            chosen += [h for h in found if h not in chosen]
        return chosen


def load(path: str | Path) -> Inventory:
    """Read and validate an inventory file; :class:`ConfigError` lists every problem in it."""
    doc = yamldoc.load(path, trusted="the host inventory")
    data = doc.data
    if not isinstance(data, dict) or not isinstance(data.get("hosts"), list):
        raise ConfigError([doc.problem((), "an inventory is a mapping with 'hosts': a list of hosts")])
    problems: list[Problem] = doc.unknown_keys(data, (), {"hosts", "pools"})
    hosts: list[InventoryHost] = []
    seen: set[str] = set()
    for i, raw in enumerate(data["hosts"]):
        name = raw.get("name") if isinstance(raw, dict) else None
        if isinstance(name, str) and name in seen:
            problems.append(doc.problem(("hosts", i, "name"), f"{name!r} is listed twice"))
        if isinstance(name, str):
            seen.add(name)
        host = _host(doc, i, raw, problems)
        if host is not None:
            hosts.append(host)
    pools = _pools(doc, data.get("pools", []), {h.name for h in hosts} | {h.group for h in hosts if h.group},
                   problems)  # fmt: skip
    if problems:
        raise ConfigError(problems)
    return Inventory(doc.file, tuple(hosts), tuple(pools))


def _pools(doc: yamldoc.Document, raw: Any, known: set[str | None], problems: list[Problem]) -> list[InventoryPool]:
    """The OVN pools, each with its NB and SB remotes and (optionally) the host they are reached through."""
    if not isinstance(raw, list):
        problems.append(doc.problem(("pools",), "a list of pools, each a mapping with 'name', 'nb' and 'sb'"))
        return []
    pools: list[InventoryPool] = []
    for i, rp in enumerate(raw):
        at: yamldoc.PathKey = ("pools", i)
        if not isinstance(rp, dict):
            problems.append(doc.problem(at, "each pool is a mapping with 'name', 'nb' and 'sb'"))
            continue
        before = len(problems)
        problems += doc.unknown_keys(rp, at, _POOL_KEYS)
        name = rp.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            problems.append(doc.problem((*at, "name"), "required: 1-63 letters, digits, '_', '.', '-'"))
        elif any(p.name == name for p in pools):
            problems.append(doc.problem((*at, "name"), f"{name!r} is listed twice"))
        via = rp.get("via")
        if via is not None and via not in known:
            problems.append(doc.problem((*at, "via"), f"not a host of this inventory: {via!r}"))
        for key in ("nb", "sb"):
            value = rp.get(key)
            if not isinstance(value, str) or not _DB_REMOTE.match(value):
                problems.append(doc.problem((*at, key), "required: unix:/PATH, tcp:HOST:PORT or ssl:HOST:PORT"))
            elif via is not None and not value.startswith("unix:"):
                problems.append(doc.problem((*at, key), "with 'via': the unix:/PATH of the socket on that host"))
        chassis = rp.get("chassis")
        if chassis is not None and (not isinstance(chassis, str) or any(
                w.strip() not in known for w in chassis.split(","))):  # fmt: skip
            problems.append(doc.problem((*at, "chassis"), "inventory host names or a group, separated by commas"))
        if len(problems) == before:
            pools.append(InventoryPool(str(name), rp["nb"], rp["sb"], via, chassis))
    return pools


def _host(doc: yamldoc.Document, i: int, raw: Any, problems: list[Problem]) -> InventoryHost | None:
    at = ("hosts", i)
    if not isinstance(raw, dict):
        problems.append(doc.problem(at, "each host is a mapping with at least 'name'"))
        return None
    before = len(problems)
    problems += doc.unknown_keys(raw, at, _KEYS)

    def text(key: str, pattern: re.Pattern[str] | None, what: str, default: str | None = None) -> str | None:
        value = raw.get(key, default)
        if value is None:
            return None
        if not isinstance(value, str) or (pattern is not None and not pattern.match(value)):
            problems.append(doc.problem((*at, key), what))
            return None
        return value

    name = text("name", _NAME, "required: 1-63 letters, digits, '_', '.', '-' (starting with a letter or digit)")
    if "name" not in raw:
        problems.append(doc.problem((*at, "name"), "required"))
    address = text("address", _ADDRESS, "a host name or an IPv4/IPv6 address", default=name)
    user = text("user", _USER, "a user name: letters, digits, '_', '.', '-'")
    kind = raw.get("kind", "kvm")
    if kind not in KINDS:
        problems.append(doc.problem((*at, "kind"), f"allowed: {', '.join(KINDS)}"))
    port = raw.get("port")
    if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536):
        problems.append(doc.problem((*at, "port"), "a TCP port, 1-65535"))
    group = text("group", _NAME, "1-63 letters, digits, '_', '.', '-'")
    rundir = text("ovs_rundir", re.compile(r"^/[^\0\n]{0,200}$"), "an absolute path", "/var/run/openvswitch")
    xapi_url, xapi_ca, pin = _xapi(doc, at, raw, problems)
    creds = text("xapi_credentials", re.compile(r"^/[^\0\n]{0,200}$"), "an absolute path to a user:password file")
    for given, missing in (("xapi_url", "xapi_credentials"), ("xapi_credentials", "xapi_url"),
                           ("xapi_ca", "xapi_url"), ("xapi_fingerprint", "xapi_url")):  # fmt: skip
        if given in raw and missing not in raw:  # one without the other would silently name no VM
            problems.append(doc.problem((*at, given), f"needs '{missing}' too: XAPI is asked with both"))
    policy = text("policy", _PATH, "a policy file's path (relative: to the inventory file's directory)")
    if len(problems) > before or name is None or address is None:
        return None
    if policy is not None:
        policy = str(Path(doc.file).parent / policy)  # an absolute path stays as it is
    return InventoryHost(name, address, user, port, str(kind), group, str(rundir), xapi_url, creds, policy,
                         xapi_ca, pin)  # fmt: skip


def _xapi(doc: yamldoc.Document, at: yamldoc.PathKey, raw: dict[str, Any], problems: list[Problem]) -> tuple[
        str | None, str | None, str | None]:  # fmt: skip
    """An entry's XAPI URL (never with credentials in it), CA file and pinned fingerprint, each checked."""
    found: list[str | None] = []
    for key, check, what in (
        ("xapi_url", validate.xapi_url, None),
        ("xapi_ca", None, "an absolute path to a PEM file of CA certificates"),
        ("xapi_fingerprint", validate.sha256_fingerprint, None),
    ):
        value = raw.get(key)
        try:
            if value is None:
                found.append(None)
            elif check is not None:
                found.append(check(value))
            elif isinstance(value, str) and re.match(r"^/[^\0\n]{0,200}$", value):
                found.append(value)
            else:
                raise ValueError(what)
        except ValueError as exc:
            problems.append(doc.problem((*at, key), f"allowed: {exc}"))
            found.append(None)
    url = raw.get("xapi_url")
    if (found[1] or found[2]) and isinstance(url, str) and url.startswith("http://"):
        problems.append(doc.problem((*at, "xapi_url"), "an https:// URL: xapi_ca and xapi_fingerprint "
                                        "check the certificate of https"))  # fmt: skip
    return found[0], found[1], found[2]
