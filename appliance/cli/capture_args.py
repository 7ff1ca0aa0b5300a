"""The ``hvnet capture`` verbs' arguments (their work is :mod:`appliance.cli.capture`, loaded when one runs)."""

from __future__ import annotations

from typing import Any

from appliance.cli.common import lazy

# A capture's default bounds, for the help (appliance.capture.spec applies them): here so that
# building the parser loads no capture code; a test checks they agree.
RING_MAX_MB = 100_000
DEFAULT_RING = (100, 10)
DEFAULT_MAX_MB = DEFAULT_RING[0] * DEFAULT_RING[1]
BUFFER_KIB_RANGE = (64, 1_048_576)  # appliance.capture.limits's
DEFAULT_BUFFER_KIB = 2048


def register(sub: Any) -> None:
    p = sub.add_parser(
        "capture", help="packet captures on switch ports or in lab guests: start, stop, list, show, fetch"
    )
    cs = p.add_subparsers(dest="capture_command", metavar="COMMAND", required=True)

    s = cs.add_parser("start", help="start a detached capture (pcaps and capture.json under $HVNET_PCAP_DIR)",
                      description=f"Every capture is bounded: by default a ring of {DEFAULT_RING[1]} files of "
                      f"{DEFAULT_RING[0]} MB (tcpdump -C {DEFAULT_RING[0]} -W {DEFAULT_RING[1]}), the oldest "
                      "overwritten; it is refused (exit 2) when that worst case would leave less free space than the "
                      "floor, and stopped if free space falls under the floor while it runs.")  # fmt: skip
    on = s.add_mutually_exclusive_group(required=True)
    on.add_argument("--port", metavar="PORT", help="a port of the switch: a VIF, a mirror's or TAP's output port")
    on.add_argument("--guest", metavar="GUEST", help="a lab guest: tcpdump on its eth0 inside its namespace")
    s.add_argument("--name", help="the capture's name (its directory; default TARGET-TIME)")
    s.add_argument("--filter", metavar="BPF", help="a tcpdump filter expression (checked by tcpdump before starting)")
    s.add_argument("--snaplen", type=int, metavar="BYTES", help="bytes kept per packet (14..262144; default all)")
    s.add_argument(
        "--buffer-kib",
        type=int,
        metavar="KIB",
        help=f"the kernel's ring for tcpdump, in KiB (tcpdump -B; {BUFFER_KIB_RANGE[0]}..{BUFFER_KIB_RANGE[1]}; "
        f"default: libpcap's, {DEFAULT_BUFFER_KIB} KiB on Linux); a ring too small drops packets in the kernel",
    )
    s.add_argument("--duration", type=float, metavar="S", help="stop after this many seconds (1..604800)")
    s.add_argument("--count", type=int, metavar="N", help="stop after this many packets (tcpdump -c)")
    s.add_argument(
        "--rotate-mb",
        type=int,
        metavar="MB",
        help=f"a ring of files of MB million bytes each (tcpdump -C; default {DEFAULT_RING[0]})",
    )
    s.add_argument(
        "--rotate-files",
        type=int,
        metavar="N",
        help=f"how many files the ring keeps, the oldest overwritten (tcpdump -W; default "
        f"{DEFAULT_RING[1]}; MB x N at most {RING_MAX_MB})",
    )
    s.add_argument(
        "--rotate-seconds",
        type=int,
        metavar="S",
        help="instead of a ring: a new file every S seconds (tcpdump -G), stopped at --max-mb",
    )
    s.add_argument(
        "--max-mb",
        type=int,
        metavar="MB",
        help=f"with --rotate-seconds: stop when the files hold MB million bytes (default {DEFAULT_MAX_MB})",
    )
    s.add_argument(
        "--free-floor",
        metavar="FLOOR",
        help="free space to leave on the captures' file system: N%% of it or a size (500MB, 2GB); refused "
        "when the worst case does not fit above it, stopped when free space falls under it "
        "(default: $HVNET_CAPTURE_FREE_FLOOR, hvnet.conf's capture_free_floor, 10%%)",
    )
    s.add_argument("--json", action="store_true", help="the capture's record as JSON")
    s.set_defaults(func=lazy("appliance.cli.capture", "cmd_capture_start"))

    for verb, text, func in (
        ("stop", "stop a capture; its tcpdump counts and completeness (exit 1 if it had died)", "cmd_capture_stop"),
        ("show", "one capture's record and figures", "cmd_capture_show"),
        ("delete", "remove an ended capture's directory", "cmd_capture_delete"),
    ):
        v = cs.add_parser(verb, help=text)
        v.add_argument("name", metavar="NAME")
        v.add_argument("--json", action="store_true", help="as JSON")
        if verb == "delete":
            v.add_argument("--if-exists", action="store_true", help="no capture of that name is success")
        v.set_defaults(func=lazy("appliance.cli.capture", func))

    f = cs.add_parser("fetch", help="copy an ended capture's pcaps here (from the host over SSH with --host)")
    f.add_argument("name", metavar="NAME")
    f.add_argument("--out", metavar="DIR", help="the directory they go to (default ./NAME); no file is overwritten")
    f.add_argument("--json", action="store_true", help="as JSON")
    f.set_defaults(func=lazy("appliance.cli.capture", "cmd_capture_fetch"))

    ls = cs.add_parser("list", help="every capture: state, packets so far, rate, drops, completeness")
    ls.add_argument("--json", action="store_true", help="as JSON")
    ls.set_defaults(func=lazy("appliance.cli.capture", "cmd_capture_list"))

    sv = cs.add_parser("_supervise")  # no help: left out of the listing (started by hvnet itself)
    sv.add_argument("directory")
    sv.set_defaults(func=lazy("appliance.cli.capture", "cmd_capture_supervise"))
