"""A one-shot read's stream: a unix socket spoken to directly answers as python-ovs's stream would."""

from __future__ import annotations

import errno
import os
import socket
import subprocess
import sys
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.core import dbstream
from tests.conftest import ROOT


@pytest.fixture()
def echo(tmp_path: Path) -> Iterator[Path]:
    """A unix socket at ``tmp_path/db.sock`` whose server sends back what each connection sends, then closes."""
    path = tmp_path / "db.sock"
    listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    listener.bind(str(path))
    listener.listen(4)

    def serve() -> None:
        while True:
            try:
                conn, _ = listener.accept()
            except OSError:
                return
            with conn:
                conn.sendall(conn.recv(65536))

    threading.Thread(target=serve, daemon=True).start()
    yield path
    listener.close()


def _round_trip(stream: dbstream.Stream) -> bytes:
    assert stream.send(b'{"id": 1}') == 9
    got = b""
    while True:
        stream.wait(True, 2000)
        err, chunk = stream.recv(1 << 16)
        if err == errno.EAGAIN:
            continue
        assert err == 0
        if not chunk:  # the end of the stream
            stream.close()
            return got
        got += chunk


def test_a_local_socket_is_spoken_to_directly_and_answers_as_through_python_ovs(echo: Path) -> None:
    err, direct = dbstream.open_stream(f"unix:{echo}", 5.0)
    assert err == 0 and isinstance(direct, dbstream._UnixStream)
    err, through_ovs = dbstream._OvsStream.open(f"unix:{echo}", 5.0)
    assert err == 0 and through_ovs is not None
    assert _round_trip(direct) == _round_trip(through_ovs) == b'{"id": 1}'


def test_a_relative_path_is_in_ovs_run_directory(echo: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import ovs.dirs

    monkeypatch.setattr(ovs.dirs, "RUNDIR", str(echo.parent))
    err, stream = dbstream.open_stream("unix:db.sock", 5.0)
    assert err == 0 and stream is not None and _round_trip(stream) == b'{"id": 1}'


def test_a_path_too_long_for_a_socket_address_goes_through_python_ovs(echo: Path, tmp_path: Path) -> None:
    deep = tmp_path / ("d" * 100) / ("e" * 100)
    deep.mkdir(parents=True)
    (deep / "db.sock").symlink_to(echo)
    err, stream = dbstream.open_stream(f"unix:{deep / 'db.sock'}", 5.0)
    assert err == 0 and isinstance(stream, dbstream._OvsStream) and _round_trip(stream) == b'{"id": 1}'


def test_failures_are_the_errno_python_ovs_gives(tmp_path: Path) -> None:
    dead = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    dead.bind(str(tmp_path / "dead.sock"))  # a socket file nobody listens on
    (tmp_path / "plain").write_text("")
    for path in (tmp_path / "missing.sock", tmp_path / "dead.sock", tmp_path / "plain", tmp_path):
        err, stream = dbstream.open_stream(f"unix:{path}", 1.0)
        ovs_err, ovs_stream = dbstream._OvsStream.open(f"unix:{path}", 1.0)
        assert (err, stream, ovs_stream) == (ovs_err, None, None) and err > 0, (path, os.strerror(err))
    dead.close()


def test_a_one_shot_read_of_a_local_server_loads_no_python_ovs_stream(echo: Path) -> None:
    """What ``hvnet status`` counts on: reading a local server loads neither the IDL nor python-ovs's
    stream, poller and logging (the echo's reply is the request, whose id is the reply's)."""
    probe = (
        "import sys\n"
        "from appliance.core import ovsdb\n"
        "from appliance.core.target import DbTarget\n"
        f"(reply,) = ovsdb.exchange(DbTarget('unix:{echo}', 'test'), [('echo', [])], 5.0)\n"
        "assert reply['method'] == 'echo', reply\n"
        "print(sorted(m for m in sys.modules if m.startswith(('ovs.stream', 'ovs.poller', 'ovs.vlog', 'ovs.db'))))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "[]"
