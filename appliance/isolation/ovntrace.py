"""``ovn-trace`` output, read: where a frame goes in a pool's logical network, or where it stops and why.

``ovn-trace`` (detailed output, its default) follows a microflow through
the logical pipelines the SB holds, one section per pipeline::

    ingress(dp="vlan1", inport="1f0c...")
    -------------------------------------
     0. ls_in_check_port_sec (northd.c:8126): 1, priority 50, uuid 5a4d8e9b
        reg0[15] = check_in_port_sec();
        next;
    ...
    multicast(dp="vlan1", mcgroup="_MC_flood")
        egress(dp="vlan1", inport="1f0c...", outport="5b3e...")
        ...
         9. ls_out_check_port_sec (northd.c:...): 1, priority 0, uuid ...
            ...
            output;
            /* output to "5b3e...", type "" */

A frame is *delivered* to a port when a ``/* output to "PORT" ... */``
comment says so; ``/* omitting output because inport == outport ... */`` is
a flood not sent back to its sender.  A ``drop;`` action drops it at the
stage whose flow matched (the stage's name and match are the why); in an
ingress pipeline that is the whole frame, in an egress one only the copy
for that section's ``outport``.  A table where no flow matched drops too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from appliance.core import ovnmatch as ovn_match

_SECTION = re.compile(
    r'^\s*(?P<kind>ingress|egress)\(dp="(?P<dp>[^"]*)", inport="(?P<inport>[^"]*)"'
    r'(?:, outport="(?P<outport>[^"]*)")?\)\s*$'
)
_STAGE = re.compile(
    r"^\s*(?P<table>[0-9]{1,3})\. (?P<stage>\S+)(?: \([^)]*\))?: (?P<match>.*), priority [0-9]+, uuid \S+$"
)
_OUTPUT = re.compile(r'^\s*/\* output to "(?P<port>[^"]*)", type "(?P<type>[^"]*)" \*/\s*$')
_NO_MATCH = re.compile(r"^\s*(?P<table>[0-9]{1,3})\. (?P<stage>\S+): no match \(implicit drop\)\s*$")
_FLOW = re.compile(r"^# (?P<flow>\S+)")


@dataclass(frozen=True)
class Fate:
    """What became of the frame for one port: delivered, dropped (and why), or neither (never sent there)."""

    delivered: bool = False
    dropped: bool = False
    why: str = ""


@dataclass
class Trace:
    """One ovn-trace run: the datapath and port the frame entered, the ports it reached, the drops on the way."""

    flow: str = ""
    datapath: str = ""
    inport: str = ""
    delivered: list[str] = field(default_factory=list)  # in the order ovn-trace output them
    ingress_drop: str | None = None  # "at STAGE (match: ...)" when the ingress pipeline dropped the frame
    egress_drops: dict[str, str] = field(default_factory=dict)  # outport -> why its copy was dropped
    skipped: list[str] = field(default_factory=list)  # ports a flood was not sent back to (its own inport)

    def fate(self, port: str) -> Fate:
        if port in self.delivered:
            return Fate(delivered=True)
        if port in self.egress_drops:
            return Fate(dropped=True, why=self.egress_drops[port])
        return Fate()

    def summary(self) -> str:
        """The trace on one line, for the report and --json."""
        head = f"{self.datapath}: from {self.inport}"
        if self.ingress_drop:
            return f"{head}: dropped {self.ingress_drop}"
        parts = [f"delivered to {', '.join(self.delivered)}" if self.delivered else "delivered to no port"]
        parts += [f"{port} dropped {why}" for port, why in self.egress_drops.items()]
        return f"{head}: {'; '.join(parts)}"


def parse(text: str) -> Trace:
    """The trace in ovn-trace's detailed output; ValueError when the text is not one (an error, say)."""
    t = Trace()
    section: tuple[str, str | None] | None = None  # (kind, outport)
    stage = ""
    for line in text.splitlines():
        if m := _FLOW.match(line):
            t.flow = t.flow or m.group("flow")
        elif m := _SECTION.match(line):
            section, stage = (m.group("kind"), m.group("outport")), ""
            if m.group("kind") == "ingress" and not t.inport:
                t.datapath, t.inport = m.group("dp"), m.group("inport")
        elif m := _STAGE.match(line):
            stage = f"at {m.group('stage')} (match: {m.group('match')})"
        elif m := _NO_MATCH.match(line):
            _drop(t, section, f"at {m.group('stage')} (no flow matched)")
        elif m := _OUTPUT.match(line):
            if m.group("port") not in t.delivered:
                t.delivered.append(m.group("port"))
        elif "omitting output because inport == outport" in line and section and section[1]:
            t.skipped.append(section[1])
        elif line.strip() == "drop;" and section is not None:
            _drop(t, section, stage or "(no stage named)")
    if not t.inport:
        first = next((ln.strip() for ln in text.splitlines() if ln.strip()), "no output")
        raise ValueError(f"no ingress pipeline in ovn-trace's output: {first[:200]}")
    return t


def _drop(t: Trace, section: tuple[str, str | None] | None, why: str) -> None:
    if section is None:
        return
    kind, outport = section
    if kind == "ingress":
        t.ingress_drop = t.ingress_drop or why
    elif outport is not None:
        t.egress_drops.setdefault(outport, why)


def arp_broadcast(port: str, mac: str, ip: str, target_ip: str) -> str:
    """The microflow of a broadcast ARP who-has for ``target_ip`` from ``mac``/``ip`` entering ``port``.

    The port's name is quoted and the addresses checked (ValueError), so no value can add a clause."""
    mac, ip, target_ip = ovn_match.mac(mac), ovn_match.ipv4(ip), ovn_match.ipv4(target_ip)
    return (
        f"{ovn_match.port_is('inport', port)} && eth.src == {mac} && eth.dst == ff:ff:ff:ff:ff:ff && "
        f"arp.op == 1 && arp.sha == {mac} && arp.spa == {ip} && arp.tpa == {target_ip}"
    )
