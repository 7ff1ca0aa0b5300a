"""The host<->guest channel's wire format and the multiplexer's bookkeeping (pure).

Messages are JSON objects, one per line (see :mod:`appliance.lab.vm.guest.agent`
for the vocabulary).  The multiplexer lets many host clients share the one
virtio-serial port: each client numbers its processes from 1 in its own
namespace, and :class:`IdMap` maps those to the ids the guest sees.  Nothing
here does I/O, so the rules are unit-tested without a guest.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Hashable, Iterator
from typing import Any

PORT_NAME = "org.hvnet.agent"  # the virtio-serial port name the guest looks for
PROTOCOL_VERSION = 1
# Exit code given to processes the guest lost (destroyed, rebooted, agent restarted).
EXIT_LOST = -255
# The largest real message is an "out" event with 32 KiB of output (about 44 KB of JSON);
# a line longer than this is garbage, or a peer that never sends a newline.
MAX_LINE = 4 << 20
# What may wait for a peer that does not read: more, and the peer is disconnected.
MAX_PENDING = 32 << 20


def encode(msg: dict[str, Any]) -> bytes:
    """One message as one line."""
    return json.dumps(msg, separators=(",", ":")).encode() + b"\n"


class LineDecoder:
    """Splits a byte stream into messages, skipping what is not a message.

    A connection that opens in the middle of a line (the guest was writing
    when the host reconnected) yields a fragment; it is dropped and counted,
    never raised, so one bad line cannot stop the channel.  Neither can a
    line that is not JSON, not UTF-8, nested too deep or not an object.  The
    buffer never holds more than :data:`MAX_LINE` bytes: the rest of a longer
    line is discarded up to its newline.  ``on_skip`` hears why each line
    was dropped (the channel logs it).
    """

    def __init__(self, on_skip: Callable[[str], None] | None = None, max_line: int = MAX_LINE) -> None:
        self.buf = bytearray()
        self.skipped = 0
        self.max_line = max_line
        self.discarding = False  # inside a line that was too long: drop up to its newline
        self.on_skip = on_skip

    def feed(self, data: bytes) -> Iterator[dict[str, Any]]:
        self.buf += data
        while True:
            nl = self.buf.find(b"\n")
            if nl < 0:
                if self.discarding:
                    self.buf.clear()
                elif len(self.buf) > self.max_line:
                    self._skip(f"a line longer than {self.max_line} bytes (dropped up to its newline)")
                    self.buf.clear()
                    self.discarding = True
                return
            line = bytes(self.buf[:nl])
            del self.buf[: nl + 1]
            if self.discarding:
                self.discarding = False
                continue
            if len(line) > self.max_line:
                self._skip(f"a line of {len(line)} bytes (at most {self.max_line})")
                continue
            msg = self._decode(line)
            if msg is not None:
                yield msg

    def _decode(self, line: bytes) -> dict[str, Any] | None:
        if not line.strip():
            return None
        try:
            msg = json.loads(line)
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            self._skip(f"not a JSON line ({type(exc).__name__}): {line[:80]!r}")
            return None
        if not isinstance(msg, dict):
            self._skip(f"a JSON {type(msg).__name__}, not an object: {line[:80]!r}")
            return None
        return msg

    def _skip(self, why: str) -> None:
        self.skipped += 1
        if self.on_skip is not None:
            self.on_skip(why)

    def reset(self) -> None:
        self.buf.clear()
        self.discarding = False


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
