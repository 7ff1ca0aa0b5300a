"""A native OpenFlow 1.3 channel to a bridge, for the one thing ``ovs-ofctl`` cannot batch: meters.

``ovs-ofctl`` (3.1) takes one meter per process and cannot put meters in a
bundle, so 1000 VIFs' meters would cost 1000 processes (seconds; over SSH,
1000 round trips).  This module speaks the few OpenFlow 1.3 messages needed
-- HELLO, METER_MOD, BARRIER -- on the bridge's management socket: every
meter mod of a sync is written at once, one barrier closes them, and the
switch's ERROR replies are matched to the mods by transaction id.

On a remote host the management socket is reached through the host's SSH
master (a forwarded unix socket), so no program runs there at all.
"""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass
from pathlib import Path

from appliance.core.errors import HvnetError

OFP_VERSION = 0x04  # OpenFlow 1.3: the first with meters
OFPT_HELLO, OFPT_ERROR, OFPT_ECHO_REQUEST, OFPT_ECHO_REPLY = 0, 1, 2, 3
OFPT_BARRIER_REQUEST, OFPT_BARRIER_REPLY, OFPT_METER_MOD = 20, 21, 29
OFPMC_ADD, OFPMC_MODIFY, OFPMC_DELETE = 0, 1, 2
OFPMF_KBPS, OFPMF_BURST, OFPMF_STATS = 1, 4, 8
OFPMBT_DROP = 1
_HEADER = struct.Struct("!BBHI")
_ERROR_NAMES = {  # (type, code) -> name, for the meter errors a sync can meet
    (12, 0): "OFPMMFC_UNKNOWN",
    (12, 1): "OFPMMFC_METER_EXISTS",
    (12, 2): "OFPMMFC_INVALID_METER",
    (12, 3): "OFPMMFC_UNKNOWN_METER",
    (12, 5): "OFPMMFC_INVALID_FLAGS",
    (12, 6): "OFPMMFC_INVALID_RATE",
    (12, 7): "OFPMMFC_INVALID_BURST",
    (12, 8): "OFPMMFC_BAD_BAND",
    (12, 10): "OFPMMFC_OUT_OF_METERS",
    (12, 11): "OFPMMFC_OUT_OF_BANDS",
    (0, 0): "OFPHFC_INCOMPATIBLE",
}


@dataclass(frozen=True)
class MeterMod:
    """One meter change: ``command`` add/modify/delete; a drop band of ``rate_kbps`` and ``burst_kbit``."""

    command: int
    meter_id: int
    rate_kbps: int = 0
    burst_kbit: int = 0


def encode_meter_mod(mod: MeterMod, xid: int) -> bytes:
    """OFPT_METER_MOD: kbps, burst and stats flags, one drop band (deletes carry no band)."""
    flags = OFPMF_KBPS | OFPMF_BURST | OFPMF_STATS
    body = struct.pack("!HHI", mod.command, flags, mod.meter_id)
    if mod.command != OFPMC_DELETE:
        body += struct.pack("!HHII4x", OFPMBT_DROP, 16, mod.rate_kbps, mod.burst_kbit)
    return _HEADER.pack(OFP_VERSION, OFPT_METER_MOD, 8 + len(body), xid) + body


def error_name(etype: int, code: int) -> str:
    return _ERROR_NAMES.get((etype, code), f"OpenFlow error type {etype} code {code}")


class Channel:
    """One OpenFlow connection to a unix socket; :meth:`meter_mods` sends a batch and waits for its barrier."""

    def __init__(self, path: str | Path, timeout: float = 30.0) -> None:
        self.path = str(path)
        self.timeout = timeout

    def meter_mods(self, mods: list[MeterMod]) -> dict[MeterMod, str]:
        """Send ``mods`` in order and a barrier; the mods the switch refused, with the error's name."""
        if not mods:
            return {}
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        sock.settimeout(self.timeout)
        try:
            try:
                sock.connect(self.path)
            except OSError as exc:
                raise HvnetError(f"cannot open the OpenFlow socket {self.path}: {exc}") from None
            self._hello(sock)
            by_xid = {i + 1: m for i, m in enumerate(mods)}
            barrier = len(mods) + 1
            data = b"".join(encode_meter_mod(m, x) for x, m in by_xid.items())
            sock.sendall(data + _HEADER.pack(OFP_VERSION, OFPT_BARRIER_REQUEST, 8, barrier))
            return self._until_barrier(sock, by_xid, barrier)
        except (OSError, struct.error) as exc:
            raise HvnetError(f"OpenFlow channel to {self.path} failed: {exc}") from None
        finally:
            sock.close()

    def _hello(self, sock: socket.socket) -> None:
        sock.sendall(_HEADER.pack(OFP_VERSION, OFPT_HELLO, 8, 0))
        version, mtype, _, _ = _read(sock)[0]
        if mtype != OFPT_HELLO:
            raise HvnetError(f"the switch at {self.path} did not answer OpenFlow's HELLO")
        if version < OFP_VERSION:
            raise HvnetError(
                f"the bridge at {self.path} does not speak OpenFlow 1.3 (meters)",
                hint="add OpenFlow13 to the bridge's protocols (hvnet apply does so for meter policing)",
            )

    def _until_barrier(self, sock: socket.socket, by_xid: dict[int, MeterMod], barrier: int) -> dict[MeterMod, str]:
        failed: dict[MeterMod, str] = {}
        while True:
            (_, mtype, _, xid), body = _read(sock)
            if mtype == OFPT_ERROR:
                etype, code = struct.unpack("!HH", body[:4])
                if xid in by_xid:
                    failed[by_xid[xid]] = error_name(etype, code)
                else:
                    raise HvnetError(f"the switch refused the OpenFlow session: {error_name(etype, code)}")
            elif mtype == OFPT_ECHO_REQUEST:
                sock.sendall(_HEADER.pack(OFP_VERSION, OFPT_ECHO_REPLY, 8 + len(body), xid) + body)
            elif mtype == OFPT_BARRIER_REPLY and xid == barrier:
                return failed


def _read(sock: socket.socket) -> tuple[tuple[int, int, int, int], bytes]:
    head = _exactly(sock, 8)
    header = _HEADER.unpack(head)
    length = header[2]
    if length < 8:
        raise HvnetError(f"malformed OpenFlow message (length {length})")
    return header, _exactly(sock, length - 8)


def _exactly(sock: socket.socket, n: int) -> bytes:
    buf = b""
    while len(buf) < n:
        chunk = sock.recv(n - len(buf))
        if not chunk:
            raise HvnetError("the switch closed the OpenFlow connection")
        buf += chunk
    return buf
