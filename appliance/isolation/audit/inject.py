"""The audit's frames: ARP probes put into a switch as if a VIF had sent them.

Everything here is pure: the bytes of each frame, the capture filter that keeps
only them, the OpenFlow packet-out lines that inject them.  What a VM sees is
exactly one ARP who-has per probe::

    Ethernet  dst ff:ff:ff:ff:ff:ff  src = the sender VIF's MAC
              [802.1Q tag, only for a tagged probe on a trunk VIF]
    ARP       who-has, sender MAC = the VIF's MAC, sender address 0.0.0.0,
              target MAC = the mark 68:76:RR:RR:VV:VV, target address 192.0.2.K

``RR:RR`` is a number drawn for the audit (frames of an earlier or a
concurrent audit do not count), ``VV:VV`` the VLAN the probe was sent in
(``ff:ff`` untagged) and ``K`` the frame's kind: 1 a probe, 254 a positive
control, 255 a closing control, 253 a link closing (an audit across hosts: sent
out of a host's uplinks after its probes; its VLAN field numbers the host).  Sender address 0.0.0.0 (an RFC 5227 probe)
updates no neighbour cache, and 192.0.2.0/24 is TEST-NET-1: no VM owns such an
address, so none answers.  The capture filter matches the mark, so no tenant
frame is ever written to a pcap.
"""

from __future__ import annotations

import ipaddress
import re
import struct
from dataclasses import dataclass

from appliance.core import ovsfeatures
from appliance.isolation.pcap import ArpFrame

MARK_NET = ipaddress.IPv4Network("192.0.2.0/24")  # TEST-NET-1 (RFC 5737)
MARK_PREFIX = b"\x68\x76"  # "hv"
CONTROL_MAC = "02:68:76:6e:65:74"  # the controls' sender (as the lab's traffic method)
KIND_PROBE, KIND_LINK, KIND_CONTROL, KIND_CLOSING = 1, 253, 254, 255
UNTAGGED = 0xFFFF
MIN_OVS = ovsfeatures.FEATURES["packet-out"].since  # packet-out's field=value syntax, bundles of packet-outs
_VERSION = re.compile(r"Open vSwitch\)? ([0-9]{1,3})\.([0-9]{1,3})")


@dataclass(frozen=True)
class Mark:
    """What a captured frame says about itself: its audit, VLAN and kind."""

    run: int
    vlan: int | None  # the VLAN the probe was sent in; None untagged
    kind: int


def frame(src_mac: str, run: int, kind: int, vlan: int | None = None, send_tagged: bool = False) -> bytes:
    """One marked broadcast ARP who-has (60 bytes untagged, 64 tagged).

    ``vlan`` is recorded in the mark; ``send_tagged`` also puts it in an
    802.1Q header (a tagged probe entering a trunk port).
    """
    if not 0 <= run <= 0xFFFF:
        raise ValueError(f"run number {run} out of range")
    if vlan is not None and not 0 <= vlan <= 4095:
        raise ValueError(f"VLAN {vlan} out of range")
    mac = bytes.fromhex(src_mac.replace(":", ""))
    if len(mac) != 6:
        raise ValueError(f"not a MAC address: {src_mac!r}")
    mark = bytes.fromhex(mark_mac(run, vlan).replace(":", ""))
    tag = struct.pack("!HH", 0x8100, vlan) if send_tagged and vlan is not None else b""
    arp = struct.pack("!HHBBH", 1, 0x0800, 6, 4, 1) + mac + bytes(4) + mark + (MARK_NET[kind]).packed
    body = b"\xff" * 6 + mac + tag + b"\x08\x06" + arp
    return body + bytes(max(0, 60 + len(tag) - len(body)))


def mark_mac(run: int, vlan: int | None) -> str:
    """The ARP target MAC that marks a frame of audit ``run`` sent in ``vlan`` (None: untagged)."""
    raw = MARK_PREFIX + struct.pack("!HH", run, UNTAGGED if vlan is None else vlan)
    return ":".join(f"{b:02x}" for b in raw)


def mark_of(f: ArpFrame) -> Mark | None:
    """The mark of a captured frame, or None when it is not an audit's frame."""
    if f.op != 1 or f.sender_ip != "0.0.0.0" or ipaddress.IPv4Address(f.target_ip) not in MARK_NET:
        return None
    raw = bytes.fromhex(f.target_mac.replace(":", "")) if f.target_mac else b""
    if len(raw) != 6 or raw[:2] != MARK_PREFIX:
        return None
    run, vlan = struct.unpack("!HH", raw[2:])
    return Mark(run, None if vlan == UNTAGGED else vlan, int(ipaddress.IPv4Address(f.target_ip)) & 0xFF)


def capture_filter(run: int) -> str:
    """A BPF filter keeping only this audit's frames, tagged or not: sender 0.0.0.0, target in
    192.0.2.0/24, target MAC starting with the mark and the run number."""
    mark = f"arp[6:2] = 1 and arp[14:4] = 0 and arp[24:2] = 0xc000 and arp[26:1] = 2 and arp[18:4] = 0x6876{run:04x}"
    return f"(arp and {mark}) or (vlan and arp and {mark})"


def packet_out(in_port: int | str, data: bytes, actions: str) -> str:
    """A packet-out in ``ovs-ofctl``'s syntax (a ``packet-out`` command's argument, a bundle file's line).

    ``in_port`` is an OpenFlow port number (a VIF) or ``controller``.
    """
    return f"in_port={in_port},packet={data.hex()},actions={actions}"


def probe_line(ofport: int, data: bytes) -> str:
    """The probe as if the VIF at ``ofport`` sent it: through table 0 (hvnet's meter and TAP flows, a
    XenServer's anti-spoofing flows), then whatever those flows do -- NORMAL with the port's VLAN settings."""
    return packet_out(ofport, data, "resubmit(,0)")


def control_line(ofports: list[int], data: bytes) -> str:
    """A control put straight onto listeners' ports (no table, no VLAN logic)."""
    return packet_out("controller", data, ",".join(f"output:{p}" for p in ofports))


def bundle(lines: list[str]) -> str:
    """A file for ``ovs-ofctl bundle``: every packet-out of one bridge in one OpenFlow transaction."""
    return "".join(f"packet-out {line}\n" for line in lines)


def ovs_version(text: str) -> tuple[int, int] | None:
    """``ovs-ofctl --version``'s first line -> (major, minor), None when it says no version."""
    m = _VERSION.search(text)
    return (int(m.group(1)), int(m.group(2))) if m else None


def version_problem(text: str) -> str | None:
    """Why this switch's ``ovs-ofctl`` cannot inject the audit's frames, or None when it can."""
    v = ovs_version(text)
    if v is None:
        return f"cannot tell the Open vSwitch version from ovs-ofctl --version ({text.strip()[:80]!r})"
    if v < MIN_OVS:
        return (
            f"Open vSwitch {v[0]}.{v[1]} is older than {MIN_OVS[0]}.{MIN_OVS[1]}: its packet-out takes another "
            "syntax and prints traces differently; the audit is not supported there"
        )
    return None
