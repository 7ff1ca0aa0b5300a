"""Programs inside a VM through libvirt's QEMU guest agent: no network path to the VM is needed.

``virsh qemu-agent-command`` on the VM's hypervisor (here, or over SSH
through the Host's runner) sends one QMP command to the ``qemu-ga`` inside
the guest over its ``org.qemu.guest_agent.0`` virtio-serial channel.
:class:`AgentChannel` is that one call; :class:`AgentRunner` is the
:class:`~appliance.core.runner.CommandRunner` protocol on top of it
(``guest-exec`` + ``guest-exec-status``); :class:`AgentLauncher` makes the
:class:`~appliance.endpoints.jobs.Group` of :mod:`.agentshell`.

What the guest agent imposes, and how it is met:

* ``guest-exec`` is asynchronous and its output (base64) comes back only
  when the process has ended and closed its pipes: a run is an exec and
  status polls; a group's jobs are detached from the exec's pipes.
* One agent command at a time per domain: calls on one channel are serialized here.
* No signals: a process is stopped with an exec of ``kill`` (by PID, only
  while its start time matches).
* EL guests' qemu-ga blocks ``guest-exec`` and ``guest-file-*`` by default:
  :class:`AgentUnavailable` then says how to allow them.
* libvirt marks a domain *tainted* (``custom-ga-command``) once any such
  command was sent to it: a note in its log, nothing else changes.

A group must not outlive the hvnet that started it, but nothing connects a
VM's processes to hvnet's: the group's holder in the VM ends them when hvnet
stops renewing a lease, and :meth:`AgentLauncher.sweep` (called before a
run's first group) ends at once what a killed hvnet left, from a record kept
on this machine (``records/<hash of the domain>.json``).
"""

from __future__ import annotations

import base64
import binascii
import fcntl
import json
import os
import re
import secrets
import subprocess
import threading
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Optional

from appliance.core.errors import CommandFailed, CommandTimedOut, HvnetError, MissingTool
from appliance.core.runner import CommandRunner
from appliance.endpoints import agentshell as sh
from appliance.endpoints.agentshell import (
    NOT_RUNNING_HINT,
    AgentUnavailable,
    DomainNotFound,
    agent_argv,
    classify_error,
    decode,
    parse_reply,
    record_name,
    status_code,
)
from appliance.endpoints.jobs import NAME, STOP_GRACE_S, Job, JobResult, check_name
from appliance.endpoints.remote import parse_sections, parse_stamp

LEASE_S = 180  # the VM ends a group hvnet has not touched for this long
POLL_EVERY_S = 0.5  # at most one agent call per group poll in this time
READ_CHUNK = 1 << 20  # guest-file-read's count
WHICH = r"""case $1 in ''|*/*) [ -f "$1" ] && [ -x "$1" ] && echo "$1"; exit ;; esac
IFS=:; for d in $PATH; do [ -f "$d/$1" ] && [ -x "$d/$1" ] && { echo "$d/$1"; exit 0; }; done; exit 1
"""
_SAFE_BASE = re.compile(r"^/[A-Za-z0-9_./-]{1,200}$")
_SIGNAL = re.compile(r"^(?:[A-Z][A-Z0-9+-]{0,15}|[0-9]{1,2})$")


# -- the channel -------------------------------------------------------------------------------


class AgentChannel:
    """One domain's guest agent through ``virsh qemu-agent-command``, run by a runner (here or a Host's SSH)."""

    def __init__(self, runner: CommandRunner, domain: str, *, uri: str | None = None, label: str | None = None,
                 timeout: float = 10.0) -> None:  # fmt: skip
        self.runner = runner
        self.domain = domain
        self.uri = uri
        self.label = label or f"domain {domain!r}"
        self.timeout = timeout
        self._lock = threading.Lock()  # one agent command at a time per domain

    def command(self, execute: str, arguments: dict | None = None, *, timeout: float | None = None) -> Any:
        """Send one command; returns its reply's ``return``."""
        wait = self.timeout if timeout is None else timeout
        argv = agent_argv(self.domain, execute, arguments, wait, self.uri)
        with self._lock:
            try:
                res = self.runner.run(argv, check=False, timeout=wait + 30.0)
            except CommandTimedOut:
                raise AgentUnavailable(f"{self.label}: virsh gave no answer to {execute} within {wait + 30:g} s",
                                       hint=NOT_RUNNING_HINT) from None  # fmt: skip
        if res.returncode != 0:
            raise classify_error(res.stderr or res.stdout, f"{self.label}: {execute}")
        return parse_reply(res.stdout, f"{self.label}: {execute}")

    def exec_start(self, argv: Sequence[str], input_text: Optional[str] = None) -> int:
        args: dict[str, Any] = {"path": argv[0], "arg": list(argv[1:]), "capture-output": True}
        if input_text is not None:
            args["input-data"] = base64.b64encode(input_text.encode()).decode()
        ret = self.command("guest-exec", args)
        if not isinstance(ret, dict) or not isinstance(ret.get("pid"), int):
            raise HvnetError(f"{self.label}: guest-exec answered {ret!r:.200}")
        return int(ret["pid"])

    def exec_status(self, pid: int) -> dict[str, Any]:
        ret = self.command("guest-exec-status", {"pid": pid})
        if not isinstance(ret, dict):
            raise HvnetError(f"{self.label}: guest-exec-status answered {ret!r:.200}")
        return ret

    def run(self, argv: Sequence[str], *, timeout: float = 60.0, input_text: Optional[str] = None
            ) -> subprocess.CompletedProcess[str]:  # fmt: skip
        """Run ``argv`` in the guest to its end; a timeout kills it (by PID) and raises CommandTimedOut."""
        if not argv:
            raise ValueError("empty argv")
        pid = self.exec_start(argv, input_text)
        deadline = time.monotonic() + timeout
        pause = 0.01
        while True:
            st = self.exec_status(pid)
            if st.get("exited"):
                return subprocess.CompletedProcess(list(argv), status_code(st), decode(st.get("out-data")),
                                                   decode(st.get("err-data")))  # fmt: skip
            if time.monotonic() > deadline:
                self._kill(pid)
                raise CommandTimedOut(list(argv), -1, f"no result within {timeout:g} s (killed in the guest)")
            time.sleep(pause)
            pause = min(pause * 2, 0.2)

    def _kill(self, pid: int) -> None:
        """KILL a process guest-exec started.  It is qemu-ga's child, seen running just before: its PID is
        another process's only if it ended and was reaped in that instant and the PID was taken at once."""
        try:
            kp = self.exec_start(["kill", "-KILL", str(pid)])
            for _ in range(50):
                if self.exec_status(kp).get("exited"):
                    break
                time.sleep(0.02)
            for _ in range(50):  # collect the killed one's status: qemu-ga keeps it until asked
                if self.exec_status(pid).get("exited"):
                    break
                time.sleep(0.02)
        except HvnetError:
            pass


def boot_id(runner: CommandRunner) -> str | None:
    """The kernel's boot id (``/proc/sys/kernel/random/boot_id``): changes at every boot."""
    text = runner.read_text("/proc/sys/kernel/random/boot_id")
    return text.strip() if text and text.strip() else None


# -- the runner ----------------------------------------------------------------------------------


class AgentRunner:
    """The :class:`~appliance.core.runner.CommandRunner` protocol inside a VM, through its guest agent."""

    local = False

    def __init__(self, channel: AgentChannel) -> None:
        self.channel = channel

    def which_optional(self, program: str) -> str | None:
        """Searched along the guest's PATH by hand: busybox's ``command -v`` names an applet without a path."""
        res = self.channel.run(["sh", "-c", WHICH, "hvnet-which", program], timeout=30.0)
        path = res.stdout.strip()
        return path if res.returncode == 0 and path.startswith("/") and "\n" not in path else None

    def which(self, program: str) -> str:
        found = self.which_optional(program)
        if found is None:
            raise MissingTool(f"{self.channel.label}: {program!r} is not installed in the guest",
                              hint=f"install {program!r} in the guest")  # fmt: skip
        return found

    def run(self, argv: Sequence[str], *, check: bool = True, env: Mapping[str, str] | None = None,
            timeout: float = 60.0, input_text: str | None = None) -> subprocess.CompletedProcess[str]:  # fmt: skip
        """Run to completion in the guest; guest-exec's own ``env`` would replace the whole environment
        (and the PATH it searches), so ``env`` is given through ``env K=V ARGV``."""
        full = list(argv) if not env else ["env", *(f"{k}={v}" for k, v in env.items()), *argv]
        res = self.channel.run(full, timeout=timeout, input_text=input_text)
        res.args = list(argv)
        if check and res.returncode != 0:
            raise CommandFailed(list(argv), res.returncode, res.stderr or res.stdout)
        return res

    def popen(self, argv: Sequence[str], **_: Any) -> subprocess.Popen[bytes]:
        raise HvnetError(f"{self.channel.label}: a long-running program with pipes runs here or over SSH, "
                         "not through the guest agent (an AgentLauncher group runs jobs in the VM)")  # fmt: skip

    def read_text(self, path: str) -> str | None:
        """A small file through guest-file-open/read/close; None when it cannot be read."""
        try:
            handle = self.channel.command("guest-file-open", {"path": path, "mode": "r"})
        except (AgentUnavailable, DomainNotFound):
            raise
        except HvnetError:
            return None  # no such file, or not readable
        chunks = []
        try:
            while True:
                got = self.channel.command("guest-file-read", {"handle": handle, "count": READ_CHUNK})
                chunks.append(base64.b64decode(got.get("buf-b64", "")))
                if got.get("eof") or not got.get("count"):
                    break
        except (HvnetError, binascii.Error, AttributeError):
            return None
        finally:
            try:
                self.channel.command("guest-file-close", {"handle": handle})
            except HvnetError:
                pass
        return b"".join(chunks).decode("utf-8", errors="replace")

    def exists(self, path: str) -> bool:
        return self.channel.run(["test", "-e", path], timeout=30.0).returncode == 0


# -- the console-side record -----------------------------------------------------------------------


@contextmanager
def _record(path: Path) -> Iterator[dict[str, Any]]:
    """The record, read and written under a lock (two hvnet processes may share a domain)."""
    path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        try:
            data = json.loads(path.read_text())
            if not isinstance(data, dict):
                data = {}
        except (OSError, ValueError):
            data = {}
        data.setdefault("groups", {})
        yield data
        if data["groups"]:
            tmp = path.with_suffix(".tmp")
            tmp.write_text(json.dumps(data, indent=1, sort_keys=True))
            tmp.replace(path)
        else:
            path.unlink(missing_ok=True)


def _start_time(pid: int) -> Optional[str]:
    """A process's start time on this machine (``/proc/PID/stat`` field 22), None when it is gone."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        return None


def _me() -> list[Any]:
    return [os.getpid(), _start_time(os.getpid())]


def _alive(owner: Any) -> bool:
    """Whether the hvnet that recorded a group still runs (same PID, same start time)."""
    if not isinstance(owner, list) or len(owner) != 2 or not isinstance(owner[0], int) or owner[1] is None:
        return False
    return _start_time(owner[0]) == owner[1]


class AgentLauncher:
    """Groups inside one VM, through its guest agent (see :mod:`.agentshell`)."""

    def __init__(self, channel: AgentChannel, *, records: Path, base: str = "/var/tmp/hvnet-endpoints",
                 lease_s: int = LEASE_S) -> None:  # fmt: skip
        if not _SAFE_BASE.match(base) or "/../" in f"{base}/":
            raise HvnetError(f"work dir base {base!r}: an absolute path of letters, digits, '_', '.', '-', '/' only")
        self.channel = channel
        self.runner = AgentRunner(channel)
        self.records = Path(records)
        self.base = base.rstrip("/")
        self.lease_s = int(lease_s)
        self.record = self.records / record_name(channel.domain, channel.uri)

    def group(self, label: str) -> AgentGroup:
        return AgentGroup(self, f"{check_name(label)}-{secrets.token_hex(6)}")

    def sh(self, text: str, args: Sequence[str], *, shell: str = "sh", timeout: float = 60.0) -> str:
        """One script in the guest; its stdout (an ``error`` line or a non-zero exit raises)."""
        res = self.channel.run([shell, "-c", text, "hvnet-endpoints", *args], timeout=timeout)
        for line in res.stdout.splitlines():
            if line.startswith("error "):
                raise HvnetError(f"{self.channel.label}: {line[6:]}")
        if res.returncode != 0:
            detail = (res.stderr.strip().splitlines() or ["no message"])[-1]
            raise HvnetError(f"{self.channel.label}: the endpoint script failed (exit {res.returncode}): {detail!r}")
        return res.stdout

    def sweep(self) -> list[str]:
        """Stop what an earlier, killed hvnet left in this VM; returns what was stopped and removed.

        Groups whose hvnet still runs on this machine are left alone; PIDs are signalled only on the
        boot they were recorded on, and only while their start time matches."""
        with _record(self.record) as data:
            groups: dict[str, Any] = data["groups"]
            if not groups:
                return []
            words: list[str] = []
            swept = []
            for gid, g in groups.items():
                d = f"{self.base}/{gid}"
                if not NAME.match(gid) or g.get("dir") != d or _alive(g.get("owner")):
                    continue  # another base's, or a running hvnet's: left alone
                swept.append(gid)
                words += [d, "-", "-"]
                for pid, start in [g.get("holder") or (None, None), *[(p, t) for _, p, t in g.get("pids", [])]]:
                    if isinstance(pid, int) and str(start).isdigit():
                        words += [d, str(pid), str(start)]
            if not swept:
                return []
            out = self.sh(sh.with_common(sh.SWEEP), [str(data.get("boot") or ""), *words])
            for gid in swept:
                del groups[gid]
        done = []
        for line in out.splitlines():
            w = line.split(" ", 1)
            if len(w) == 2 and w[0] in ("stopped", "removed") and f"{w[0]} {w[1]}" not in done:
                done.append(f"{w[0]} {w[1]}")
        return done


class AgentGroup:
    """Jobs inside a VM started together through its guest agent (see :mod:`.agentshell`)."""

    clock = "realtime"
    # Each poll is a shell started in the VM: none while the jobs measure (see appliance.endpoints.wait_all).
    poll_while_quiet = False

    def __init__(self, launcher: AgentLauncher, gid: str) -> None:
        self.launcher = launcher
        self.id = gid
        self.dir = f"{launcher.base}/{gid}"
        self.mark = f"hvnet-{secrets.token_hex(8)}"
        self.ready = 0
        self.released_ns: Optional[int] = None
        self.offset_ns: Optional[int] = None  # the VM's clock minus this machine's, at the release (+- half a call)
        self.results: dict[str, JobResult] = {}
        self.shell = "sh"
        self._pids: dict[str, tuple[int, str]] = {}
        self._names: list[str] = []
        self._last_poll = 0.0
        self._started = False
        self._closed = False

    def _note(self, **fields: Any) -> None:
        with _record(self.launcher.record) as data:
            if "boot" in fields:
                data["boot"] = fields.pop("boot")
            data["domain"] = self.launcher.channel.domain
            if fields.get("drop"):
                data["groups"].pop(self.id, None)
            else:
                data["groups"].setdefault(self.id, {}).update({"dir": self.dir, "owner": _me(), **fields})

    def start(self, jobs: Sequence[Job], *, hold: bool = True, ready_timeout: float = 30.0) -> None:
        """One exec: the start script makes the dir, the holder and every job, and waits at the barrier."""
        self._names = [j.name for j in jobs]
        if len(set(self._names)) != len(self._names):
            raise ValueError("job names must be unique within a group")
        text = sh.start_script(jobs)
        self._note()  # before the exec: a kill during it still leaves the dir to sweep
        self._started = True
        tries = max(1, int(ready_timeout * 100))
        args = [self.launcher.base, self.id, "1" if hold else "0", str(tries), str(self.launcher.lease_s)]
        out = self.launcher.sh(text, args, timeout=ready_timeout + 60.0)
        got = sh.parse_start(out)
        self._pids = got.pids
        self.ready = got.ready
        self.shell = got.shell
        self._note(boot=got.boot, holder=list(got.holder) if got.holder else None,
                   pids=[[n, p, t] for n, (p, t) in got.pids.items()])  # fmt: skip
        self.results = {n: JobResult() for n in self._names}

    def release(self) -> Optional[int]:
        before = time.time_ns()
        out = self.launcher.sh(sh.with_common(sh.RELEASE), [self.dir, "\n" * len(self._names)], shell=self.shell)
        after = time.time_ns()
        self.released_ns = sh.parse_released(out)
        if self.released_ns is not None:
            self.offset_ns = self.released_ns - (before + after) // 2
        return self.released_ns

    def poll(self) -> dict[str, JobResult]:
        """Jobs whose exit status was written since the last poll; at most one agent call per half second."""
        now = time.monotonic()
        if now - self._last_poll < POLL_EVERY_S or not self._started or self._closed:
            return {}
        self._last_poll = now
        ended = {}
        for name, (st, stamp) in sh.parse_poll(self.launcher.sh(sh.POLL, [self.dir])).items():
            r = self.results.get(name)
            if r is None or r.returncode is not None:
                continue
            r.returncode = st if st is not None else -1
            r.started_ns = stamp
            ended[name] = r
        return ended

    def pids(self) -> dict[str, int]:
        return {n: p for n, (p, _) in self._pids.items()}

    def signal(self, names: Sequence[str], sig: str) -> None:
        if not _SIGNAL.match(sig):
            raise ValueError(f"signal {sig!r}")
        wanted = [n for n in names if n in self._pids]
        if wanted and not self._closed:
            self.launcher.sh(sh.with_common(sh.SIGNAL), [self.dir, sig, *wanted])

    def cat(self, files: Sequence[str]) -> dict[str, Optional[str]]:
        out = self.launcher.sh(sh.CAT, [self.dir, self.mark, *files])
        lines = out.splitlines()
        if f"{self.mark} done" not in lines:  # qemu-ga keeps at most 16 MB of a process's output
            raise HvnetError(f"{self.launcher.channel.label}: the files of group {self.id} came back cut short "
                             "(the guest agent returns at most 16 MB per command)")  # fmt: skip
        return parse_sections(lines, self.mark)

    def fetch(self, local_dir: Path) -> None:
        local_dir.mkdir(parents=True, exist_ok=True)
        got = self.cat([f"{n}.{s}" for n in self._names for s in ("out", "err", "stamp")])
        for n in self._names:
            for suffix in ("out", "err"):
                (local_dir / f"{n}.{suffix}").write_text(got.get(f"{n}.{suffix}") or "")
            self.results.setdefault(n, JobResult()).started_ns = parse_stamp(got.get(f"{n}.stamp"))

    def read_text(self, name: str) -> Optional[str]:
        check_name(name)
        return self.cat([name]).get(name)

    def close(self) -> None:
        """Stop what runs (TERM, then KILL after the grace), the holder, remove the dir and the record."""
        if self._closed:
            return
        self._closed = True
        if not self._started:
            return
        try:
            self.launcher.sh(sh.with_common(sh.CLOSE), [self.dir], timeout=60.0 + STOP_GRACE_S)
        finally:
            self._note(drop=True)

    def __enter__(self) -> AgentGroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


__all__ = ["AgentChannel", "AgentGroup", "AgentLauncher", "AgentRunner", "AgentUnavailable", "DomainNotFound",
           "boot_id"]  # fmt: skip
