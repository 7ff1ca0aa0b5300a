"""``--hosts NAME,NAME|GROUP|all`` on ``status``, ``plan``, ``apply`` and ``verify``: the verb on many hosts.

The hosts come from the inventory; each runs the verb's one-host function
(the same one ``--host`` runs, handed in by the verb's command module as a
:class:`Verb`) in parallel through
:func:`appliance.services.fleet.run`.  The output is a table of the hosts
side by side -- HOST, RESULT, DETAIL, seconds -- then, when a host has more
to say than its row, that host's usual output under ``== HOST ==``.  The exit
code is the worst host's (see :data:`appliance.core.errors.SEVERITY`).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from appliance.core import documents, render
from appliance.core.errors import EXIT_UNKNOWN, EXIT_UNREACHABLE, UsageError, exit_word
from appliance.core.hostlist import InventoryHost, load
from appliance.frontdoor.hosts import build_host, inventory_file
from appliance.services import fleet
from appliance.services import fleet_policy as pool
from appliance.switch.host import Host


@dataclass(frozen=True)
class Verb:
    """How one verb's per-host result is run and shown."""

    work: Callable[[Host, InventoryHost], tuple[Any, int]]
    result: Callable[[Any], str]  # the RESULT cell
    detail: Callable[[Any], str]  # the DETAIL cell: changes, problems
    text: Callable[[Any], str]  # the host's usual output
    json: Callable[[Any], Any]
    changes_hosts: bool = False  # a host given up on mid-way has an unknown outcome
    gate: pool.PlanGate | None = None  # a policy's verbs: the hosts' plans meet before anything changes


def hosts_of(args: argparse.Namespace) -> list[InventoryHost]:
    """The inventory entries ``--hosts`` names; with ``--host`` or ``--db`` it is a usage error."""
    if args.host or args.db:
        raise UsageError(
            f"--hosts names hosts from the inventory and {'--host' if args.host else '--db'} one switch: give one"
        )
    path = inventory_file()
    if not path.exists():
        raise UsageError(f"--hosts: no host inventory at {path}", hint="write one, or set $HVNET_INVENTORY")
    inventory = load(path)
    chosen = inventory.select(args.hosts)
    if not chosen:
        raise UsageError(f"--hosts {args.hosts}: {inventory.file} lists no hosts")
    return chosen


def run(args: argparse.Namespace, verb: Verb) -> int:
    """The verb on every host ``--hosts`` names, in parallel; the output, and the worst host's exit code."""
    entries = hosts_of(args)  # every name checked before any host is contacted
    gate = verb.gate
    if gate is not None:
        gate.expect(e.name for e in entries)

    def connect(e: InventoryHost) -> Host:
        try:
            return build_host(ssh_host=e.name, libvirt=args.libvirt, timeout=args.timeout)
        except BaseException:
            if gate is not None:
                gate.leave(e.name)
            raise

    def work(host: Host, e: InventoryHost) -> tuple[Any, int]:
        try:
            return verb.work(host, e)
        finally:
            if gate is not None:
                gate.leave(e.name)  # failed before planning (a no-op after its plan arrived)

    outcomes = fleet.run(
        entries,
        work,
        connect,
        deadline_s=args.host_timeout,
        overdue_exit=EXIT_UNKNOWN if verb.changes_hosts else EXIT_UNREACHABLE,
    )
    code = fleet.worst([o.exit for o in outcomes])
    if args.json:
        render.print_json(fleet_json(outcomes, verb, code))
    else:
        print(format_outcomes(outcomes, verb))
    return code


def fleet_json(outcomes: list[fleet.HostOutcome[Any]], verb: Verb, code: int) -> dict[str, Any]:
    """``VERB --hosts ... --json``: document ``hvnet.fleet``, each host's exit, time and document (or error)."""
    return documents.FLEET.stamp({"hosts": {o.name: _json(o, verb) for o in outcomes}, "exit": code})


def _json(o: fleet.HostOutcome[Any], verb: Verb) -> dict[str, Any]:
    out: dict[str, Any] = {"exit": o.exit, "elapsed_s": round(o.seconds, 3)}
    if o.value is not None:
        out["result"] = verb.json(o.value)
    else:
        out["error"] = o.error
        if o.hint:
            out["hint"] = o.hint
    return out


def format_outcomes(outcomes: list[fleet.HostOutcome[Any]], verb: Verb) -> str:
    """The hosts' table, then each host's own output when it holds more than its row."""
    rows, sections = [], []
    for o in outcomes:
        if o.value is None:
            error = o.error or ""
            cell = _cell(error)
            rows.append([o.name, exit_word(o.exit), cell, f"{o.seconds:.2f}"])
            if o.hint or cell != error:  # the whole message below the table when the row could not hold it
                sections.append(f"== {o.name} ==\n{error}" + (f"\n  hint: {o.hint}" if o.hint else ""))
            continue
        rows.append([o.name, verb.result(o.value), verb.detail(o.value), f"{o.seconds:.2f}"])
        text = verb.text(o.value)
        if len(text.splitlines()) > 2:  # more than a result line or two: the row said it already
            sections.append(f"== {o.name} ==\n{text}")
    return "\n\n".join([render.table(["HOST", "RESULT", "DETAIL", "S"], rows), *sections])


DETAIL_WIDTH = 48  # the table stays within 80 columns with a host name of up to about 12 characters


def _cell(text: str) -> str:
    """A message's first line, shortened to fit the DETAIL column (the whole message follows the table)."""
    first = text.splitlines()[0] if text else ""
    return first if len(first) <= DETAIL_WIDTH else first[: DETAIL_WIDTH - 3] + "..."


def tally(first: tuple[int, str], *more: tuple[int, str]) -> str:
    """``3 changes, 1 problem``: the first count always, the others when not zero."""
    counts = [first, *(m for m in more if m[0])]
    return ", ".join(f"{n} {what}{'' if n == 1 else 's'}" for n, what in counts)
