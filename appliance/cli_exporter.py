"""``hvnet exporter``: Prometheus metrics of the switch, served over HTTP until stopped.

The listen address comes from ``--listen``, else ``$HVNET_EXPORTER_LISTEN``,
else 127.0.0.1:9477.  The service layer does the work (:mod:`.services.exporter`);
this module parses, starts it, says where it listens and waits for SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from . import config
from .cli_common import lazy
from .errors import EXIT_OK, UsageError
from .frontdoor import build_host, host_of, inventory_file
from .host import DEFAULT_POLICY_FILE


def cmd_exporter(args: argparse.Namespace) -> int:
    from .services import exporter, metrics

    # --listen, $HVNET_EXPORTER_LISTEN, hvnet.conf's [exporter] listen, 127.0.0.1:9477: in that order
    chosen = config.resolve("exporter.listen", args.listen, flag_name="--listen")
    listen = exporter.parse_listen(str(chosen.value or exporter.DEFAULT_LISTEN), chosen.source)
    exporter.require_allowed(listen, args.allow_remote)
    policy = args.policy
    if policy is not None and policy != "none" and not Path(policy).is_file():
        raise UsageError(f"--policy {policy}: no such file", hint="name the agent's policy file, or --policy none")
    if not 1 <= args.check_interval <= 3600:
        raise UsageError(f"--check-interval {args.check_interval:g}: allowed 1-3600 seconds")
    if not 0 < args.scrape_timeout <= 60:
        raise UsageError(f"--scrape-timeout {args.scrape_timeout:g}: allowed more than 0, at most 60 seconds")
    options = {"timeout": args.scrape_timeout, "check_interval": args.check_interval}
    collector: Any
    if args.hosts:
        if args.host or args.db:
            raise UsageError("--hosts names the hypervisors to export: not with --host or --db")
        from .hosts import load
        from .services.metrics_fleet import FleetCollector

        entries = load(inventory_file()).select(args.hosts)
        # each host's drift from its own policy (the inventory's), unless --policy names one for all
        policies = {h.name: (None if policy == "none" else policy or h.policy) for h in entries}
        collector = FleetCollector(policies, lambda name, timeout: build_host(ssh_host=name, timeout=timeout),
                                   **options)  # fmt: skip
        what = f"{len(entries)} hosts ({', '.join(policies)})"
    else:
        if policy is None and Path(DEFAULT_POLICY_FILE).exists():
            policy = DEFAULT_POLICY_FILE
        host = host_of(args)
        collector = metrics.Collector(host, policy=None if policy == "none" else policy, **options)
        what = host.describe()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    server = exporter.Server(collector, listen, allow_remote=args.allow_remote)
    try:
        print(f"hvnet exporter: serving {server.url} for {what}", flush=True)
        while not stop.wait(1.0):
            pass
    finally:
        server.close()
    print("hvnet exporter: stopped", file=sys.stderr)
    return EXIT_OK


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    e = sub.add_parser(
        "exporter",
        help="serve Prometheus metrics of the switch over HTTP: VIF counters, limits and their enforcement, "
        "mirrors, sFlow/IPFIX, agent, ovs-vswitchd CPU",
    )
    e.add_argument(
        "--listen", metavar="ADDR:PORT",
        help="where to listen: 127.0.0.1:9477 (default, $HVNET_EXPORTER_LISTEN), [::1]:9477; port 0 picks a free one",
    )  # fmt: skip
    e.add_argument(
        "--allow-remote", action="store_true",
        help="allow a non-loopback --listen address (the metrics name every VM; the endpoint has no authentication)",
    )  # fmt: skip
    e.add_argument(
        "--policy", metavar="FILE",
        help=f"policy file whose drift is exported (default {DEFAULT_POLICY_FILE} when it exists; 'none': no drift)",
    )  # fmt: skip
    e.add_argument(
        "--check-interval", type=float, default=60.0, metavar="S",
        help="seconds between checks of limit enforcement and policy drift, in the background (default 60)",
    )  # fmt: skip
    e.add_argument(
        "--scrape-timeout", type=float, default=2.0, metavar="S",
        help="longest wait for OVSDB in a scrape; past it the scrape says hvnet_up 0 (default 2)",
    )  # fmt: skip
    e.add_argument(
        "--hosts", metavar="NAME,NAME|GROUP|all",
        help="export these inventory hosts (over SSH, each on its own; label host=NAME) instead of one switch",
    )  # fmt: skip
    e.set_defaults(func=lazy("cli_exporter", "cmd_exporter"))
