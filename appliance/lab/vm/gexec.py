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


def main(argv: list[str]) -> int:
    args = list(argv)
    forward_stdin: bool | None = None
    env: dict[str, str] = {}
    cwd: str | None = None
    while args and args[0].startswith("--") and args[0] != "--":
        opt = args.pop(0)
        if opt == "--stdin":
            forward_stdin = True
        elif opt == "--no-stdin":
            forward_stdin = False
        elif opt == "--env" and args and "=" in args[0]:
            k, _, v = args.pop(0).partition("=")
            env[k] = v
        elif opt == "--cwd" and args:
            cwd = args.pop(0)
        else:
            return _usage()
    if len(args) < 3 or args[1] != "--":
        return _usage()
    sock_path, command = args[0], args[2:]
    if forward_stdin is None:
        forward_stdin = _auto_stdin()

    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        sock.connect(sock_path)
    except OSError as e:
        _say(f"cannot reach the guest multiplexer at {sock_path}: {e.strerror}")
        return 255

    # Signals arrive on a pipe so that the loop below sees them between two reads.
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_w, False)
    os.set_blocking(wake_r, False)
    signal.set_wakeup_fd(wake_w)
    for sig in FORWARDED_SIGNALS:
        signal.signal(sig, lambda *_: None)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)

    def send(msg: dict) -> None:
        sock.sendall(json.dumps(msg, separators=(",", ":")).encode() + b"\n")

    inbuf = bytearray()
    started = False
    deadline = time.monotonic() + READY_TIMEOUT_S
    code: int | None = None
    cpu_s = 0.0
    error: str | None = None
    stdin_open = forward_stdin
    pending_signals: list[int] = []
    send({"op": "hello"})
    while code is None:
        readers = [sock, wake_r] + ([0] if started and stdin_open else [])
        timeout = max(0.0, deadline - time.monotonic()) if not started else None
        try:
            ready, _, _ = select.select(readers, [], [], timeout)
        except InterruptedError:
            continue
        if not ready and not started:
            _say(f"the guest behind {sock_path} was not ready within {READY_TIMEOUT_S:g} s")
            return 255
        if wake_r in ready:
            try:
                sigs = os.read(wake_r, 64)
            except BlockingIOError:
                sigs = b""
            for sig in sigs:
                if started:
                    send({"op": "signal", "id": 1, "sig": sig})
                else:
                    pending_signals.append(sig)
        if 0 in ready:
            data = os.read(0, 32768)
            if data:
                send({"op": "stdin", "id": 1, "data": base64.b64encode(data).decode()})
            else:
                send({"op": "eof", "id": 1})
                stdin_open = False
        if sock in ready:
            data = sock.recv(65536)
            if not data:
                error = error or "the guest multiplexer closed the connection"
                code = EXIT_LOST
                break
            inbuf += data
            while code is None:
                nl = inbuf.find(b"\n")
                if nl < 0:
                    break
                line = bytes(inbuf[:nl])
                del inbuf[: nl + 1]
                try:
                    msg = json.loads(line)
                except ValueError:
                    continue
                ev = msg.get("ev")
                if ev == "hello" and not started:
                    started = True
                    spawn = {"op": "spawn", "id": 1, "argv": command, "stdin": bool(forward_stdin)}
                    if env:
                        spawn["env"] = env
                    if cwd:
                        spawn["cwd"] = cwd
                    send(spawn)
                    for sig in pending_signals:  # a signal that came while the guest booted
                        send({"op": "signal", "id": 1, "sig": sig})
                elif msg.get("id") != 1:
                    continue
                elif ev == "out":
                    _write_all(1 if msg.get("fd") == 1 else 2, base64.b64decode(msg.get("data", "")))
                elif ev == "error":
                    error = str(msg.get("message"))
                elif ev == "exit":
                    code = int(msg.get("code", EXIT_LOST))
                    cpu_s = float(msg.get("cpu_s") or 0.0)
    sock.close()
    if error and (code == EXIT_LOST or code in (126, 127)):
        _say(error)
    if os.environ.get("HVNET_GEXEC_CPU") == "1":
        os.write(2, f"hvnet-guest-cpu {cpu_s:.6f}\n".encode())
    if code == EXIT_LOST:
        return 255
    return 128 - code if code < 0 else code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
