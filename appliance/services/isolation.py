"""Isolation verbs: load a scenario, run its check on a host's guests.

``hvnet isolation check`` and the console's Isolation screen both call
:func:`run_check`, so the checks before anything is touched (root and
tcpdump for the traffic method, the scenario's guests) and the capture
directory rule are the same from either.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from contextlib import ExitStack
from pathlib import Path
from typing import Any, Optional

from appliance.core.errors import UsageError
from appliance.core.ovsdb import Connection
from appliance.endpoints.guests import GuestSource
from appliance.isolation import check, model, report
from appliance.isolation import scenario as scenario_mod
from appliance.isolation.check import CheckResult
from appliance.isolation.scenario import Scenario
from appliance.switch import reader
from appliance.switch.host import Host

METHODS = check.METHODS

__all__ = [
    "METHODS", "CheckResult", "Scenario", "load_result", "load_scenario", "methods_of", "model", "result_json",
    "result_junit", "result_page", "result_text", "run_check",
]  # fmt: skip


def load_scenario(file: str) -> Scenario:
    """The scenario in ``file``, validated whole (``file:line: field`` errors, exit 2)."""
    return scenario_mod.load(file)


def load_result(path: str) -> CheckResult:
    """A result saved by ``hvnet isolation check --json``, read back to be reported again (exit 2 if not one)."""
    try:
        text = Path(path).read_text()
    except (OSError, UnicodeDecodeError) as exc:
        raise UsageError(f"{path}: cannot read: {getattr(exc, 'strerror', None) or exc}") from None
    try:
        return report.from_json(json.loads(text))
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        raise UsageError(
            f"{path}: not a saved isolation result ({type(exc).__name__}: {exc})",
            hint="save one with: hvnet isolation check SCENARIO --json > FILE",
        ) from None


def result_text(result: CheckResult) -> str:
    """A check's or an audit's result as the terminal shows it: the matrices, then what went wrong."""
    return report.format_result(result)


def result_json(result: CheckResult) -> dict[str, Any]:
    """A check's or an audit's result as ``--json`` prints it (what :func:`load_result` reads back)."""
    return report.to_json(result)


def result_junit(result: CheckResult) -> str:
    """A check's or an audit's result as JUnit XML (``--junit``): a test case per method and ordered pair;
    leaks and unexpected blocks fail, undecided cells are skipped, a method that could not run errs."""
    from appliance.isolation import junit

    return junit.document(result)


def result_page(result: CheckResult, *, source: str = "", scenario: Optional[Scenario] = None) -> str:
    """A check's or an audit's result as one self-contained HTML page (``--html``); ``source``: where it
    was checked, or the saved result it was read from."""
    from appliance.isolation import html

    return html.page(result, source=source, scenario=scenario)


def methods_of(method: str) -> tuple[str, ...]:
    """``both`` -> every method in their fixed order; otherwise the one named."""
    if method == "both":
        return check.METHODS
    if method not in check.METHODS:
        raise UsageError(f"unknown method {method!r}; choose one of both, {', '.join(check.METHODS)}")
    return (method,)


def run_check(
    host: Host,
    guests: GuestSource,
    sc: Scenario,
    method: str = "both",
    out_dir: Optional[Path] = None,
    *,
    root_hint: str,
    conn: Optional[Connection] = None,
    timeout: float = 5.0,
    hosts: Optional[Mapping[str, Host]] = None,
) -> CheckResult:
    """Check ``sc`` on ``host`` with ``guests``: settings applied for the run and undone after it.

    ``conn``: an open connection to reuse (the console's); otherwise one is
    opened for the check and closed after it.  A scenario whose topology has
    ``hosts`` runs on every one of them (``hosts``, by name): its settings on
    each host's switch, its frames traced and captured across the trunks.
    """
    methods = methods_of(method)
    if sc.topology.ovn:  # its switching is the pool's logical network, not a host's VLANs
        raise UsageError(f"scenario {sc.name} runs on an OVN pool ({sc.topology.file})",
                         hint=f"check it with: hvnet isolation check {sc.file}")  # fmt: skip
    found, captures = check.prepare(host, guests, sc, methods, out_dir, root_hint=root_hint)
    sc = as_found(sc, found)
    if sc.topology.hosts:
        return _check_hosts(hosts or {}, found, sc, methods, captures, timeout)
    if conn is not None:
        return check.run_check(conn, host, found, sc, methods, captures)
    with host.connect(reader.COLUMNS, timeout=timeout) as own:
        return check.run_check(own, host, found, sc, methods, captures)


def as_found(sc: Scenario, found: Mapping[str, Any]) -> Scenario:
    """The scenario with each real VM's facts as its guest source found them -- its VIF on the switch, its
    MAC, the address on that VIF -- in place of the names-only entries the file gives for VMs."""
    real = {n: ep for n, ep in found.items() if getattr(ep, "access", None) is not None}
    if not real:
        return sc
    guests = tuple(dataclasses.replace(g, vif=real[g.name].vif, mac=real[g.name].mac, ip=real[g.name].ip)
                   if g.name in real else g for g in sc.topology.guests)  # fmt: skip
    return dataclasses.replace(sc, topology=dataclasses.replace(sc.topology, guests=guests))


def _check_hosts(
    hosts: Mapping[str, Host],
    found: dict[str, Any],
    sc: Scenario,
    methods: tuple[str, ...],
    captures: Optional[Path],
    timeout: float,
) -> CheckResult:
    """One site per host of the topology (a host without the scenario's guests still carries their frames)."""
    missing = [n for n in sc.topology.hosts if n not in hosts]
    if missing:
        raise UsageError(f"scenario {sc.name} spans hosts {', '.join(sc.topology.hosts)}; "
                         f"{', '.join(missing)} cannot be reached from here",
                         hint=f"bring up its lab: hvnet lab up --topology {sc.topology.file}")  # fmt: skip
    with ExitStack() as stack:
        sites = [
            check.Site(stack.enter_context(hosts[n].connect(reader.COLUMNS, timeout=timeout)), hosts[n],
                       tuple(g for g in sc.guests if sc.topology.guest(g).host == n), n)
            for n in sc.topology.hosts
        ]  # fmt: skip
        return check.run_sites(sites, found, sc, methods, captures)
