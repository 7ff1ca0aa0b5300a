"""``hvnet exporter``: Prometheus metrics of the switch, served over HTTP until stopped.

Each setting comes from its flag, else its ``HVNET_EXPORTER_*`` variable, else
hvnet.conf's ``[exporter]`` section, else its default (127.0.0.1:9477, 5 s,
plain HTTP).  The service layer does the work (:mod:`.services.exporter`);
this module parses, starts it, says where it listens and waits for SIGTERM or SIGINT.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path
from typing import Any

from appliance.cli.common import lazy
from appliance.core import config
from appliance.core.errors import EXIT_OK, UsageError
from appliance.frontdoor.hosts import build_host, host_of, inventory_file
from appliance.switch.host import DEFAULT_POLICY_FILE


def cmd_exporter(args: argparse.Namespace) -> int:
    from appliance.exporter import server as exporter
    from appliance.services import scrape

    # each: the flag, $HVNET_EXPORTER_*, hvnet.conf's [exporter], the default -- in that order
    chosen = config.resolve("exporter.listen", args.listen, flag_name="--listen")
    listen = exporter.parse_listen(str(chosen.value or exporter.DEFAULT_LISTEN), chosen.source)
    tls = _tls(args)
    exporter.require_allowed(listen, args.allow_remote, tls, chosen.source)
    deadline = _scrape_timeout(args.scrape_timeout)
    policy = args.policy
    if policy is not None and policy != "none" and not Path(policy).is_file():
        raise UsageError(f"--policy {policy}: no such file", hint="name the agent's policy file, or --policy none")
    if not 1 <= args.check_interval <= 3600:
        raise UsageError(f"--check-interval {args.check_interval:g}: allowed 1-3600 seconds")
    options = {"timeout": deadline, "check_interval": args.check_interval}
    collector: Any
    if args.hosts:
        if args.host or args.db:
            raise UsageError("--hosts names the hypervisors to export: not with --host or --db")
        from appliance.core.hostlist import load
        from appliance.services.metrics_fleet import FleetCollector

        entries = load(inventory_file()).select(args.hosts)
        # each host's drift from its own policy (the inventory's), unless --policy names one for all
        policies = {h.name: (None if policy == "none" else policy or h.policy) for h in entries}
        # the whole scrape within the deadline: each host's connection and OVSDB calls within half of it
        options = {**options, "timeout": deadline / 2, "deadline": deadline}
        collector = FleetCollector(policies, lambda name, timeout: build_host(ssh_host=name, timeout=timeout),
                                   **options)  # fmt: skip
        what = f"{len(entries)} hosts ({', '.join(policies)})"
    else:
        if policy is None and Path(DEFAULT_POLICY_FILE).exists():
            policy = DEFAULT_POLICY_FILE
        host = host_of(args)
        collector = scrape.Collector(host, policy=None if policy == "none" else policy, **options)
        what = host.describe()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    server = exporter.Server(collector, listen, allow_remote=args.allow_remote, tls=tls)
    try:
        print(f"hvnet exporter: serving {server.url} for {what}", flush=True)
        while not stop.wait(1.0):
            pass
    finally:
        server.close()
    print("hvnet exporter: stopped", file=sys.stderr)
    return EXIT_OK


def _scrape_timeout(flag: Any) -> float:
    r = config.resolve("exporter.scrape_timeout", None if flag is None else f"{flag:g}", flag_name="--scrape-timeout")
    try:
        value = float(str(r.value))
    except ValueError:
        value = -1.0
    if not 0 < value <= 60:
        raise UsageError(f"{r.source}: {r.value!r}: allowed more than 0, at most 60 seconds")
    return value


def _tls(args: argparse.Namespace) -> Any:
    """The HTTPS settings (flags over the variables over the file), checked; None for plain HTTP."""
    from appliance.exporter import server as exporter

    files = {}
    for key, flag in (("tls_cert", "--tls-cert"), ("tls_key", "--tls-key"), ("client_ca", "--client-ca")):
        r = config.resolve(f"exporter.{key}", getattr(args, key), flag_name=flag)
        if r.value and r.kind in ("flag", "env"):  # the file's values were checked when it was read
            try:
                config.BY_NAME[f"exporter.{key}"].check(r.value)
            except ValueError as exc:
                raise UsageError(f"{r.source}: {r.value!r} is not allowed; allowed: {exc}") from None
        files[key] = exporter.TlsFile(r.value, r.source) if r.value else None
    tls = exporter.tls_of(files["tls_cert"], files["tls_key"], files["client_ca"])
    if tls is not None:
        tls.context()  # files that cannot be loaded: said now, before any connection
    return tls


def register(sub: argparse._SubParsersAction) -> None:  # type: ignore[type-arg]
    e = sub.add_parser(
        "exporter",
        help="serve Prometheus metrics of the switch over HTTP: VIF counters, limits and their enforcement, "
        "mirrors, sFlow/IPFIX, agent, ovs-vswitchd CPU",
    )
    e.add_argument(
        "--listen", metavar="ADDR:PORT",
        help="where to listen: 127.0.0.1:9477 (default; [exporter] listen), [::1]:9477; port 0 picks a free one",
    )  # fmt: skip
    e.add_argument(
        "--allow-remote", action="store_true",
        help="allow a non-loopback --listen address without --client-ca (the metrics name every VM)",
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
        "--scrape-timeout", type=float, metavar="S",
        help="every scrape answers within S seconds; what is not collected by then is hvnet_up 0 and "
        "hvnet_exporter_scrape_timed_out 1 ([exporter] scrape_timeout, default 5, at most 60)",
    )  # fmt: skip
    e.add_argument(
        "--tls-cert", metavar="FILE",
        help="serve HTTPS with this PEM certificate, with --tls-key ([exporter] tls_cert)",
    )  # fmt: skip
    e.add_argument("--tls-key", metavar="FILE", help="the certificate's PEM private key ([exporter] tls_key)")
    e.add_argument(
        "--client-ca", metavar="FILE",
        help="serve only clients whose certificate this CA signed (HTTPS only; [exporter] client_ca); "
        "then a non-loopback --listen needs no --allow-remote",
    )  # fmt: skip
    e.add_argument(
        "--hosts", metavar="NAME,NAME|GROUP|all",
        help="export these inventory hosts (over SSH, each on its own; label host=NAME) instead of one switch",
    )  # fmt: skip
    e.set_defaults(func=lazy("appliance.cli.exporter", "cmd_exporter"))
