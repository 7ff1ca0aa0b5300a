"""The audit's trace method: every probe through ``ofproto/trace``, one shell per host.

A host's traces -- ``dpif/show`` once, one ``ofproto/trace`` per probe, one
``ofproto/trace-packet-out`` per listener (its positive control) -- run in a
single ``sh`` started through the Host's runner (one SSH command for a remote
host, not one per trace).  The script is constant: names, flows and actions
reach it as positional arguments, never as shell text, and each output is
preceded by a marker line the parser splits on.
"""

from __future__ import annotations

from ..errors import CommandFailed
from ..host import Host
from . import inject, model, trace
from .audit import AuditPort, Probe
from .model import MethodResult

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
    res = MethodResult("trace")
    by_label = {p.label: p for p in ports}
    bridges = sorted({p.vif.bridge for p in ports})
    items = [("d", "", "", "")]
    for probe in plan:
        s = by_label[probe.sender]
        flow = trace.arp_flow(s.port, s.vif.mac or "00:00:00:00:00:00", "0.0.0.0", PROBE_TARGET,
                              vlan=probe.vlan if probe.tagged else None)  # fmt: skip
        items.append(("t", s.vif.bridge, flow, ""))
    for p in ports:
        flow = trace.control_flow(inject.CONTROL_MAC, CONTROL_TARGET)
        items.append(("p", p.vif.bridge, flow, f"output:{p.vif.ofport}"))
    try:
        results = batch(host, items)
    except (CommandFailed, ValueError) as exc:
        res.error = f"the traces could not be run: {exc}"
        return res
    dpif = results[0][1]
    odp = {br: trace.parse_dpif_show(dpif, br) for br in bridges}
    doubts = {p.label: _control(p, results[1 + len(plan) + i], odp[p.vif.bridge]) for i, p in enumerate(ports)}
    res.stats["datapath_actions"] = {}
    res.stats["traces"] = len(items)
    for n, probe in enumerate(plan):
        s = by_label[probe.sender]
        heard, problem = _heard(probe, s, results[1 + n], odp[s.vif.bridge], res)
        for p in ports:
            if p.label == probe.sender:
                continue
            cell = (p.label, probe.key)
            if problem is None and p.port in heard:
                res.cells[cell] = model.YES
            elif problem is None and doubts[p.label] is None:
                res.cells[cell] = model.NO
            else:
                res.cells[cell] = model.UNKNOWN
                res.reasons[cell] = problem or doubts[p.label] or ""
    return res


def _heard(
    probe: Probe, s: AuditPort, result: tuple[int, str], odp: dict[int, str], res: MethodResult
) -> tuple[set[str], str | None]:
    """The ports a probe's trace outputs to, or why that is not known."""
    if s.vif.mac is None:
        return set(), f"{s.port} has no known MAC (external_ids attached-mac), so no probe is made for it"
    rc, text = result
    if rc != 0:
        return set(), f"the trace of {probe.key}'s probe failed: {text.strip()[:200]}"
    try:
        passes = trace.passes(text)
        res.stats["datapath_actions"][probe.key] = trace.describe(passes)
        return {d.port for d in trace.deliveries(passes, odp)}, None
    except ValueError as exc:
        return set(), f"the trace of {probe.key}'s probe could not be read: {exc}"


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
