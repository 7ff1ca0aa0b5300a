"""Captures on a hypervisor over SSH (``hvnet --host NAME capture ...``): start, stop, list, show, delete.

tcpdump runs on that host, detached under a small shell (:mod:`appliance.capture.remote`),
and its pcaps, log and ``capture.json`` are in hvnet's captures directory *there*
(``$HVNET_PCAP_DIR`` names the path on the host, default ``/var/lib/hvnet/captures``).
``fetch`` brings an ended capture's pcaps here over the same connection.
No process of hvnet stays behind on this machine: the host itself stops tcpdump
after the duration and records how it ended; the next command that looks
completes the record from what was recorded then.

Measured remotely: tcpdump's own counts (live on SIGUSR1: a count that does not
arrive within a second is "-"), its drops, the files' sizes, the port's kernel
counters before and at the end (completeness).  Not measured: packets in the
files (they would be read over SSH; tcpdump's count stands for them), and a
capture whose host rebooted is only known to be gone ("dead").
"""

from __future__ import annotations

import json
import posixpath
import time
from pathlib import Path, PurePosixPath

from appliance.capture import disk, limits
from appliance.capture import remote as rc
from appliance.capture.fetch import Fetched
from appliance.capture.fetch import fetch as fetch_files
from appliance.capture.record import LIVE_STATES, CaptureRecord, final_counts_text
from appliance.capture.spec import CaptureSpec, check_name, tcpdump_argv
from appliance.capture.supervise import counters_of, read_port_counters
from appliance.capture.view import CaptureView
from appliance.core.errors import HvnetError, UsageError
from appliance.core.safedirs import UnsafeDirectory
from appliance.switch.host import Host

STOP_WAIT_S = 30.0


def base_dir(host: Host) -> PurePosixPath:
    return PurePosixPath(posixpath.normpath(str(host.paths.pcap_dir)))


def capture_dir(host: Host, name: str) -> PurePosixPath:
    """A capture's directory on the host: hvnet's captures directory and the capture's checked name (never a
    path read from a file there)."""
    return base_dir(host) / check_name(name)


def _sh(host: Host, script: str, *args: str, timeout: float = 30.0, input_text: str | None = None) -> str:
    res = host.runner.run(["sh", "-c", script, "hvnet", *args], check=False, timeout=timeout, input_text=input_text)
    if res.returncode != 0:
        lines = [line for line in (res.stderr or res.stdout).strip().splitlines() if line.strip()]
        raise HvnetError(f"{host.label}: {lines[-1] if lines else f'exit {res.returncode}'}")
    return res.stdout


def _prepare(host: Host) -> PurePosixPath:
    """hvnet's captures directory on the host, its missing parts made (0700), refused when another user
    controls any part of the way to it (each directory and symlink, walked by a shell there)."""
    base = base_dir(host)
    for attempt in range(2):
        problem, missing = rc.judge_walk(_sh(host, rc.WALK, str(base)), str(base))
        if problem is not None:
            raise UnsafeDirectory(f"{host.label}: {problem}", hint="point $HVNET_PCAP_DIR elsewhere")
        if not missing:
            return base
        if attempt == 0:
            _sh(host, rc.MAKE, str(base))
    raise HvnetError(f"{host.label}: {base} could not be made")


def _space(host: Host, base: PurePosixPath) -> disk.Space:
    res = host.runner.run(disk.df_argv(str(base)), check=False, timeout=30)
    space = disk.parse_df(res.stdout) if res.returncode == 0 else None
    if space is None:
        why = res.stderr.strip() or res.stdout.strip()
        hint = "a capture is started only when its worst case fits above the free-space floor"
        raise HvnetError(f"{host.label}: the free space under {base} is unknown: {why}", hint=hint)
    return space


def save(host: Host, record: CaptureRecord) -> None:
    """Replace the record on the host (whole: a reader sees the old one or the new one)."""
    text = json.dumps(record.to_json(), sort_keys=True) + "\n"
    _sh(host, rc.WRITE, str(capture_dir(host, record.name) / "capture.json"), input_text=text)


def start(host: Host, spec: CaptureSpec, tcpdump: str, floor: disk.Floor, floor_source: str) -> CaptureRecord:
    """Create the capture's directory and record on the host, start it detached, return once tcpdump listens
    (refused first when its worst case would take free space there under the floor)."""
    base = _prepare(host)
    running = disk.running_bounds(list_captures(host, live=False))
    figures = disk.check_fits(f"{base} on {host.label}", _space(host, base), spec.limits, floor, floor_source,
                              running)  # fmt: skip
    directory = capture_dir(host, spec.name)
    argv = tcpdump_argv(tcpdump, spec, directory)  # type: ignore[arg-type]
    record = CaptureRecord(spec=spec, directory=str(directory), host=host.identity, argv=argv, created=time.time(),
                           disk=figures)  # fmt: skip
    before = read_port_counters(host, spec.port)
    record.counters_before = None if before is None else rc.counters_json(before)
    text = json.dumps(record.to_json(), sort_keys=True) + "\n"
    res = host.runner.run(["sh", "-c", rc.CREATE, "hvnet", str(directory)], check=False, input_text=text, timeout=30)
    if res.returncode == 17:
        hint = f"choose another --name, or 'hvnet --host {host.label} capture delete {spec.name}'"
        raise UsageError(f"a capture named {spec.name!r} exists on {host.label} ({directory})", hint=hint)
    if res.returncode != 0:
        raise HvnetError(f"{host.label}: cannot create {directory}: {res.stderr.strip() or res.returncode}")
    duration = "-" if spec.limits.duration is None else f"{spec.limits.duration:g}"
    floor_kib = str(-(-figures["floor"] // 1024))
    cap = "-" if spec.limits.max_mb is None else str(spec.limits.max_mb * 1_000_000)
    pid = _sh(host, rc.START, rc.WRAPPER, str(directory), spec.port, duration, floor_kib, cap, *argv).strip()
    record.supervisor_pid = int(pid) if pid.isdigit() else None
    started = _sh(host, rc.WAIT_LISTENING, str(directory), timeout=30).strip()
    probe = _probe(host, [spec.name], live=False).get(spec.name, rc.Probe(spec.name))
    record.tcpdump_pid = _pid(host, directory)
    if started != "listening":
        if started == "timeout":
            _sh(host, rc.STOP, str(directory), timeout=STOP_WAIT_S)
            probe = _probe(host, [spec.name], live=False).get(spec.name, probe)
        lines = [line for line in probe.log.strip().splitlines() if line.strip()]
        record.state, record.stopped = "failed", time.time()
        record.reason = f"tcpdump did not start on {host.label}: {lines[-1] if lines else started}"
        save(host, record)
        hint = f"its record: {directory} on {host.label}"
        raise HvnetError(f"capture {spec.name} failed: {record.reason}", hint=hint)
    record.state, record.started = "running", time.time()
    save(host, record)
    return record


def _pid(host: Host, directory: PurePosixPath) -> int | None:
    text = host.runner.read_text(str(directory / "tcpdump.pid"))
    return int(text.strip()) if text and text.strip().isdigit() else None


def _probe(host: Host, names: list[str] | None, *, live: bool) -> dict[str, rc.Probe]:
    """The captures as the host reports them, by name; a record is taken to be in the directory it was read
    from (a record naming another capture is not one)."""
    base = base_dir(host)
    mark = rc.marker()
    dirs = [str(capture_dir(host, n)) for n in names or []]
    probes = rc.parse_probe(_sh(host, rc.PROBE, str(base), "1" if live else "0", mark, *dirs, timeout=60), mark)
    for name, probe in list(probes.items()):
        try:
            directory = capture_dir(host, name)
        except UsageError:
            del probes[name]  # not a directory hvnet made
            continue
        if probe.record is not None and probe.record.name != name:
            probe.record, probe.error = None, f"its record names another capture ({probe.record.name!r})"
        elif probe.record is not None:
            probe.record.directory = str(directory)
    return probes


def _view(host: Host, probe: rc.Probe) -> CaptureView:
    """The capture as of now; one whose wrapper recorded its end gets its final record (saved on the host)."""
    record = probe.record
    assert record is not None
    state, reason = record.state, record.reason
    if state in LIVE_STATES and probe.ended:
        record = rc.finished(record, probe, counters_of(record.counters_before), time.time())
        save(host, record)
        state, reason = record.state, record.reason
    elif state in LIVE_STATES and not probe.wrapper_alive:
        state, reason = "dead", f"its shell on {host.label} is gone (killed, or the host restarted?)"
        if probe.tcpdump_alive:
            reason += f"; tcpdump still runs there: 'hvnet --host {host.label} capture stop {record.name}' ends it"
    if record.tcpdump is not None:
        t = record.tcpdump
        packets, dropped = t.get("captured"), limits.dropped(t)
    else:
        live = probe.live_counts()
        packets, dropped = (live.captured, live.dropped) if live is not None else (None, None)
    end = record.stopped if record.stopped and state not in LIVE_STATES else time.time()
    seconds = end - record.started if record.started else None
    return CaptureView(record, state, reason, packets, dropped, seconds, probe.bytes)


def list_captures(host: Host, *, live: bool = True) -> list[CaptureView]:
    """Every capture in hvnet's captures directory on the host, oldest first (one round trip)."""
    views = [_view(host, p) for p in _probe(host, None, live=live).values() if p.record is not None]
    return sorted(views, key=lambda v: v.record.created)


def show(host: Host, name: str) -> CaptureView:
    probe = _probe(host, [name], live=True).get(name)
    if probe is None or probe.record is None:
        raise UsageError(f"no capture named {name!r} on {host.label}", hint=f"hvnet --host {host.label} capture list")
    return _view(host, probe)


def stop(host: Host, name: str) -> CaptureView:
    """Stop the capture (SIGTERM to its tcpdump on the host), wait for its end, complete its record."""
    probe = _one(host, name)
    record = probe.record
    assert record is not None
    if record.state not in LIVE_STATES or probe.ended:
        return _view(host, probe)
    _sh(host, rc.STOP, str(capture_dir(host, name)), timeout=STOP_WAIT_S)
    probe = _one(host, name)
    if not probe.ended and not probe.tcpdump_alive:
        _record_dead(host, probe)  # its wrapper was gone: what tcpdump printed as it stopped, and its files
    view = _view(host, probe)
    if view.state in LIVE_STATES:
        raise HvnetError(f"capture {name} on {host.label} did not stop within 20 s", hint=str(capture_dir(host, name)))
    return view


def _one(host: Host, name: str) -> rc.Probe:
    probe = _probe(host, [name], live=False).get(name)
    if probe is None or probe.record is None:
        raise UsageError(f"no capture named {name!r} on {host.label}", hint=f"hvnet --host {host.label} capture list")
    return probe


def _record_dead(host: Host, probe: rc.Probe) -> None:
    """Record a capture whose wrapper on the host was killed: tcpdump's counts if it printed them, no completeness."""
    record = probe.record
    assert record is not None
    record.tcpdump = limits.counts(final_counts_text(probe.log))
    record.state, record.stopped = "dead", time.time()
    record.reason = f"its shell on {host.label} was gone (killed behind hvnet's back, or the host restarted)"
    record.files = [n for n, _ in probe.files]
    save(host, record)


def delete(host: Host, name: str, *, if_exists: bool = False) -> str | None:
    """Remove an ended capture's directory on the host; the directory removed."""
    probe = _probe(host, [name], live=False).get(name)
    if probe is None or probe.record is None:
        if if_exists:
            return None
        raise UsageError(f"no capture named {name!r} on {host.label}", hint=f"hvnet --host {host.label} capture list")
    view = _view(host, probe)
    if view.state in LIVE_STATES:
        raise UsageError(f"capture {name} is {view.state}", hint=f"hvnet --host {host.label} capture stop {name}")
    directory = str(capture_dir(host, name))
    _sh(host, rc.DELETE, directory)
    return directory


def fetch(host: Host, name: str, out: Path) -> Fetched:
    """Copy an ended capture's pcaps from the host into ``out`` here: the files the host lists in the capture's
    directory, each checked against the size listed."""
    probe = _one(host, name)
    view = _view(host, probe)
    if view.state in LIVE_STATES:
        hint = f"hvnet --host {host.label} capture stop {name}"
        raise UsageError(f"capture {name} is {view.state} on {host.label}: its files still change", hint=hint)
    return fetch_files(host.runner, host.label, name, capture_dir(host, name), probe.files, out)
