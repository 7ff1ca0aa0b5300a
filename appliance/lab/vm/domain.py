"""libvirt domain XML for a lab guest (pure: no libvirt connection needed).

Each NIC is ``<interface type='bridge'>`` with ``<virtualport
type='openvswitch'/>`` and a ``<vlan>`` element, so that libvirt itself adds
the ``vnetN`` port to OVS with its tag and its ``external_ids`` (``vm-id``,
``iface-id``, ``attached-mac``, ``iface-status``) -- the behaviour hvnet
must cope with on a real KVM host.  The guest boots the probe image directly
(kernel + initramfs, no disk); hvnet reaches it over a virtio-serial channel,
never over the network being tested; a second channel,
``org.qemu.guest_agent.0``, carries libvirt's own guest agent (Debian's ``qemu-ga`` in the image).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from dataclasses import dataclass, field

from appliance.lab.vm.protocol import PORT_NAME

CHANNEL_NAME = PORT_NAME
GA_CHANNEL_NAME = "org.qemu.guest_agent.0"  # qemu-ga's port, as libvirt's qemu-agent-command expects it


@dataclass(frozen=True)
class Nic:
    """One guest NIC as libvirt plugs it."""

    bridge: str
    mac: str
    tag: int | None = None
    trunks: tuple[int, ...] = ()
    vlan_mode: str | None = None  # OVS vlan_mode; libvirt knows trunk and native-tagged/untagged


@dataclass(frozen=True)
class DomainSpec:
    name: str
    uuid: str
    domain_type: str  # "kvm" or "qemu" (TCG)
    kernel: str
    initrd: str
    cmdline: str
    channel: str  # unix socket path QEMU binds for the agent channel
    console_log: str
    memory_mib: int = 256
    vcpus: int = 1
    nics: tuple[Nic, ...] = field(default_factory=tuple)


def vlan_element(nic: Nic) -> ET.Element | None:
    """libvirt's ``<vlan>`` for a NIC, or None for a port carrying every VLAN.

    libvirt writes ``tag=`` for one untrunked tag, ``trunks=`` (plus
    ``vlan_mode=native-*`` for a nativeMode tag) otherwise.
    """
    if nic.tag is None and not nic.trunks:
        return None
    trunk = bool(nic.trunks) or nic.vlan_mode in ("trunk", "native-tagged", "native-untagged")
    vlan = ET.Element("vlan", {"trunk": "yes"} if trunk else {})
    if nic.tag is not None:
        attrs = {"id": str(nic.tag)}
        if nic.vlan_mode in ("native-tagged", "native-untagged"):
            attrs["nativeMode"] = nic.vlan_mode.split("-")[1]
        ET.SubElement(vlan, "tag", attrs)
    for t in nic.trunks:
        if t != nic.tag:
            ET.SubElement(vlan, "tag", {"id": str(t)})
    return vlan


def interface_element(nic: Nic) -> ET.Element:
    iface = ET.Element("interface", {"type": "bridge"})
    ET.SubElement(iface, "mac", {"address": nic.mac})
    ET.SubElement(iface, "source", {"bridge": nic.bridge})
    ET.SubElement(iface, "virtualport", {"type": "openvswitch"})
    vlan = vlan_element(nic)
    if vlan is not None:
        iface.append(vlan)
    ET.SubElement(iface, "model", {"type": "virtio"})
    return iface


def interface_xml(nic: Nic) -> str:
    """The ``<interface>`` alone, for ``virsh attach-interface --config``-style hot-plugging."""
    return ET.tostring(interface_element(nic), encoding="unicode")


def domain_xml(spec: DomainSpec) -> str:
    """The whole ``<domain>`` document for ``spec``."""
    dom = ET.Element("domain", {"type": spec.domain_type})
    ET.SubElement(dom, "name").text = spec.name
    ET.SubElement(dom, "uuid").text = spec.uuid
    ET.SubElement(dom, "title").text = "hvnet lab guest"
    ET.SubElement(dom, "memory", {"unit": "MiB"}).text = str(spec.memory_mib)
    ET.SubElement(dom, "vcpu").text = str(spec.vcpus)
    os_el = ET.SubElement(dom, "os")
    ET.SubElement(os_el, "type", {"arch": "x86_64", "machine": "pc"}).text = "hvm"
    ET.SubElement(os_el, "kernel").text = spec.kernel
    ET.SubElement(os_el, "initrd").text = spec.initrd
    ET.SubElement(os_el, "cmdline").text = spec.cmdline
    # ACPI: the PCI bus supports hot-plugging only with it (virsh attach/detach-interface)
    ET.SubElement(ET.SubElement(dom, "features"), "acpi")
    ET.SubElement(dom, "on_poweroff").text = "destroy"
    ET.SubElement(dom, "on_reboot").text = "restart"
    ET.SubElement(dom, "on_crash").text = "destroy"
    if spec.domain_type == "kvm":
        ET.SubElement(dom, "cpu", {"mode": "host-passthrough"})
    devices = ET.SubElement(dom, "devices")
    for nic in spec.nics:
        devices.append(interface_element(nic))
    serial = ET.SubElement(devices, "serial", {"type": "file"})
    ET.SubElement(serial, "source", {"path": spec.console_log})
    ET.SubElement(serial, "target", {"port": "0"})
    chan = ET.SubElement(devices, "channel", {"type": "unix"})
    ET.SubElement(chan, "source", {"mode": "bind", "path": spec.channel})
    ET.SubElement(chan, "target", {"type": "virtio", "name": CHANNEL_NAME})
    # The guest agent's channel: libvirt picks the socket path and connects to it itself.
    ga = ET.SubElement(devices, "channel", {"type": "unix"})
    ET.SubElement(ga, "source", {"mode": "bind"})
    ET.SubElement(ga, "target", {"type": "virtio", "name": GA_CHANNEL_NAME})
    ET.SubElement(devices, "memballoon", {"model": "none"})
    # QEMU runs as root for lab guests: its channel socket and console log
    # live in the lab's root-owned run directory, and nothing is relabelled.
    sec = ET.SubElement(dom, "seclabel", {"type": "static", "model": "dac", "relabel": "no"})
    ET.SubElement(sec, "label").text = "+0:+0"
    ET.indent(dom)
    return ET.tostring(dom, encoding="unicode")
