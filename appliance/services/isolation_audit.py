"""``hvnet isolation audit``: who hears whom among a host's real VIFs, with nothing installed in any VM.

The selection, the probes and the expectations are planned from one
inventory read (:mod:`appliance.isolation.audit.plan`); the trace method runs
every trace of the host in one shell (:mod:`~appliance.isolation.audit.trace`),
the traffic method injects the probes by packet-out and captures them on the
listeners' host-side devices (:mod:`~appliance.isolation.audit.traffic`).  The
result is an isolation check's, so reports, JSON, HTML and exit codes (0, 1
leak, 7 undecided) are the same.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Mapping
from contextlib import ExitStack
from datetime import datetime
from pathlib import Path
from typing import Optional

from appliance.core import ovsfeatures, yamldoc
from appliance.core.errors import UsageError
from appliance.core.ovsdb import Connection
from appliance.isolation.audit import inject
from appliance.isolation.audit import plan as audit
from appliance.isolation.audit import trace as audittrace
from appliance.isolation.audit import traffic as audittraffic
from appliance.isolation.check import METHODS, CheckResult
from appliance.isolation.model import MethodResult
from appliance.services.isolation import methods_of
from appliance.switch import inventory, reader
from appliance.switch.host import Host

__all__ = ["load_expect", "run_audit", "run_audit_hosts"]

_IP_LINK = re.compile(r"^(?P<index>[0-9]{1,10}): (?P<name>[^:@\s]+)[@:]")
TC_NOTE = "tc ingress policing is not crossed: injected probes enter the switch after it"
SENDER_NOTE = (
    "a sender's 'No' counts only when a trace of its exact packet-out reaches the switch's forwarding "
    "(NORMAL, a flood, an output); a probe dropped in a table before it leaves that sender's cells unknown"
)
CAPTURE_NOTE = "a capture records what the switch handed to the VM's device, not what the VM's driver accepted"


def load_expect(path: str) -> yamldoc.Document:
    """The ``--expect`` file, parsed (checked against the VIFs once they are known)."""
    return yamldoc.load(path)


def run_audit(
    host: Host,
    selectors: list[str],
    *,
    method: str = "both",
    expect: Optional[yamldoc.Document] = None,
    out_dir: Optional[Path] = None,
    keep: bool = False,
    timeout: float = 5.0,
) -> CheckResult:
    """Audit the VIFs of ``host`` that ``selectors`` pick (all of them when none)."""
    return run_audit_hosts({None: host}, selectors, method=method, expect=expect, out_dir=out_dir, keep=keep,
                           timeout=timeout)  # fmt: skip


def run_audit_hosts(
    hosts: Mapping[Optional[str], Host],
    selectors: list[str],
    *,
    method: str = "both",
    expect: Optional[yamldoc.Document] = None,
    out_dir: Optional[Path] = None,
    keep: bool = False,
    timeout: float = 5.0,
) -> CheckResult:
    """One audit of the VIFs the selectors pick on every host of ``hosts`` (by name; ``{None: host}`` for
    one): a probe injected on one host is listened for on all of them, across their uplinks."""
    methods = methods_of(method)
    sels = audit.parse_selectors(selectors)
    if "traffic" in methods and any(h.runner.local for h in hosts.values()) and os.geteuid() != 0:
        raise UsageError("the traffic method needs root (captures on the VIFs' devices)", hint="or use --method trace")
    for h in hosts.values():
        _check_ovs(h)
    started = time.monotonic()
    with ExitStack() as stack:
        conns = {n: stack.enter_context(h.connect(reader.COLUMNS, timeout=timeout)) for n, h in hosts.items()}
        invs = {n: inventory.read(conns[n], names=h.name_sources()) for n, h in hosts.items()}
        for n, inv in invs.items():  # the switch's own word, as well as its tools' (a dom0's OVS is its own)
            if (why := ovsfeatures.first_missing(["packet-out", "trace"], inv.host.ovs_version)) is not None:
                raise UsageError(f"{hosts[n].label or 'this host'}: {why}; the audit is not supported there")
        ports = audit.select_hosts(invs, sels)
        plan = audit.probes(ports)
        links = {(n, br): ups for n, inv in invs.items() for br, ups in audit.uplinks(inv).items()}
        mirrors = [m for n, inv in invs.items() for m in audit.mirror_specs(inv, [p for p in ports if p.host == n])]
        expected = audit.given(expect, ports, plan) if expect is not None else audit.derive(ports, plan, mirrors, links)
        results: dict[str, MethodResult] = {}
        for m in METHODS:
            if m not in methods:
                continue
            if m == "trace":
                names = {(n, br): ups for n, inv in invs.items() for br, ups in audit.uplink_names(inv).items()}
                results[m] = audittrace.run_hosts(dict(hosts), ports, plan, names if len(hosts) > 1 else {})
            else:
                ups = {(n, br): [(v.port, v.ofport) for v in inv.vifs if v.port in names and v.ofport]
                       for n, inv in invs.items() for br, names in audit.uplink_names(inv).items()}  # fmt: skip
                results[m] = _traffic(dict(hosts), conns, ports, plan, ups if len(hosts) > 1 else {}, out_dir, keep)
    where = ", ".join(str(n) for n in hosts) if len(hosts) > 1 else (next(iter(hosts.values())).label or "this host")
    return CheckResult(
        scenario=f"audit of {len(ports)} VIFs on {where}" + (_links_text(invs) if len(hosts) > 1 else ""),
        guests=[p.label for p in ports],
        expected=expected,
        methods=results,
        out_dir=str(out_dir) if out_dir and keep else None,
        duration_s=time.monotonic() - started,
        senders=[p.key for p in plan],
    )


def _links_text(invs: Mapping[Optional[str], inventory.Inventory]) -> str:
    """Which uplinks join the hosts, and that they were read from the switches."""
    parts = [f"{n} {br}: {', '.join(ups)}" for n, inv in invs.items() for br, ups in audit.uplink_names(inv).items()]
    return (" (bridges of one name joined through their uplinks, read from the switches: "
            f"{'; '.join(parts) or 'none'})")  # fmt: skip


def _check_ovs(host: Host) -> None:
    """Refuse an Open vSwitch too old for the audit's packet-out and traces, naming its version."""
    res = host.runner.run(["ovs-ofctl", "--version"], env=host.ovs_env, check=False)
    problem = inject.version_problem(res.stdout)
    if problem:
        raise UsageError(f"{host.label or 'this host'}: {problem}")


def _traffic(
    hosts: dict[Optional[str], Host], conns: Mapping[Optional[str], Connection], ports: list[audit.AuditPort],
    plan: list[audit.Probe], ups: audittraffic.Uplinks, out_dir: Optional[Path], keep: bool,
) -> MethodResult:  # fmt: skip
    first = next(iter(hosts.values()))
    where = out_dir or first.paths.captures_dir / f"audit-{datetime.now():%Y%m%d-%H%M%S}-{os.getpid()}"
    before = {n: _plugs(h, conns[n], [p for p in ports if p.host == n]) for n, h in hosts.items()}
    inj, listens = audittraffic.run_hosts(hosts, ports, plan, ups, where, keep=keep)
    after = {n: _plugs(h, conns[n], [p for p in ports if p.host == n]) for n, h in hosts.items()}
    replugged = {
        p.label: f"{p.port} was replugged during the audit ({before[p.host][p.label]} -> "
        f"{after[p.host].get(p.label) or 'gone'})"
        for p in ports
        if after[p.host].get(p.label) != before[p.host].get(p.label)
    }
    res = audittraffic.cells(ports, plan, inj, listens, replugged)
    res.stats = {
        "probes_sent": inj.probes_sent,
        "window_s": round(inj.window_s, 3),
        "controls_sent": len(inj.controls),
        "closing_controls_sent": len(inj.closing),
        "settle_s": round(inj.settle_s, 3),
        "senders_not_reaching_forwarding": dict(inj.unreached),
        "captures": len(listens),
        "dropped": {lbl: lst.counts.dropped if lst.counts else None for lbl, lst in listens.items()},
        "pcaps_kept": keep,
        "notes": [TC_NOTE, CAPTURE_NOTE, SENDER_NOTE],
    }
    if len(hosts) > 1:
        res.stats["links_closed"] = sorted(f"{x} -> {y}" for x, y in inj.links_closed)
    if keep:
        res.stats["pcaps"] = {lbl: str(lst.pcap) for lbl, lst in listens.items()}
    return res


def _plugs(host: Host, conn: Connection, ports: list[audit.AuditPort]) -> dict[str, str]:
    """Each port's plug as it is now: OpenFlow port number and kernel ifindex (a replug changes one)."""
    conn.run_once()
    inv = inventory.read(conn, kernel_counters=False)
    res = host.runner.run(["ip", "-o", "link", "show"], check=False)
    index = {m.group("name"): m.group("index") for line in res.stdout.splitlines() if (m := _IP_LINK.match(line))}
    out = {}
    for p in ports:
        v = inv.vif_by_port(p.port)
        if v is not None:
            out[p.label] = f"ofport {v.ofport}, ifindex {index.get(p.device, '-')}"
    return out
