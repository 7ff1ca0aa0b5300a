"""The one-shot OVSDB reader against a server that misbehaves: a real unix socket served by a thread of
the test that reads the request and answers as told -- trickling bytes forever, sending without end,
splitting a character across sends, or smuggling a lone surrogate in through a JSON escape."""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

from appliance.core import ovsdb
from appliance.core.errors import OvsdbError, OvsdbUnreachable
from appliance.core.target import DbTarget

Answer = Callable[[socket.socket], None]


@pytest.fixture()
def server(tmp_path: Path) -> Iterator[Callable[[Answer], DbTarget]]:
    """A unix socket server answering each connection's first request with ``answer``."""
    path = tmp_path / "db.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(4)
    stop = threading.Event()
    threads: list[threading.Thread] = []

    def serve(answer: Answer) -> None:
        listener.settimeout(0.2)
        while not stop.is_set():
            try:
                conn, _ = listener.accept()
            except OSError:
                continue
            with conn:
                conn.recv(65536)  # the request
                try:
                    answer(conn)
                except OSError:
                    pass  # the client gave up

    def start(answer: Answer) -> DbTarget:
        t = threading.Thread(target=serve, args=(answer,), daemon=True)
        t.start()
        threads.append(t)
        return DbTarget(f"unix:{path}", "test")

    yield start
    stop.set()
    for t in threads:
        t.join(5)
    listener.close()


def test_a_server_trickling_bytes_is_cut_off_at_the_deadline(server: Callable[[Answer], DbTarget]) -> None:
    def trickle(conn: socket.socket) -> None:
        conn.sendall(b'{"id": 1, "result": [')
        for _ in range(200):  # 10 s of a byte every 50 ms: never idle long, never done
            conn.sendall(b" ")
            time.sleep(0.05)

    target = server(trickle)
    started = time.monotonic()
    with pytest.raises(OvsdbUnreachable) as err:
        ovsdb.exchange(target, [("get_schema", ["Open_vSwitch"])], 1.0)
    assert time.monotonic() - started < 2.0
    assert "no answer within 1 s" in str(err.value)


def test_a_reply_past_the_limit_is_refused(server: Callable[[Answer], DbTarget]) -> None:
    def endless(conn: socket.socket) -> None:
        conn.sendall(b'{"id": 1, "result": "')
        block = b"x" * 65536
        for _ in range(200):  # 13 MB, never closed
            conn.sendall(block)

    target = server(endless)
    with pytest.raises(OvsdbError) as err:
        ovsdb.exchange(target, [("get_schema", ["Open_vSwitch"])], 10.0, limit=4 << 20)
    assert "grew past 4 MiB" in str(err.value)


def test_lone_surrogates_and_bad_utf8_become_replacement_characters(server: Callable[[Answer], DbTarget]) -> None:
    result = {"vif\ud800": ["p\udfff1", "ok \U0001f600", "é"]}
    reply = json.dumps({"id": 1, "result": result, "error": None}, ensure_ascii=False)
    assert "\\ud800" in json.dumps(result)  # ovsdb-server sends a lone surrogate as such an escape
    reply = reply.replace("\ud800", "\\ud800").replace("\udfff", "\\udfff")
    data = reply.encode()
    bad = b'{"id": 2, "result": "a\xffb", "error": null}'

    def answer(conn: socket.socket) -> None:
        half = data.index("é".encode()) + 1  # the é's two bytes land in different sends
        conn.sendall(data[:half])
        time.sleep(0.1)
        conn.sendall(data[half:] + bad)

    target = server(answer)
    got = ovsdb.exchange(target, [("get_schema", ["a"]), ("get_schema", ["b"])], 5.0)
    assert got[0]["result"] == {"vif\ufffd": ["p\ufffd1", "ok \U0001f600", "é"]}
    assert got[1]["result"] == "a\ufffdb"
    json.dumps(got, ensure_ascii=False).encode()  # every string can be encoded again


def test_without_lone_surrogates_keeps_everything_else() -> None:
    value = {"a": [1, 2.5, None, True, "x\ud83d"], "\udc00": {"k": "é"}}
    assert ovsdb.without_lone_surrogates(value) == {"a": [1, 2.5, None, True, "x\ufffd"], "\ufffd": {"k": "é"}}


def test_an_exchange_sends_at_once_and_reads_the_replies_later(server: Callable[[Answer], DbTarget]) -> None:
    """The request is on its way before the caller asks for the reply (hvnet status loads its reader
    in between); the reply is read once, and an exchange given up on closes its connection."""
    asked = threading.Event()

    def answer(conn: socket.socket) -> None:
        asked.set()  # the fixture has read the request
        conn.sendall(b'{"id": 1, "result": {"tables": {}}, "error": null}')

    target = server(answer)
    sent = ovsdb.Exchange(target, [("get_schema", ["Open_vSwitch"])], 5.0)
    assert asked.wait(5)
    assert sent.replies() == [{"id": 1, "result": {"tables": {}}, "error": None}]
    with pytest.raises(RuntimeError):
        sent.replies()
    dropped = ovsdb.Exchange(target, [("get_schema", ["Open_vSwitch"])], 5.0)
    dropped.close()
    with pytest.raises(RuntimeError):
        dropped.replies()
