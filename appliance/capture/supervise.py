"""The process that runs one capture: ``hvnet capture _supervise DIR``, detached.

It outlives the command that started it (its own session, like the
--no-commit watcher) and is the one that knows when the capture ended, so
the record is right however it ends -- ``hvnet capture stop`` (SIGTERM to
this process), the duration passing, tcpdump's own packet limit or ring of
files, or tcpdump dying.  In order: the port's counters, tcpdump started and
listening ("listening on" in its log), waiting, tcpdump stopped with SIGINT
(it then prints its counts), its CPU read from ``/proc`` once it has exited
and before it is reaped (:func:`_exited` never reaps it), the port's counters
again, the record with its completeness and its limits (see :mod:`.limits`).

While it waits it watches the disk (every :data:`DISK_CHECK_S`): free space
under the capture's floor, or a time-rotated capture's files reaching their
cap, stops it, and its record says which (see :mod:`.disk`).  tcpdump runs
under umask 077, so the pcaps it creates are root's alone.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import Any

from appliance.capture import disk
from appliance.capture import limits as lim_mod
from appliance.capture import record as rec_mod
from appliance.capture.completeness import completeness
from appliance.capture.record import CaptureRecord
from appliance.capture.spec import ended_by_itself, pcap_files
from appliance.core.safedirs import FILE_MODE
from appliance.isolation.pcap import parse_tcpdump_counts
from appliance.switch.counters import Counters, read_kernel_many
from appliance.switch.host import Host

DISK_CHECK_S = 0.5
LISTEN_TIMEOUT_S = 10.0
STOP_TIMEOUT_S = 10.0
POLL_S = 0.05


def read_port_counters(host: Host, port: str) -> Counters | None:
    """The kernel's counters of the switch port ``port`` on the hypervisor, None when it has none."""
    return read_kernel_many(host.runner, [port]).get(port)


def _counters_json(c: Counters | None) -> dict[str, Any] | None:
    return None if c is None else {**c.as_dict(), "source": c.source}


def _counters_of(data: dict[str, Any] | None) -> Counters | None:
    if data is None:
        return None
    return Counters.from_mapping({k: v for k, v in data.items() if k != "source" and v is not None},
                                 data.get("source", "kernel"))  # fmt: skip


def supervise(host: Host, directory: Path) -> int:
    """Run the capture recorded in ``directory`` to its end; 0 unless tcpdump failed to start."""
    os.umask(0o077)  # tcpdump's files (created with the umask it inherits) hold tenants' traffic
    record = rec_mod.load(directory)
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT, signal.SIGHUP):
        signal.signal(sig, lambda *_: stop.set())
    runner = host.runner if record.spec.kind == "port" else host.local_runner
    record.supervisor_pid = os.getpid()
    record.counters_before = _counters_json(read_port_counters(host, record.spec.port))
    fd = os.open(directory / rec_mod.LOG_FILE, os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, FILE_MODE)
    with os.fdopen(fd, "wb") as log:
        proc = runner.popen(record.argv, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log)
    record.tcpdump_pid = proc.pid
    rec_mod.save(record)
    problem = _wait_listening(proc, directory, stop)
    if problem is not None:
        _end(proc)
        record.state, record.reason, record.stopped = "failed", problem, time.time()
        rec_mod.save(record)
        return 1
    record.state, record.started = "running", time.time()
    rec_mod.save(record)
    ended_by = _wait_end(proc, record, stop)
    status, cpu = _end(proc)
    finish(host, record, status, ended_by, cpu)
    return 0


def _wait_listening(proc: subprocess.Popen[bytes], directory: Path, stop: threading.Event) -> str | None:
    """None once tcpdump says it listens; else what went wrong (its own message when it gave one)."""
    deadline = time.monotonic() + LISTEN_TIMEOUT_S
    while time.monotonic() < deadline and not stop.is_set():
        text = rec_mod.read_log(directory)
        if "listening on" in text:
            return None
        if proc.poll() is not None:
            lines = [line for line in text.strip().splitlines() if line.strip()]
            return f"tcpdump did not start (exit {proc.returncode}): {lines[-1] if lines else 'no output'}"
        time.sleep(0.02)
    return (
        "stopped before tcpdump listened" if stop.is_set() else f"tcpdump not listening within {LISTEN_TIMEOUT_S:g} s"
    )


def _wait_end(proc: subprocess.Popen[bytes], record: CaptureRecord, stop: threading.Event) -> str | None:
    """Wait for the capture's end: "stop", "duration", "floor", "size", or None when tcpdump ended by itself."""
    duration = record.spec.limits.duration
    deadline = None if duration is None else (record.started or time.time()) + duration
    next_disk_check = 0.0
    while not _exited(proc):
        if stop.is_set():
            return "stop"
        if deadline is not None and time.time() >= deadline:
            return "duration"
        if time.monotonic() >= next_disk_check:
            next_disk_check = time.monotonic() + DISK_CHECK_S
            ended_by = _disk_full(record)
            if ended_by is not None:
                return ended_by
        stop.wait(POLL_S)
    return None


def _disk_full(record: CaptureRecord) -> str | None:
    """Why the disk ends the capture: "floor" when free space fell under its floor (noted in the record),
    "size" when a time-rotated capture's files reached their cap; None while neither."""
    if record.disk is None:
        return None
    free = disk.local_space(record.path).free
    if free < record.disk["floor"]:
        record.disk["free_at_stop"] = free
        return "floor"
    cap = record.spec.limits.max_mb
    if cap is not None and sum(p.stat().st_size for p in pcap_files(record.path, record.spec)) >= cap * 1_000_000:
        return "size"
    return None


def _exited(proc: subprocess.Popen[bytes]) -> bool:
    """Whether tcpdump has exited, leaving it unreaped: its ``/proc/PID/stat`` still holds its CPU times."""
    if proc.returncode is not None:
        return True
    try:
        return os.waitid(os.P_PID, proc.pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None
    except ChildProcessError:
        return True


def _end(proc: subprocess.Popen[bytes]) -> tuple[int, dict[str, Any]]:
    """SIGINT tcpdump (it prints its counts and closes its file), SIGKILL it if it lingers; its status and
    its CPU over its life, read between its exit and its reaping."""
    if proc.returncode is not None:  # reaped while starting: its /proc entry is gone (or another's)
        return proc.returncode, lim_mod.not_measured("tcpdump had exited before it listened")
    if not _exited(proc):
        proc.send_signal(signal.SIGINT)
    deadline = time.monotonic() + STOP_TIMEOUT_S
    while not _exited(proc) and time.monotonic() < deadline:
        time.sleep(0.01)
    if not _exited(proc):
        proc.kill()
        return proc.wait(), lim_mod.not_measured(f"tcpdump did not stop within {STOP_TIMEOUT_S:g} s and was killed")
    cpu = _cpu(proc.pid)
    return proc.wait(), cpu


def _cpu(pid: int) -> dict[str, Any]:
    """The exited, unreaped tcpdump's CPU (see :func:`.limits.cpu_figures`)."""
    return lim_mod.cpu_figures(_read(f"/proc/{pid}/stat"), _read("/proc/uptime"), os.sysconf("SC_CLK_TCK"))


def _read(path: str) -> str | None:
    try:
        with open(path, encoding="ascii", errors="replace") as fh:
            return fh.read()
    except OSError:
        return None


def _why(record: CaptureRecord, status: int | None, ended_by: str | None) -> tuple[str, str]:
    if ended_by == "stop":
        return "stopped", "stopped by 'hvnet capture stop'"
    if ended_by == "duration":
        return "finished", f"its duration of {record.spec.limits.duration:g} s passed"
    if ended_by == "floor" and record.disk is not None:
        return "stopped", disk.under_floor_reason(record.disk["free_at_stop"], record.disk)
    if ended_by == "size":
        return "finished", f"its files reached their cap of {record.spec.limits.max_mb} MB"
    if ended_by == "gone":
        return "dead", "its supervising process was gone; tcpdump was stopped by 'hvnet capture stop'"
    if status == 0:
        if record.spec.limits.count is not None:
            return "finished", f"tcpdump stopped at its limit of {record.spec.limits.count} packets"
        return "finished", ended_by_itself(record.spec.limits)
    if status is not None and status < 0:
        name = signal.Signals(-status).name if -status in signal.valid_signals() else str(-status)
        return "dead", f"tcpdump was killed by {name}, not by hvnet"
    lines = [line for line in rec_mod.read_log(record.path).strip().splitlines() if line.strip()]
    return "dead", f"tcpdump exited with status {status}: {lines[-1] if lines else 'no output'}"


def finish(
    host: Host, record: CaptureRecord, status: int | None, ended_by: str | None, cpu: dict[str, Any] | None = None
) -> None:
    """Read the counters after the capture, tcpdump's counts, the completeness; save the final record.
    ``cpu``: tcpdump's, read as it exited (None: this process did not start it, so it could not)."""
    after = read_port_counters(host, record.spec.port)
    record.stopped = time.time()
    record.counters_after = _counters_json(after)
    final = rec_mod.final_counts_text(rec_mod.read_log(record.path))
    counts = parse_tcpdump_counts(final)
    record.tcpdump = lim_mod.counts(final)
    record.tcpdump_cpu = cpu or lim_mod.not_measured("tcpdump was not this capture process's child when it ended")
    record.completeness = completeness(
        counts, _counters_of(record.counters_before), after,
        bpf=record.spec.bpf, count_limit=record.spec.limits.count,
    ).to_json()  # fmt: skip
    record.state, record.reason = _why(record, status, ended_by)
    record.files = [p.name for p in pcap_files(record.path, record.spec)]
    rec_mod.save(record)


def counters_of(data: dict[str, Any] | None) -> Counters | None:
    """A record's counters (as saved) back as :class:`Counters`."""
    return _counters_of(data)
