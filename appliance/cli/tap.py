"""``hvnet tap add | del | list``: flow TAPs, the mirror commands' vocabulary with a match.

The flags build the same mapping a policy file's ``bridges.BR.taps.NAME``
holds, so a TAP is refused with the same words however it is typed.
"""

from __future__ import annotations

import argparse
from typing import Any

from appliance.cli.tap_args import MATCH_FLAGS
from appliance.core import documents, render
from appliance.core.errors import EXIT_OK, UsageError


def spec_of(args: argparse.Namespace) -> dict[str, Any]:
    """The policy file's mapping for the flags given."""
    outputs = {"port": args.output_port, "gre": args.output_gre, "erspan": args.output_erspan}
    given = {k: v for k, v in outputs.items() if v is not None}
    if len(given) != 1:
        raise UsageError("give exactly one of --output-port, --output-gre, --output-erspan")
    if args.key is not None:
        given["key"] = args.key
    spec: dict[str, Any] = {
        "vifs": list(args.vif),
        "direction": args.direction,
        "method": args.method,
        "output": given,
        "allow_isolation_exception": args.allow_isolation_exception,
    }
    match = {k: getattr(args, k) for k in MATCH_FLAGS if getattr(args, k) is not None}
    if match:
        spec["match"] = match
    if args.sampling is not None:
        spec["sampling"] = args.sampling
    return spec


def cmd_tap_add(args: argparse.Namespace) -> int:
    from appliance.cli.policy import _engine, _finish
    from appliance.services import taps

    spec = spec_of(args)
    try:
        rule = taps.tap_rule(args.bridge, args.name, spec)
    except UsageError as exc:
        field, _, message = exc.message.partition(": ")
        flag = "--" + field.split(".")[-1].replace("_", "-")
        if field.startswith("output"):
            flag = "--output-" + field.split(".")[-1] if field != "output" else "--output-port"
        raise UsageError(f"{flag}: {message}") from None
    with _engine(args) as eng:
        return _finish(args, taps.add_tap(eng, rule, dry_run=args.dry_run))


def cmd_tap_del(args: argparse.Namespace) -> int:
    from appliance.cli.policy import _engine, _finish
    from appliance.services import taps

    with _engine(args) as eng:
        return _finish(args, taps.delete_tap(eng, args.name, args.bridge, dry_run=args.dry_run))


def cmd_tap_list(args: argparse.Namespace) -> int:
    from appliance.cli.policy import _engine
    from appliance.services import taps

    with _engine(args) as eng:
        rows = taps.list_taps(eng)
    if args.json:
        render.print_json(documents.TAP_LIST.stamp({"taps": [r.to_json() for r in rows]}))
        return EXIT_OK
    if not rows:
        print("no TAPs")
        return EXIT_OK
    table = [
        [r.bridge, r.name, r.cols.describe(),
         "not measured" if r.packets is None else render.count(r.packets) + " pkt",
         "not measured" if r.bytes is None else render.si(r.bytes, "B")]
        for r in rows
    ]  # fmt: skip
    print(render.table(["BRIDGE", "TAP", "MATCH OF VIFS -> OUTPUT (METHOD)", "COPIED", "BYTES"], table))
    for note in sorted({r.note for r in rows if r.note}):
        print(f"note: {note}")
    return EXIT_OK
