"""``hvnet suite prune | pin | unpin``: keeping the runs directory to the runs worth keeping.

Thin: the rules are :mod:`appliance.netperf.store.retention`'s, the finding and
removing :mod:`appliance.services.runs`'; a prune is a dry run unless
``--yes`` is given, and says what it removed (or would) and why each other
run stays.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any

from appliance.core import documents, render
from appliance.core.errors import EXIT_FAILED, EXIT_OK


def _age(text: str) -> Any:
    from appliance.services.runs import parse_age

    try:
        return parse_age(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _count(text: str) -> int:
    if not text.isascii() or not text.isdigit() or int(text) > 100000:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of runs from 0 to 100000")
    return int(text)


def _runs_dir(args: argparse.Namespace) -> Path:
    from appliance.frontdoor.hosts import data_paths

    if args.runs:
        return Path(args.runs)
    from appliance.core import config

    return data_paths(config.environ()).runs_dir  # no switch is needed to look at saved runs


def cmd_prune(args: argparse.Namespace) -> int:
    from appliance.services import runs

    result = runs.prune(_runs_dir(args), keep=args.keep, older_than=args.older_than, dry_run=not args.yes)
    if args.json:
        render.print_json(documents.SUITE_PRUNE.stamp(result.to_json()))
        return EXIT_FAILED if result.failed else EXIT_OK
    gone, kept = result.removed, [d for d in result.decisions if not d.remove]
    verb = "would remove" if result.dry_run else "removed"
    print(f"{result.base}: {verb} {len(gone)} run(s), keeping {len(kept)}")
    rows = [[d.run.path.name, d.run.suite, d.run.state, (verb if d.remove else "keep") + ": " + d.reason]
            for d in result.decisions if d.run.path not in result.failed]  # fmt: skip
    rows += [[p.name, "", "", f"NOT removed: {why}"] for p, why in result.failed.items()]
    if rows:
        print(render.table(["RUN", "SUITE", "STATE", "WHAT AND WHY"], rows))
    if result.dry_run and gone:
        print("dry run: nothing was removed; --yes removes them")
    return EXIT_FAILED if result.failed else EXIT_OK


def cmd_pin(args: argparse.Namespace) -> int:
    from appliance.services import runs

    marker = runs.pin(Path(args.run), args.note or "")
    if args.json:
        render.print_json(documents.SUITE_PIN.stamp({"run": args.run, "pinned": True, "marker": str(marker)}))
    else:
        print(f"pinned: {args.run} ('hvnet suite prune' keeps it; {marker} says when and why)")
    return EXIT_OK


def cmd_unpin(args: argparse.Namespace) -> int:
    from appliance.services import runs

    was = runs.unpin(Path(args.run))
    if args.json:
        render.print_json(documents.SUITE_UNPIN.stamp({"run": args.run, "pinned": False, "was_pinned": was}))
    else:
        print(f"unpinned: {args.run}" if was else f"{args.run} was not pinned")
    return EXIT_OK


def register(ss: Any) -> None:
    """The verbs, under ``hvnet suite``."""
    pr = ss.add_parser(
        "prune", help="remove old runs (a dry run unless --yes): older than AGE and/or beyond the N newest per suite"
    )
    pr.add_argument("--keep", type=_count, metavar="N", help="keep the N newest runs of each suite")
    pr.add_argument(
        "--older-than", type=_age, metavar="AGE", help="only runs that started more than AGE ago (30d, 12h)"
    )
    pr.add_argument("--yes", action="store_true", help="remove them (default: only say what would go)")
    pr.add_argument("--runs", metavar="DIR", help="the runs directory (default $HVNET_RUNS_DIR, hvnet.conf's runs_dir)")
    pr.add_argument("--json", action="store_true", help="machine-readable output")
    pr.set_defaults(func=cmd_prune)

    pn = ss.add_parser("pin", help="keep a run from every prune (a compare baseline)")
    pn.add_argument("run", metavar="RUN", help="run directory")
    pn.add_argument("--note", metavar="TEXT", help="why it is kept (written in the run's 'pinned' file)")
    pn.add_argument("--json", action="store_true", help="machine-readable output")
    pn.set_defaults(func=cmd_pin)

    up = ss.add_parser("unpin", help="let prunes remove a pinned run again")
    up.add_argument("run", metavar="RUN", help="run directory")
    up.add_argument("--json", action="store_true", help="machine-readable output")
    up.set_defaults(func=cmd_unpin)
