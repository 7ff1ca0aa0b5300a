"""Run one command inside a probe guest as if it ran here: ``gexec SOCK -- ARGV...``.

Code that drives a namespace guest wraps its commands as ``ip netns exec NS
ARGV``; for a QEMU probe guest the wrapper is this program, so netserver,
netperf, tcpdump (``-w -`` streams pcap on stdout) and friends need no
changes.  It behaves like the process it stands for:

* the guest process's stdout and stderr are copied to ours as they arrive;
* our stdin is forwarded when it is a pipe or a file (``--stdin`` forces it,
  ``--no-stdin`` turns it off; a terminal is never forwarded);
* SIGTERM, SIGINT, SIGHUP and SIGUSR1 are passed on to the guest process's group;
* we exit with its exit code, 128+N if signal N killed it, 255 if the guest
  was lost (its message on stderr);
* with ``HVNET_GEXEC_CPU=1`` one last stderr line ``hvnet-guest-cpu SECONDS``
  reports the user+system CPU the guest process (and its children) used.

It is started once per wrapped command, so it stays self-contained and
imports only a few standard modules; :func:`gexec_argv` gives the quickest
command line (the script itself, not ``-m``, skips the package's imports).
"""

from __future__ import annotations

import base64
import json
import os
import select
import signal
import socket
import stat
import sys
import time

FORWARDED_SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP, signal.SIGUSR1)
EXIT_LOST = -255
MAX_LINE = 4 << 20  # as appliance.lab.vm.protocol.MAX_LINE: longer lines are dropped, never buffered
READY_TIMEOUT_S = float(os.environ.get("HVNET_GEXEC_READY_TIMEOUT", "120"))


def gexec_argv(sock: str, argv: list[str], *, stdin: bool | None = None) -> list[str]:
    """The command line that runs ``argv`` in the guest behind multiplexer socket ``sock``."""
    flags = [] if stdin is None else ["--stdin" if stdin else "--no-stdin"]
    return [sys.executable, "-I", "-S", os.path.abspath(__file__), *flags, sock, "--", *argv]


def _usage() -> int:
    os.write(2, b"usage: gexec [--stdin|--no-stdin] [--env K=V]... [--cwd DIR] SOCK -- ARGV...\n")
    return 2


def _say(message: str) -> None:
    os.write(2, f"gexec: {message}\n".encode(errors="replace"))


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        try:
            n = os.write(fd, view)
        except BlockingIOError:
            select.select([], [fd], [])
            continue
        except BrokenPipeError:
            return  # our reader went away; keep serving the guest process until it ends
        view = view[n:]


def _auto_stdin() -> bool:
    try:
        mode = os.fstat(0).st_mode
    except OSError:
        return False
    return stat.S_ISFIFO(mode) or stat.S_ISREG(mode)


def _parse(argv: list[str]) -> tuple[bool | None, dict[str, str], str | None, str, list[str]] | None:
    """``[--stdin|--no-stdin] [--env K=V]... [--cwd DIR] SOCK -- ARGV...``; None when malformed."""
    args = list(argv)
    forward_stdin: bool | None = None
    env: dict[str, str] = {}
    cwd: str | None = None
    while args and args[0].startswith("--") and args[0] != "--":
        opt = args.pop(0)
        if opt in ("--stdin", "--no-stdin"):
            forward_stdin = opt == "--stdin"
        elif opt == "--env" and args and "=" in args[0]:
            k, _, v = args.pop(0).partition("=")
            env[k] = v
        elif opt == "--cwd" and args:
            cwd = args.pop(0)
        else:
            return None
    if len(args) < 3 or args[1] != "--":
        return None
    return forward_stdin, env, cwd, args[0], args[2:]


class _Client:
    """One command in the guest: spawn it once the guest says hello, relay stdin, output and signals."""

    def __init__(self, sock: socket.socket, command: list[str], stdin: bool, env: dict[str, str], cwd: str | None):
        self.sock = sock
        self.command, self.forward_stdin, self.env, self.cwd = command, stdin, env, cwd
        self.inbuf = bytearray()
        self.discarding = False  # inside a line longer than MAX_LINE: drop up to its newline
        self.started = False
        self.code: int | None = None
        self.cpu_s = 0.0
        self.error: str | None = None
        self.stdin_open = stdin
        self.pending_signals: list[int] = []

    def send(self, msg: dict) -> None:
        self.sock.sendall(json.dumps(msg, separators=(",", ":")).encode() + b"\n")

    def signals(self, wake_r: int) -> None:
        """Signals caught since the last read: to the guest's process, or kept until it runs."""
        try:
            sigs = os.read(wake_r, 64)
        except BlockingIOError:
            sigs = b""
        for sig in sigs:
            if self.started:
                self.send({"op": "signal", "id": 1, "sig": sig})
            else:
                self.pending_signals.append(sig)

    def stdin(self) -> None:
        data = os.read(0, 32768)
        if data:
            self.send({"op": "stdin", "id": 1, "data": base64.b64encode(data).decode()})
        else:
            self.send({"op": "eof", "id": 1})
            self.stdin_open = False

    def receive(self) -> None:
        data = self.sock.recv(65536)
        if not data:
            self.error = self.error or "the guest multiplexer closed the connection"
            self.code = EXIT_LOST
            return
        self.inbuf += data
        while self.code is None:
            nl = self.inbuf.find(b"\n")
            if nl < 0:
                if self.discarding:
                    self.inbuf.clear()
                elif len(self.inbuf) > MAX_LINE:
                    _say(f"ignored a line of more than {MAX_LINE} bytes from the multiplexer")
                    self.inbuf.clear()
                    self.discarding = True
                return
            line = bytes(self.inbuf[:nl])
            del self.inbuf[: nl + 1]
            if self.discarding:
                self.discarding = False
                continue
            self.line(line)

    def line(self, line: bytes) -> None:
        """One line from the multiplexer: a message, or garbage that is reported and skipped."""
        if not line.strip():
            return
        try:
            msg = json.loads(line)
        except (ValueError, RecursionError) as e:  # UnicodeDecodeError is a ValueError
            msg = f"{type(e).__name__}: {e}"
        if not isinstance(msg, dict):
            _say(f"ignored a line from the multiplexer that is not a message ({msg!s:.80}): {line[:80]!r}")
            return
        try:
            self.event(msg)
        except (ValueError, TypeError) as e:  # binascii.Error is a ValueError
            _say(f"ignored a malformed message from the multiplexer ({type(e).__name__}: {e}): {line[:80]!r}")
            if msg.get("ev") == "exit" and msg.get("id") == 1:
                self.error, self.code = "the guest's exit message was malformed: its status is unknown", EXIT_LOST

    def event(self, msg: dict) -> None:
        ev = msg.get("ev")
        if ev == "hello" and not self.started:
            self.started = True
            spawn = {"op": "spawn", "id": 1, "argv": self.command, "stdin": bool(self.forward_stdin)}
            if self.env:
                spawn["env"] = self.env
            if self.cwd:
                spawn["cwd"] = self.cwd
            self.send(spawn)
            for sig in self.pending_signals:  # a signal that came while the guest booted
                self.send({"op": "signal", "id": 1, "sig": sig})
        elif msg.get("id") != 1:
            return
        elif ev == "out":
            _write_all(1 if msg.get("fd") == 1 else 2, base64.b64decode(msg.get("data", ""), validate=True))
        elif ev == "error":
            self.error = str(msg.get("message"))
        elif ev == "exit":
            self.code = int(msg.get("code", EXIT_LOST))
            self.cpu_s = float(msg.get("cpu_s") or 0.0)


def _wake_pipe() -> int:
    """Signals arrive on a pipe, so the loop sees them between two reads; its read end."""
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.set_wakeup_fd(wake_w)
    for sig in FORWARDED_SIGNALS:
        signal.signal(sig, lambda *_: None)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    return wake_r


def main(argv: list[str]) -> int:
    parsed = _parse(argv)
    if parsed is None:
        return _usage()
    forward_stdin, env, cwd, sock_path, command = parsed
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(sock_path)
    except OSError as e:
        _say(f"cannot reach the guest multiplexer at {sock_path}: {e.strerror}")
        return 255
    wake_r = _wake_pipe()
    client = _Client(sock, command, _auto_stdin() if forward_stdin is None else forward_stdin, env, cwd)
    deadline = time.monotonic() + READY_TIMEOUT_S
    client.send({"op": "hello"})
    while client.code is None:
        readers = [sock, wake_r] + ([0] if client.started and client.stdin_open else [])
        timeout = max(0.0, deadline - time.monotonic()) if not client.started else None
        try:
            ready, _, _ = select.select(readers, [], [], timeout)
        except InterruptedError:
            continue
        if not ready and not client.started:
            _say(f"the guest behind {sock_path} was not ready within {READY_TIMEOUT_S:g} s")
            return 255
        if wake_r in ready:
            client.signals(wake_r)
        if 0 in ready:
            client.stdin()
        if sock in ready:
            client.receive()
    sock.close()
    return _finish(client)


def _finish(client: _Client) -> int:
    """The command's exit status as a shell would give it; the guest's CPU when asked."""
    code = client.code
    if client.error and (code == EXIT_LOST or code in (126, 127)):
        _say(client.error)
    if os.environ.get("HVNET_GEXEC_CPU") == "1":
        os.write(2, f"hvnet-guest-cpu {client.cpu_s:.6f}\n".encode())
    if code == EXIT_LOST:
        return 255
    assert code is not None
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
