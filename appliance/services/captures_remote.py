"""Captures on a hypervisor over SSH (``hvnet --host NAME capture ...``): start, stop, list, show, delete.

tcpdump runs on that host, detached under a small shell (:mod:`appliance.capture.remote`),
and its pcaps, log and ``capture.json`` are in hvnet's captures directory *there*
(``$HVNET_PCAP_DIR`` names the path on the host, default ``/var/lib/hvnet/captures``).
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
import time
from pathlib import PurePosixPath

from ..capture import remote as rc
from ..capture.record import LIVE_STATES, CaptureRecord, final_counts_text
from ..capture.spec import CaptureSpec, check_name, tcpdump_argv
from ..capture.supervise import counters_of, read_port_counters
from ..capture.view import CaptureView
from ..errors import HvnetError, UsageError
from ..host import Host
from ..isolation.pcap import parse_tcpdump_counts

STOP_WAIT_S = 30.0


def base_dir(host: Host) -> PurePosixPath:
    return PurePosixPath(str(host.paths.pcap_dir))


def _sh(host: Host, script: str, *args: str, timeout: float = 30.0, input_text: str | None = None) -> str:
    res = host.runner.run(["sh", "-c", script, "hvnet", *args], check=False, timeout=timeout, input_text=input_text)
    if res.returncode != 0:
        lines = [line for line in (res.stderr or res.stdout).strip().splitlines() if line.strip()]
        raise HvnetError(f"{host.label}: {lines[-1] if lines else f'exit {res.returncode}'}")
    return res.stdout


def _prepare(host: Host) -> PurePosixPath:
    """hvnet's captures directory on the host, made if missing, refused when another user controls it."""
    base = base_dir(host)
    words = _sh(host, rc.PREPARE, str(base)).split(maxsplit=2)
    if len(words) < 3 or words[2].strip() != "directory":
        raise HvnetError(f"{host.label}: {base} is not a directory")
    uid, mode = words[0], int(words[1], 8)
    if uid != "0" or (mode & 0o022 and not mode & 0o1000):
        raise HvnetError(f"{host.label}: {base} is owned by uid {uid} with mode {mode:o}: another user could "
                         "choose where hvnet writes", hint="point $HVNET_PCAP_DIR elsewhere")  # fmt: skip
    return base


def save(host: Host, record: CaptureRecord) -> None:
    """Replace the record on the host (whole: a reader sees the old one or the new one)."""
    text = json.dumps(record.to_json(), sort_keys=True) + "\n"
    _sh(host, rc.WRITE, f"{record.directory}/capture.json", input_text=text)


def start(host: Host, spec: CaptureSpec, tcpdump: str) -> CaptureRecord:
    """Create the capture's directory and record on the host, start it detached, return once tcpdump listens."""
    directory = _prepare(host) / spec.name
    argv = tcpdump_argv(tcpdump, spec, directory)  # type: ignore[arg-type]
    record = CaptureRecord(spec=spec, directory=str(directory), host=host.identity, argv=argv, created=time.time())
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
    pid = _sh(host, rc.START, rc.WRAPPER, str(directory), spec.port, duration, *argv).strip()
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
    base = base_dir(host)
    mark = rc.marker()
    dirs = [str(base / check_name(n)) for n in names or []]
    return rc.parse_probe(_sh(host, rc.PROBE, str(base), "1" if live else "0", mark, *dirs, timeout=60), mark)


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
        packets, dropped = t.get("captured"), t.get("dropped_by_kernel", 0) + t.get("dropped_by_interface", 0)
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
    _sh(host, rc.STOP, record.directory, timeout=STOP_WAIT_S)
    probe = _one(host, name)
    if not probe.ended and not probe.tcpdump_alive:
        _record_dead(host, probe)  # its wrapper was gone: what tcpdump printed as it stopped, and its files
    view = _view(host, probe)
    if view.state in LIVE_STATES:
        raise HvnetError(f"capture {name} on {host.label} did not stop within 20 s", hint=record.directory)
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
    counts = parse_tcpdump_counts(final_counts_text(probe.log))
    record.tcpdump = None if counts is None else vars(counts).copy()
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
    _sh(host, rc.DELETE, view.record.directory)
    return view.record.directory
