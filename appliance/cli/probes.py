"""``hvnet probes list | clean``: the probe ports hvnet added to a host's bridge, and removing the ones left.

A run removes its own probes when it ends; a run that was killed (SIGKILL,
a crash, a lost connection) leaves them, marked with their owner and expiry.
The next suite or check with probes on that host removes them; these verbs let
the operator see and remove them without running anything.
"""

from __future__ import annotations

import argparse
import time
from typing import Any

from appliance.cli.common import lazy
from appliance.core import documents, render
from appliance.core.errors import EXIT_OK


def _shown(text: Any) -> str:
    """A value read from the switch, printed literally: control characters escaped, never interpreted."""
    return render.terminal("" if text is None else str(text))


def cmd_list(args: argparse.Namespace) -> int:
    from appliance.frontdoor.hosts import host_of
    from appliance.services import probes

    found = probes.list_probes(host_of(args), timeout=args.timeout)
    if args.json:
        render.print_json(documents.PROBES_LIST.stamp({"probes": found}))
        return EXIT_OK
    if not found:
        print("no probe ports on this switch")
        return EXIT_OK
    now = time.time()
    rows = [
        [_shown(p["probe"]), _shown(p["bridge"]), _shown(p["port"]), _shown(p["owner"]) or "-",
         "-" if p["expires"] is None else f"{int(p['expires'] - now)} s", _shown(p["reason"]) or "in use"]
        for p in found
    ]  # fmt: skip
    print(render.table(["probe", "bridge", "port", "owner", "expires in", "state"], rows))
    return EXIT_OK


def cmd_clean(args: argparse.Namespace) -> int:
    from appliance.frontdoor.hosts import host_of
    from appliance.services import probes

    done = probes.clean(host_of(args), all_probes=args.all, timeout=args.timeout)
    if args.json:
        render.print_json(documents.PROBES_CLEAN.stamp({"done": done}))
    else:
        print("\n".join(_shown(d) for d in done) if done else "nothing to remove")
    return EXIT_OK


def register(sub: Any) -> None:
    p = sub.add_parser("probes", help="probe ports hvnet added for suites and checks: list, clean")
    ps = p.add_subparsers(dest="probes_command", metavar="ACTION", required=True, parser_class=type(p))
    ls = ps.add_parser("list", help="probe ports on the switch: owner, expiry, whether any run may remove them")
    ls.add_argument("--json", action="store_true", help="machine-readable output")
    ls.set_defaults(func=lazy("appliance.cli.probes", "cmd_list"))
    c = ps.add_parser("clean", help="remove the probes left behind (owner gone or expired), with their namespaces")
    c.add_argument("--all", action="store_true", help="also the probes of a run that is still going (it fails)")
    c.add_argument("--json", action="store_true", help="machine-readable output")
    c.set_defaults(func=lazy("appliance.cli.probes", "cmd_clean"))
