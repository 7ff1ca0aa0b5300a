"""``hvnet exporter``: Prometheus metrics of the switch, served over HTTP until stopped.

The listen address comes from ``--listen``, else ``$HVNET_EXPORTER_LISTEN``,
else 127.0.0.1:9477.  The service layer does the work (:mod:`.services.exporter`);
this module parses, starts it, says where it listens and waits for SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from pathlib import Path

from .cli_common import lazy
from .errors import EXIT_OK, UsageError
from .frontdoor import host_of
from .host import DEFAULT_POLICY_FILE


def cmd_exporter(args: argparse.Namespace) -> int:
    from .services import exporter, metrics

    env = os.environ.get("HVNET_EXPORTER_LISTEN")
    text, origin = (
        (args.listen, "--listen")
        if args.listen
        else (env, "$HVNET_EXPORTER_LISTEN")
        if env
        else (exporter.DEFAULT_LISTEN, "the default")
    )
    listen = exporter.parse_listen(text, origin)
    exporter.require_allowed(listen, args.allow_remote)
    policy = args.policy
    if policy is None and Path(DEFAULT_POLICY_FILE).exists():
        policy = DEFAULT_POLICY_FILE
    if policy is not None and policy != "none" and not Path(policy).is_file():
        raise UsageError(f"--policy {policy}: no such file", hint="name the agent's policy file, or --policy none")
    policy = None if policy == "none" else policy
    if not 1 <= args.check_interval <= 3600:
        raise UsageError(f"--check-interval {args.check_interval:g}: allowed 1-3600 seconds")
    if not 0 < args.scrape_timeout <= 60:
        raise UsageError(f"--scrape-timeout {args.scrape_timeout:g}: allowed more than 0, at most 60 seconds")
    host = host_of(args)
    collector = metrics.Collector(host, timeout=args.scrape_timeout, policy=policy,
                                  check_interval=args.check_interval)  # fmt: skip
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    server = exporter.Server(collector, listen, allow_remote=args.allow_remote)
    try:
        print(f"hvnet exporter: serving {server.url} for {host.describe()}", flush=True)
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
    e.set_defaults(func=lazy("cli_exporter", "cmd_exporter"))
