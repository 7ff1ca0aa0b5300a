"""The audit's traffic method: probes injected by packet-out, captured on the listeners' host-side devices.

Order, as in the lab's traffic method: a capture armed on every listener's
device (``tcpdump -Q out -p``: what the switch handed to the VM's device, not
what the VM's driver then accepted; a userspace ``type=tap`` port shows those
frames as inbound, so ``-Q in`` there), then a positive control put on every
listener's port, then every probe -- one OpenFlow bundle of packet-outs per
bridge, each with ``in_port`` = the sender's VIF and ``resubmit(,0)`` so the
frame crosses table 0 like one the VM sent (tc ingress policing is *not*
crossed: it sits before the switch) -- then a closing control on every
listener's port.  Frames queue on a port in order, so a capture that shows
its closing control saw every probe forwarded to it before.

Captures keep only the audit's frames (a BPF filter on the mark, see
:mod:`.inject`), in a 0700 directory as 0600 files (tcpdump under umask
077), deleted after counting unless asked to keep them.
"""

from __future__ import annotations

import secrets
import time
from dataclasses import dataclass, field
from pathlib import Path

from appliance.isolation import model
from appliance.isolation.audit import inject
from appliance.isolation.audit import trace as audittrace
from appliance.isolation.audit.capture import Captures, Listen, LocalCaptures
from appliance.isolation.audit.plan import AuditPort, Probe
from appliance.isolation.audit.remote import RemoteCaptures
from appliance.isolation.model import Evidence, MethodResult
from appliance.isolation.pcap import ArpFrame
from appliance.switch.host import Host

QUIET_S = 0.1
SETTLE_MAX_S = 2.0
POLL_S = 0.01


@dataclass
class Injection:
    """What the run put into the switches."""

    run: int
    probes_sent: int = 0
    failed: dict[tuple[str | None, str], str] = field(default_factory=dict)  # (host, bridge) -> why refused
    links_closed: set[tuple[str | None, str | None]] = field(default_factory=set)  # (from, to): link bounded
    controls: set[str] = field(default_factory=set)  # labels whose port got the positive control
    closing: set[str] = field(default_factory=set)
    window_s: float = 0.0
    settle_s: float = 0.0
    unreached: dict[str, str] = field(default_factory=dict)  # probe key -> why it is not shown reaching forwarding


def remote_captures(host: Host, keep_dir: Path | None) -> Captures:
    return RemoteCaptures(host, keep_dir)


def _send(host: Host, bridge: str, lines: list[str]) -> str | None:
    """Every packet-out of ``lines`` in one OpenFlow bundle on ``bridge``; why it failed, or None."""
    if not lines:
        return None
    res = host.runner.run(["ovs-ofctl", "bundle", bridge, "-"], env=host.ovs_env, check=False,
                          input_text=inject.bundle(lines), timeout=60.0)  # fmt: skip
    return None if res.returncode == 0 else (res.stderr.strip() or f"ovs-ofctl exited {res.returncode}")[:300]


def _controls(host: Host, ports: list[AuditPort], labels: set[str], run: int, kind: int) -> set[str]:
    """A control frame put straight onto each listener's port: one packet-out per bridge; who got it."""
    data = inject.frame(inject.CONTROL_MAC, run, kind)
    by_bridge: dict[str, list[AuditPort]] = {}
    for p in ports:
        if p.label in labels and p.vif.ofport is not None and p.vif.ofport >= 1:
            by_bridge.setdefault(p.vif.bridge, []).append(p)
    got: set[str] = set()
    for bridge, ps in by_bridge.items():
        if _send(host, bridge, [inject.control_line([p.vif.ofport for p in ps if p.vif.ofport], data)]) is None:
            got |= {p.label for p in ps}
    return got


def _probe_lines(ports: list[AuditPort], plan: list[Probe], run: int) -> dict[str, list[str]]:
    by_label = {p.label: p for p in ports}
    out: dict[str, list[str]] = {}
    for probe in plan:
        s = by_label[probe.sender]
        if s.vif.mac is None or s.vif.ofport is None or s.vif.ofport < 1:
            continue
        data = inject.frame(s.vif.mac, run, inject.KIND_PROBE, probe.vlan, send_tagged=probe.tagged)
        out.setdefault(s.vif.bridge, []).append(inject.probe_line(s.vif.ofport, data))
    return out


def _settle(caps: Captures, listens: dict[str, Listen], closing: set[str], run: int) -> float:
    """Wait until every capture in ``closing`` holds its closing control and none grew for QUIET_S (at most
    SETTLE_MAX_S); the time waited.  Only a wait: the verdict reads the frames after the captures stop."""
    started = time.monotonic()
    counts: dict[str, int] = {}
    grew = dict.fromkeys(listens, started)
    missing = {label for label in closing if label in listens and listens[label].error is None}
    while True:
        now = time.monotonic()
        frames = caps.frames()
        for label, got in frames.items():
            if len(got) != counts.get(label):
                counts[label], grew[label] = len(got), now
        missing = {label for label in missing if not _holds(frames.get(label, []), inject.KIND_CLOSING, run)}
        if (not missing and all(now - t >= QUIET_S for t in grew.values())) or now - started >= SETTLE_MAX_S:
            break
        time.sleep(POLL_S)
    for label, lst in listens.items():
        lst.settled = now - grew[label] >= QUIET_S
    return now - started


def _holds(frames: list[ArpFrame], kind: int, run: int) -> bool:
    return any((m := inject.mark_of(f)) is not None and m.kind == kind and m.run == run for f in frames)


def run(
    host: Host, ports: list[AuditPort], plan: list[Probe], out_dir: Path, *, keep: bool = False
) -> tuple[Injection, dict[str, Listen]]:
    """Capture on every listener, inject every probe, collect the frames (pcaps deleted unless ``keep``)."""
    return run_hosts({None: host}, ports, plan, {}, out_dir, keep=keep)


Uplinks = dict[tuple[str | None, str], list[tuple[str, int]]]  # (host, bridge) -> [(uplink port, ofport)]
UPLINK = "\x00uplink "  # the key prefix of an uplink's capture: no VIF label starts so


def run_hosts(
    hosts: dict[str | None, Host], ports: list[AuditPort], plan: list[Probe], ups: Uplinks, out_dir: Path,
    *, keep: bool = False,
) -> tuple[Injection, dict[str, Listen]]:  # fmt: skip
    """:func:`run` across hosts: captures on every host (and, inbound, on its uplinks), probes injected on
    each sender's host, then a link closing out of every uplink; each host's closing controls go out only
    once its uplink captures show the other hosts' link closings (or the wait ends), so they bound what
    was still in flight on the physical link too."""
    inj = Injection(run=secrets.randbelow(0xFFFF))
    caps: dict[str | None, Captures] = {}
    for i, (name, host) in enumerate(hosts.items()):
        where = out_dir if len(hosts) == 1 else out_dir / f"host{i}"
        caps[name] = LocalCaptures(host, where) if host.runner.local else remote_captures(host, where if keep else None)
    listens: dict[str | None, dict[str, Listen]] = {}
    started = time.monotonic()
    try:
        for name in hosts:
            specs = [(p.label, p.device, d) for p in ports if p.host == name for d, _why in [p.capture()] if d]
            specs += [(f"{UPLINK}{u}", u, "in") for (h, _br), us in ups.items() if h == name for u, _o in us]
            listens[name] = caps[name].start(specs, inj.run, timeout=10.0)
        started = time.monotonic()
        try:
            _inject(hosts, ports, plan, ups, inj, listens, caps)
        finally:
            inj.window_s = time.monotonic() - started
            for c in caps.values():
                c.stop()
        # The sender-side control: a probe dropped in a table before forwarding is heard by no one.
        inj.unreached = audittrace.sender_checks(hosts, ports, plan, inj.run)
    finally:
        for c in caps.values():
            c.close(keep)
    return inj, {k: v for per in listens.values() for k, v in per.items() if not k.startswith(UPLINK)}


def _inject(
    hosts: dict[str | None, Host], ports: list[AuditPort], plan: list[Probe], ups: Uplinks, inj: Injection,
    listens: dict[str | None, dict[str, Listen]], caps: dict[str | None, Captures],
) -> None:  # fmt: skip
    """Controls, probes, link closings, closing controls, the settling: in that order on every host."""
    listening = {k for per in listens.values() for k, lst in per.items() if lst.error is None}
    mine = {name: [p for p in ports if p.host == name] for name in hosts}
    for name, host in hosts.items():
        inj.controls |= _controls(host, mine[name], listening, inj.run, inject.KIND_CONTROL)
    for name, host in hosts.items():
        senders = {p.label for p in mine[name]}
        for bridge, lines in _probe_lines(mine[name], [x for x in plan if x.sender in senders], inj.run).items():
            why = _send(host, bridge, lines)
            if why is None:
                inj.probes_sent += len(lines)
            else:
                inj.failed[(name, bridge)] = why
    if len(hosts) > 1:
        _close_links(hosts, ups, inj, caps)
    for name, host in hosts.items():
        inj.closing |= _controls(host, mine[name], listening, inj.run, inject.KIND_CLOSING)
    for name in hosts:
        inj.settle_s = max(inj.settle_s, _settle(caps[name], listens[name], inj.closing, inj.run))


def _close_links(hosts: dict[str | None, Host], ups: Uplinks, inj: Injection, caps: dict[str | None, Captures]) -> None:
    """A link closing out of every host's uplinks, then wait (at most SETTLE_MAX_S) until each host's uplink
    captures show every other host's: the frames sent before it on the link have arrived."""
    index = {name: i for i, name in enumerate(hosts)}
    for (name, bridge), us in ups.items():
        data = inject.frame(inject.CONTROL_MAC, inj.run, inject.KIND_LINK, index[name])
        _send(hosts[name], bridge, [inject.control_line([o for _u, o in us], data)])
    bridges = {name: {br for (h, br) in ups if h == name} for name in hosts}
    wanted = {(x, y) for x in hosts for y in hosts if x != y and bridges[x] & bridges[y]}
    deadline = time.monotonic() + SETTLE_MAX_S
    while wanted - inj.links_closed and time.monotonic() < deadline:
        for y in {y for _x, y in wanted - inj.links_closed}:
            for key, frames in caps[y].frames().items():
                if key.startswith(UPLINK):
                    for f in frames:
                        m = inject.mark_of(f)
                        if m and m.run == inj.run and m.kind == inject.KIND_LINK and m.vlan is not None:
                            inj.links_closed |= {(x, y) for x, i in index.items() if i == m.vlan}
        time.sleep(POLL_S)


# -- verdicts (pure) ------------------------------------------------------------------


def doubt(lst: Listen, inj: Injection) -> str | None:
    """Why a probe missing from this capture does not prove it never came, or None."""
    if lst.error:
        return lst.error
    if lst.label not in inj.controls or not lst.has(inject.KIND_CONTROL, inj.run):
        return f"{lst.device}'s capture does not show its positive control, so a 'No' is not proven"
    if lst.counts is None:
        return f"{lst.device}'s tcpdump printed no packet counts when it stopped, so lost frames are not ruled out"
    if lst.counts.dropped:
        return f"{lst.device}'s tcpdump reported {lst.counts.describe_drops()}, so a frame may have been lost"
    if lst.label not in inj.closing or not lst.has(inject.KIND_CLOSING, inj.run):
        return (
            f"{lst.device}'s capture does not show the closing control sent after the last probe, "
            "so a late frame may be missing"
        )
    if not lst.settled:
        return f"{lst.device}'s capture was still growing when it was stopped, so a late frame may be missing"
    return None


def cells(
    ports: list[AuditPort], plan: list[Probe], inj: Injection, listens: dict[str, Listen], replugged: dict[str, str]
) -> MethodResult:
    """Every cell of the traffic method from its captures; ``replugged`` names ports that changed mid-audit."""
    res = MethodResult("traffic")
    by_label = {p.label: p for p in ports}
    doubts = {label: doubt(lst, inj) for label, lst in listens.items()}
    for probe in plan:
        s = by_label[probe.sender]
        for p in ports:
            if p.label == probe.sender:
                continue
            cell = (p.label, probe.key)
            value, why = _cell(probe, s, p, inj, listens.get(p.label), doubts.get(p.label), replugged, res)
            res.cells[cell] = value
            if why:
                res.reasons[cell] = why
    return res


def _cell(
    probe: Probe, s: AuditPort, p: AuditPort, inj: Injection, lst: Listen | None, doubt_: str | None,
    replugged: dict[str, str], res: MethodResult,
) -> tuple[str, str | None]:  # fmt: skip
    for who in (p.label, s.label):
        if who in replugged:
            return model.UNKNOWN, replugged[who]
    if lst is None:
        return model.UNKNOWN, p.capture()[1] or f"no capture on {p.device}"
    if s.vif.mac is None:
        return model.UNKNOWN, f"{s.port} has no known MAC (external_ids attached-mac), so no probe is made for it"
    want_vlan = probe.vlan if probe.tagged else None
    for f in lst.frames:
        m = inject.mark_of(f)
        if (
            m
            and m.run == inj.run
            and m.kind == inject.KIND_PROBE
            and f.sender_mac == s.vif.mac.lower()
            and m.vlan == want_vlan
        ):
            res.evidence[(p.label, probe.key)] = Evidence(f.time, f.sender_mac, f.sender_ip, f.vlan, str(lst.pcap))
            return model.YES, None
    if (s.host, s.vif.bridge) in inj.failed:
        why = inj.failed[(s.host, s.vif.bridge)]
        return model.UNKNOWN, f"the probes on {s.vif.bridge} were refused by the switch: {why}"
    if s.vif.ofport is None or s.vif.ofport < 1:
        return model.UNKNOWN, f"{s.port} has no OpenFlow port number, so no probe could enter there"
    if probe.key in inj.unreached:
        return model.UNKNOWN, inj.unreached[probe.key]
    if doubt_:
        return model.UNKNOWN, doubt_
    if s.host != p.host and (s.host, p.host) not in inj.links_closed:
        return model.UNKNOWN, (
            f"the link closing sent from {s.host} after its probes was not seen arriving at {p.host}'s uplink, "
            "so frames still in flight on the physical link are not bounded"
        )
    return model.NO, None
