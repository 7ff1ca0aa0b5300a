"""Garbage on the guest channel is logged and skipped: it never stops a reader.

Every end of the channel reads JSON lines from a peer it cannot trust to be
well-formed -- a guest agent that crashed mid-line, a broken build, a stray
client.  Here the real multiplexer, client, gexec and in-guest agent read from
real unix sockets whose other end is this test, writing lines that are not
JSON, not UTF-8, nested too deep, not objects, objects of the wrong shape or
an unknown type, and a line longer than the channel's limit; then a
well-formed exchange must still work.
"""

from __future__ import annotations

import base64
import json
import logging
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

from appliance.lab.vm import channel
from appliance.lab.vm.gexec import gexec_argv
from appliance.lab.vm.protocol import EXIT_LOST, MAX_LINE, LineDecoder, encode

AGENT = Path(channel.__file__).resolve().parent / "guest" / "agent.py"

NOT_MESSAGES = [
    b"not json at all",
    b'\xff\xfe{"ev": "hello"}',  # invalid UTF-8
    b"[" * 100_000,  # deeper than the JSON decoder recurses
    b"[1, 2]",
    b'"a string"',
    b'{"ev": "out", "id": 1, "data": "unterminated',
]
TOO_LONG = b"x" * (MAX_LINE + 100_000)  # sent without a newline, then the newline


def _lines(*items: bytes | dict[str, Any]) -> bytes:
    return b"".join(encode(i) if isinstance(i, dict) else i + b"\n" for i in items)


class Peer:
    """The test's end of a socket: JSON lines in, raw bytes out."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.sock.settimeout(10)
        self.buf = b""

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)

    def wait_for(self, wanted: Callable[[dict[str, Any]], bool]) -> dict[str, Any]:
        """The first message that ``wanted`` accepts (others are skipped)."""
        while True:
            while b"\n" in self.buf:
                line, self.buf = self.buf.split(b"\n", 1)
                msg = json.loads(line) if line.strip() else None
                if isinstance(msg, dict) and wanted(msg):
                    return msg
            data = self.sock.recv(65536)
            assert data, "the other end closed the connection"
            self.buf += data


def _listen(path: Path) -> socket.socket:
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    srv.bind(str(path))
    srv.listen(4)
    srv.settimeout(10)
    return srv


# -- the decoder ---------------------------------------------------------------------------


def test_decoder_skips_every_kind_of_garbage_and_says_why() -> None:
    reasons: list[str] = []
    d = LineDecoder(on_skip=reasons.append, max_line=200_000)
    assert list(d.feed(_lines(*NOT_MESSAGES))) == []
    assert d.skipped == len(NOT_MESSAGES) and len(reasons) == len(NOT_MESSAGES)
    assert "RecursionError" in reasons[2] and "UnicodeDecodeError" in reasons[1] and "list" in reasons[3]
    for _ in range(50):  # 500 kB of one line without a newline: the buffer stays under the limit
        assert list(d.feed(b"y" * 10_000)) == []
        assert len(d.buf) <= 210_000
    assert list(d.feed(b'tail of the long line\n{"ev": "pong", "seq": 1}\n')) == [{"ev": "pong", "seq": 1}]
    assert "longer than 200000 bytes" in reasons[len(NOT_MESSAGES)]
    assert d.skipped == len(NOT_MESSAGES) + 1  # the long line counts once


# -- the multiplexer -------------------------------------------------------------------------


@pytest.fixture()
def mux(tmp_path: Path) -> Iterator[tuple[Peer, Path, channel.Mux]]:
    """A multiplexer whose guest is this test: (the guest's end, the clients' socket, the mux)."""
    chan_srv = _listen(tmp_path / "g.chan")
    m = channel.Mux(str(tmp_path / "g.chan"), str(tmp_path / "g.sock"))
    thread = threading.Thread(target=m.serve, daemon=True)
    thread.start()
    guest = Peer(chan_srv.accept()[0])
    guest.wait_for(lambda msg: msg.get("op") == "hello")
    guest.send(encode({"ev": "hello", "version": 1, "boot_s": 1.0, "instance": "i1"}))
    try:
        yield guest, tmp_path / "g.sock", m
    finally:
        m.stopping = True
        thread.join(5)
        guest.sock.close()
        chan_srv.close()
        assert not thread.is_alive()


def _serve_one_spawn(guest: Peer, output: bytes) -> None:
    """Play the guest agent for one spawn: its output, then exit 0."""
    spawn = guest.wait_for(lambda msg: msg.get("op") == "spawn")
    out = {"ev": "out", "id": spawn["id"], "fd": 1, "data": base64.b64encode(output).decode()}
    guest.send(_lines(out, {"ev": "exit", "id": spawn["id"], "code": 0, "cpu_s": 0.0}))


def test_mux_survives_a_hostile_guest(mux: tuple[Peer, Path, channel.Mux], caplog) -> None:
    guest, sock, m = mux
    caplog.set_level(logging.WARNING, logger="hvnet.vm.mux")
    guest.send(_lines(*NOT_MESSAGES))
    guest.send(_lines({"ev": "pong", "seq": [1]}, {"ev": "pong", "seq": {"a": 1}}, {"ev": "out", "id": [1]},
                      {"ev": "no-such-event", "id": 1}, {"ev": "exit", "id": {"x": 1}}, {"ev": 7}))  # fmt: skip
    guest.send(TOO_LONG)
    guest.send(b"\n")
    with channel.GuestClient(sock) as client:
        client.wait_ready(10)
        proc = client.spawn(["true"])
        _serve_one_spawn(guest, b"still here\n")
        assert proc.wait(10) == 0 and proc.stdout == b"still here\n"
    text = caplog.text
    assert "the guest sent a line longer than" in text and "unknown event 'no-such-event'" in text
    assert "RecursionError" in text and "UnicodeDecodeError" in text
    assert len(m.ids) == 0


def test_mux_survives_a_hostile_client(mux: tuple[Peer, Path, channel.Mux], caplog) -> None:
    guest, sock, _ = mux
    caplog.set_level(logging.WARNING, logger="hvnet.vm.mux")
    hostile = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    hostile.connect(str(sock))
    bad = Peer(hostile)
    bad.send(_lines(*NOT_MESSAGES))
    bad.send(_lines({"op": "spawn", "id": [1], "argv": ["x"]}, {"op": "stdin", "id": {"a": 1}, "data": ""},
                    {"op": "ping", "seq": {}}, {"op": ["spawn"]}, {"op": "signal", "id": None}))  # fmt: skip
    error = bad.wait_for(lambda msg: msg.get("ev") == "error" and "spawn" in str(msg.get("message")))
    assert error["message"] == "spawn: the id must be an integer"
    bad.send(TOO_LONG + b"\n")
    with channel.GuestClient(sock) as client:
        client.wait_ready(10)
        proc = client.spawn(["true"])
        _serve_one_spawn(guest, b"ok\n")
        assert proc.wait(10) == 0 and proc.stdout == b"ok\n"
    hostile.close()
    assert "client 1 sent a line longer than" in caplog.text


def test_mux_disconnects_a_client_that_does_not_read(mux: tuple[Peer, Path, channel.Mux], monkeypatch, caplog) -> None:
    """What waits for a client is bounded: past the limit it is disconnected (and its process killed)."""
    guest, sock, m = mux
    monkeypatch.setattr(channel, "MAX_PENDING", 256 << 10)
    caplog.set_level(logging.WARNING, logger="hvnet.vm.mux")
    idle = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    idle.connect(str(sock))
    idle.sendall(encode({"op": "spawn", "id": 1, "argv": ["yes"]}))
    gid = guest.wait_for(lambda msg: msg.get("op") == "spawn")["id"]
    chunk = encode({"ev": "out", "id": gid, "fd": 1, "data": base64.b64encode(b"y\n" * 16384).decode()})
    for _ in range(64):  # 2 MiB of output, 4 MiB encoded: far more than the socket buffers hold
        guest.send(chunk)
    kill = guest.wait_for(lambda msg: msg.get("op") == "signal")
    assert kill == {"op": "signal", "id": gid, "sig": 9}
    assert "client 1 is not reading" in caplog.text and not m.clients
    idle.close()


# -- the client ----------------------------------------------------------------------------------


@pytest.fixture()
def fake_mux(tmp_path: Path) -> Iterator[tuple[Peer, channel.GuestClient]]:
    """A client whose multiplexer is this test, past the hello."""
    srv = _listen(tmp_path / "m.sock")
    client = channel.GuestClient(tmp_path / "m.sock")
    mux = Peer(srv.accept()[0])
    mux.wait_for(lambda msg: msg.get("op") == "hello")
    mux.send(encode({"ev": "hello", "version": 1, "instance": "i1", "ready": True}))
    client.wait_ready(10)
    try:
        yield mux, client
    finally:
        client.close()
        mux.sock.close()
        srv.close()


def test_client_reader_survives_garbage(fake_mux: tuple[Peer, channel.GuestClient], caplog) -> None:
    mux, client = fake_mux
    caplog.set_level(logging.WARNING, logger="hvnet.vm.mux")
    proc = client.spawn(["x"])
    mux.wait_for(lambda msg: msg.get("op") == "spawn")
    mux.send(_lines(*NOT_MESSAGES))
    mux.send(_lines({"ev": "pong", "seq": [1]}, {"ev": "out", "id": [1], "data": ""},
                    {"ev": "out", "id": proc.id, "data": "!!not base64!!"}, {"ev": "out", "id": proc.id, "fd": "x"},
                    {"ev": "no-such-event", "id": proc.id}, {"ev": "exit", "id": {"x": 1}}))  # fmt: skip
    mux.send(TOO_LONG + b"\n")
    mux.send(_lines({"ev": "out", "id": proc.id, "fd": 1, "data": "b2sK"}, {"ev": "exit", "id": proc.id, "code": 3}))
    assert proc.wait(10) == 3 and proc.stdout == b"ok\n"
    assert client._reader.is_alive()
    assert "malformed message" in caplog.text and "longer than" in caplog.text


def test_a_malformed_exit_fails_only_its_process(fake_mux: tuple[Peer, channel.GuestClient]) -> None:
    mux, client = fake_mux
    broken, fine = client.spawn(["a"]), client.spawn(["b"])
    mux.send(_lines({"ev": "exit", "id": broken.id, "code": "three"}))
    assert broken.wait(10) == EXIT_LOST and "malformed" in (broken.error or "")
    mux.send(_lines({"ev": "exit", "id": fine.id, "code": 0}))
    assert fine.wait(10) == 0 and client._reader.is_alive()


# -- gexec ------------------------------------------------------------------------------------


def _gexec_against(tmp_path: Path, *garbage: bytes | dict[str, Any], exit_msg: dict[str, Any]) -> Any:
    srv = _listen(tmp_path / "m.sock")
    proc = subprocess.Popen(gexec_argv(str(tmp_path / "m.sock"), ["x"], stdin=False), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)  # fmt: skip
    try:
        mux = Peer(srv.accept()[0])
        mux.wait_for(lambda msg: msg.get("op") == "hello")
        mux.send(encode({"ev": "hello", "version": 1, "instance": "i1", "ready": True}))
        mux.wait_for(lambda msg: msg.get("op") == "spawn")
        mux.send(_lines(*garbage))
        mux.send(TOO_LONG + b"\n")
        mux.send(_lines({"ev": "out", "id": 1, "fd": 1, "data": "b2sK"}, exit_msg))
        out, err = proc.communicate(timeout=30)
    finally:
        proc.kill()
        srv.close()
    return proc.returncode, out, err.decode()


def test_gexec_skips_garbage(tmp_path: Path) -> None:
    rc, out, err = _gexec_against(
        tmp_path, *NOT_MESSAGES, {"ev": "out", "id": 1, "data": "!!"}, {"ev": "out", "id": 1, "data": 5},
        exit_msg={"ev": "exit", "id": 1, "code": 3},
    )  # fmt: skip
    assert (rc, out) == (3, b"ok\n"), err
    assert "Traceback" not in err and "ignored a line of more than" in err and "RecursionError" in err


def test_gexec_malformed_exit_is_a_lost_guest(tmp_path: Path) -> None:
    rc, out, err = _gexec_against(tmp_path, exit_msg={"ev": "exit", "id": 1, "code": "three"})
    assert (rc, out) == (255, b"ok\n") and "exit message was malformed" in err and "Traceback" not in err


# -- the in-guest agent -------------------------------------------------------------------------


def test_guest_agent_skips_garbage_and_overlong_requests() -> None:
    host, guest_end = socket.socketpair()
    agent = subprocess.Popen([sys.executable, str(AGENT), f"fd:{guest_end.fileno()}"], pass_fds=[guest_end.fileno()],
                             stderr=subprocess.DEVNULL)  # fmt: skip
    guest_end.close()
    peer = Peer(host)
    try:
        peer.wait_for(lambda msg: msg.get("ev") == "hello")
        peer.send(_lines(*NOT_MESSAGES, {"op": "spawn", "id": [1], "argv": 5}, {"op": {"a": 1}}, {"id": 1}))
        started = time.monotonic()
        peer.send(TOO_LONG)
        peer.send(b"\n")
        peer.wait_for(lambda msg: "request over" in str(msg.get("message")))
        peer.send(encode({"op": "ping", "seq": 7}))
        assert peer.wait_for(lambda msg: msg.get("ev") == "pong") == {"ev": "pong", "seq": 7}
        assert time.monotonic() - started < 10 and agent.poll() is None
    finally:
        agent.kill()
        agent.wait()
        host.close()
