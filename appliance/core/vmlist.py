"""The VM inventory: how hvnet reaches real VMs that a suite or a scenario names, read and validated whole.

``/etc/hvnet/vms.yaml`` (``$HVNET_VMS``, ``[measure] vms``, ``--vms FILE``)::

    vms:
      - name: vm1                  # what suites and scenarios call it (client:, server:, a scenario's guests);
                                   # a glob (web-*) matches several, each then known by its own name
        vm: web-01                 # the VM as its hypervisor names it (libvirt domain, XAPI name-label);
                                   # default: the name
        vif: vnet3                 # the VIF under test; default: the VM's one VIF on the switch
        mac: 52:54:00:12:34:56     # or the VIF under test by the VM's MAC
        ip: 10.0.0.1/24            # the address under test; default: found inside the VM by the VIF's MAC
        # reached over SSH (the system client, strict host keys, one multiplexed connection per VM) ...
        ssh: web-01.mgmt           # a ~/.ssh/config Host, a host name or an address: the management path
        user: root
        port: 22
        identity: vm_key           # paths relative to this file
        known_hosts: vm_known_hosts
        ssh_config: vm_ssh_config
        # ... or through libvirt's QEMU guest agent on the driven hypervisor (no network path to the VM)
        agent: libvirt
        libvirt: qemu:///system    # default: the hypervisor's own libvirt

Traffic goes to the address on the VIF under test, never to the management
address ``ssh`` names.  Every problem is reported with ``file:line``, the
field and what is allowed, before any VM is contacted; the YAML is read with
hvnet's bounded loader.  A VM name from a hypervisor may hold any character:
``vm`` is kept as data (an argument, never shell text) and shown escaped.
"""

from __future__ import annotations

import fnmatch
import ipaddress
import re
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Optional

from appliance.core import validate, yamldoc
from appliance.core.errors import ConfigError, Problem

DEFAULT_VMS = Path("/etc/hvnet/vms.yaml")
METHODS = ("ssh", "agent")
AGENTS = ("libvirt",)
_NAME = re.compile(r"^[A-Za-z0-9*?\[][A-Za-z0-9_.*?\[\]-]{0,62}$")
_PLAIN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,62}$")
_SSH = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,252}$|^\[[0-9A-Fa-f:.]{2,45}\]$")
_USER = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}$")
_PATH = re.compile(r"^[^\0\n]{1,400}$")
_URI = re.compile(r"^[a-z0-9+]{1,32}:///?[A-Za-z0-9_./?=&%:@+-]{0,300}$")
_KEYS = {"name", "vm", "vif", "mac", "ip", "ssh", "user", "port", "identity", "known_hosts", "ssh_config", "agent",
         "libvirt"}  # fmt: skip


@dataclass(frozen=True)
class InventoryVm:
    """One VM of the inventory (``name`` resolved: a glob's entry copied under the name asked for)."""

    name: str
    method: str  # ssh | agent
    vm: str  # as its hypervisor names it
    where: str  # file:line of its entry, for messages
    vif: Optional[str] = None
    mac: Optional[str] = None
    ip: Optional[str] = None  # with its prefix length
    ssh: Optional[str] = None
    user: Optional[str] = None
    port: Optional[int] = None
    identity: Optional[str] = None
    known_hosts: Optional[str] = None
    ssh_config: Optional[str] = None
    libvirt: Optional[str] = None
    pattern: bool = False  # the entry is a glob

    @property
    def address(self) -> Optional[str]:
        return self.ip.split("/")[0] if self.ip else None


@dataclass(frozen=True)
class VmInventory:
    file: str
    vms: tuple[InventoryVm, ...]

    def get(self, name: str) -> Optional[InventoryVm]:
        """The entry for ``name``: its own, else the first glob that matches it (in the file's order)."""
        for v in self.vms:
            if not v.pattern and v.name == name:
                return v
        for v in self.vms:
            if v.pattern and fnmatch.fnmatchcase(name, v.name):
                vm = name if v.vm == v.name else v.vm
                ssh = name if v.ssh == v.name else v.ssh
                return replace(v, name=name, vm=vm, ssh=ssh, pattern=False)
        return None

    def names(self) -> list[str]:
        return [v.name for v in self.vms]


def load(path: str | Path) -> VmInventory:
    """Read and validate a VM inventory; :class:`ConfigError` lists every problem in it."""
    doc = yamldoc.load(path, trusted="the VM inventory")
    data = doc.data
    if not isinstance(data, dict) or not isinstance(data.get("vms"), list):
        raise ConfigError([doc.problem((), "a VM inventory is a mapping with 'vms': a list of VMs")])
    problems: list[Problem] = doc.unknown_keys(data, (), {"vms"})
    vms: list[InventoryVm] = []
    seen: set[str] = set()
    for i, raw in enumerate(data["vms"]):
        name = raw.get("name") if isinstance(raw, dict) else None
        if isinstance(name, str) and name in seen:
            problems.append(doc.problem(("vms", i, "name"), f"{name!r} is listed twice"))
        if isinstance(name, str):
            seen.add(name)
        vm = _vm(doc, i, raw, problems)
        if vm is not None:
            vms.append(vm)
    if problems:
        raise ConfigError(problems)
    return VmInventory(doc.file, tuple(vms))


def _vm(doc: yamldoc.Document, i: int, raw: Any, problems: list[Problem]) -> Optional[InventoryVm]:
    at: yamldoc.PathKey = ("vms", i)
    if not isinstance(raw, dict):
        problems.append(doc.problem(at, "each VM is a mapping with 'name' and either 'ssh' or 'agent'"))
        return None
    before = len(problems)
    problems += doc.unknown_keys(raw, at, _KEYS)

    def text(key: str, pattern: re.Pattern[str], what: str) -> Optional[str]:
        value = raw.get(key)
        if value is None:
            return None
        if not isinstance(value, str) or not pattern.match(value):
            problems.append(doc.problem((*at, key), what))
            return None
        return value

    name = text("name", _NAME, "1-63 letters, digits, '_', '.', '-' (a glob may use * ? [...])")
    if "name" not in raw:
        problems.append(doc.problem((*at, "name"), "required"))
    vm = _hypervisor_name(doc, at, raw, problems)
    method = _method(doc, at, raw, problems)
    vif = _checked(doc, at, raw, "vif", validate.ifname, problems)
    mac = _checked(doc, at, raw, "mac", validate.mac, problems)
    ip = _checked(doc, at, raw, "ip", _interface_address, problems)
    ssh = text("ssh", _SSH, "an ssh destination: a ~/.ssh/config Host, a host name or an address (no user@)")
    user = text("user", _USER, "a user name: letters, digits, '_', '.', '-'")
    port = raw.get("port")
    if port is not None and (isinstance(port, bool) or not isinstance(port, int) or not 0 < port < 65536):
        problems.append(doc.problem((*at, "port"), "a TCP port, 1-65535"))
    files = {k: text(k, _PATH, "a file's path (relative: to this inventory's directory)")
             for k in ("identity", "known_hosts", "ssh_config")}  # fmt: skip
    libvirt = text("libvirt", _URI, "a libvirt URI (qemu:///system, qemu+ssh://host/system)")
    if method == "agent":
        for key in ("user", "port", "identity", "known_hosts", "ssh_config"):
            if key in raw:
                problems.append(doc.problem((*at, key), "belongs to 'ssh': this VM is reached through its guest agent"))
    elif method == "ssh" and "libvirt" in raw:
        problems.append(doc.problem((*at, "libvirt"), "belongs to 'agent': this VM is reached over SSH"))
    if len(problems) > before or name is None or method is None:
        return None
    base = Path(doc.file).parent
    paths = {k: (str(base / v) if v is not None else None) for k, v in files.items()}  # absolute ones stay
    return InventoryVm(
        name, method, vm or name, f"{doc.file}:{doc.line(at)}", vif, mac, ip,
        ssh or (name if method == "ssh" else None), user, port, paths["identity"], paths["known_hosts"],
        paths["ssh_config"], libvirt, pattern=not _PLAIN.match(name),
    )  # fmt: skip


def _hypervisor_name(doc: yamldoc.Document, at: yamldoc.PathKey, raw: dict[str, Any],
                     problems: list[Problem]) -> Optional[str]:  # fmt: skip
    """``vm``: any name a hypervisor allows, but one line of printable text (it is shown, and passed as data)."""
    value = raw.get("vm")
    if value is None:
        return None
    try:
        if not isinstance(value, str) or not 0 < len(value) <= 255:
            raise ValueError("1-255 characters")
        return validate.no_control(value)
    except ValueError as exc:
        problems.append(doc.problem((*at, "vm"), f"the VM's name on its hypervisor: {exc}"))
        return None


def _method(doc: yamldoc.Document, at: yamldoc.PathKey, raw: dict[str, Any], problems: list[Problem]) -> Optional[str]:
    """``agent`` names the guest agent; without it the VM is reached over SSH (``ssh`` defaulting to the name)."""
    agent = raw.get("agent")
    if agent is None:
        return "ssh"
    if agent not in AGENTS:
        problems.append(doc.problem((*at, "agent"), f"allowed: {', '.join(AGENTS)} (libvirt's QEMU guest agent)"))
        return None
    if "ssh" in raw:
        problems.append(doc.problem((*at, "agent"), "give 'ssh' or 'agent', not both: one way reaches a VM"))
        return None
    return "agent"


def _checked(doc: yamldoc.Document, at: yamldoc.PathKey, raw: dict[str, Any], key: str, check: Any,
             problems: list[Problem]) -> Optional[str]:  # fmt: skip
    if key not in raw:
        return None
    try:
        return str(check(raw[key]))
    except ValueError as exc:
        problems.append(doc.problem((*at, key), f"allowed: {exc}"))
        return None


def _interface_address(value: Any) -> str:
    """``ADDRESS/PREFIX`` (IPv4 or IPv6), as a guest's interface carries it."""
    if not isinstance(value, str) or "/" not in value:
        raise ValueError("an address with its prefix length, 10.0.0.1/24")
    try:
        iface = ipaddress.ip_interface(value)
    except ValueError:
        raise ValueError("an address with its prefix length, 10.0.0.1/24") from None
    return str(iface)
