"""``hvnet isolation audit``: the front end of :mod:`appliance.services.isolation_audit`."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from appliance.core import render
from appliance.core.errors import UsageError
from appliance.frontdoor.hosts import host_of, hosts_by_name


def register(isub: argparse._SubParsersAction) -> None:
    """The ``audit`` action of ``hvnet isolation``."""
    ia = isub.add_parser(
        "audit",
        help="who hears whom among this host's real VIFs, installing nothing in any VM; exit 0 match, 1 leak, "
        "7 undecided, 2 fewer than two VIFs",
        description="Every selected VIF is a sender and a listener: one ARP who-has per probe (sender 0.0.0.0, "
        "target in 192.0.2.0/24) is put into the switch as if the VIF sent it (packet-out, in_port = the VIF, "
        "resubmit to table 0) and captured on the listeners' host-side devices; or traced with ofproto/trace.",
    )
    ia.add_argument("selectors", nargs="*", metavar="SELECTOR",
                    help="a VIF, VM or MAC (vm:NAME, port:NAME, mac:MAC, or a glob); none: every VIF")  # fmt: skip
    ia.add_argument("--method", choices=("traffic", "trace", "both"), default="both", help="default: both")
    ia.add_argument("--expect", metavar="FILE",
                    help="expected matrix {matrix: {LISTENER: {SENDER: yes|no}}} by VM or VIF name "
                         "(default: derived from the ports' VLAN settings and mirrors)")  # fmt: skip
    ia.add_argument("--json", action="store_true", help="machine-readable output")
    ia.add_argument("--html", metavar="FILE", help="also write the matrices and evidence as one self-contained page")
    ia.add_argument("--keep-pcaps", metavar="DIR",
                    help="keep the captures (0600 files in a 0700 directory DIR); by default they are deleted "
                         "after counting")  # fmt: skip
    ia.add_argument("--hosts", metavar="NAME,NAME",
                    help="one audit across these hosts (inventory or lab names, not with --host/--db): probes "
                         "injected on one host are listened for on all, through the bridges' uplinks")  # fmt: skip
    ia.set_defaults(func=cmd_isolation_audit)


def _hosts(args: argparse.Namespace) -> dict:
    """``--hosts``: a Host per name, every one reached before anything runs; else the one the options name."""
    if not args.hosts:
        return {None: host_of(args)}
    if getattr(args, "host", None) or args.db:
        raise UsageError("--hosts names several hosts and --host/--db one switch: give one")
    names = [n.strip() for n in args.hosts.split(",") if n.strip()]
    if len(set(names)) != len(names) or len(names) < 2:
        raise UsageError(f"--hosts {args.hosts}: name two or more different hosts (one host: --host NAME)")
    return hosts_by_name(names, timeout=args.timeout)


def cmd_isolation_audit(args: argparse.Namespace) -> int:
    from appliance.core import htmlpage
    from appliance.services import isolation, isolation_audit

    expect = isolation_audit.load_expect(args.expect) if args.expect else None  # file errors before anything runs
    html_target = htmlpage.check_target(args.html) if args.html else None
    hosts = _hosts(args)
    result = isolation_audit.run_audit_hosts(
        hosts, list(args.selectors), method=args.method, expect=expect,
        out_dir=Path(args.keep_pcaps) if args.keep_pcaps else None, keep=bool(args.keep_pcaps),
        timeout=args.timeout,
    )  # fmt: skip
    if args.json:
        render.print_json(isolation.result_json(result))
    else:
        print(isolation.result_text(result))
    if html_target is not None:
        where = ", ".join(str(n) for n in hosts) if args.hosts else host_of(args).label or "this host"
        htmlpage.write(html_target, isolation.result_page(result, source=f"audited on {where}"))
        print(f"report: {html_target}", file=sys.stderr if args.json else sys.stdout)
    return result.exit_code
