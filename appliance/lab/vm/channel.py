"""The host end of the probe guest's channel: a multiplexer daemon and a client API.

A probe guest is reached over a virtio-serial port, never over its network
(the network is what is being tested).  QEMU exposes that port as a unix
socket which accepts exactly one client, so a small daemon per guest, the
*multiplexer*, holds that one connection and serves any number of host
clients on its own socket:

    QEMU  RUN/NAME.chan  <-- mux -->  RUN/NAME.sock  <-- GuestClient / gexec ...

Each client connection is its own id namespace (the mux remaps ids, see
:class:`~appliance.lab.vm.protocol.IdMap`).  The mux outlives the guest: when
QEMU goes away it tells every client whose processes were lost (exit code
:data:`~appliance.lab.vm.protocol.EXIT_LOST`, "guest restarted"), then reconnects
when the socket comes back.  Start it with :func:`start_mux` or::

    python -m appliance.lab.vm.channel mux --chan RUN/NAME.chan --listen RUN/NAME.sock \\
        --pidfile RUN/NAME.mux.pid --log RUN/NAME.mux.log
"""

from __future__ import annotations

import argparse
import base64
import errno
import logging
import os
import selectors
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Optional

from appliance.lab.vm.protocol import EXIT_LOST, MAX_PENDING, IdMap, LineDecoder, encode, exit_status

log = logging.getLogger("hvnet.vm.mux")

RECONNECT_S = 0.2  # how often the mux looks for the guest's socket while it is away
HELLO_RETRY_S = 1.0  # how often it asks a connected but silent guest whether it is ready
PACKAGE_PARENT = Path(__file__).resolve().parents[2]


class ChannelError(Exception):
    """The multiplexer or the guest could not be reached or did not answer."""


# -- the multiplexer ---------------------------------------------------------------------


# What a peer may send that is not a message the mux can act on: logged and skipped.
MALFORMED = (TypeError, ValueError, KeyError, AttributeError)
GUEST_EVENTS = frozenset({"hello", "pong", "out", "exit", "error"})  # see guest/agent.py


class _Conn:
    """One socket with a line decoder and an output buffer (non-blocking)."""

    def __init__(self, sock: socket.socket, key: int) -> None:
        self.sock = sock
        self.key = key  # never reused, unlike id() or a file descriptor
        self.name = "the guest" if key == 0 else f"client {key}"
        self.decoder = LineDecoder(on_skip=lambda why: log.warning("%s sent %s; ignored", self.name, why))
        self.out = bytearray()
        self.closed = False


class Mux:
    """Serves the guest's single channel to many clients; survives the guest going away."""

    def __init__(self, chan: str, listen: str) -> None:
        self.chan_path = chan
        self.listen_path = listen
        self.sel = selectors.DefaultSelector()
        self.ids = IdMap()
        self.pings = IdMap()
        self.chan: _Conn | None = None
        self.next_connect = 0.0
        self.hello: dict[str, Any] | None = None  # the guest's last hello while it is ready
        self.instance: str | None = None
        self.hello_asked = 0.0
        self.clients: dict[int, _Conn] = {}
        self.conn_seq = 0
        self.stopping = False
        self.server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)

    # -- lifecycle ---------------------------------------------------------

    def serve(self) -> None:
        try:
            os.unlink(self.listen_path)
        except FileNotFoundError:
            pass
        self.server.bind(self.listen_path)
        os.chmod(self.listen_path, 0o600)
        self.server.listen(64)
        self.server.setblocking(False)
        self.sel.register(self.server, selectors.EVENT_READ, ("accept", None))
        log.info("listening on %s for the guest channel %s", self.listen_path, self.chan_path)
        try:
            while not self.stopping:
                self.tick()
        finally:
            self.close()

    def close(self) -> None:
        for conn in [*self.clients.values(), *([self.chan] if self.chan else [])]:
            conn.sock.close()
        self.server.close()
        try:
            os.unlink(self.listen_path)
        except FileNotFoundError:
            pass
        log.info("stopped")

    def tick(self) -> None:
        now = time.monotonic()
        if self.chan is None and now >= self.next_connect:
            self.connect_chan()
        if self.chan is not None and self.hello is None and now - self.hello_asked >= HELLO_RETRY_S:
            self.send_chan({"op": "hello", "reset": True})
            self.hello_asked = now
        for key, mask in self.sel.select(timeout=RECONNECT_S):
            kind, conn = key.data
            if kind == "accept":
                self.accept()
                continue
            if mask & selectors.EVENT_READ:
                self.read(kind, conn)
            if mask & selectors.EVENT_WRITE and not conn.closed:
                self.flush(kind, conn)

    # -- the guest side ----------------------------------------------------

    def connect_chan(self) -> None:
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            sock.connect(self.chan_path)
        except OSError:
            sock.close()
            self.next_connect = time.monotonic() + RECONNECT_S
            return
        sock.setblocking(False)
        self.chan = _Conn(sock, 0)
        self.sel.register(sock, selectors.EVENT_READ, ("chan", self.chan))
        log.info("connected to the guest channel %s", self.chan_path)
        # Whatever ran for an earlier connection is unknown to this one: have the agent drop it.
        self.chan.out += b"\n"  # ends any fragment the guest may still hold from before
        self.send_chan({"op": "hello", "reset": True})
        self.hello_asked = time.monotonic()

    def chan_lost(self, why: str) -> None:
        if self.chan is None:
            return
        log.warning("guest channel closed (%s); reconnecting every %.1f s", why, RECONNECT_S)
        self.sel.unregister(self.chan.sock)
        self.chan.sock.close()
        self.chan.closed = True
        self.chan = None
        self.next_connect = time.monotonic() + RECONNECT_S
        was_ready = self.hello is not None
        self.hello = None
        self.lose_all("guest restarted: the channel closed")
        if was_ready:
            self.broadcast({"ev": "down", "message": f"guest channel closed ({why})"})

    def lose_all(self, message: str) -> None:
        for gid, owner, cid in self.ids.release_all():
            client = self.clients.get(owner)  # type: ignore[call-overload]
            if client is not None:
                self.send_client(client, {"ev": "error", "id": cid, "message": message})
                self.send_client(client, {"ev": "exit", "id": cid, "code": EXIT_LOST, "cpu_s": 0})
            log.info("process %d lost: %s", gid, message)
        self.pings.release_all()

    def send_chan(self, msg: dict[str, Any]) -> None:
        if self.chan is None:
            return
        self.chan.out += encode(msg)
        self.flush("chan", self.chan)
        if self.chan is not None and len(self.chan.out) > MAX_PENDING:
            self.chan_lost(f"the guest is not reading: {len(self.chan.out)} bytes waiting for it")

    def from_guest(self, msg: dict[str, Any]) -> None:
        ev = msg.get("ev")
        if ev == "hello":
            instance = msg.get("instance")
            if self.instance is not None and instance != self.instance and len(self.ids):
                self.lose_all("guest restarted: the agent started afresh")
            first = self.hello is None or instance != self.instance
            self.instance = instance
            self.hello = {k: v for k, v in msg.items() if k != "reply"}
            if first:
                log.info("guest ready: %s", self.hello)
                self.broadcast({**self.hello, "ready": True})
            return
        if ev == "pong":
            seq = msg.get("seq")
            key = self.pings.release(seq) if isinstance(seq, int) else None
            if key is not None and key[0] in self.clients:
                self.send_client(self.clients[key[0]], {"ev": "pong", "seq": key[1]})  # type: ignore[index]
            return
        if ev not in GUEST_EVENTS:
            log.warning("the guest sent an unknown event %.40r; ignored", ev)
            return
        gid = msg.get("id")
        key = self.ids.client_of(gid) if isinstance(gid, int) else None
        if key is None:
            if ev == "error":
                log.warning("guest: %s", msg.get("message"))
            return
        if ev == "exit":
            self.ids.release(gid)  # type: ignore[arg-type]
        owner, cid = key
        client = self.clients.get(owner)  # type: ignore[call-overload]
        if client is not None:
            self.send_client(client, {**msg, "id": cid})

    # -- the clients' side --------------------------------------------------

    def accept(self) -> None:
        try:
            sock, _ = self.server.accept()
        except BlockingIOError:
            return
        sock.setblocking(False)
        self.conn_seq += 1
        conn = _Conn(sock, self.conn_seq)
        self.clients[conn.key] = conn
        self.sel.register(sock, selectors.EVENT_READ, ("client", conn))
        if self.hello is not None:
            self.send_client(conn, {**self.hello, "ready": True})

    def client_gone(self, conn: _Conn) -> None:
        if conn.closed:
            return
        conn.closed = True
        self.sel.unregister(conn.sock)
        conn.sock.close()
        self.clients.pop(conn.key, None)
        # Nobody will read what its processes print: stop them (their exits are then dropped).
        for gid in self.ids.owned_by(conn.key):
            self.send_chan({"op": "signal", "id": gid, "sig": int(signal.SIGKILL)})

    def from_client(self, conn: _Conn, msg: dict[str, Any]) -> None:
        op = msg.get("op")
        owner = conn.key
        if op == "hello":
            if self.hello is not None:
                self.send_client(conn, {**self.hello, "ready": True})
            return
        if op == "ping":
            if self.hello is None or not isinstance(msg.get("seq"), int):
                return
            try:
                gseq = self.pings.allocate(owner, msg.get("seq"))
            except ValueError:
                return
            self.send_chan({"op": "ping", "seq": gseq})
            return
        cid = msg.get("id")
        if op in ("spawn", "stdin", "eof", "signal") and not isinstance(cid, int):
            log.warning("%s: %s with id %.40r (not an integer); ignored", conn.name, op, cid)
            self.send_client(conn, {"ev": "error", "id": None, "message": f"{op}: the id must be an integer"})
            return
        if op == "spawn":
            if self.hello is None or self.chan is None:
                self.send_client(conn, {"ev": "error", "id": cid, "message": "guest not ready"})
                self.send_client(conn, {"ev": "exit", "id": cid, "code": EXIT_LOST, "cpu_s": 0})
                return
            try:
                gid = self.ids.allocate(owner, cid)
            except ValueError as e:
                self.send_client(conn, {"ev": "error", "id": cid, "message": str(e)})
                return
            self.send_chan({**msg, "id": gid})
            return
        if op in ("stdin", "eof", "signal"):
            gid = self.ids.guest_id(owner, cid)
            if gid is not None:
                self.send_chan({**msg, "id": gid})
            return
        self.send_client(conn, {"ev": "error", "id": cid, "message": f"unknown op {op!r:.40}"})

    def send_client(self, conn: _Conn, msg: dict[str, Any]) -> None:
        if conn.closed:
            return
        conn.out += encode(msg)
        self.flush("client", conn)
        if not conn.closed and len(conn.out) > MAX_PENDING:
            log.warning("%s is not reading (%d bytes waiting for it); disconnected", conn.name, len(conn.out))
            self.client_gone(conn)

    def broadcast(self, msg: dict[str, Any]) -> None:
        for conn in list(self.clients.values()):
            self.send_client(conn, msg)

    # -- I/O ------------------------------------------------------------------

    def read(self, kind: str, conn: _Conn) -> None:
        try:
            data = conn.sock.recv(65536)
        except BlockingIOError:
            return
        except OSError as e:
            data = b""
            why = errno.errorcode.get(e.errno or 0, str(e))
        else:
            why = "end of file"
        if not data:
            if kind == "chan":
                self.chan_lost(why)
            else:
                self.client_gone(conn)
            return
        for msg in conn.decoder.feed(data):
            try:
                if kind == "chan":
                    self.from_guest(msg)
                elif not conn.closed:
                    self.from_client(conn, msg)
            except MALFORMED as exc:  # a message of the wrong shape must not stop the mux
                log.warning("%s sent a malformed message %.200r (%s: %s); ignored", conn.name, msg,
                            type(exc).__name__, exc)  # fmt: skip

    def flush(self, kind: str, conn: _Conn) -> None:
        while conn.out:
            try:
                n = conn.sock.send(conn.out)
            except BlockingIOError:
                break
            except OSError as e:
                if kind == "chan":
                    self.chan_lost(str(e))
                else:
                    self.client_gone(conn)
                return
            del conn.out[:n]
        if conn.closed:
            return
        want = selectors.EVENT_READ | (selectors.EVENT_WRITE if conn.out else 0)
        key = self.sel.get_key(conn.sock)
        if key.events != want:
            self.sel.modify(conn.sock, want, key.data)


def _cmdline(pid: int) -> list[str]:
    """The process's argv, or [] once it is gone (a zombie has an empty command line)."""
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return []
    return raw.decode(errors="replace").rstrip("\0").split("\0") if raw else []


def _gone(pid: int) -> bool:
    try:
        os.waitpid(pid, os.WNOHANG)  # our own child (start_mux in this process): reap it
    except ChildProcessError:
        pass
    return not _cmdline(pid)


def _read_pid(pidfile: Path) -> int | None:
    try:
        return int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return None


def mux_pid(pidfile: str | Path) -> int | None:
    """The pid of the running multiplexer that wrote ``pidfile``, or None.

    A pid is only trusted when /proc says it is our multiplexer for this very
    pidfile: a stale file must never make hvnet signal an unrelated process.
    """
    pidfile = Path(pidfile)
    pid = _read_pid(pidfile)
    if pid is None:
        return None
    cmd = _cmdline(pid)
    if "appliance.lab.vm.channel" in cmd and "mux" in cmd and str(pidfile) in cmd:
        return pid
    return None


def start_mux(
    chan: str | Path, listen: str | Path, pidfile: str | Path, log_path: str | Path, timeout: float = 10.0
) -> int:
    """Start a detached multiplexer (or find the running one) and return its pid.

    Returns once the listening socket exists, so clients can connect at once;
    the guest itself may not be ready yet (see :meth:`GuestClient.wait_ready`).
    """
    pidfile = Path(pidfile)
    running = mux_pid(pidfile)
    if running is not None:
        if Path(listen).exists():
            return running
        stop_mux(pidfile)  # alive but its socket is gone: replace it rather than leave it orphaned
    argv = [
        # -W: appliance/__init__ imports this module before runpy runs it, which is harmless.
        sys.executable, "-W", "ignore::RuntimeWarning", "-m", "appliance.lab.vm.channel", "mux",
        "--chan", str(chan), "--listen", str(listen), "--pidfile", str(pidfile), "--log", str(log_path),
    ]  # fmt: skip
    Path(listen).parent.mkdir(parents=True, exist_ok=True)
    try:
        os.unlink(listen)
    except FileNotFoundError:
        pass
    with open(os.devnull, "rb") as devnull, open(log_path, "ab") as logf:
        proc = subprocess.Popen(
            argv, stdin=devnull, stdout=logf, stderr=logf, cwd=PACKAGE_PARENT, start_new_session=True, close_fds=True
        )
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise ChannelError(f"the multiplexer exited at start (code {proc.returncode}); see {log_path}")
        if Path(listen).exists() and _read_pid(pidfile) == proc.pid:
            return proc.pid
        time.sleep(0.02)
    proc.kill()
    raise ChannelError(f"the multiplexer did not start within {timeout:g} s; see {log_path}")


def stop_mux(pidfile: str | Path, timeout: float = 5.0) -> bool:
    """Stop the multiplexer of ``pidfile`` (SIGTERM, then SIGKILL); False if none ran."""
    pid = mux_pid(pidfile)
    if pid is None:
        return False
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return True
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _gone(pid):
            return True
        time.sleep(0.02)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    return True


def run_mux(chan: str, listen: str, pidfile: str, log_path: str) -> int:
    logging.basicConfig(
        filename=log_path, level=logging.INFO, format="%(asctime)s mux[%(process)d] %(levelname)s %(message)s"
    )
    mux = Mux(chan, listen)

    def stop(signum: int, _frame: object) -> None:
        log.info("signal %d: stopping", signum)
        mux.stopping = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    Path(pidfile).write_text(f"{os.getpid()}\n")
    try:
        mux.serve()
    finally:
        if _read_pid(Path(pidfile)) == os.getpid():
            Path(pidfile).unlink()
    return 0


# -- the client API -----------------------------------------------------------------------


@dataclass
class GuestResult:
    """What :meth:`GuestClient.run` returns: shaped like ``subprocess.CompletedProcess``."""

    argv: list[str]
    returncode: int
    stdout: Any  # str with text=True, else bytes
    stderr: Any
    cpu_s: float
    error: str | None = None  # why the guest could not run it or lost it, if it says


Sink = Optional[Callable[[bytes], None]]


@dataclass
class GuestProcess:
    """A process running in the guest; output arrives on the client's reader thread."""

    client: GuestClient
    id: int
    argv: list[str]
    on_stdout: Sink = None
    on_stderr: Sink = None
    returncode: int | None = None
    cpu_s: float = 0.0
    error: str | None = None
    stdout_buf: bytearray = field(default_factory=bytearray)
    stderr_buf: bytearray = field(default_factory=bytearray)
    done: threading.Event = field(default_factory=threading.Event)

    def _out(self, fd: int, data: bytes) -> None:
        sink = self.on_stdout if fd == 1 else self.on_stderr
        if sink is not None:
            sink(data)
        else:
            (self.stdout_buf if fd == 1 else self.stderr_buf).extend(data)

    def _exit(self, code: int, cpu_s: float) -> None:
        self.cpu_s = cpu_s
        self.returncode = code
        self.done.set()

    @property
    def stdout(self) -> bytes:
        return bytes(self.stdout_buf)

    @property
    def stderr(self) -> bytes:
        return bytes(self.stderr_buf)

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        """The exit code (minus N if killed by signal N); ``subprocess.TimeoutExpired`` on timeout."""
        if not self.done.wait(timeout):
            raise subprocess.TimeoutExpired(self.argv, timeout or 0)
        assert self.returncode is not None
        return self.returncode

    def signal(self, sig: int) -> None:
        if self.returncode is None:
            self.client._send({"op": "signal", "id": self.id, "sig": int(sig)})

    def terminate(self) -> None:
        self.signal(signal.SIGTERM)

    def kill(self) -> None:
        self.signal(signal.SIGKILL)

    def write(self, data: bytes) -> None:
        """Send bytes to the process's stdin (spawned with ``stdin=True``)."""
        for i in range(0, len(data), 32768):
            self.client._send({"op": "stdin", "id": self.id, "data": base64.b64encode(data[i : i + 32768]).decode()})

    def close_stdin(self) -> None:
        self.client._send({"op": "eof", "id": self.id})


def _file_sink(f: IO[bytes] | None) -> Sink:
    if f is None:
        return None

    def write(data: bytes) -> None:
        f.write(data)
        f.flush()

    return write


class GuestClient:
    """A connection to a guest's multiplexer; thread-safe, one reader thread.

    ``GuestClient(RUN/NAME.sock)`` connects at once (waiting up to
    ``connect_timeout`` for the socket to appear); the guest may still be
    booting, which :meth:`wait_ready` waits for.
    """

    def __init__(self, sock_path: str | Path, connect_timeout: float = 10.0) -> None:
        self.sock_path = str(sock_path)
        self.sock = self._connect(connect_timeout)
        self._lock = threading.Lock()
        self._procs: dict[int, GuestProcess] = {}
        self._pongs: dict[int, threading.Event] = {}
        self._next = 1
        self._ready = threading.Event()
        self.guest: dict[str, Any] = {}  # the guest's hello: version, boot_s, instance
        self.closed = False
        self._reader = threading.Thread(target=self._read_loop, name=f"guest-client {self.sock_path}", daemon=True)
        self._reader.start()
        self._send({"op": "hello"})

    def _connect(self, timeout: float) -> socket.socket:
        deadline = time.monotonic() + timeout
        while True:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                sock.connect(self.sock_path)
                return sock
            except OSError as e:
                sock.close()
                if time.monotonic() >= deadline:
                    raise ChannelError(
                        f"no guest multiplexer at {self.sock_path}: {e.strerror}; is the guest's mux running?"
                    ) from None
                time.sleep(0.05)

    def __enter__(self) -> GuestClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            try:
                self.sock.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            self.sock.close()

    def _send(self, msg: dict[str, Any]) -> None:
        data = encode(msg)
        with self._lock:
            if self.closed:
                raise ChannelError("the guest client is closed")
            self.sock.sendall(data)

    def _read_loop(self) -> None:
        decoder = LineDecoder(on_skip=lambda why: log.warning("%s sent %s; ignored", self.sock_path, why))
        while True:
            try:
                data = self.sock.recv(65536)
            except OSError:
                data = b""
            if not data:
                break
            for msg in decoder.feed(data):
                self._dispatch_one(msg)
        self._ready.clear()
        with self._lock:
            procs = list(self._procs.values())
            self._procs.clear()
        for proc in procs:
            proc.error = proc.error or "the connection to the guest multiplexer closed"
            proc._exit(EXIT_LOST, 0.0)

    def _dispatch_one(self, msg: dict[str, Any]) -> None:
        """Act on one message; one of the wrong shape fails its process (if any), never the reader."""
        ident = msg.get("id")
        proc = self._procs.get(ident) if isinstance(ident, int) else None
        try:
            self._dispatch(msg)
        except MALFORMED as exc:
            why = f"malformed message from the guest channel ({type(exc).__name__}: {exc})"
            log.warning("%s: %s: %.200r", self.sock_path, why, msg)
            if proc is not None and msg.get("ev") == "exit":  # its real exit status is unknown
                with self._lock:
                    self._procs.pop(proc.id, None)
                proc.error = why
                proc._exit(EXIT_LOST, 0.0)

    def _dispatch(self, msg: dict[str, Any]) -> None:
        ev = msg.get("ev")
        if ev == "hello":
            self.guest = msg
            self._ready.set()
            return
        if ev == "down":
            self._ready.clear()
            return
        if ev == "pong":
            seq = msg.get("seq")
            waiter = self._pongs.get(seq) if isinstance(seq, int) else None
            if waiter is not None:
                waiter.set()
            return
        ident = msg.get("id")
        proc = self._procs.get(ident) if isinstance(ident, int) else None
        if proc is None:
            return
        if ev == "out":
            proc._out(int(msg.get("fd", 1)), base64.b64decode(msg.get("data", ""), validate=True))
        elif ev == "error":
            proc.error = str(msg.get("message"))
        elif ev == "exit":
            code, cpu_s = int(msg.get("code", EXIT_LOST)), float(msg.get("cpu_s") or 0.0)
            with self._lock:
                self._procs.pop(proc.id, None)
            proc._exit(code, cpu_s)

    @property
    def ready(self) -> bool:
        return self._ready.is_set()

    def wait_ready(self, timeout: float = 60.0) -> float:
        """Seconds waited until the guest said hello; ``ChannelError`` after ``timeout``."""
        start = time.monotonic()
        if not self._ready.wait(timeout):
            raise ChannelError(f"the guest behind {self.sock_path} was not ready within {timeout:g} s")
        return time.monotonic() - start

    def ping(self, timeout: float = 10.0) -> float:
        """Round-trip seconds to the in-guest agent."""
        with self._lock:
            seq = self._next
            self._next += 1
        waiter = self._pongs[seq] = threading.Event()
        start = time.monotonic()
        try:
            self._send({"op": "ping", "seq": seq})
            if not waiter.wait(timeout):
                raise ChannelError(f"the guest did not answer a ping within {timeout:g} s")
        finally:
            self._pongs.pop(seq, None)
        return time.monotonic() - start

    def spawn(
        self,
        argv: Sequence[str],
        *,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
        stdin: bool = False,
        on_stdout: Sink = None,
        on_stderr: Sink = None,
        stdout: IO[bytes] | None = None,
        stderr: IO[bytes] | None = None,
    ) -> GuestProcess:
        """Start ``argv`` in the guest and return at once.

        Output goes to the callbacks, else to the files, else into the
        process's ``stdout``/``stderr`` buffers.  With ``stdin`` the process
        reads what :meth:`GuestProcess.write` sends until ``close_stdin``;
        without, it reads /dev/null.
        """
        with self._lock:
            ident = self._next
            self._next += 1
        proc = GuestProcess(
            self,
            ident,
            list(argv),
            on_stdout=on_stdout or _file_sink(stdout),
            on_stderr=on_stderr or _file_sink(stderr),
        )
        with self._lock:
            self._procs[ident] = proc
        msg: dict[str, Any] = {"op": "spawn", "id": ident, "argv": list(argv), "stdin": stdin}
        if env:
            msg["env"] = env
        if cwd:
            msg["cwd"] = cwd
        self._send(msg)
        return proc

    def run(
        self,
        argv: Sequence[str],
        timeout: float = 30.0,
        input: bytes | str | None = None,
        *,
        text: bool = True,
        env: dict[str, str] | None = None,
        cwd: str | None = None,
    ) -> GuestResult:
        """Run ``argv`` to completion in the guest, like ``subprocess.run(capture_output=True)``.

        On timeout the process (group) is killed and ``subprocess.TimeoutExpired`` raised.
        """
        self.wait_ready(timeout)
        proc = self.spawn(argv, env=env, cwd=cwd, stdin=input is not None)
        if input is not None:
            proc.write(input.encode() if isinstance(input, str) else input)
            proc.close_stdin()
        try:
            code = proc.wait(timeout)
        except subprocess.TimeoutExpired:
            proc.kill()
            raise
        out, err = proc.stdout, proc.stderr
        if text:
            return GuestResult(list(argv), code, out.decode(errors="replace"), err.decode(errors="replace"),
                               proc.cpu_s, proc.error)  # fmt: skip
        return GuestResult(list(argv), code, out, err, proc.cpu_s, proc.error)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m appliance.lab.vm.channel", description=__doc__.split("\n")[0])
    sub = p.add_subparsers(dest="command", required=True)
    m = sub.add_parser("mux", help="serve a guest's channel socket to many clients (runs until SIGTERM)")
    m.add_argument("--chan", required=True, help="QEMU's unix socket for the org.hvnet.agent port")
    m.add_argument("--listen", required=True, help="the unix socket clients connect to")
    m.add_argument("--pidfile", required=True)
    m.add_argument("--log", required=True)
    r = sub.add_parser("run", help="run one command in the guest (output at the end; gexec streams)")
    r.add_argument("sock")
    r.add_argument("argv", nargs=argparse.REMAINDER)
    r.add_argument("--timeout", type=float, default=60.0)
    args = p.parse_args(argv)
    if args.command == "mux":
        return run_mux(args.chan, args.listen, args.pidfile, args.log)
    cmd = args.argv[1:] if args.argv[:1] == ["--"] else args.argv
    with GuestClient(args.sock) as client:
        res = client.run(cmd, timeout=args.timeout, text=False)
    sys.stdout.buffer.write(res.stdout)
    sys.stderr.buffer.write(res.stderr)
    return exit_status(res.returncode)


if __name__ == "__main__":
    sys.exit(main())
