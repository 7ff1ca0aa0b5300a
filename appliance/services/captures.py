"""Captures: start, stop, list and show packet captures on the switch's ports or in lab guests.

Each capture is a directory of hvnet's captures directory (``$HVNET_PCAP_DIR``,
default ``/var/lib/hvnet/captures``) holding its pcaps, tcpdump's log and
``capture.json``; a detached process of its own runs it (see
:mod:`appliance.capture.supervise`).  On a hypervisor over SSH the directory
is on that host and a detached shell there runs it (see
:mod:`.captures_remote`).  Everything is checked before anything
starts -- the name, the limits, the port or guest, the filter (by tcpdump
itself) -- so a refused capture leaves nothing behind.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from appliance.capture import disk, limits
from appliance.capture import record as rec_mod
from appliance.capture import supervise as supervisor
from appliance.capture.completeness import Completeness
from appliance.capture.fetch import Fetched
from appliance.capture.fetch import fetch as fetch_files
from appliance.capture.limits import describe_buffer, describe_cpu, describe_snaplen
from appliance.capture.record import CaptureRecord
from appliance.capture.spec import (
    CaptureSpec,
    Limits,
    check_filter_text,
    check_limits,
    check_name,
    default_name,
    filter_check_argv,
    pcap_files,
    tcpdump_argv,
)
from appliance.capture.view import CaptureView
from appliance.core.errors import HvnetError, UsageError
from appliance.core.safedirs import DIR_MODE, FILE_MODE, make_private
from appliance.endpoints.guests import GuestEndpoint
from appliance.isolation.pcap import parse_tcpdump_counts
from appliance.switch.counters import read_kernel_many
from appliance.switch.host import Host

# What front ends show and build, named here so that they depend on this module, not on the capture engine.
__all__ = ["CaptureRecord", "CaptureView", "Completeness", "Fetched", "Limits", "describe_buffer", "describe_cpu",
           "describe_snaplen"]  # fmt: skip

START_TIMEOUT_S = 15.0
STOP_TIMEOUT_S = 20.0
LIVE_WAIT_S = 0.5  # how long 'list' waits for a running tcpdump to print its counts on SIGUSR1
GUEST_INTERFACE = "eth0"


def captures_dir(host: Host) -> Path:
    """hvnet's captures directory, created and checked (no other user controls any part of it)."""
    return make_private(host.paths.pcap_dir)


def _check_port(host: Host, port: str) -> None:
    """``port`` must be an interface of the switch with a network device on the hypervisor."""
    with host.connect({"Interface": ["name"]}) as conn:
        names = sorted(str(r.name) for r in conn.idl.tables["Interface"].rows.values())
    if port not in names:
        shown = ", ".join(names[:12]) + (" ..." if len(names) > 12 else "")
        raise UsageError(f"the switch has no port {port!r}", hint=f"ports: {shown or 'none'}")
    if port not in read_kernel_many(host.runner, [port]):
        raise UsageError(f"port {port!r} has no network device on the hypervisor (a patch or tunnel port?): "
                         "tcpdump cannot listen on it")  # fmt: skip


def _check_filter(host: Host, tcpdump: str, bpf: str | None) -> None:
    if bpf is None:
        return
    res = host.runner.run(filter_check_argv(tcpdump, bpf), check=False, timeout=30)
    if res.returncode != 0:
        lines = [line for line in res.stderr.strip().splitlines() if line.strip()]
        raise UsageError(f"tcpdump rejects the filter {bpf!r}: {lines[-1] if lines else 'no message'}")


def _target_options(host: Host) -> list[str]:
    """The global options that name this host's switch to a child hvnet (the capture's supervisor)."""
    options = ["--db", host.remote]
    ssl = host.target.ssl
    if ssl is not None:
        options += ["--ssl-key", ssl.private_key, "--ssl-cert", ssl.certificate, "--ssl-ca", ssl.ca_cert]
    return options


def start(
    host: Host,
    *,
    port: str | None = None,
    guest: GuestEndpoint | None = None,
    name: str | None = None,
    bpf: str | None = None,
    limits: Limits | None = None,
    free_floor: str | None = None,
) -> CaptureRecord:
    """Check everything, then start a detached capture and return its record once tcpdump listens.

    ``free_floor`` (``--free-floor``) overrides the host's ``capture_free_floor``: the capture is
    refused when its worst case would leave less free space than that (see :mod:`..capture.disk`).
    """
    floor, floor_source = _floor(host, free_floor)
    if (port is None) == (guest is None):
        raise UsageError("give a port (--port) or a lab guest (--guest), one of them")
    limits = check_limits(limits or Limits())
    bpf = check_filter_text(bpf)
    target = port if port is not None else guest.name  # type: ignore[union-attr]
    name = check_name(name) if name is not None else default_name(target, f"{datetime.now():%Y%m%d-%H%M%S}")
    tcpdump = host.runner.which("tcpdump")
    if guest is not None and not host.runner.local:
        raise UsageError(f"--guest: the lab's guests are on this machine, not on {host.label}",
                         hint=f"capture on the guest's VIF there: --port {guest.vif}")  # fmt: skip
    if guest is not None:
        if guest.in_vm:
            raise UsageError(f"captures inside a QEMU guest ({guest.name}) are not supported",
                             hint=f"capture on its VIF instead: --port {guest.vif}")  # fmt: skip
        _check_port(host, guest.vif)
        spec = CaptureSpec(name, "guest", guest.name, guest.vif, GUEST_INTERFACE, bpf, limits)
    else:
        assert port is not None
        _check_port(host, port)
        spec = CaptureSpec(name, "port", port, port, port, bpf, limits)
    _check_filter(host, tcpdump, bpf)
    if not host.runner.local:
        from appliance.services import captures_remote

        return captures_remote.start(host, spec, tcpdump, floor, floor_source)
    base = captures_dir(host)
    running = disk.running_bounds(list_captures(host, live=False))
    figures = disk.check_fits(str(base), disk.local_space(base), limits, floor, floor_source, running)
    directory = base / name
    try:
        os.mkdir(directory, DIR_MODE)  # never an existing directory, nor through a link planted under that name
    except FileExistsError:
        raise UsageError(f"a capture named {name!r} exists ({directory})",
                         hint=f"choose another --name, or 'hvnet capture delete {name}'") from None  # fmt: skip
    argv = tcpdump_argv(tcpdump, spec, directory)
    if guest is not None:
        argv = guest.argv(argv)
    record = CaptureRecord(spec=spec, directory=str(directory), host=host.identity, argv=argv, created=time.time(),
                           disk=figures)  # fmt: skip
    rec_mod.save(record)
    _spawn(host, directory)
    return _wait_started(directory)


def _spawn(host: Host, directory: Path) -> None:
    """Start the capture's own process (a new session: it outlives this command, as the --no-commit watcher)."""
    env = {"HVNET_PCAP_DIR": str(host.paths.pcap_dir)}
    fd = os.open(directory / "supervisor.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND | os.O_NOFOLLOW, FILE_MODE)
    with os.fdopen(fd, "wb") as log:
        host.local_runner.popen(
            [sys.executable, "-m", "appliance", *_target_options(host), "capture", "_supervise", str(directory)],
            stdin=subprocess.DEVNULL, stdout=log, stderr=log, env=env, start_new_session=True,
        )  # fmt: skip


def _floor(host: Host, flag: str | None) -> tuple[disk.Floor, str]:
    """The free-space floor asked for and where it came from, or a :class:`UsageError` saying what is allowed."""
    text, source = (flag, "--free-floor") if flag is not None else (host.paths.pcap_free_floor, "capture_free_floor")
    try:
        return disk.parse_floor(text), source
    except ValueError as exc:
        raise UsageError(f"{source} {text!r} is not a free-space floor; allowed: {exc}") from None


def _wait_started(directory: Path) -> CaptureRecord:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        record = rec_mod.load(directory)
        if record.state != "starting":
            break
        if time.monotonic() > deadline:
            rec_mod.signal_process(record.supervisor_pid, str(directory))
            raise HvnetError(f"capture {record.name} did not start within {START_TIMEOUT_S:g} s",
                             hint=f"see {directory / 'supervisor.log'}")  # fmt: skip
        time.sleep(0.02)
    if record.state == "failed":
        raise HvnetError(f"capture {record.name} failed: {record.reason}", hint=f"its record: {directory}")
    return record


def _find(host: Host, name: str) -> Path:
    directory = captures_dir(host) / check_name(name)
    if not (directory / rec_mod.META_FILE).is_file() or directory.is_symlink():
        raise UsageError(f"no capture named {name!r}", hint="hvnet capture list")
    return directory


def stop(host: Host, name: str) -> CaptureRecord:
    """Stop a capture and return its final record (with its completeness); one already ended is returned as is."""
    if not host.runner.local:
        from appliance.services import captures_remote

        return captures_remote.stop(host, name).record
    directory = _find(host, name)
    record = rec_mod.load(directory)
    if record.state in rec_mod.FINAL_STATES:
        return record
    marker = str(directory)
    if rec_mod.signal_process(record.supervisor_pid, marker):
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while time.monotonic() < deadline:
            record = rec_mod.load(directory)
            if record.state in rec_mod.FINAL_STATES:
                return record
            time.sleep(0.05)
        raise HvnetError(f"capture {name} did not stop within {STOP_TIMEOUT_S:g} s", hint=f"see {directory}")
    # Its supervisor is gone (killed): end a tcpdump it left running ourselves, record what can be.
    if rec_mod.signal_process(record.tcpdump_pid, marker, signal.SIGINT):
        deadline = time.monotonic() + STOP_TIMEOUT_S
        while rec_mod.process_alive(record.tcpdump_pid, marker) and time.monotonic() < deadline:
            time.sleep(0.05)
        supervisor.finish(host, record, None, "gone")
    else:
        record.state, record.reason = "dead", "its processes were gone (killed behind hvnet's back)"
        record.files = [p.name for p in pcap_files(directory, record.spec)]
        rec_mod.save(record)
    return record


def stop_view(host: Host, name: str) -> CaptureView:
    """Stop a capture; its final figures (what ``capture stop`` and the console show)."""
    if not host.runner.local:
        from appliance.services import captures_remote

        return captures_remote.stop(host, name)
    return inspect(stop(host, name), live=False)


def delete(host: Host, name: str, *, if_exists: bool = False) -> Path | str | None:
    """Remove an ended capture's directory (a live one must be stopped first); the directory removed.

    ``if_exists`` (as ovs-vsctl's): no capture of that name is None, not an error -- a clean-up
    script need not list first.  A live one is refused all the same: it is there.
    """
    if not host.runner.local:
        from appliance.services import captures_remote

        return captures_remote.delete(host, name, if_exists=if_exists)
    if if_exists and not (captures_dir(host) / check_name(name) / rec_mod.META_FILE).is_file():
        return None
    directory = _find(host, name)
    view = inspect(rec_mod.load(directory), live=False)
    if view.state in rec_mod.LIVE_STATES:
        raise UsageError(f"capture {name} is {view.state}", hint=f"hvnet capture stop {name}")
    shutil.rmtree(directory)
    return directory


def fetch(host: Host, name: str, out: Path) -> Fetched:
    """Copy an ended capture's pcaps into ``out`` on this machine (from the hypervisor over SSH when it is
    another machine's); a live capture is refused: its files still change."""
    if not host.runner.local:
        from appliance.services import captures_remote

        return captures_remote.fetch(host, name, out)
    directory = _find(host, name)
    view = inspect(rec_mod.load(directory), live=False)
    if view.state in rec_mod.LIVE_STATES:
        raise UsageError(f"capture {name} is {view.state}: its files still change", hint=f"hvnet capture stop {name}")
    listed = [(p.name, p.stat().st_size) for p in pcap_files(directory, view.record.spec)]
    return fetch_files(host.runner, "this machine", name, directory, listed, out)


def inspect(record: CaptureRecord, *, live: bool = True) -> CaptureView:
    """The figures of one capture now; ``live`` asks a running tcpdump for its counts (SIGUSR1)."""
    directory, marker = record.path, str(record.path)
    state, reason = record.state, record.reason
    if state in rec_mod.LIVE_STATES and not rec_mod.process_alive(record.supervisor_pid, marker):
        state = "dead"
        reason = "its capture process is gone (killed behind hvnet's back?)"
        if rec_mod.process_alive(record.tcpdump_pid, marker):
            reason += f"; tcpdump (pid {record.tcpdump_pid}) still runs: 'hvnet capture stop {record.name}' ends it"
    files = pcap_files(directory, record.spec)
    size = sum(p.stat().st_size for p in files)
    packets, dropped = _figures(record, state, files, live)
    end = record.stopped if state in rec_mod.FINAL_STATES and record.stopped else time.time()
    seconds = end - record.started if record.started else None
    return CaptureView(record, state, reason, packets, dropped, seconds, size)


def _figures(record: CaptureRecord, state: str, files: list[Path], live: bool) -> tuple[int | None, int | None]:
    if record.tcpdump is not None:  # final counts
        return record.tcpdump.get("captured"), limits.dropped(record.tcpdump)
    if live and state == "running" and rec_mod.process_alive(record.tcpdump_pid, str(record.path)):
        before = rec_mod.read_log(record.path)
        if rec_mod.signal_process(record.tcpdump_pid, str(record.path), signal.SIGUSR1):
            deadline = time.monotonic() + LIVE_WAIT_S
            text = before
            while text == before and time.monotonic() < deadline:
                time.sleep(0.01)
                text = rec_mod.read_log(record.path)
            counts = parse_tcpdump_counts(text)
            if counts is not None and text != before:
                return counts.captured, counts.dropped
    return rec_mod.count_packets(files), None


def list_captures(host: Host, *, live: bool = True) -> list[CaptureView]:
    """Every capture in hvnet's captures directory (on the host, for one over SSH), oldest first."""
    if not host.runner.local:
        from appliance.services import captures_remote

        return captures_remote.list_captures(host, live=live)
    base = captures_dir(host)
    views = []
    for directory in sorted(base.iterdir()):
        if directory.is_symlink() or not (directory / rec_mod.META_FILE).is_file():
            continue
        try:
            views.append(inspect(rec_mod.load(directory), live=live))
        except HvnetError:
            continue  # an unreadable record is shown by 'show', not allowed to hide the others
    return sorted(views, key=lambda v: v.record.created)


def show(host: Host, name: str) -> CaptureView:
    """One capture's record and figures."""
    if not host.runner.local:
        from appliance.services import captures_remote

        return captures_remote.show(host, name)
    return inspect(rec_mod.load(_find(host, name)))


def completeness(view: CaptureView) -> Completeness | None:
    """How complete the capture was (what the switch counted against what tcpdump kept), once it is known."""
    data = view.record.completeness
    return Completeness(**data) if data else None


def supervise(host: Host, directory: Path) -> int:
    """The detached process of the capture in ``directory`` (what :func:`start` spawns); its exit code.

    Only a directory of hvnet's captures directory is taken: the process runs
    tcpdump as root and writes where the record says.
    """
    if directory.parent != captures_dir(host):
        raise UsageError(f"{directory} is not in hvnet's captures directory {host.paths.pcap_dir}")
    return supervisor.supervise(host, directory)


# -- the console's start form ---------------------------------------------------

LIMIT_FIELDS = ("snaplen", "duration", "count")


@dataclass
class CaptureForm:
    """The start dialog's fields as typed (empty = not given)."""

    port: str = ""
    name: str = ""
    bpf: str = ""
    snaplen: str = ""
    duration: str = ""
    count: str = ""


def form_limits(form: CaptureForm) -> Limits:
    """The limits asked for; a value that is not a number is refused naming the field, as argparse would."""
    values: dict[str, float | int | None] = {}
    for key in LIMIT_FIELDS:
        text = getattr(form, key).strip()
        if not text:
            values[key] = None
            continue
        try:
            values[key] = float(text) if key == "duration" else int(text)
        except ValueError:
            kind = "a number of seconds" if key == "duration" else "a whole number"
            raise UsageError(f"--{key}: {text!r} is not {kind}") from None
    return Limits(**values)  # type: ignore[arg-type]


def start_form(host: Host, form: CaptureForm) -> CaptureRecord:
    """Start a capture from the console's form: the same checks and refusals as ``hvnet capture start``."""
    if not form.port:
        raise UsageError("--port: choose a port to capture on")
    return start(host, port=form.port, name=form.name.strip() or None, bpf=form.bpf or None, limits=form_limits(form))


@dataclass
class SuiteListener:
    """Captures as a suite's case asks for them (:class:`appliance.netperf.run.pktgen.Listen`): started on a
    port, stopped, counted and removed -- the suite keeps the counts and the capture's limits, not the pcaps."""

    host: Host

    def start(self, port: str, name: str, snaplen: int | None, buffer_kib: int | None = None) -> None:
        start(self.host, port=port, name=name, limits=Limits(snaplen=snaplen, buffer_kib=buffer_kib))

    def stop(self, name: str) -> dict[str, Any]:
        """Its counts as tcpdump reported them (None: not reported), its buffer and tcpdump's CPU."""
        record = stop(self.host, name)
        counts = record.tcpdump or {}
        cpu = record.tcpdump_cpu or limits.not_measured("the capture recorded none")
        delete(self.host, name, if_exists=True)
        return {
            "captured": counts.get("captured"), "received": counts.get("received"),
            "dropped": limits.dropped(record.tcpdump), "dropped_by_kernel": counts.get("dropped_by_kernel"),
            "dropped_by_interface": counts.get("dropped_by_interface"), "state": record.state,
            "buffer_kib": record.spec.limits.buffer_kib, "buffer": describe_buffer(record.spec.limits.buffer_kib),
            "tcpdump_cpu_pct": cpu.get("pct_of_core"), "tcpdump_cpu": cpu,
        }  # fmt: skip
