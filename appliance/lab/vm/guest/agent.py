"""hvnet's in-guest agent: runs programs for the host over a virtio-serial port.

The probe guest exists to test its own network, so the host must reach it
through something that does not depend on that network: a virtio-serial port
named ``org.hvnet.agent``.  This agent is the guest end of that channel.  It
speaks JSON lines and multiplexes any number of concurrent processes:

host -> guest::

    {"op": "spawn", "id": N, "argv": [...], "env": {...}, "cwd": "/", "stdin": true}
    {"op": "stdin", "id": N, "data": "<base64>"}
    {"op": "eof", "id": N}
    {"op": "signal", "id": N, "sig": 15}
    {"op": "ping", "seq": K}
    {"op": "hello", "reset": true}

guest -> host::

    {"ev": "hello", "version": V, "boot_s": uptime, "instance": "..."}
    {"ev": "out", "id": N, "fd": 1|2, "data": "<base64>"}
    {"ev": "exit", "id": N, "code": rc or -signal, "cpu_s": user+sys}
    {"ev": "error", "id": N, "message": "..."}
    {"ev": "pong", "seq": K}

Every process's output is sent before its ``exit`` event.  ``hello`` is sent
at start and in answer to a ``hello`` op, so a host that connects later learns
that the guest is ready; ``instance`` changes whenever the agent restarts, so
the host knows the processes it was told about are gone.

This file runs inside the guest with a minimal standard library and nothing
else: standard library only, every import at the top (the image builder finds
the modules to copy by importing this file), Python 3.9 syntax.
"""

from __future__ import annotations

import binascii
import errno
import json
import os
import resource  # noqa: F401  (os.wait4 imports it on first use: the image builder must see it)
import select
import signal
import sys
import time

# Imports are few on purpose: under software emulation every module costs tens of milliseconds
# of boot time (base64, subprocess and traceback together cost ~0.3 s), so the agent uses
# binascii, its own fork/exec and a one-line error report instead.

VERSION = 1
# Stop reading children's output while this much is waiting for the host:
# the children then block on their pipes instead of the agent running out of memory.
MAX_PENDING = 1 << 20
# The longest request the host sends is a stdin chunk (32 KiB, ~44 KB encoded); a longer
# line is dropped up to its newline instead of growing the buffer without end.
MAX_REQUEST = 4 << 20
READ_CHUNK = 32 * 1024
# While the host end is closed the port polls as "hung up" without pause; look again this often.
HOST_DOWN_RETRY_S = 0.2
DEFAULT_ENV = {"PATH": "/usr/sbin:/usr/bin:/sbin:/bin", "HOME": "/root", "TERM": "dumb", "LANG": "C.UTF-8"}


def log(message: str) -> None:
    """One line on the agent's stderr (the guest console): the only place a host-less agent can speak."""
    try:
        os.write(2, f"hvnet-agent: {message}\n".encode())
    except OSError:
        pass


def uptime() -> float:
    """Seconds since the guest kernel started (the host reports it as boot time)."""
    try:
        with open("/proc/uptime") as f:
            return float(f.read().split()[0])
    except (OSError, ValueError, IndexError):
        return -1.0


def b64encode(data: bytes) -> str:
    return binascii.b2a_base64(data, newline=False).decode()


def b64decode(text: str) -> bytes:
    return binascii.a2b_base64(text)


def spawn_process(argv: list[str], env: dict[str, str], cwd: str, want_stdin: bool) -> tuple[int, int | None, int, int]:
    """Fork and exec ``argv`` in its own session; (pid, stdin fd or None, stdout fd, stderr fd).

    An exec failure is reported back over a close-on-exec pipe and raised here
    as OSError, like ``subprocess`` does, without importing it.
    """
    if want_stdin:
        in_r, in_w = os.pipe()
    else:
        in_r, in_w = os.open(os.devnull, os.O_RDONLY | os.O_CLOEXEC), None
    out_r, out_w = os.pipe()
    err_r, err_w = os.pipe()
    ex_r, ex_w = os.pipe()  # close-on-exec: EOF without data means the exec succeeded
    pid = os.fork()
    if pid == 0:  # the child: only system calls from here on
        try:
            os.setsid()  # its own process group, so that a signal reaches its children too
            os.dup2(in_r, 0)
            os.dup2(out_w, 1)
            os.dup2(err_w, 2)
            os.closerange(3, ex_w)
            os.closerange(ex_w + 1, 1 << 16)
            for sig in (signal.SIGPIPE, signal.SIGXFSZ, signal.SIGCHLD):  # Python's settings, not the program's
                signal.signal(sig, signal.SIG_DFL)
            signal.set_wakeup_fd(-1)
            os.chdir(cwd)
            os.execvpe(argv[0], argv, env)
        except BaseException as e:
            os.write(ex_w, f"{getattr(e, 'errno', 0) or 0}:{e}".encode(errors="replace"))
        os._exit(127)
    for fd in (in_r, out_w, err_w, ex_w):
        os.close(fd)
    failure = b""
    while True:
        chunk = os.read(ex_r, 4096)
        if not chunk:
            break
        failure += chunk
    os.close(ex_r)
    if failure:
        os.waitpid(pid, 0)
        for fd in (in_w, out_r, err_r):
            if fd is not None:
                os.close(fd)
        code, _, message = failure.decode(errors="replace").partition(":")
        raise OSError(int(code) if code.isdigit() else 0, message)
    return pid, in_w, out_r, err_r


def exit_code(status: int) -> int:
    """The exit code of a wait status: the code, or minus the signal that killed the process."""
    if os.WIFSIGNALED(status):
        return -os.WTERMSIG(status)
    if os.WIFEXITED(status):
        return os.WEXITSTATUS(status)
    return -255


class Proc:
    """One spawned process and the pipes the agent still serves for it."""

    def __init__(self, ident: int, pid: int) -> None:
        self.id = ident
        self.pid = pid
        self.outputs: dict[int, int] = {}  # pipe fd -> 1 (stdout) or 2 (stderr)
        self.stdin_fd: int | None = None
        self.stdin_buf = bytearray()
        self.stdin_eof = False
        self.silent = False  # forgotten by a host reset: reap quietly


class Agent:
    """The event loop: one port, many processes, never blocking on any of them."""

    def __init__(self, port: str) -> None:
        self.port_path = port
        # "fd:N" serves an inherited socket instead of a device: the host-side tests run the agent that way.
        self.socket_mode = port.startswith("fd:")
        if self.socket_mode:
            self.port = int(port[3:])
            os.set_blocking(self.port, False)
        else:
            self.port = os.open(port, os.O_RDWR | os.O_NONBLOCK | os.O_CLOEXEC)
        self.inbuf = bytearray()
        self.discarding = False  # inside a request longer than MAX_REQUEST: drop up to its newline
        self.outbuf = bytearray()
        self.procs: dict[int, Proc] = {}
        self.by_pid: dict[int, Proc] = {}
        self.instance = os.urandom(8).hex()
        self.host_down_until = 0.0
        self.wake_r, self.wake_w = os.pipe()
        for fd in (self.wake_r, self.wake_w):
            os.set_blocking(fd, False)
            os.set_inheritable(fd, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that SIGCHLD wakes poll()

    # -- sending -------------------------------------------------------------

    def send(self, msg: dict) -> None:
        self.outbuf += json.dumps(msg, separators=(",", ":")).encode() + b"\n"
        self.flush()

    def flush(self) -> None:
        while self.outbuf:
            try:
                n = os.write(self.port, self.outbuf)
            except BlockingIOError:
                return
            except OSError as e:
                if e.errno in (errno.EAGAIN, errno.EPIPE, errno.ENODEV, errno.ENOTCONN, errno.EINTR):
                    return
                raise
            del self.outbuf[:n]

    def hello(self, **extra: object) -> None:
        self.send({"ev": "hello", "version": VERSION, "boot_s": uptime(), "instance": self.instance, **extra})

    # -- requests ------------------------------------------------------------

    def handle_line(self, line: bytes) -> None:
        try:
            msg = json.loads(line)
            op = msg["op"]
        except (ValueError, KeyError, TypeError, IndexError, RecursionError):
            # A reconnect can cut a line in two: ignore the fragment, say so once.
            self.send({"ev": "error", "id": None, "message": "unreadable request ignored"})
            return
        handler = getattr(self, f"op_{op}", None)
        if handler is None:
            self.send({"ev": "error", "id": msg.get("id"), "message": f"unknown op {op!r}"})
            return
        try:
            handler(msg)
        except Exception as e:
            self.send({"ev": "error", "id": msg.get("id"), "message": f"{op}: {type(e).__name__}: {e}"})

    def op_hello(self, msg: dict) -> None:
        if msg.get("reset"):
            self.forget_all()
        self.hello(reply=True)

    def op_ping(self, msg: dict) -> None:
        self.send({"ev": "pong", "seq": msg.get("seq")})

    def op_spawn(self, msg: dict) -> None:
        ident = msg["id"]
        if ident in self.procs:
            self.send({"ev": "error", "id": ident, "message": f"id {ident} is still running"})
            return
        argv = [str(a) for a in msg["argv"]]
        env = dict(DEFAULT_ENV)
        env.update({str(k): str(v) for k, v in (msg.get("env") or {}).items()})
        want_stdin = bool(msg.get("stdin"))
        try:
            if not argv:
                raise ValueError("empty argv")
            pid, stdin_fd, out_fd, err_fd = spawn_process(argv, env, msg.get("cwd") or "/", want_stdin)
        except (OSError, ValueError) as e:
            self.send({"ev": "error", "id": ident, "message": f"cannot run {argv[0] if argv else '?'}: {e}"})
            code = 126 if getattr(e, "errno", None) in (errno.EACCES, errno.EPERM) else 127
            self.send({"ev": "exit", "id": ident, "code": code, "cpu_s": 0})
            return
        proc = Proc(ident, pid)
        for fd, num in ((out_fd, 1), (err_fd, 2)):
            os.set_blocking(fd, False)
            proc.outputs[fd] = num
        if stdin_fd is not None:
            proc.stdin_fd = stdin_fd
            os.set_blocking(stdin_fd, False)
        self.procs[ident] = proc
        self.by_pid[proc.pid] = proc

    def op_stdin(self, msg: dict) -> None:
        proc = self.procs.get(msg["id"])
        if proc is not None and proc.stdin_fd is not None and not proc.stdin_eof:
            proc.stdin_buf += b64decode(msg["data"])
            self.write_stdin(proc)

    def op_eof(self, msg: dict) -> None:
        proc = self.procs.get(msg["id"])
        if proc is not None:
            proc.stdin_eof = True
            self.write_stdin(proc)

    def op_signal(self, msg: dict) -> None:
        proc = self.procs.get(msg["id"])
        if proc is None:
            return  # already gone: its exit event is on the way or was sent
        self.kill(proc, int(msg.get("sig", signal.SIGTERM)))

    # -- processes -----------------------------------------------------------

    @staticmethod
    def kill(proc: Proc, sig: int) -> None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            try:
                os.kill(proc.pid, sig)
            except ProcessLookupError:
                pass

    def forget_all(self) -> None:
        """A new host session: whatever ran for the previous one is killed and reaped quietly."""
        for proc in list(self.procs.values()):
            proc.silent = True
            self.kill(proc, signal.SIGKILL)
            self.close_pipes(proc)
        self.procs.clear()

    def write_stdin(self, proc: Proc) -> None:
        if proc.stdin_fd is None:
            return
        while proc.stdin_buf:
            try:
                n = os.write(proc.stdin_fd, proc.stdin_buf)
            except BlockingIOError:
                return
            except OSError:  # the process closed its stdin: nothing more can go in
                proc.stdin_buf.clear()
                proc.stdin_eof = True
                break
            del proc.stdin_buf[:n]
        if proc.stdin_eof:
            os.close(proc.stdin_fd)
            proc.stdin_fd = None

    def read_output(self, proc: Proc, fd: int, drain: bool = False) -> None:
        """Forward what the pipe holds; ``drain`` reads until it is empty (after the process exited)."""
        while True:
            try:
                data = os.read(fd, READ_CHUNK)
            except BlockingIOError:
                return
            except OSError:
                data = b""
            if not data:
                self.close_output(proc, fd)
                return
            if not proc.silent:
                self.send({"ev": "out", "id": proc.id, "fd": proc.outputs[fd], "data": b64encode(data)})
            if not drain:
                return

    @staticmethod
    def close_output(proc: Proc, fd: int) -> None:
        proc.outputs.pop(fd, None)
        try:
            os.close(fd)
        except OSError:
            pass

    def close_pipes(self, proc: Proc) -> None:
        for fd in list(proc.outputs):
            self.close_output(proc, fd)
        if proc.stdin_fd is not None:
            try:
                os.close(proc.stdin_fd)
            except OSError:
                pass
            proc.stdin_fd = None

    def reap(self) -> None:
        """Collect every exited child (the agent is PID 1: orphans come here too)."""
        while True:
            try:
                pid, status, usage = os.wait4(-1, os.WNOHANG)
            except ChildProcessError:
                return
            except InterruptedError:
                continue
            if pid == 0:
                return
            proc = self.by_pid.pop(pid, None)
            if proc is None:
                continue  # an orphan re-parented to PID 1, or a forgotten one's child
            for fd in list(proc.outputs):
                self.read_output(proc, fd, drain=True)
            self.close_pipes(proc)
            if proc.silent:
                continue
            self.procs.pop(proc.id, None)
            cpu = usage.ru_utime + usage.ru_stime
            self.send({"ev": "exit", "id": proc.id, "code": exit_code(status), "cpu_s": round(cpu, 6)})

    # -- the loop ------------------------------------------------------------

    def poll_once(self, timeout: float) -> None:
        poller = select.poll()
        now = time.monotonic()
        port_watched = now >= self.host_down_until
        if port_watched:
            poller.register(self.port, select.POLLIN | (select.POLLOUT if self.outbuf else 0))
        poller.register(self.wake_r, select.POLLIN)
        fd_owner: dict[int, Proc] = {}
        accept_output = len(self.outbuf) < MAX_PENDING
        for proc in self.procs.values():
            if accept_output:
                for fd in proc.outputs:
                    poller.register(fd, select.POLLIN)
                    fd_owner[fd] = proc
            if proc.stdin_fd is not None and proc.stdin_buf:
                poller.register(proc.stdin_fd, select.POLLOUT)
                fd_owner[proc.stdin_fd] = proc
        wait_ms = int(timeout * 1000) if port_watched else int(HOST_DOWN_RETRY_S * 1000)
        try:
            events = poller.poll(wait_ms)
        except InterruptedError:
            events = []
        if not port_watched:
            self.flush()  # the host may be back: try to deliver what is waiting
        for fd, ev in events:
            if fd == self.port:
                self.port_event(ev)
            elif fd == self.wake_r:
                try:
                    while os.read(self.wake_r, 512):
                        pass
                except BlockingIOError:
                    pass
            elif fd in fd_owner:
                proc = fd_owner[fd]
                if fd == proc.stdin_fd:
                    if ev & (select.POLLERR | select.POLLHUP):
                        proc.stdin_buf.clear()
                        proc.stdin_eof = True
                    self.write_stdin(proc)
                elif fd in proc.outputs:
                    self.read_output(proc, fd)
        self.reap()

    def port_event(self, ev: int) -> None:
        if ev & select.POLLIN:
            try:
                data = os.read(self.port, 65536)
            except BlockingIOError:
                data = None
            except OSError as e:
                log(f"reading the port failed: {e}")
                data = b""
            if data:
                self.receive(data)
                return
            if data == b"":
                self.host_gone()
                return
        if ev & select.POLLOUT:
            self.flush()
        if ev & (select.POLLHUP | select.POLLERR) and not ev & select.POLLIN:
            self.host_gone()

    def receive(self, data: bytes) -> None:
        """Run the complete requests in ``data``; what is longer than MAX_REQUEST is dropped, said once."""
        self.inbuf += data
        while True:
            nl = self.inbuf.find(b"\n")
            if nl < 0:
                if self.discarding:
                    self.inbuf.clear()
                elif len(self.inbuf) > MAX_REQUEST:
                    self.send({"ev": "error", "id": None, "message": f"request over {MAX_REQUEST} bytes ignored"})
                    self.inbuf.clear()
                    self.discarding = True
                return
            line = bytes(self.inbuf[:nl])
            del self.inbuf[: nl + 1]
            if self.discarding:
                self.discarding = False
            elif line.strip():
                self.handle_line(line)

    def host_gone(self) -> None:
        """Nobody is connected on the host side: look again later (processes keep running)."""
        if self.socket_mode:
            raise SystemExit(0)  # a socket, unlike the port, never comes back
        self.host_down_until = time.monotonic() + HOST_DOWN_RETRY_S
        self.inbuf.clear()  # a half request from the old connection must not prefix the next one
        self.discarding = False

    def run(self) -> None:
        log(f"listening on {self.port_path} (instance {self.instance})")
        self.hello()
        while True:
            self.poll_once(timeout=5.0)


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: agent.py /dev/vportNpM | fd:N", file=sys.stderr)
        return 2
    try:
        Agent(argv[1]).run()
    except Exception:
        # As the guest's PID 1 the agent must not die: report, then start afresh in this same process.
        log(f"fatal error, restarting: {_describe_exception()}")
        time.sleep(1)
        os.execv(sys.executable, [sys.executable, *_interpreter_flags(), *sys.argv])
    return 0


def _describe_exception() -> str:
    """The current exception and where it happened, in one line (no traceback module to import)."""
    _, exc, tb = sys.exc_info()
    where = []
    while tb is not None:
        where.append(f"{tb.tb_frame.f_code.co_name}:{tb.tb_lineno}")
        tb = tb.tb_next
    return f"{type(exc).__name__}: {exc} (at {' > '.join(where)})"


def _interpreter_flags() -> list[str]:
    """The interpreter flags this agent was started with, to re-exec itself the same way."""
    flags = []
    if sys.flags.isolated:
        flags.append("-I")
    if sys.flags.no_site:
        flags.append("-S")
    if sys.flags.utf8_mode:
        flags += ["-X", "utf8"]
    return flags


if __name__ == "__main__":
    sys.exit(main(sys.argv))
