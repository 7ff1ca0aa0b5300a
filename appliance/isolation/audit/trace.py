"""The audit's trace method: every probe through ``ofproto/trace``, one shell per host.

A host's traces -- ``dpif/show`` once, one ``ofproto/trace`` per probe, one
``ofproto/trace-packet-out`` per listener (its positive control) -- run in a
single ``sh`` started through the Host's runner (one SSH command for a remote
host, not one per trace).  The script is constant: names, flows and actions
reach it as positional arguments, never as shell text, and each output is
preceded by a marker line the parser splits on.
"""

from __future__ import annotations

from typing import Any

from appliance.core.errors import CommandFailed
from appliance.isolation import model
from appliance.isolation import ofproto as trace
from appliance.isolation.audit import inject
from appliance.isolation.audit.plan import AuditPort, Probe
from appliance.isolation.model import MethodResult
from appliance.switch.host import Host

MARKER = "@@hvnet-audit-trace@@"
# Arguments come four at a time: KIND BRIDGE FLOW ACTIONS (d: dpif/show, t: trace, p: trace-packet-out).
SCRIPT = (
    'ctl=$1; shift; while [ "$#" -ge 4 ]; do echo "' + MARKER + '"; case $1 in '
    'd) ovs-appctl -t "$ctl" dpif/show;; '
    't) ovs-appctl -t "$ctl" ofproto/trace "$2" "$3";; '
    'p) ovs-appctl -t "$ctl" ofproto/trace-packet-out "$2" "$3" "$4";; '
    'esac 2>&1; echo "' + MARKER + ' rc=$?"; shift 4; done'
)
PROBE_TARGET = str(inject.MARK_NET[inject.KIND_PROBE])
CONTROL_TARGET = str(inject.MARK_NET[inject.KIND_CONTROL])


def batch(host: Host, items: list[tuple[str, str, str, str]], timeout: float = 120.0) -> list[tuple[int, str]]:
    """Run every (kind, bridge, flow, actions) in one shell on ``host``: each one's (exit status, output)."""
    ctl = host.daemon_ctl("ovs-vswitchd") or "ovs-vswitchd"
    argv = ["sh", "-c", SCRIPT, "sh", ctl, *(x for item in items for x in item)]
    res = host.runner.run(argv, env=host.ovs_env, check=False, timeout=timeout)
    return split(res.stdout, len(items))


def split(text: str, expected: int) -> list[tuple[int, str]]:
    """The batch's output cut at its markers (pure); ValueError when it holds fewer results than asked."""
    out: list[tuple[int, str]] = []
    body: list[str] | None = None
    for line in text.splitlines():
        if line == MARKER:
            body = []
        elif line.startswith(MARKER + " rc=") and body is not None:
            rc = line.rpartition("=")[2]
            out.append((int(rc) if rc.isdigit() else -1, "\n".join(body)))
            body = None
        elif body is not None:
            body.append(line)
    if len(out) < expected:
        raise ValueError(f"the trace batch returned {len(out)} of {expected} results")
    return out


def run(host: Host, ports: list[AuditPort], plan: list[Probe]) -> MethodResult:
    """Trace every probe of ``plan`` and every listener's control on one host's switch."""
    return run_hosts({None: host}, ports, plan, {})


Crossing = tuple[int, str | None, str, int | None]  # (probe index, from host, bridge, VLAN on the wire)


def run_hosts(
    hosts: dict[str | None, Host],
    ports: list[AuditPort],
    plan: list[Probe],
    ups: dict[tuple[str | None, str], list[str]],
) -> MethodResult:
    """Trace every probe on its sender's host, then again on each other host entering its uplinks with the
    VLAN it left by (round by round, one shell per host each round), and every listener's control.

    ``ups``: each (host, bridge)'s uplink port names; the bridges of one name on the hosts are one network
    joined through them.
    """
    res = MethodResult("trace")
    res.stats["datapath_actions"], res.stats["traces"] = {}, 0
    by_label = {p.label: p for p in ports}
    heard: dict[tuple[int, str | None], set[str]] = {}  # (probe, host) -> ports the frame leaves by there
    problems: dict[int, str] = {}
    odp: dict[str | None, str] = {}  # each host's dpif/show
    doubts: dict[str, str | None] = {}
    # Round one: each probe on its sender's host, each listener's control on its own.
    todo: dict[str | None, list[tuple[Any, tuple[str, str, str, str]]]] = {h: [] for h in hosts}
    for n, probe in enumerate(plan):
        snd = by_label[probe.sender]
        if snd.vif.mac is None:
            problems[n] = f"{snd.port} has no known MAC (external_ids attached-mac), so no probe is made for it"
            continue
        tag = probe.vlan if probe.tagged else None
        flow = trace.arp_flow(snd.port, snd.vif.mac, "0.0.0.0", PROBE_TARGET, vlan=tag)
        todo[snd.host].append((("probe", n, snd.host, tag), ("t", snd.vif.bridge, flow, "")))
    for p in ports:
        flow = trace.control_flow(inject.CONTROL_MAC, CONTROL_TARGET)
        todo[p.host].append((("control", p.label), ("p", p.vif.bridge, flow, f"output:{p.vif.ofport}")))
    while any(todo.values()):
        crossings: list[Crossing] = []
        for h, jobs in todo.items():
            if not jobs:
                continue
            results = _round(hosts[h], h, jobs, odp, res)
            for (key, item), result in zip(jobs, results):
                if key[0] == "control":
                    p = by_label[key[1]]
                    ctl = result if isinstance(result, str) else _control(p, result, _ports(odp, h, p.vif.bridge))
                    doubts[p.label] = ctl
                    continue
                n = key[1]
                if isinstance(result, str):
                    problems.setdefault(n, result)
                    continue
                out, problem = _read(plan[n], result, _ports(odp, h, item[1]), res, key[3], first=key[0] == "probe")
                if problem:
                    problems.setdefault(n, problem)
                heard.setdefault((n, h), set()).update(d.port for d in out)
                crossings += [(n, h, item[1], d.vlan) for d in out if d.port in ups.get((h, item[1]), [])]
        todo = {h: [] for h in hosts}
        for n, frm, bridge, vlan in crossings:
            snd = by_label[plan[n].sender]
            for y in hosts:
                if y == frm or (n, y) in heard:
                    continue
                heard[(n, y)] = set()
                for u in ups.get((y, bridge), []):
                    flow = trace.arp_flow(u, snd.vif.mac or "", "0.0.0.0", PROBE_TARGET, vlan=vlan)
                    todo[y].append((("far", n, y, vlan), ("t", bridge, flow, "")))
    for n, probe in enumerate(plan):
        for p in ports:
            if p.label == probe.sender:
                continue
            cell = (p.label, probe.key)
            if n not in problems and p.port in heard.get((n, p.host), set()):
                res.cells[cell] = model.YES
            elif n not in problems and doubts.get(p.label) is None:
                res.cells[cell] = model.NO
            else:
                res.cells[cell] = model.UNKNOWN
                res.reasons[cell] = problems.get(n) or doubts.get(p.label) or "not traced"
    return res


def _round(
    host: Host, name: str | None, jobs: list[tuple[Any, tuple[str, str, str, str]]], odp: dict, res: MethodResult
) -> list[tuple[int, str] | str]:
    """One shell on ``host`` for ``jobs`` (its datapath ports read first, once): each job's result, or why
    the whole batch failed."""
    first = name not in odp
    items = ([("d", "", "", "")] if first else []) + [item for _key, item in jobs]
    res.stats["traces"] += len(items)
    try:
        results = batch(host, items)
    except (CommandFailed, ValueError) as exc:
        where = f" on {name}" if name else ""
        return [f"the traces{where} could not be run: {exc}"] * len(jobs)
    if first:
        odp[name] = results.pop(0)[1]
    return list(results)


def _ports(odp: dict[str | None, str], host: str | None, bridge: str) -> dict[int, str]:
    return trace.parse_dpif_show(odp.get(host, ""), bridge)


def _read(
    probe: Probe, result: tuple[int, str], odp: dict[int, str], res: MethodResult, vlan: int | None, *, first: bool
) -> tuple[list[trace.Delivery], str | None]:
    """Where one trace sends the probe (which entered tagged ``vlan``, or untagged), or why that is not known."""
    rc, text = result
    if rc != 0:
        return [], f"the trace of {probe.key}'s probe failed: {text.strip()[:200]}"
    if first and (stop := trace.forwarding_stop(text)) is not None:  # a VM's own frames may not stop there
        return [], (f"{probe.key}'s probe (sender 0.0.0.0) stops before the switch's forwarding, at {stop}: "
                    "what the VM's own frames meet is not shown")  # fmt: skip
    try:
        passes = trace.passes(text)
        if first:
            res.stats["datapath_actions"][probe.key] = trace.describe(passes)
        return trace.deliveries(passes, odp, vlan), None
    except ValueError as exc:
        return [], f"the trace of {probe.key}'s probe could not be read: {exc}"


def _control(p: AuditPort, result: tuple[int, str], odp: dict[int, str]) -> str | None:
    """Why the trace method's "No" is not proven for listener ``p`` (None: its control trace reaches it)."""
    if p.vif.ofport is None or p.vif.ofport < 1:
        return f"{p.port} has no OpenFlow port number, so no control trace can reach it"
    rc, text = result
    try:
        reached = rc == 0 and any(d.port == p.port for d in trace.deliveries(trace.passes(text), odp))
    except ValueError as exc:
        return f"the control trace to {p.port} could not be read ({exc}), so the trace's 'No' is not proven"
    if reached:
        return None
    return f"a control trace straight to {p.port} does not show it leaving there, so the trace's 'No' is not proven"


def sender_checks(hosts: dict[str | None, Host], ports: list[AuditPort], plan: list[Probe], run: int) -> dict[str, str]:
    """The traffic method's sender-side control: each probe's exact packet-out (``in_port`` = its VIF,
    ``resubmit(,0)``) traced on its sender's host, one shell per host.  Returns, by probe key, why a
    probe is not shown reaching the switch's forwarding decision (dropped in a table -- a VIF locking
    mode's ``arp_spa`` allow-list, an operator's flow -- or the trace failed); a probe that does is absent.
    """
    by_label = {p.label: p for p in ports}
    jobs: dict[str | None, list[tuple[Probe, tuple[str, str, str, str]]]] = {h: [] for h in hosts}
    for probe in plan:
        s = by_label[probe.sender]
        if s.vif.mac is None or s.vif.ofport is None or s.vif.ofport < 1:
            continue  # no probe was injected: its cells are unknown for that already
        vlan = probe.vlan if probe.tagged else None
        tha = inject.mark_mac(run, probe.vlan)
        flow = trace.probe_flow(s.vif.ofport, s.vif.mac.lower(), tha, PROBE_TARGET, vlan)
        jobs[s.host].append((probe, ("p", s.vif.bridge, flow, "resubmit(,0)")))
    out: dict[str, str] = {}
    for name, todo in jobs.items():
        if not todo:
            continue
        where = f" on {name}" if name else ""
        results: list[tuple[int, str]] | None = None
        failed = ""
        try:
            results = batch(hosts[name], [item for _p, item in todo])
        except (CommandFailed, ValueError) as exc:
            failed = str(exc)[:200]
        for i, (probe, _item) in enumerate(todo):
            sender = by_label[probe.sender].port + (f" (tagged VLAN {probe.vlan})" if probe.tagged else "")
            if results is None:
                out[probe.key] = (
                    f"the trace of {sender}'s probe{where} could not be run ({failed}), so a 'No' is not proven"
                )
                continue
            rc, text = results[i]
            if rc != 0:
                out[probe.key] = (
                    f"the trace of {sender}'s probe{where} failed ({text.strip()[:200]}), so a 'No' is not proven"
                )
            elif (stop := trace.forwarding_stop(text)) is not None:
                out[probe.key] = (
                    f"{sender}'s probe does not reach the switch's forwarding decision{where}: {stop}, "
                    "so its 'No' is not proven"
                )
    return out
