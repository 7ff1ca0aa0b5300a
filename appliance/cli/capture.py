"""``hvnet capture``: packet captures on switch ports or inside lab guests (start, stop, list, show, fetch, delete).

Its commands import the services when they run: every hvnet command builds the parser, and
``status``, ``plan`` and the agent load no more than they need.
"""

from __future__ import annotations

import argparse
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from appliance.core import documents, render
from appliance.core.errors import EXIT_FAILED, EXIT_OK
from appliance.frontdoor.hosts import host_of

if TYPE_CHECKING:  # the services (and tcpdump's parsers) load when a capture verb runs, not with every hvnet
    from appliance.services.captures import CaptureView, Completeness, Limits


def cmd_capture_start(args: argparse.Namespace) -> int:
    from appliance.services import captures

    guest = None
    if args.guest is not None:
        from appliance.lab import Lab

        guest = Lab().endpoint(args.guest)
    limits = captures.Limits(
        snaplen=args.snaplen, buffer_kib=args.buffer_kib, duration=args.duration, count=args.count,
        rotate_mb=args.rotate_mb, rotate_files=args.rotate_files, rotate_seconds=args.rotate_seconds,
        max_mb=args.max_mb,
    )  # fmt: skip
    record = captures.start(host_of(args), port=args.port, guest=guest, name=args.name, bpf=args.filter,
                            limits=limits, free_floor=args.free_floor)  # fmt: skip
    if args.json:
        render.print_json(record.to_json())
    else:
        where = f"guest {record.spec.target} ({record.spec.interface}, VIF {record.spec.port})"
        if record.spec.kind == "port":
            where = f"port {record.spec.port}"
        print(f"capture {record.name} started on {where}: pid {record.supervisor_pid}, files in {record.directory}")
    return EXIT_OK


def cmd_capture_stop(args: argparse.Namespace) -> int:
    from appliance.services import captures

    view = captures.stop_view(host_of(args), args.name)
    record = view.record
    if args.json:
        render.print_json(view.to_json())
    else:
        print(f"capture {record.name}: {view.state} ({view.reason or '-'})")
        _print_stats(view)
    return EXIT_OK if view.state != "dead" else EXIT_FAILED


def cmd_capture_list(args: argparse.Namespace) -> int:
    from appliance.services import captures

    views = captures.list_captures(host_of(args))
    if args.json:
        render.print_json(list_json(str(host_of(args).paths.pcap_dir), views))
        return EXIT_OK
    heads = ["NAME", "STATE", "ON", "FILTER", "STARTED", "SECONDS", "PACKETS", "RATE", "DROPS", "SIZE", "COMPLETE"]
    print(render.table(heads, [_row(v) for v in views]))
    return EXIT_OK


def cmd_capture_show(args: argparse.Namespace) -> int:
    from appliance.services import captures

    view = captures.show(host_of(args), args.name)
    if args.json:
        render.print_json(view.to_json())
        return EXIT_OK
    rec = view.record
    print(f"capture {rec.name}: {view.state}" + (f" ({view.reason})" if view.reason else ""))
    print(
        f"  on        {rec.spec.kind} {rec.spec.target} (tcpdump on {rec.spec.interface}, counters of {rec.spec.port})"
    )
    print(f"  filter    {rec.spec.bpf or '-'}")
    print(f"  limits    {_limits(rec.spec.limits)}")
    if rec.disk is not None:
        print(f"  disk      {_disk(rec.disk)}")
    print(f"  started   {_time(rec.started)}   stopped {_time(rec.stopped)}")
    print(f"  pids      capture {rec.supervisor_pid or '-'}, tcpdump {rec.tcpdump_pid or '-'}")
    print(f"  directory {rec.directory}")
    _print_stats(view)
    for name in rec.files:
        print(f"  file      {name}")
    return EXIT_OK


def cmd_capture_delete(args: argparse.Namespace) -> int:
    from appliance.services import captures

    removed = captures.delete(host_of(args), args.name, if_exists=args.if_exists)
    if args.json:
        gone = str(removed) if removed else None
        render.print_json(documents.CAPTURE_DELETE.stamp({"name": args.name, "removed": gone}))
    else:
        print(f"removed {removed}" if removed else f"no capture named {args.name!r} (--if-exists): nothing removed")
    return EXIT_OK


def cmd_capture_fetch(args: argparse.Namespace) -> int:
    from appliance.services import captures

    out = Path(args.out) if args.out else Path.cwd() / args.name
    done = captures.fetch(host_of(args), args.name, out)
    if args.json:
        render.print_json(done.to_json())
        return EXIT_OK
    for name, size in done.files:
        print(f"{done.directory / name}  {render.si(size, 'B')}")
    print(f"capture {done.name}: {len(done.files)} file(s), {render.si(done.bytes, 'B')} from {done.source}")
    return EXIT_OK


def cmd_capture_supervise(args: argparse.Namespace) -> int:
    """The detached process of one capture (started by 'capture start', never by hand)."""
    from appliance.services import captures

    return captures.supervise(host_of(args), Path(args.directory))


# -- rendering -----------------------------------------------------------------------


def _completeness(view: CaptureView) -> Completeness | None:
    from appliance.services import captures

    return captures.completeness(view)


def _row(v: CaptureView) -> list[str]:
    spec = v.record.spec
    comp = _completeness(v)
    complete = "-" if comp is None else ("unknown" if comp.ratio is None else f"{comp.ratio:.1%}")
    rate = v.rate_pps
    return [
        v.record.name, v.state, f"{spec.kind}:{spec.target}", (spec.bpf or "-")[:24], _time(v.record.started),
        "-" if v.seconds is None else f"{v.seconds:.1f}", render.count(v.packets),
        "-" if rate is None else f"{rate:.0f} pkt/s", render.count(v.dropped), render.si(v.bytes, "B"), complete,
    ]  # fmt: skip


def _print_stats(view: CaptureView) -> None:
    from appliance.services import captures

    rec = view.record
    rate = view.rate_pps
    print(
        f"  packets   {render.count(view.packets)} captured"
        + (f", {rate:.0f} pkt/s" if rate is not None else "")
        + f", {render.count(view.dropped)} dropped, {render.si(view.bytes, 'B')} in {len(rec.files) or '-'} file(s)"
    )
    if rec.tcpdump is not None:
        t = rec.tcpdump
        interface = t.get("dropped_by_interface")
        print(
            f"  tcpdump   {t['captured']} captured, {t['received']} received by filter, "
            f"{t['dropped_by_kernel']} dropped by kernel, "
            + ("no interface drops reported" if interface is None else f"{interface} dropped by interface")
        )
    print(f"  buffer    {captures.describe_buffer(rec.spec.limits.buffer_kib)}; "
          f"snaplen {captures.describe_snaplen(rec.spec.limits.snaplen)}")  # fmt: skip
    if rec.tcpdump_cpu is not None:
        print(f"  tcpdump   CPU {captures.describe_cpu(rec.tcpdump_cpu)}")
    comp = _completeness(view)
    if comp is not None:
        print(f"  complete  {comp.describe()}")


def list_json(directory: str, views: list[CaptureView]) -> dict[str, Any]:
    """``capture list --json``: document ``hvnet.capture.list``, each capture as ``capture show`` has it."""
    return documents.CAPTURE_LIST.stamp({"directory": directory, "captures": [v.body() for v in views]})


def _limits(lim: Limits) -> str:
    parts = [f"{k}={v}" for k, v in vars(lim).items() if v is not None]
    return ", ".join(parts) or "none"


def _disk(d: dict[str, Any]) -> str:
    text = (
        f"worst case {render.si(d['worst_case'], 'B')} ({d['bound']}); floor {render.si(d['floor'], 'B')} "
        f"({d['floor_setting']}, {d['floor_source']}); {render.si(d['free_at_start'], 'B')} free at start"
    )
    if d.get("free_at_stop") is not None:
        text += f", {render.si(d['free_at_stop'], 'B')} when stopped"
    return text


def _time(ts: float | None) -> str:
    return "-" if ts is None else f"{datetime.fromtimestamp(ts):%H:%M:%S}"
