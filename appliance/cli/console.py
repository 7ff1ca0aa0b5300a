"""``hvnet tui``: the console, on the switch the options name."""

from __future__ import annotations

import argparse

from appliance.frontdoor.hosts import configured_host, host_of, local_host_of
from appliance.services import inventory


def cmd_tui(args: argparse.Namespace) -> int:
    from tui.app import run as run_tui  # the UI is optional for scripted use

    # The schema is fetched (an unreachable switch is reported here); the replica is built after the first paint.
    conn = inventory.connect(host_of(args), timeout=args.timeout, sync=False)
    name = getattr(args, "host", None) or configured_host(args.db)  # as the operator called it (an inventory name)
    return run_tui(conn, host_of(args), start=args.screen, timeout=args.timeout, name=name,
                   local=lambda: local_host_of(args))  # fmt: skip
