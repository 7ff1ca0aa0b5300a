"""``hvnet isolation check | report``: a scenario checked on the lab, probe ports or an OVN pool, and its report.

(``hvnet isolation audit``, on a host's real VIFs, is :mod:`appliance.cli.audit`.)
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, Optional

from appliance.core import htmlpage, render
from appliance.frontdoor.guests import scenario_measurement
from appliance.services import isolation


def cmd_isolation_check(args: argparse.Namespace) -> int:
    sc = isolation.load_scenario(args.file)  # validated whole before anything is touched
    html_target = htmlpage.check_target(args.html) if args.html else None  # refused before the check runs
    junit_target = htmlpage.check_target(args.junit, "--junit") if args.junit else None
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
    _write_junit(junit_target, result, sys.stderr if args.json else sys.stdout)
    return result.exit_code


def _write_junit(target: Optional[Path], result: Any, stream: Any) -> None:
    """``--junit FILE``: the result as JUnit XML (a test case per method and pair), said where."""
    if target is not None:
        htmlpage.write(target, isolation.result_junit(result), option="--junit")
        print(f"junit: {target}", file=stream)


def cmd_isolation_report(args: argparse.Namespace) -> int:
    """A saved result (``isolation check --json``) printed again, or written as an HTML page."""
    html_target = htmlpage.check_target(args.html) if args.html else None
    junit_target = htmlpage.check_target(args.junit, "--junit") if args.junit else None
    result = isolation.load_result(args.result)
    if args.json:  # the saved result, read back and written as check --json writes it
        render.print_json(isolation.result_json(result))
    elif html_target is None:
        print(isolation.result_text(result))
    if html_target is not None:
        htmlpage.write(html_target, isolation.result_page(result, source=args.result))
        print(f"report: {html_target}", file=sys.stderr if args.json else sys.stdout)
    _write_junit(junit_target, result, sys.stderr if args.json else sys.stdout)
    return result.exit_code
