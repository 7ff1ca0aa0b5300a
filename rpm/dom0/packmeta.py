"""The metadata of a XenServer / XCP-ng supplemental pack: written, and checked when read back.

A pack is an ISO holding RPMs and two generations of metadata (docs/reference/dom0-runtime.md
says where each rule comes from):

- ``update.xml`` plus a yum repository (``repodata/``, with a comps group ``update``):
  what ``xe-install-supplemental-pack`` reads on XenServer 7.1 and later, XCP-ng 8.x and
  XenServer 8 -- it is ``xe update-upload`` then ``xe update-apply``.  xapi takes the
  ``update`` element's ``uuid``, ``name-label``, ``version`` (required), ``installation-size``,
  ``after-apply-guidance``, ``enforce-homogeneity``, ``key`` and the ``name-description``
  child; its precheck installs the package named by ``control`` (whose Requires state the
  product versions) and its apply installs the group ``@update``.
- ``XS-REPOSITORY`` and ``XS-PACKAGES``: the older format, still parsed by the host
  installer's library (python-libs ``xcp.repository``) and kept under
  /etc/xensource/installed-repos: ``repository`` with ``originator``, ``name``,
  ``product``, ``version`` (required) and ``build``, a ``description``, and ``requires``
  elements (originator, name, test, version); one ``package`` per RPM with label, type,
  size and md5, its file name as text.

Everything here is pure: the writers return text, ``check_pack`` reads a directory.
"""

from __future__ import annotations

import hashlib
import re
import uuid as uuidlib
import xml.etree.ElementTree as ET
from dataclasses import dataclass, field
from pathlib import Path

NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._+-]{0,63}$")
VERSION_RE = re.compile(r"^[0-9]+(\.[0-9]+){0,3}$")
TESTS = ("eq", "ne", "lt", "gt", "le", "ge")
UPDATE_GROUP = "update"
ISO_VOLUME_MAX = 32  # ISO 9660 volume identifier


class PackError(ValueError):
    """Bad pack input: the message names the field and what is allowed."""


@dataclass(frozen=True)
class Requirement:
    """A base product a pack needs: ``xs:main >= 8.2.0`` (XCP-ng reports itself as xs:main too)."""

    originator: str = "xs"
    name: str = "main"
    test: str = "ge"
    version: str = "8.2.0"


@dataclass(frozen=True)
class RpmFile:
    filename: str
    label: str  # the package's NAME
    size: int
    md5: str
    installed_size: int = 0


@dataclass
class PackInfo:
    name: str
    version: str
    description: str
    originator: str = "hvnet"
    product: str = "XenServer"
    build: str = ""
    uuid: str = ""
    requires: list[Requirement] = field(default_factory=lambda: [Requirement()])

    def __post_init__(self) -> None:
        if not NAME_RE.match(self.name):
            raise PackError(f"--name {self.name!r}: letters, digits and ._+- only, at most 64, no spaces")
        if not NAME_RE.match(self.originator):
            raise PackError(f"--originator {self.originator!r}: letters, digits and ._+- only, no spaces")
        if not VERSION_RE.match(self.version):
            raise PackError(f"--version {self.version!r}: numbers separated by dots, e.g. 1.2.0")
        if self.build and not NAME_RE.match(self.build):
            raise PackError(f"--build {self.build!r}: letters, digits and ._+- only")
        if not self.description.strip() or "\n" in self.description:
            raise PackError("--description: one non-empty line")
        for r in self.requires:
            if r.test not in TESTS or not VERSION_RE.match(r.version):
                raise PackError(f"requirement {r}: test one of {', '.join(TESTS)}, version like 8.2.0")
        if not self.uuid:
            # the same name and version give the same UUID: xapi refuses two updates with one UUID
            # and one update under two, so a rebuild must not mint a new one
            self.uuid = str(
                uuidlib.uuid5(uuidlib.NAMESPACE_URL, f"hvnet-pack:{self.originator}:{self.name}:{self.version}")
            )
        try:
            uuidlib.UUID(self.uuid)
        except ValueError:
            raise PackError(f"--uuid {self.uuid!r}: not a UUID") from None

    @property
    def control(self) -> str:
        return f"control-{self.name}"

    @property
    def volume_id(self) -> str:
        return f"{self.name}-{self.version}"[:ISO_VOLUME_MAX]


def md5_of(path: Path) -> str:
    h = hashlib.md5(usedforsecurity=False)
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _text(root: ET.Element) -> str:
    ET.indent(root)
    return ET.tostring(root, encoding="unicode", xml_declaration=False) + "\n"


def xs_repository(info: PackInfo) -> str:
    attrs = {"originator": info.originator, "name": info.name, "product": info.product, "version": info.version}
    if info.build:
        attrs["build"] = info.build
    root = ET.Element("repository", attrs)
    ET.SubElement(root, "description").text = info.description
    for r in info.requires:
        ET.SubElement(
            root, "requires", {"originator": r.originator, "name": r.name, "test": r.test, "version": r.version}
        )
    return _text(root)


def xs_packages(rpms: list[RpmFile]) -> str:
    root = ET.Element("packages")
    for rpm in rpms:
        attrs = {"label": rpm.label, "type": "rpm", "size": str(rpm.size), "md5": rpm.md5}
        ET.SubElement(root, "package", attrs).text = rpm.filename
    return _text(root)


def update_xml(info: PackInfo, rpms: list[RpmFile]) -> str:
    attrs = {
        "uuid": info.uuid,
        "name-label": info.name,
        "version": info.version,
        "control": info.control,
        "installation-size": str(sum(r.installed_size for r in rpms)),
        "after-apply-guidance": "",
        "enforce-homogeneity": "false",
    }
    root = ET.Element("update", attrs)
    ET.SubElement(root, "name-description").text = info.description
    return _text(root)


def groups_xml(labels: list[str]) -> str:
    """comps: the group ``update`` that ``pool_update.apply`` installs (``yum install @update``)."""
    root = ET.Element("comps")
    group = ET.SubElement(root, "group")
    ET.SubElement(group, "id").text = UPDATE_GROUP
    ET.SubElement(group, "name").text = UPDATE_GROUP
    ET.SubElement(group, "default").text = "true"
    ET.SubElement(group, "uservisible").text = "true"
    reqs = ET.SubElement(group, "packagelist")
    for label in labels:
        ET.SubElement(reqs, "packagereq", {"type": "mandatory"}).text = label
    return '<?xml version="1.0" encoding="UTF-8"?>\n' + _text(root)


def control_spec(info: PackInfo) -> str:
    """The control package: its Requires are the product versions, as dom0's release package
    provides them (``Provides: product-version = 8.2.1`` in xenserver-release/xcp-ng-release)."""
    ops = {"eq": "=", "lt": "<", "gt": ">", "le": "<=", "ge": ">="}
    reqs = "\n".join(f"Requires: product-version {ops[r.test]} {r.version}" for r in info.requires if r.test in ops)
    return f"""\
Name: {info.control}
Version: {info.version}
Release: 1
Summary: {info.name} supplemental pack control package
License: MIT
BuildArch: noarch
{reqs}
%description
Checks that the host runs a product version the {info.name} pack supports.
%files
"""


def _parse(path: Path, problems: list[str]) -> ET.Element | None:
    try:
        return ET.parse(path).getroot()
    except (OSError, ET.ParseError) as exc:
        problems.append(f"{path.name}: {exc}")
        return None


def _check_update(base: Path, problems: list[str]) -> str:
    root = _parse(base / "update.xml", problems)
    if root is None:
        return ""
    if root.tag != "update":
        problems.append("update.xml: the root element is not <update>")
    for attr in ("uuid", "name-label", "version", "control"):
        if not root.get(attr):
            problems.append(f"update.xml: <update> has no {attr}")
    try:
        uuidlib.UUID(root.get("uuid", ""))
    except ValueError:
        problems.append(f"update.xml: uuid {root.get('uuid')!r} is not a UUID")
    if not (root.get("installation-size") or "0").isdigit():
        problems.append("update.xml: installation-size is not a number")
    desc = root.find("name-description")
    if desc is None or not (desc.text or "").strip():
        problems.append("update.xml: no <name-description> text")
    return root.get("control", "")


def _check_repository(base: Path, problems: list[str]) -> None:
    root = _parse(base / "XS-REPOSITORY", problems)
    if root is None:
        return
    for attr in ("originator", "name", "product", "version"):
        if not root.get(attr):
            problems.append(f"XS-REPOSITORY: <repository> has no {attr}")
    if root.find("description") is None:
        problems.append("XS-REPOSITORY: no <description>")
    for req in root.findall("requires"):
        if req.get("test") not in TESTS:
            problems.append(f"XS-REPOSITORY: requires test {req.get('test')!r} is not one of {', '.join(TESTS)}")


def _check_packages(base: Path, problems: list[str]) -> set[str]:
    root = _parse(base / "XS-PACKAGES", problems)
    labels: set[str] = set()
    for pkg in [] if root is None else root.findall("package"):
        fname = (pkg.text or "").strip()
        labels.add(pkg.get("label", ""))
        path = base / fname
        if pkg.get("type") != "rpm" or not path.is_file():
            problems.append(f"XS-PACKAGES: {fname!r} is not an rpm on the disc")
            continue
        if pkg.get("size") != str(path.stat().st_size) or pkg.get("md5") != md5_of(path):
            problems.append(f"XS-PACKAGES: size or md5 of {fname} does not match the file")
    return labels


def check_pack(base: Path) -> list[str]:
    """Every rule above, checked on an unpacked pack; [] when it keeps them all."""
    problems: list[str] = []
    control = _check_update(base, problems)
    _check_repository(base, problems)
    labels = _check_packages(base, problems)
    if control and control not in labels:
        problems.append(f"update.xml: control package {control!r} is not on the disc")
    if not (base / "repodata" / "repomd.xml").is_file():
        problems.append("repodata/repomd.xml is missing: xapi serves the pack as a yum repository")
        return problems
    repomd = ET.parse(base / "repodata" / "repomd.xml").getroot()
    ns = {"r": "http://linux.duke.edu/metadata/repo"}
    kinds = {d.get("type"): d.find("r:location", ns) for d in repomd.findall("r:data", ns)}
    if "group" not in kinds:
        problems.append("repodata: no group file (the comps group 'update' is what xapi installs)")
    for kind, loc in kinds.items():
        href = "" if loc is None else loc.get("href", "")
        if not href.endswith((".xml", ".gz", ".bz2")):
            problems.append(f"repodata: {kind} at {href!r}: plain, gz or bz2 only (dom0's yum 3.4 predates zstd)")
    return problems
