"""The host<->guest channel's wire format and the multiplexer's bookkeeping (pure).

Messages are JSON objects, one per line (see :mod:`appliance.lab.vm.guest.agent`
for the vocabulary).  The multiplexer lets many host clients share the one
virtio-serial port: each client numbers its processes from 1 in its own
namespace, and :class:`IdMap` maps those to the ids the guest sees.  Nothing
here does I/O, so the rules are unit-tested without a guest.
"""

from __future__ import annotations

import json
from collections.abc import Hashable, Iterator
from typing import Any

PORT_NAME = "org.hvnet.agent"  # the virtio-serial port name the guest looks for
PROTOCOL_VERSION = 1
# Exit code given to processes the guest lost (destroyed, rebooted, agent restarted).
EXIT_LOST = -255
MAX_LINE = 16 << 20  # a line longer than this is garbage, not a message


def encode(msg: dict[str, Any]) -> bytes:
    """One message as one line."""
    return json.dumps(msg, separators=(",", ":")).encode() + b"\n"


class LineDecoder:
    """Splits a byte stream into messages, skipping what is not a message.

    A connection that opens in the middle of a line (the guest was writing
    when the host reconnected) yields a fragment; it is dropped and counted,
    never raised, so one bad line cannot stop the channel.
    """

    def __init__(self) -> None:
        self.buf = bytearray()
        self.skipped = 0

    def feed(self, data: bytes) -> Iterator[dict[str, Any]]:
        self.buf += data
        while True:
            nl = self.buf.find(b"\n")
            if nl < 0:
                if len(self.buf) > MAX_LINE:
                    self.buf.clear()
                    self.skipped += 1
                return
            line = bytes(self.buf[:nl])
            del self.buf[: nl + 1]
            if not line.strip():
                continue
            try:
                msg = json.loads(line)
            except ValueError:
                self.skipped += 1
                continue
            if isinstance(msg, dict):
                yield msg
            else:
                self.skipped += 1

    def reset(self) -> None:
        self.buf.clear()


class IdMap:
    """Client-local ids <-> guest-wide ids, for any number of clients.

    ``owner`` is any hashable that names a client connection.  Guest ids are
    never reused while the multiplexer lives, so a late event for a finished
    process can never be delivered to a newer one.
    """

    def __init__(self) -> None:
        self._next = 1
        self._to_guest: dict[tuple[Hashable, Any], int] = {}
        self._to_client: dict[int, tuple[Hashable, Any]] = {}

    def allocate(self, owner: Hashable, client_id: Any) -> int:
        """A fresh guest id for ``owner``'s ``client_id``; ValueError if that id is in use."""
        key = (owner, client_id)
        if key in self._to_guest:
            raise ValueError(f"id {client_id!r} is already running")
        gid = self._next
        self._next += 1
        self._to_guest[key] = gid
        self._to_client[gid] = key
        return gid

    def guest_id(self, owner: Hashable, client_id: Any) -> int | None:
        return self._to_guest.get((owner, client_id))

    def client_of(self, gid: int) -> tuple[Hashable, Any] | None:
        return self._to_client.get(gid)

    def release(self, gid: int) -> tuple[Hashable, Any] | None:
        key = self._to_client.pop(gid, None)
        if key is not None:
            self._to_guest.pop(key, None)
        return key

    def owned_by(self, owner: Hashable) -> list[int]:
        return [gid for gid, (o, _) in self._to_client.items() if o == owner]

    def release_all(self) -> list[tuple[int, Hashable, Any]]:
        """Forget every mapping (the guest lost its processes); returns what was live."""
        live = [(gid, owner, cid) for gid, (owner, cid) in self._to_client.items()]
        self._to_client.clear()
        self._to_guest.clear()
        return live

    def __len__(self) -> int:
        return len(self._to_client)


def exit_status(code: int) -> int:
    """A shell-style exit status for a guest exit code: 128+N when killed by signal N."""
    if code == EXIT_LOST:
        return 255
    if code < 0:
        return 128 + (-code)
    return code
