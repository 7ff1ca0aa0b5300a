"""VM names for VIFs: from libvirt, from XAPI, or from the lab's records.

OVS only knows VM *ids* (libvirt's ``vm-id``, XenServer's ``xs-vm-uuid``);
operators think in VM names.  Each source is optional: the libvirt Python
binding may be absent, XAPI may not be configured, and a production host has
no lab.  A source that fails is skipped -- inventory never fails for want of
a name -- and the source that answered is reported next to the name.
"""

from __future__ import annotations

import logging
import os
import xmlrpc.client
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Protocol

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


class LibvirtNames:
    """Domain names through the libvirt API (``libvirt-python``, optional)."""

    name = "libvirt"

    def __init__(self, uri: str) -> None:
        self.uri = uri

    @staticmethod
    def available() -> bool:
        try:
            import libvirt  # noqa: F401
        except ImportError:
            return False
        return True

    def lookup(self, vm_uuids: Iterable[str]) -> dict[str, str]:
        import libvirt

        wanted = set(vm_uuids)
        if not wanted:
            return {}
        try:
            conn = libvirt.openReadOnly(self.uri)
        except libvirt.libvirtError as exc:
            log.info("libvirt at %s not reachable: %s", self.uri, exc)
            return {}
        try:
            return {d.UUIDString(): d.name() for d in conn.listAllDomains() if d.UUIDString() in wanted}
        finally:
            conn.close()


class XapiNames:
    """VM name labels through XAPI's XML-RPC interface (XenServer / XCP-ng).

    Configured with ``HVNET_XAPI_URL`` (e.g. ``https://localhost``) and a
    credentials file ``HVNET_XAPI_CREDENTIALS`` holding ``user:password``.
    """

    name = "xapi"

    def __init__(self, url: str, user: str, password: str, timeout: float = 3.0) -> None:
        self.url = url
        self.user = user
        self.password = password
        self.timeout = timeout

    @classmethod
    def from_env(cls, env: dict[str, str] | os._Environ[str]) -> XapiNames | None:
        url = env.get("HVNET_XAPI_URL")
        cred_file = env.get("HVNET_XAPI_CREDENTIALS")
        if not url or not cred_file:
            return None
        try:
            with open(cred_file, encoding="utf-8") as fh:
                user, _, password = fh.read().strip().partition(":")
        except OSError as exc:
            log.warning("cannot read XAPI credentials %s: %s", cred_file, exc)
            return None
        return cls(url, user, password)

    def lookup(self, vm_uuids: Iterable[str]) -> dict[str, str]:
        wanted = list(dict.fromkeys(vm_uuids))
        if not wanted:
            return {}
        proxy = xmlrpc.client.ServerProxy(self.url, allow_none=True)
        try:
            session = _xapi_value(proxy.session.login_with_password(self.user, self.password, "1.0", "hvnet"))
            try:
                names = {}
                for vm_uuid in wanted:
                    ref = proxy.VM.get_by_uuid(session, vm_uuid)
                    if ref.get("Status") == "Success":
                        names[vm_uuid] = _xapi_value(proxy.VM.get_name_label(session, ref["Value"]))
                return names
            finally:
                proxy.session.logout(session)
        except (OSError, xmlrpc.client.Error, XapiFailure) as exc:
            log.info("XAPI at %s not usable: %s", self.url, exc)
            return {}


class XapiFailure(Exception):
    pass


def _xapi_value(result: dict) -> str:
    if result.get("Status") != "Success":
        raise XapiFailure(str(result.get("ErrorDescription")))
    return result["Value"]


def resolve_names(sources: list[NameSource], vm_uuids: Iterable[str]) -> dict[str, tuple[str, str]]:
    """``{vm_uuid: (name, source)}``, asking each source for what is still unknown."""
    remaining = set(vm_uuids)
    found: dict[str, tuple[str, str]] = {}
    for source in sources:
        if not remaining:
            break
        try:
            got = source.lookup(sorted(remaining))
        except Exception as exc:  # an optional source must never break inventory
            log.info("VM name source %s failed: %s", source.name, exc)
            continue
        for vm_uuid, vm_name in got.items():
            found[vm_uuid] = (vm_name, source.name)
            remaining.discard(vm_uuid)
    return found


def default_sources(
    lab_names: dict[str, str] | None, env: dict[str, str] | os._Environ[str] | None = None
) -> list[NameSource]:
    """libvirt (when the binding and a URI are there), XAPI (when configured), the lab."""
    env = os.environ if env is None else env
    sources: list[NameSource] = []
    uri = env.get("HVNET_LIBVIRT_URI") or env.get("LIBVIRT_DEFAULT_URI")
    if not uri and os.path.exists("/var/run/libvirt/libvirt-sock"):
        uri = "qemu:///system"
    if uri and LibvirtNames.available():
        sources.append(LibvirtNames(uri))
    xapi = XapiNames.from_env(env)
    if xapi is not None:
        sources.append(xapi)
    if lab_names:
        sources.append(StaticNames(lab_names))
    return sources
