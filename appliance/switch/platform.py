"""Where hvnet runs: a XenServer or XCP-ng dom0, or another host, read from the files the host keeps.

A dom0 is told by ``/etc/xensource-inventory``, the key=value file XenServer's installer writes
(``INSTALLATION_UUID``, ``CONTROL_DOMAIN_UUID``, ``PRODUCT_BRAND``, ``PRODUCT_VERSION``...) and
xapi itself reads; both UUIDs name the host and its control domain, so a file holding both is a
dom0's.  The release file (``/etc/xcp-ng-release``, ``/etc/xenserver-release``, else
``/etc/redhat-release``) names the product when the inventory has no brand.  Parsing is pure; the
files are read through the Host's runner, so a host over SSH is told the same way as this one.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Optional

from appliance.core.runner import CommandRunner

INVENTORY = "/etc/xensource-inventory"
RELEASE_FILES = ("/etc/xcp-ng-release", "/etc/xenserver-release", "/etc/redhat-release")

_LINE = re.compile(r"^([A-Z][A-Z0-9_]*)=(.*)$")
_RELEASE = re.compile(r"^(?P<product>.+?) release (?P<version>[0-9][0-9.]*)")


@dataclass(frozen=True)
class Platform:
    """What the host is: its product and version when known, and whether it is a Xen dom0."""

    product: Optional[str]
    version: Optional[str]
    dom0: bool
    build: Optional[str] = None

    def to_json(self) -> dict[str, Any]:
        return {"product": self.product, "version": self.version, "dom0": self.dom0, "build": self.build}

    def text(self) -> str:
        """``XCP-ng 8.2.1 (dom0)``, ``XenServer 7.0.0 (dom0)``; empty for a host that says nothing."""
        name = " ".join(x for x in (self.product, self.version) if x)
        return f"{name} (dom0)" if self.dom0 else name


def parse_inventory(text: str) -> dict[str, str]:
    """``KEY='value'`` lines -> {KEY: value}; other lines (blank, comments, junk) are skipped."""
    out: dict[str, str] = {}
    for line in text.splitlines():
        m = _LINE.match(line.strip())
        if m is None:
            continue
        value = m.group(2).strip()
        if len(value) >= 2 and value[0] == value[-1] and value[0] in "'\"":
            value = value[1:-1]
        out[m.group(1)] = value
    return out


def parse_release(text: str) -> tuple[Optional[str], Optional[str]]:
    """``XCP-ng release 8.2.1 (xenenterprise)`` -> ("XCP-ng", "8.2.1"); (None, None) if it is not one."""
    m = _RELEASE.match(text.strip().splitlines()[0] if text.strip() else "")
    return (m.group("product"), m.group("version")) if m else (None, None)


def detect(inventory: Optional[str], release: Optional[str]) -> Platform:
    """The platform the two files' texts describe (either may be None: not there, not readable)."""
    inv = parse_inventory(inventory or "")
    dom0 = bool(inv.get("INSTALLATION_UUID") and inv.get("CONTROL_DOMAIN_UUID"))
    rel_product, rel_version = parse_release(release or "")
    product = inv.get("PRODUCT_BRAND") or (rel_product if dom0 or rel_product else None)
    version = inv.get("PRODUCT_VERSION") or rel_version
    return Platform(product or None, version or None, dom0, inv.get("BUILD_NUMBER") or None)


def read(runner: CommandRunner) -> Platform:
    """The platform of the host ``runner`` reaches (this machine, or one over SSH)."""
    release = next((t for t in (runner.read_text(p) for p in RELEASE_FILES) if t), None)
    return detect(runner.read_text(INVENTORY), release)
