"""``hvnet``: the command line.

Each subcommand is a small function taking the parsed arguments and returning
an exit code.  Expected failures are :class:`HvnetError` subclasses, printed as
one message (plus a hint) with their exit code; there are no tracebacks for
them.  ``--json`` output is meant for scripts and keeps units in key names.
"""

from __future__ import annotations

import argparse
import gc
import logging
import os
import sys
import time
from collections.abc import Callable, Sequence

from appliance import __version__
from appliance.cli import audit as cli_audit
from appliance.cli import capture as cli_capture
from appliance.cli import completion as cli_completion
from appliance.cli import config as cli_config
from appliance.cli import exporter as cli_exporter
from appliance.cli import policy_args as cli_policy_args
from appliance.cli import probes as cli_probes
from appliance.cli import suite as cli_suite
from appliance.cli import tap as cli_tap
from appliance.cli.common import add_hosts_option, lazy
from appliance.core import render, validate
from appliance.core.errors import EXIT_CODES_HELP, EXIT_OK, EXIT_USAGE, HOSTS_EXIT_HELP, HvnetError
from appliance.core.systemd import log_handler
from appliance.endpoints.topology import DEFAULT_TOPOLOGY
from appliance.frontdoor.hosts import configured_host, host_of, local_host_of
from appliance.services import inventory
from appliance.services.inventory import Inventory, Vif
from appliance.switch.host import Host

log = logging.getLogger("hvnet")


# -- status ------------------------------------------------------------------


def _ingress_text(v: Vif) -> str:
    if not v.ingress_policing_rate_kbps:
        return "-"
    burst = v.ingress_policing_burst_kbit
    how = f" ({v.ingress_mechanism})" if v.ingress_mechanism else ""
    return f"{v.ingress_policing_rate_kbps} kbit/s burst {burst if burst else '8000 (default)'} kbit{how}"


def _vm_text(v: Vif) -> str:
    """``web-01 (running)``: the name, and the domain's state when libvirt said it."""
    name = v.vm_name or (v.vm_uuid[:8] if v.vm_uuid else "-")
    return f"{name} ({v.vm_state})" if v.vm_state else name


def _traffic_cells(v: Vif, with_rates: bool) -> list[str]:
    if with_rates:
        if v.rates is None:
            return ["-", "-"]
        return [render.si(v.rates.rx_bps, "bit/s"), render.si(v.rates.tx_bps, "bit/s")]
    return [render.count(v.counters.rx_packets) + " pkt", render.count(v.counters.tx_packets) + " pkt"]


def format_status(inv: Inventory, *, all_ports: bool, with_rates: bool) -> str:
    h = inv.host
    dps = ", ".join(f"{b.name} ({b.datapath_type})" for b in inv.bridges) or "none"
    lines = [
        f"host {h.hostname}  OVS {h.ovs_version or '?'}  db {h.db_target}",
        f"bridges: {dps}",
        "",
    ]
    vifs = [v for v in inv.vifs if all_ports or v.is_vif]
    rx_head, tx_head = ("RX(VM sends)", "TX(to VM)") if with_rates else ("RX", "TX")
    rows = []
    for v in vifs:
        rows.append(
            [
                _vm_text(v),
                v.port + ("+" + ",".join(v.alias_ports) if v.alias_ports else ""),
                v.mac or "-",
                v.vlan_summary(),
                _ingress_text(v),
                render.kbps(v.egress_max_rate_kbps),
                v.link_state or "-",
                *_traffic_cells(v, with_rates),
                f"{v.drops}/{v.errors}",
            ]
        )
    if rows:
        heads = ["VM", "PORT", "MAC", "VLAN", "INGRESS", "EGRESS", "LINK", rx_head, tx_head, "DROP/ERR"]
        lines += render.table(heads, rows).split("\n")
    else:
        lines.append("no VIFs on this switch" + ("" if all_ports else " (--all shows every port)"))
    notes = []
    for v in vifs:
        if v.carries_every_vlan:
            why = "no tag and no trunks" if v.vlan_mode == "trunk" else f"{v.vlan_mode} with no trunks"
            notes.append(f"warning: {v.port} has {why}: it carries EVERY VLAN")
        if v.error:
            notes.append(f"error: {v.port}: {v.error}")
        if v.ingress_policing_rate_kbps:
            notes.append(
                f"note: {v.port} ingress policing is configured ({v.ingress_mechanism}); enforcement has not "
                "been verified here ('hvnet verify FILE' checks it)"
            )
    if with_rates and any(v.rates is None for v in vifs):
        notes.append(
            "note: '-' rates: no kernel counters for that interface and OVSDB statistics refresh every "
            f"{inventory.OVSDB_STATS_INTERVAL_S:g} s; use --rates {inventory.OVSDB_STATS_INTERVAL_S:g} or more"
        )
    for m in inv.mirrors:
        out = m.output_port or (f"VLAN {m.output_vlan}" if m.output_vlan is not None else "?")
        sent = "not reported yet" if m.tx_packets is None else f"{render.count(m.tx_packets)} pkt"
        notes.append(f"mirror {m.name} on {m.bridge} -> {out} (sent {sent})")
    for t in inv.taps:
        copied = "-" if t["packets"] is None else f"{render.count(t['packets'])} pkt, {render.si(t['bytes'], 'B')}"
        notes.append(f"tap {t['name']} on {t['bridge']}: {t['config']} (copied {copied})")
    notes += sorted({f"note: TAP {t['note']}" for t in inv.taps if t["note"]})
    for b in inv.bridges:
        notes += [f"{b.name}: {line}" for line in b.sampling_text()]
    if notes:
        lines += ["", *notes]
    return render.lines(lines)  # one line each: a name cannot steer nor add a line


POOL_VERBS = ("status", "plan", "apply", "verify", "export", "rollback")  # on an OVN pool (and isolation check)


def cmd_status(args: argparse.Namespace) -> int:
    if getattr(args, "pool", None):
        from appliance.cli.pool import cmd_pool_status

        return cmd_pool_status(args)
    if getattr(args, "hosts", None):
        from appliance.cli import fleet as cli_fleet

        verb = cli_fleet.Verb(
            work=lambda host, _entry: (status_of(host, args), EXIT_OK),
            result=lambda inv: "ok",
            detail=lambda inv: cli_fleet.tally((sum(v.is_vif for v in inv.vifs), "VIF"), (len(inv.bridges), "bridge")),
            text=lambda inv: format_status(inv, all_ports=args.all, with_rates=bool(args.rates)),
            json=lambda inv: inv.to_json(all_ports=args.all),
        )
        return cli_fleet.run(args, verb)
    inv = status_of(host_of(args), args)
    if args.json:
        render.print_json(inv.to_json(all_ports=args.all))
    else:
        print(format_status(inv, all_ports=args.all, with_rates=bool(args.rates)))
    return EXIT_OK


def status_of(host: Host, args: argparse.Namespace) -> Inventory:
    """One host's inventory as ``status`` shows it (``--rates``, ``--bridge``): for one host or each of ``--hosts``."""
    if args.rates:
        with inventory.connect(host, timeout=args.timeout) as conn:
            live = inventory.LiveInventory(conn, host)
            live.refresh()
            time.sleep(args.rates)
            conn.run_once()
            inv = live.refresh()
    else:
        inv = inventory.read_inventory_once(host, timeout=args.timeout)
    if args.bridge:
        if not any(b.name == args.bridge for b in inv.bridges):
            raise HvnetError(
                f"no bridge named {args.bridge!r}",
                hint=f"bridges: {', '.join(b.name for b in inv.bridges) or 'none'}",
            )
        inv.vifs = [v for v in inv.vifs if v.bridge == args.bridge]
    from appliance.services.taps import host_taps

    inv.taps = [t.to_json() for t in host_taps(host) if not args.bridge or t.bridge == args.bridge]
    return inv


# -- isolation -------------------------------------------------------------------


def cmd_isolation_check(args: argparse.Namespace) -> int:
    from pathlib import Path

    from appliance.core import htmlpage
    from appliance.frontdoor.guests import scenario_measurement
    from appliance.services import isolation

    sc = isolation.load_scenario(args.file)  # validated whole before anything is touched
    html_target = htmlpage.check_target(args.html) if args.html else None  # refused before the check runs
    if sc.topology.ovn or getattr(args, "pool", None):  # an OVN pool: its logical network, ovn-trace
        from appliance.cli.pool import check_pool_scenario
        from appliance.lab import Lab

        result = check_pool_scenario(args, sc, Lab())
        where = f"pool {args.pool or sc.topology.name}"
    else:
        # The guests (the lab's, or probes on the target's bridge) and the switches: chosen once.
        with scenario_measurement(sc, args, method=args.method) as m:
            result = isolation.run_check(
                m.host, m.guests, sc, args.method, Path(args.out) if args.out else None,
                root_hint="run as root, or use --method trace", timeout=args.timeout,
                hosts={n: h for n, h in m.switches.items() if n is not None},
            )  # fmt: skip
            where = m.where
    if args.json:
        render.print_json(isolation.result_json(result))
    else:
        print(isolation.result_text(result))
    if html_target is not None:
        htmlpage.write(html_target, isolation.result_page(result, source=f"checked on {where}", scenario=sc))
        print(f"report: {html_target}", file=sys.stderr if args.json else sys.stdout)
    return result.exit_code


def cmd_isolation_report(args: argparse.Namespace) -> int:
    """A saved result (``isolation check --json``) printed again, or written as an HTML page."""
    from appliance.core import htmlpage
    from appliance.services import isolation

    html_target = htmlpage.check_target(args.html) if args.html else None
    result = isolation.load_result(args.result)
    if html_target is None:
        print(isolation.result_text(result))
        return result.exit_code
    htmlpage.write(html_target, isolation.result_page(result, source=args.result))
    print(f"report: {html_target}")
    return result.exit_code


# -- tui -------------------------------------------------------------------------


def cmd_tui(args: argparse.Namespace) -> int:
    from tui.app import run as run_tui  # the UI is optional for scripted use

    # The schema is fetched (an unreachable switch is reported here); the replica is built after the first paint.
    conn = inventory.connect(host_of(args), timeout=args.timeout, sync=False)
    name = getattr(args, "host", None) or configured_host(args.db)  # as the operator called it (an inventory name)
    return run_tui(conn, host_of(args), start=args.screen, timeout=args.timeout, name=name,
                   local=lambda: local_host_of(args))  # fmt: skip


# -- plumbing ----------------------------------------------------------------------


def _positive_float(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number: {text!r}") from None
    if not 0 < value <= 3600:
        raise argparse.ArgumentTypeError(f"must be between 0 and 3600 seconds, not {value}")
    return value


class _Parser(argparse.ArgumentParser):
    """argparse that exits with :data:`EXIT_USAGE` and a one-line hint."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"hvnet: error: {message}\n  hint: '{self.prog} --help' lists what is allowed\n")


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(
        prog="hvnet",
        description="Host networking for XenServer and KVM hypervisors: see and manage what Open vSwitch "
        "does for your VMs.",
        epilog="OVSDB target, first match wins: --db, $HVNET_DB, [target] db in hvnet.conf, a running hvnet lab "
        "(unless --no-lab), unix:/var/run/openvswitch/db.sock. tcp: targets are unencrypted and unauthenticated: "
        "prefer ssl:. Settings: flags, then $HVNET_* variables, then /etc/hvnet/hvnet.conf ($HVNET_CONFIG), then "
        "defaults ('hvnet config show')."
        "\n\n" + EXIT_CODES_HELP + "\n\n" + HOSTS_EXIT_HELP.replace(": 6", ":\n  6"),
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("--version", action="version", version=f"hvnet {__version__}")
    p.add_argument(
        "--db", metavar="TARGET",
        help="OVSDB target: unix:PATH, tcp:HOST[:PORT] or ssl:HOST[:PORT] (port 6640 by default; [IPv6]:PORT), "
        "or a cluster's servers separated by commas, tried in order ($HVNET_DB)",
    )  # fmt: skip
    p.add_argument(
        "--host",
        metavar="[USER@]NAME[:PORT]",
        help="a remote hypervisor over SSH, nothing installed there ($HVNET_HOST; the system ssh client, "
        "strict host keys, ~/.ssh/config)",
    )
    p.add_argument(
        "--pool",
        metavar="NAME",
        help="an OVN pool of the inventory (its 'pools:'): status shows its logical switches, ports and chassis; "
        "plan/apply/verify FILE set its ports' limits (QoS rules), logical switches (vlan) and mirrors in its NB; "
        "export and rollback as on a host; isolation check FILE checks a pool scenario on it",
    )
    p.add_argument(
        "--pool-wait",
        type=float,
        default=30.0,
        metavar="S",
        help="with --pool apply or rollback: wait up to S seconds for every chassis to acknowledge (default 30)",
    )
    p.add_argument(
        "--guests", choices=("lab", "probes"),
        help="where suite run and isolation check find their endpoints: the built-in lab's guests, or probe "
        "ports hvnet adds to the target's bridge for the run (the file's 'probes:'); default: probes when the "
        "file names them, else the lab -- but never the lab silently when --host/--db/--hosts/--pool names a "
        "real target ($HVNET_GUESTS)",
    )  # fmt: skip
    p.add_argument(
        "--no-lab",
        action="store_true",
        help="never use a running hvnet lab as the target: --db, $HVNET_DB, else the system OVS "
        "(the hvnet-agent service runs with it)",
    )
    # OVS's own spellings too (ovs-vsctl -p/--private-key, -c/--certificate, -C/--ca-cert): one dest each.
    p.add_argument("--ssl-key", "-p", "--private-key", dest="ssl_key", metavar="FILE",
                   help="private key for ssl: targets ($HVNET_SSL_KEY)")  # fmt: skip
    p.add_argument("--ssl-cert", "-c", "--certificate", dest="ssl_cert", metavar="FILE",
                   help="certificate for ssl: targets ($HVNET_SSL_CERT)")  # fmt: skip
    p.add_argument("--ssl-ca", "-C", "--ca-cert", dest="ssl_ca", metavar="FILE",
                   help="CA certificate for ssl: targets ($HVNET_SSL_CA)")  # fmt: skip
    p.add_argument(
        "--libvirt",
        metavar="URI",
        help="libvirt URI for VM names, states and interfaces, or 'none' "
        "($HVNET_LIBVIRT_URI; default qemu:///system when its daemon runs)",
    )
    p.add_argument("--timeout", type=_positive_float, default=5.0, metavar="S", help="connect timeout (default 5 s)")
    p.add_argument("-v", "--verbose", action="count", default=0, help="log more (-vv for debug)")
    sub = p.add_subparsers(dest="command", metavar="COMMAND", title="commands", parser_class=_Parser)

    h = sub.add_parser(
        "hosts",
        help="the inventory's hypervisors: reachable over SSH, OVS, datapath, VIFs, agent, policy drift; "
        "exit 0 all reachable, else the worst host's (3 unreachable)",
    )
    h.add_argument("--hosts", metavar="NAME,NAME|GROUP|all", help="only these hosts (default: all); " + HOSTS_EXIT_HELP)
    h.add_argument("--json", action="store_true", help="machine-readable output")
    h.set_defaults(func=lazy("appliance.cli.hosts", "cmd_hosts"))

    s = sub.add_parser("status", help="show the host's bridges and VIFs (VM, VLAN, QoS, mirrors, counters)")
    s.add_argument("--json", action="store_true", help="machine-readable output (units in key names)")
    s.add_argument("--all", action="store_true", help="include ports that are not VM interfaces")
    s.add_argument("--bridge", metavar="BR", help="only this bridge")
    s.add_argument(
        "--rates", type=_positive_float, metavar="S", help="sample counters twice, S seconds apart, and show rates"
    )
    add_hosts_option(s)
    s.set_defaults(func=cmd_status)

    lab = sub.add_parser("lab", help="the built-in lab: a private OVS with namespace guests (up, down, status)")
    lsub = lab.add_subparsers(dest="lab_command", metavar="ACTION", required=True, parser_class=_Parser)
    up = lsub.add_parser("up", help="start the lab (idempotent)")
    up.add_argument(
        "--topology", default=str(DEFAULT_TOPOLOGY), metavar="FILE", help="topology YAML (default: the 2010 study's)"
    )
    up.add_argument("--json", action="store_true", help="machine-readable output")
    up.set_defaults(func=lazy("appliance.cli.lab", "cmd_lab_up"))
    down = lsub.add_parser("down", help="remove every namespace, veth, daemon and file the lab created")
    down.add_argument("--json", action="store_true", help="machine-readable output")
    down.set_defaults(func=lazy("appliance.cli.lab", "cmd_lab_down"))
    st = lsub.add_parser("status", help="show whether the lab is up and what it holds (exit 1 if not up)")
    st.add_argument("--json", action="store_true", help="machine-readable output")
    st.set_defaults(func=lazy("appliance.cli.lab", "cmd_lab_status"))
    im = lsub.add_parser("image", help="build the probe guest image for QEMU guests (or find it in the cache)")
    im.add_argument("--force", action="store_true", help="rebuild even when the cached image is current")
    im.add_argument("--cache", metavar="DIR", help="cache directory (default /var/cache/hvnet/image)")
    im.add_argument("--json", action="store_true", help="machine-readable output")
    im.set_defaults(func=lazy("appliance.cli.lab", "cmd_lab_image"))
    ex = lsub.add_parser("exec", help="run a command inside a lab guest (namespace or QEMU VM); its exit status")
    ex.add_argument("guest", metavar="GUEST", help="guest name from the topology")
    ex.add_argument("argv", nargs=argparse.REMAINDER, metavar="-- COMMAND", help="the command and its arguments")
    ex.set_defaults(func=lazy("appliance.cli.lab", "cmd_lab_exec"))

    iso = sub.add_parser("isolation", help="ARP/VLAN isolation checks: who hears whom, versus the VLAN config")
    isub = iso.add_subparsers(dest="isolation_command", metavar="ACTION", required=True, parser_class=_Parser)
    ic = isub.add_parser("check", help="run a scenario (vlan-tests/*.yaml); exit 0 match, 1 leak/block, 7 undecided")
    ic.add_argument("file", metavar="FILE", help="scenario YAML")
    ic.add_argument("--method", choices=("traffic", "trace", "both"), default="both", help="default: both")
    ic.add_argument("--json", action="store_true", help="machine-readable output")
    ic.add_argument("--out", metavar="DIR", help="where to keep the pcap files (default /var/lib/hvnet/isolation/...)")
    ic.add_argument("--html", metavar="FILE", help="also write the matrices and evidence as one self-contained page")
    ic.set_defaults(func=cmd_isolation_check)
    ir = isub.add_parser(
        "report", help="print a saved result (check --json) again, or write it as HTML; exits as the check did"
    )
    ir.add_argument("result", metavar="RESULT", help="a result saved with: hvnet isolation check ... --json > RESULT")
    ir.add_argument("--html", metavar="FILE", help="write one self-contained HTML page instead of printing")
    ir.set_defaults(func=cmd_isolation_report)
    cli_audit.register(isub)

    cli_policy_args.register(sub)
    cli_suite.register(sub)
    cli_capture.register(sub)
    cli_exporter.register(sub)
    cli_config.register(sub)
    cli_tap.register(sub)
    cli_probes.register(sub)

    t = sub.add_parser("tui", help="open the terminal UI")
    t.add_argument(
        "--screen", default="vifs", choices=("fleet", "host", "vifs", "mirrors", "suites", "isolation", "log"),
        help="the screen to open first (default: vifs)",
    )  # fmt: skip
    t.set_defaults(func=cmd_tui)
    cli_completion.register(sub, build_parser)
    return p


ONE_SHOT = frozenset({"status", "plan", "verify", "export", "hosts"})  # verbs that read once and exit


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; its text output shown through :class:`render.TerminalStream` (names cannot steer
    the terminal), except the console's, which draws the terminal itself and escapes what it shows."""
    streams = sys.stdout, sys.stderr
    sys.stdout, sys.stderr = render.TerminalStream(sys.stdout), render.TerminalStream(sys.stderr)
    try:
        return _main(argv, streams)
    finally:
        sys.stdout, sys.stderr = streams


def _refuse_control(argv: Sequence[str]) -> str | None:
    """Why an argument cannot be taken (a name holding control characters), checked before anything else;
    what follows ``--`` (a command for ``lab exec``) is passed on as given."""
    for i, arg in enumerate(argv, start=1):
        if arg == "--":
            return None
        try:
            validate.no_control(arg)
        except ValueError as exc:
            return f"argument {i} ('{render.terminal(arg)}'): {exc}"
    return None


def _main(argv: Sequence[str] | None, streams: tuple[object, object]) -> int:
    refused = _refuse_control(sys.argv[1:] if argv is None else argv)
    if refused:
        print(f"hvnet: {refused}", file=sys.stderr)
        return EXIT_USAGE
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "tui":
        sys.stdout, sys.stderr = streams  # type: ignore[assignment]
    logging.basicConfig(
        level=[logging.WARNING, logging.INFO, logging.DEBUG][min(args.verbose, 2)],
        handlers=[log_handler("hvnet")],  # "<N>message" when stderr is the journal, else "hvnet: level: message"
    )
    func: Callable[[argparse.Namespace], int] | None = getattr(args, "func", None)
    if func is None:
        parser.print_help()
        return EXIT_USAGE
    pool_check = args.command == "isolation" and getattr(args, "isolation_command", None) == "check"
    if getattr(args, "pool", None) and args.command not in POOL_VERBS and not pool_check:
        print(f"hvnet: --pool works with {', '.join(POOL_VERBS)} and isolation check; '{args.command}' manages "
              "one switch (--host, --db)", file=sys.stderr)  # fmt: skip
        return EXIT_USAGE
    if args.command in ONE_SHOT:
        # Read the switch once, print, exit: every object made is kept to the end, so the cyclic
        # collector would only walk them again (about a tenth of 'status' on a 1000-VIF host).
        gc.disable()
    try:
        return func(args)
    except HvnetError as exc:
        print(f"hvnet: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("hvnet: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return EXIT_OK


if __name__ == "__main__":
    sys.exit(main())
