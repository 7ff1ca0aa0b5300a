"""VM names for VIFs: from libvirt, from XAPI, or from the lab's records.

OVS only knows VM *ids* (libvirt's ``vm-id``, XenServer's ``xs-vm-uuid``);
operators think in VM names.  Each source is optional: the libvirt Python
binding may be absent, XAPI may not be configured, and a production host has
no lab.  A source that fails is skipped -- inventory never fails for want of
a name -- and the source that answered is reported next to the name.

XAPI is asked through one logged-in session per configuration, with every
call bounded by a timeout; its configuration comes from the caller
(:class:`XapiConfig`), never from this module's own reading of the environment.

libvirt also says what a name alone does not: whether the domain is running
or paused, and which of its interfaces (target device, model, bridge) a port
is -- matched by ``vm-id`` (the domain's uuid) and ``attached-mac``.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import socket
import threading
import time
import urllib.parse
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from appliance.core import config

if TYPE_CHECKING:
    import xml.etree.ElementTree as ET

    from appliance.switch.xapi import XapiConfig

log = logging.getLogger("hvnet.names")


class NameSource(Protocol):
    """Something that maps VM uuids to names."""

    name: str

    def lookup(self, vm_uuids: Iterable[str]) -> dict[str, str]: ...


@dataclass
class StaticNames:
    """Names known in advance (the lab's records, a test's fixture)."""

    names: dict[str, str]
    name: str = "lab"

    def lookup(self, vm_uuids: Iterable[str]) -> dict[str, str]:
        return {u: self.names[u] for u in vm_uuids if u in self.names}


# virsh's words for virDomainState (tools/virsh-domain-monitor.c), so that
# what hvnet shows reads the same as ``virsh list --all``.
DOMAIN_STATES = {
    0: "no state",
    1: "running",
    2: "idle",
    3: "paused",
    4: "in shutdown",
    5: "shut off",
    6: "crashed",
    7: "pmsuspended",
}


def state_name(state: int) -> str:
    """virsh's word for a libvirt domain state number (``3`` -> ``paused``)."""
    return DOMAIN_STATES.get(state, "no state")


@dataclass(frozen=True)
class DomainInterface:
    """One ``<interface>`` of a domain, as libvirt describes it."""

    mac: str | None
    kind: str  # the interface type: bridge, network, direct, ethernet, ...
    target: str | None  # the host-side device (vnetN); only while the domain runs
    model: str | None  # virtio, e1000, rtl8139, ...
    source: str | None  # the bridge, network or host device it is attached to

    def describe(self) -> str:
        """``vnet3 virtio on br0``; ``on network default``; parts libvirt does not say are left out."""
        words = [w for w in (self.target, self.model) if w]
        if self.source:
            where = {"network": f"network {self.source}", "direct": f"{self.source} (direct)"}
            words.append("on " + where.get(self.kind, self.source))
        return " ".join(words) or self.kind


@dataclass(frozen=True)
class Domain:
    """What hvnet shows of a libvirt domain next to its VIFs."""

    uuid: str
    name: str
    state: str
    interfaces: tuple[DomainInterface, ...] = ()

    def interface_for(self, mac: str | None) -> DomainInterface | None:
        """The interface with ``mac`` (OVS's ``attached-mac``), or None.

        The MAC is the only key both sides hold: OVS names the port after the
        target device, but that name is reused as soon as the domain stops.
        """
        if not mac:
            return None
        wanted = mac.lower()
        return next((i for i in self.interfaces if i.mac and i.mac.lower() == wanted), None)


def parse_interfaces(domain_xml: str) -> tuple[DomainInterface, ...]:
    """The ``<interface>`` elements of a domain's XML (``virsh dumpxml``), in order."""
    import xml.etree.ElementTree as ET  # only where libvirt answers: not on every hvnet status

    root = ET.fromstring(domain_xml)
    out = []
    for el in root.iterfind("./devices/interface"):
        kind = el.get("type", "")
        src = el.find("source")
        source = None
        if src is not None:
            source = src.get("bridge") or src.get("network") or src.get("dev") or src.get("path")
        out.append(
            DomainInterface(
                mac=_attr(el, "mac", "address"),
                kind=kind,
                target=_attr(el, "target", "dev"),
                model=_attr(el, "model", "type"),
                source=source,
            )
        )
    return tuple(out)


def _attr(el: ET.Element, child: str, name: str) -> str | None:
    found = el.find(child)
    return found.get(name) if found is not None else None


DEFAULT_URI = "qemu:///system"

# libvirt's daemons' sockets: the monolithic libvirtd and the per-driver
# modular daemons (virtqemud, virtxend, ...), read-write and read-only.
_RUN_DIRS = ("/run/libvirt", "/var/run/libvirt")
_REMOTE_PORTS = {"tcp": 16509, "tls": 16514, "": 16514, "ssh": 22, "libssh": 22, "libssh2": 22}
_IN_PROCESS_DRIVERS = ("test",)


def uri_unreachable(uri: str, probe_timeout: float = 1.0) -> str | None:
    """Why ``uri`` certainly cannot be reached now, or None when it is worth a try.

    Asking libvirt to connect to a daemon that is not there can cost long
    timeouts (or, for ``qemu:///session``, start a daemon); inventory is
    refreshed every second, so the cheap evidence is checked first: the unix
    socket a local URI uses must exist, a remote host must accept a TCP
    connection on the transport's port within ``probe_timeout``.
    """
    parsed = urllib.parse.urlsplit(uri)
    driver, _, transport = parsed.scheme.partition("+")
    if driver in _IN_PROCESS_DRIVERS:
        return None
    query = urllib.parse.parse_qs(parsed.query)
    if transport in ("", "unix") and not parsed.hostname:
        if "socket" in query:
            candidates = [query["socket"][0]]
        elif parsed.path.rstrip("/") == "/session":
            runtime = os.environ.get("XDG_RUNTIME_DIR") or os.path.expanduser("~/.cache")
            candidates = [f"{runtime}/libvirt/{n}" for n in (f"virt{driver}d-sock", "libvirt-sock")]
        else:
            names = (f"virt{driver}d-sock-ro", f"virt{driver}d-sock", "libvirt-sock-ro", "libvirt-sock")
            candidates = [f"{d}/{n}" for d in _RUN_DIRS for n in names]
        if any(os.path.exists(c) for c in candidates):
            return None
        return f"no libvirt daemon socket ({', '.join(candidates[:2])}{', ...' if len(candidates) > 2 else ''})"
    if transport in ("ext",):
        return None
    port = parsed.port or _REMOTE_PORTS.get(transport)
    if not parsed.hostname or port is None:
        return None
    try:
        with socket.create_connection((parsed.hostname, port), timeout=probe_timeout):
            return None
    except OSError as exc:
        return f"{parsed.hostname}:{port} not reachable ({exc})"


class LibvirtDomains:
    """Domain names, states and interfaces through the libvirt API (``libvirt-python``, optional).

    Inventory is refreshed about once a second, by several readers at once in
    the console; so one read-only connection is kept open per URI (see
    :func:`libvirt_source`) and reopened after a failure, and what it answers
    is reused for :attr:`ttl` seconds: one ``getAllDomainStats`` call (names,
    uuids and states of every domain) per period, plus one ``XMLDesc`` for a
    domain whose VIFs are asked about, only when that domain has restarted,
    its XML is older than :attr:`xml_ttl`, or a MAC asked for is not in it
    (a NIC hot-plugged since).  An unreachable URI is retried at most every
    :attr:`retry_s` seconds, and never waited for (:func:`uri_unreachable`);
    nor is the binding imported for it: where no daemon's socket is (a
    XenServer host, a KVM host whose libvirtd is stopped), ``hvnet status``
    does not pay for ``import libvirt``.
    """

    name = "libvirt"
    ttl = 2.0
    xml_ttl = 30.0
    retry_s = 10.0

    def __init__(self, uri: str) -> None:
        self.uri = uri
        self._lock = threading.Lock()
        self._conn: Any = None
        self._failed_at: float | None = None
        self._listed_at: float | None = None
        self._domains: dict[str, tuple[Any, str]] = {}  # uuid -> (virDomain, state word)
        self._xml: dict[str, tuple[int, float, tuple[DomainInterface, ...]]] = {}  # uuid -> (id, when, ifaces)

    @staticmethod
    def available() -> bool:
        """Whether the binding is installed: found, not imported.  Importing it costs about as much
        as the rest of ``hvnet status``; that is paid only once a daemon is there to ask (:meth:`domains`)."""
        return importlib.util.find_spec("libvirt") is not None

    def lookup(self, vm_uuids: Iterable[str]) -> dict[str, str]:
        return {u: d.name for u, d in self.domains({u: () for u in vm_uuids}).items()}

    def domains(self, wanted: Mapping[str, Iterable[str]]) -> dict[str, Domain]:
        """``{uuid: Domain}`` for the uuids in ``wanted`` that libvirt knows.

        ``wanted`` maps each uuid to the MACs asked about (OVS's
        ``attached-mac``); a domain's interfaces are read only when some are.
        """
        if not wanted:
            return {}
        with self._lock:
            now = time.monotonic()
            stale = self._listed_at is None or now - self._listed_at >= self.ttl
            if stale and not self._worth_connecting(now):
                return {}  # no daemon socket: libvirt is not even imported
            try:
                import libvirt
            except ImportError as exc:  # found but broken (a binding without its C module): as if absent
                log.debug("libvirt binding not importable: %s", exc)
                self._failed_at = now
                return {}
            try:
                if stale and not self._list(now):
                    return {}
                out = {}
                for vm_uuid, macs in wanted.items():
                    if vm_uuid not in self._domains:
                        continue
                    dom, state = self._domains[vm_uuid]
                    out[vm_uuid] = Domain(vm_uuid, dom.name(), state, self._interfaces(dom, vm_uuid, macs, now))
                return out
            except libvirt.libvirtError as exc:
                log.info("libvirt at %s failed: %s; reconnecting on the next refresh", self.uri, exc)
                self._drop()
                return {}

    def _worth_connecting(self, now: float) -> bool:
        """Connected, or worth a try: not failed within :attr:`retry_s` and :func:`uri_unreachable`
        finds the daemon's socket (or the remote host answering).  Decided before libvirt is imported."""
        if self._conn is not None:
            return True
        if self._failed_at is not None and now - self._failed_at < self.retry_s:
            return False
        why = uri_unreachable(self.uri)
        if why is not None:
            log.debug("libvirt at %s not reachable: %s", self.uri, why)
            self._failed_at = now
            return False
        return True

    def _list(self, now: float) -> bool:
        """Refresh the domain list and states (connecting first); False when libvirt cannot be reached."""
        import libvirt

        if self._conn is None:
            quiet_libvirt()
            try:
                self._conn = libvirt.openReadOnly(self.uri)
            except libvirt.libvirtError as exc:
                log.info("libvirt at %s not reachable: %s", self.uri, exc)
                self._failed_at = now
                return False
            self._failed_at = None
        try:
            stats = self._conn.getAllDomainStats(libvirt.VIR_DOMAIN_STATS_STATE)
            listed = {d.UUIDString(): (d, state_name(s.get("state.state", 0))) for d, s in stats}
        except libvirt.libvirtError as exc:
            if exc.get_error_code() != libvirt.VIR_ERR_NO_SUPPORT:
                raise
            listed = {d.UUIDString(): (d, state_name(d.state()[0])) for d in self._conn.listAllDomains()}
        self._domains = listed
        self._xml = {u: x for u, x in self._xml.items() if u in listed}
        self._listed_at = now
        return True

    def _interfaces(self, dom: Any, vm_uuid: str, macs: Iterable[str], now: float) -> tuple[DomainInterface, ...]:
        macs = [m.lower() for m in macs if m]
        if not macs:
            return ()
        cached = self._xml.get(vm_uuid)
        if cached is not None:
            dom_id, when, ifaces = cached
            age = now - when
            known = {i.mac.lower() for i in ifaces if i.mac}
            # An unknown MAC (a NIC hot-plugged since) is looked for again, once per ttl.
            if dom_id == dom.ID() and age < self.xml_ttl and (age < self.ttl or all(m in known for m in macs)):
                return ifaces
        import libvirt

        try:
            ifaces = parse_interfaces(dom.XMLDesc(0))
        except libvirt.libvirtError as exc:
            if exc.get_error_code() == libvirt.VIR_ERR_NO_DOMAIN:
                return ()  # undefined since it was listed: the next listing drops it
            raise
        self._xml[vm_uuid] = (dom.ID(), now, ifaces)
        return ifaces

    def _drop(self) -> None:
        """Forget the connection and what it said; the next refresh connects again."""
        conn, self._conn = self._conn, None
        self._domains, self._xml, self._listed_at = {}, {}, None
        if conn is not None:
            try:
                conn.close()
            except Exception:  # closing a broken connection may fail too; it is gone either way
                pass

    def close(self) -> None:
        with self._lock:
            self._drop()


# The name it had when it gave names only.
LibvirtNames = LibvirtDomains

_sources_lock = threading.Lock()
_sources: dict[str, LibvirtDomains] = {}


def libvirt_source(uri: str) -> LibvirtDomains:
    """The one :class:`LibvirtDomains` of this process for ``uri`` (its connection and cache are shared)."""
    with _sources_lock:
        if uri not in _sources:
            _sources[uri] = LibvirtDomains(uri)
        return _sources[uri]


def quiet_libvirt() -> None:
    """libvirt prints every error on stderr by default; hvnet reports them itself (or not at all)."""
    import libvirt

    libvirt.registerErrorHandler(lambda _ctx, err: log.debug("libvirt: %s", err), None)


@dataclass(frozen=True)
class VmInfo:
    """What the name sources know of one VM: always a name, the rest when libvirt answered."""

    name: str
    source: str
    domain: Domain | None = None


def resolve_vms(sources: list[NameSource], wanted: Mapping[str, Iterable[str]]) -> dict[str, VmInfo]:
    """``{vm_uuid: VmInfo}`` for ``wanted`` (uuid -> the MACs asked about), each
    source asked for what is still unknown; a source that fails is skipped."""
    remaining = dict(wanted)
    found: dict[str, VmInfo] = {}
    for source in sources:
        if not remaining:
            break
        try:
            if isinstance(source, LibvirtDomains):
                got = {u: VmInfo(d.name, source.name, d) for u, d in source.domains(remaining).items()}
            else:
                got = {u: VmInfo(n, source.name) for u, n in source.lookup(sorted(remaining)).items()}
        except Exception as exc:  # an optional source must never break inventory
            log.info("VM name source %s failed: %s", source.name, exc)
            continue
        found.update(got)
        for vm_uuid in got:
            remaining.pop(vm_uuid, None)
    return found


def resolve_names(sources: list[NameSource], vm_uuids: Iterable[str]) -> dict[str, tuple[str, str]]:
    """``{vm_uuid: (name, source)}``, asking each source for what is still unknown."""
    return {u: (i.name, i.source) for u, i in resolve_vms(sources, {u: () for u in vm_uuids}).items()}


def libvirt_uri(choice: str | None = None, env: dict[str, str] | os._Environ[str] | None = None) -> str | None:
    """The libvirt URI to ask, or None: ``choice`` (``--libvirt``), ``$HVNET_LIBVIRT_URI``,
    ``$LIBVIRT_DEFAULT_URI``, else ``qemu:///system``.  ``none`` (option or variable)
    turns libvirt off.

    The default is kept even where no libvirtd runs (a XenServer host, a lab
    without QEMU guests): the source costs a few ``stat`` calls every
    :attr:`LibvirtDomains.retry_s` there, and a console left open sees the
    domains of a libvirtd started after it.
    """
    env = config.environ() if env is None else env
    uri = choice or env.get("HVNET_LIBVIRT_URI") or env.get("LIBVIRT_DEFAULT_URI") or DEFAULT_URI
    return None if uri.strip().lower() == "none" else uri


def local_xapi(
    socket_path: str | None = None, inventory: str = "/etc/xensource-inventory", euid: int | None = None
) -> XapiConfig | None:
    """XAPI through the local socket when this machine is a XenServer/XCP-ng dom0 and hvnet is root; else None.

    Only in a dom0 (its inventory names the host and the control domain) and only for root, who alone may
    open the socket: anywhere else an absent socket is the rule, not a failure worth a warning."""
    from appliance.switch import platform

    if (os.geteuid() if euid is None else euid) != 0:
        return None
    try:
        with open(inventory, encoding="utf-8", errors="replace") as fh:
            text = fh.read(65536)
    except OSError:
        return None
    if not platform.detect(text, None).dom0:
        return None
    from appliance.switch.xapi import LOCAL_SOCKET, local_config  # XenAPI: loaded only where it is used

    return local_config(socket_path or LOCAL_SOCKET)


def default_sources(
    lab_names: dict[str, str] | None,
    env: Mapping[str, str] | None = None,
    libvirt_choice: str | None = None,
    xapi: XapiConfig | None = None,
    *,
    this_host: bool = False,
) -> list[NameSource]:
    """libvirt (when the binding and a URI are there), XAPI (when configured), the lab.

    ``libvirt_choice`` is the front end's choice of URI (``--libvirt``), see :func:`libvirt_uri`.
    XAPI is asked when ``xapi`` is given, else when ``env`` configures it
    (:meth:`XapiConfig.from_env`); its source is the process's shared one (:func:`xapi_source`).
    """
    if xapi is None and env is not None and env.get("HVNET_XAPI_URL"):
        from appliance.switch.xapi import XapiConfig  # XenAPI and its HTTP stack: loaded only where XAPI is configured

        xapi = XapiConfig.from_env(env)
    if xapi is None and this_host and not (env or {}).get("HVNET_XAPI_URL"):
        xapi = local_xapi()  # a dom0's own XAPI, when hvnet runs there as root and nothing else is configured
    env = config.environ() if env is None else env
    sources: list[NameSource] = []
    uri = libvirt_uri(libvirt_choice, env)
    if uri and LibvirtDomains.available():
        sources.append(libvirt_source(uri))
    if xapi is not None:
        from appliance.switch.xapi import xapi_source

        sources.append(xapi_source(xapi))
    if lab_names:
        sources.append(StaticNames(lab_names))
    return sources
