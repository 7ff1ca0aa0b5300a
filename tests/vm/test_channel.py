"""The channel without a guest: the real agent served on a socket that stands in for QEMU's.

QEMU's chardev socket is a unix socket that accepts one client and hands its
bytes to the guest's virtio-serial port.  Here a thread plays QEMU: it
listens on the channel path and starts the in-guest agent on each accepted
connection (``agent.py fd:N``).  The multiplexer, the client API and gexec
then run exactly as they do against a guest, in a second: no root, no QEMU.
Killing the agent and closing the socket plays a guest being destroyed.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.lab.vm import channel
from appliance.lab.vm.gexec import gexec_argv
from appliance.lab.vm.protocol import EXIT_LOST

AGENT = Path(channel.__file__).resolve().parent / "guest" / "agent.py"


class FakeQemu:
    """Listens on the channel path like QEMU; each connection gets a fresh agent."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self.srv.bind(str(path))
        self.srv.listen(1)
        self.agent: subprocess.Popen | None = None
        self.conn: socket.socket | None = None
        self.stopped = False
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stopped:
            try:
                conn, _ = self.srv.accept()
            except OSError:
                return
            self.conn = conn
            self.agent = subprocess.Popen([sys.executable, str(AGENT), f"fd:{conn.fileno()}"], pass_fds=[conn.fileno()])

    def destroy(self) -> None:
        """The guest goes away: its agent dies and the socket closes."""
        if self.agent is not None:
            self.agent.kill()
            self.agent.wait()
        if self.conn is not None:
            self.conn.close()

    def stop(self) -> None:
        self.stopped = True
        self.destroy()
        self.srv.close()


@pytest.fixture()
def guest(tmp_path: Path) -> Iterator[tuple[FakeQemu, Path]]:
    chan, sock, pidfile = tmp_path / "g.chan", tmp_path / "g.sock", tmp_path / "g.mux.pid"
    qemu = FakeQemu(chan)
    channel.start_mux(chan, sock, pidfile, tmp_path / "g.mux.log")
    try:
        yield qemu, sock
    finally:
        assert channel.stop_mux(pidfile)
        qemu.stop()
        assert not sock.exists(), "the multiplexer left its socket behind"


def test_run_exit_codes_stdin_env_cwd(guest: tuple[FakeQemu, Path]) -> None:
    _, sock = guest
    with channel.GuestClient(sock) as c:
        assert c.wait_ready(10) >= 0
        assert c.guest["version"] == 1
        r = c.run(["sh", "-c", "echo out; echo err >&2; exit 3"])
        assert (r.returncode, r.stdout, r.stderr) == (3, "out\n", "err\n")
        assert c.run(["cat"], input="abc").stdout == "abc"
        assert c.run(["pwd"], cwd="/tmp").stdout == "/tmp\n"
        assert c.run(["sh", "-c", "echo $FOO"], env={"FOO": "bar"}).stdout == "bar\n"
        killed = c.run(["sh", "-c", "kill -9 $$"])
        assert killed.returncode == -9
        missing = c.run(["no-such-program-hvnet"])
        assert missing.returncode == 127 and "no-such-program-hvnet" in (missing.error or "")
        assert c.ping() < 5


def test_no_output_lost_and_concurrency(guest: tuple[FakeQemu, Path]) -> None:
    _, sock = guest
    with channel.GuestClient(sock) as c, channel.GuestClient(sock) as c2:
        c.wait_ready(10)
        c2.wait_ready(10)
        big = c.run(["seq", "1", "200000"], timeout=60)
        assert big.stdout == "".join(f"{i}\n" for i in range(1, 200001))
        start = time.monotonic()
        procs = [cl.spawn(["sleep", "1"]) for cl in (c, c2) for _ in range(10)]
        assert [p.wait(30) for p in procs] == [0] * 20
        assert time.monotonic() - start < 5, "the sleeps ran one after another"
        # Both clients numbered their processes from 1: the multiplexer kept them apart.
        assert len({p.id for p in procs[:10]} & {p.id for p in procs[10:]}) >= 9


def test_signal_and_client_disconnect(guest: tuple[FakeQemu, Path]) -> None:
    _, sock = guest
    with channel.GuestClient(sock) as c:
        c.wait_ready(10)
        p = c.spawn(["sleep", "100"])
        time.sleep(0.2)
        p.terminate()
        assert p.wait(10) == -signal.SIGTERM
    # A client that goes away takes its processes with it.
    c = channel.GuestClient(sock)
    c.wait_ready(10)
    c.spawn(["sh", "-c", "echo $$ > /tmp/hvi-orphan.pid; exec sleep 100"])
    time.sleep(0.5)
    pid = int(Path("/tmp/hvi-orphan.pid").read_text())
    c.close()
    deadline = time.monotonic() + 5
    while Path(f"/proc/{pid}").exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    Path("/tmp/hvi-orphan.pid").unlink()
    assert not Path(f"/proc/{pid}/cmdline").exists() or not Path(f"/proc/{pid}/cmdline").read_bytes()


def test_guest_restart_loses_processes_then_reconnects(guest: tuple[FakeQemu, Path]) -> None:
    qemu, sock = guest
    with channel.GuestClient(sock) as c:
        c.wait_ready(10)
        first = c.guest["instance"]
        p = c.spawn(["sleep", "100"])
        time.sleep(0.2)
        qemu.destroy()
        assert p.wait(10) == EXIT_LOST
        assert "guest restarted" in (p.error or "")
        deadline = time.monotonic() + 10
        while (not c.ready or c.guest.get("instance") == first) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert c.guest["instance"] != first, "the multiplexer did not reconnect to the new guest"
        assert c.run(["echo", "back"]).stdout == "back\n"


def test_gexec(guest: tuple[FakeQemu, Path]) -> None:
    _, sock = guest
    with channel.GuestClient(sock) as c:
        c.wait_ready(10)
    env = {**os.environ, "HVNET_GEXEC_CPU": "1"}
    r = subprocess.run(gexec_argv(str(sock), ["sh", "-c", "echo out; echo err >&2; exit 7"]),
                       capture_output=True, text=True, env=env, timeout=30, stdin=subprocess.DEVNULL)  # fmt: skip
    assert r.returncode == 7 and r.stdout == "out\n"
    assert r.stderr.startswith("err\n") and r.stderr.splitlines()[-1].startswith("hvnet-guest-cpu ")
    r = subprocess.run(gexec_argv(str(sock), ["tr", "a-z", "A-Z"]), input="hello", capture_output=True, text=True)
    assert (r.returncode, r.stdout) == (0, "HELLO")
    g = subprocess.Popen(gexec_argv(str(sock), ["sleep", "100"]), stdin=subprocess.DEVNULL)
    time.sleep(0.5)
    g.send_signal(signal.SIGTERM)
    assert g.wait(10) == 128 + signal.SIGTERM
    # The module form works too.
    r = subprocess.run([sys.executable, "-m", "appliance.lab.vm.gexec", str(sock), "--", "true"], timeout=30)
    assert r.returncode == 0
