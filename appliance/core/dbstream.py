"""The byte stream a one-shot OVSDB read speaks JSON-RPC on (:func:`appliance.core.ovsdb.exchange`).

A local server's ``unix:`` socket is spoken to directly.  python-ovs's stream
does no more for it, but loading that stream -- its poller, its logging,
ssl -- is 9 ms of every ``hvnet status``.  ``tcp:`` and ``ssl:`` remotes
(TCP_NODELAY, DSCP, certificates) and a socket path too long for a socket
address (python-ovs goes round through ``/proc/self/fd``) take python-ovs's
stream as before.  Both answer the same calls, in python-ovs's terms: an
error is an errno value, a send that cannot go now is ``-EAGAIN``, a read
that finds nothing is ``(EAGAIN, b"")`` and the end of the stream ``(0, b"")``.
"""

from __future__ import annotations

import errno
import os
import select
import socket
from typing import Any, Protocol

_SOCKET_PATH_MAX = 107  # the bytes of a path a unix socket address holds, its terminating NUL aside


class Stream(Protocol):
    def run(self) -> None: ...
    def send(self, data: bytes) -> int: ...
    def recv(self, n: int) -> tuple[int, bytes]: ...
    def wait(self, readable: bool, timeout_ms: int) -> None: ...
    def close(self) -> None: ...


def open_stream(remote: str, timeout: float) -> tuple[int, Stream | None]:
    """``(0, stream)`` connected to ``remote`` (an OVSDB remote: ``unix:``, ``tcp:``, ``ssl:``) within
    ``timeout`` seconds, or ``(errno, None)``."""
    if remote.startswith("unix:"):
        import ovs.dirs
        import ovs.util

        path = ovs.util.abs_file_name(ovs.dirs.RUNDIR, remote[len("unix:") :])  # relative: to OVS's run directory
        if path is not None and len(os.fsencode(path)) <= _SOCKET_PATH_MAX:
            return _UnixStream.open(path)
    return _OvsStream.open(remote, timeout)


class _UnixStream:
    """A unix socket, non-blocking; connecting to a local server is done or refused at once."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock

    @classmethod
    def open(cls, path: str) -> tuple[int, Stream | None]:
        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        except OSError as exc:
            return exc.errno or errno.EPROTO, None
        try:
            sock.setblocking(False)
            sock.connect(path)
        except OSError as exc:
            if exc.errno != errno.EINPROGRESS:
                sock.close()
                return exc.errno or errno.EPROTO, None
        return 0, cls(sock)

    def run(self) -> None:
        """Nothing to drive (an SSL stream's handshake is)."""

    def send(self, data: bytes) -> int:
        try:
            return self._sock.send(data)
        except OSError as exc:
            return -(exc.errno or errno.EPROTO)

    def recv(self, n: int) -> tuple[int, bytes]:
        try:
            return 0, self._sock.recv(n)
        except OSError as exc:
            return exc.errno or errno.EPROTO, b""

    def wait(self, readable: bool, timeout_ms: int) -> None:
        """Until the socket can be read (or written), or ``timeout_ms`` passes."""
        poll = select.poll()
        poll.register(self._sock, select.POLLIN if readable else select.POLLOUT)
        poll.poll(timeout_ms)

    def close(self) -> None:
        self._sock.close()


class _OvsStream:
    """python-ovs's stream (``tcp:``, ``ssl:``, a long ``unix:`` path), loaded when one is opened."""

    def __init__(self, stream: Any) -> None:
        self._stream = stream

    @classmethod
    def open(cls, remote: str, timeout: float) -> tuple[int, Stream | None]:
        import ovs.stream

        err, stream = ovs.stream.Stream.open(remote)
        if not err:
            err, stream = ovs.stream.Stream.open_block((err, stream), int(timeout * 1000))
        return (err, None) if err else (0, cls(stream))

    def run(self) -> None:
        self._stream.run()

    def send(self, data: bytes) -> int:
        return int(self._stream.send(data))

    def recv(self, n: int) -> tuple[int, bytes]:
        err, data = self._stream.recv(n)
        return err, data

    def wait(self, readable: bool, timeout_ms: int) -> None:
        import ovs.poller

        poller = ovs.poller.Poller()
        self._stream.run_wait(poller)
        if readable:
            self._stream.recv_wait(poller)
        else:
            self._stream.send_wait(poller)
        poller.timer_wait(timeout_ms)
        poller.block()

    def close(self) -> None:
        self._stream.close()
