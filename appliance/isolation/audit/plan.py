"""Planning an isolation audit of a host's real VIFs (pure): which ports, which probes, what to expect.

An audit installs nothing in any VM.  Each selected VIF is a sender and a
listener: its probes are put into the switch as if it had sent them, and what
the switch hands to its device is captured on the host side.  This module
decides, from the inventory alone:

* which VIFs take part (the policy file's selectors: port name, VM name, MAC,
  a glob of any; none means every VIF);
* the probes: one untagged probe per VIF -- on an access port it tests the
  access VLAN, on a trunk its native VLAN (VLAN 0 on a pure trunk) -- plus, on a
  trunk or native-* port, one tagged probe per trunked VLAN (a trunk of every
  VLAN: each VLAN some selected port uses);
* the expected matrix, from the switch's own VLAN settings and mirrors
  (:mod:`.model`'s rules), or given as a matrix by VM or VIF name.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from typing import Any

from appliance.core import render, yamldoc
from appliance.core.errors import ConfigError, Problem, UsageError
from appliance.isolation import model
from appliance.policy.plan.fields import parse_selector
from appliance.policy.plan.model import Selector
from appliance.switch.inventory import Inventory, Vif

KERNEL_TYPES = ("", "system")  # a kernel net device of the port's name (vifD.N, tapD.N, vnetN): outbound there
# What the switch hands these shows as *inbound* on their device: a userspace datapath's tap (written to its
# fd), an internal port (the switch's frames are received by the host's stack).
TAP_TYPES = ("tap", "internal")


@dataclass(frozen=True)
class AuditPort:
    """One VIF of the audit: its label in the matrix and where it sits on the switch."""

    label: str
    vif: Vif
    host: str | None = None  # the hypervisor holding it, in an audit across hosts

    @property
    def port(self) -> str:
        return self.vif.port

    @property
    def device(self) -> str:
        return self.vif.interface

    @property
    def vlan(self) -> model.PortVlan:
        v = self.vif
        return model.PortVlan(v.bridge, v.vlan_mode_configured, v.tag, tuple(v.trunks))

    def capture(self) -> tuple[str | None, str | None]:
        """(tcpdump direction, None) for a port with a kernel device, or (None, why it cannot be captured)."""
        t = self.vif.type or ""
        if t in KERNEL_TYPES:
            return "out", None
        if t in TAP_TYPES:
            return "in", None
        return (
            None,
            f"{self.port} is a {t} port with no kernel device to capture on "
            "(a mirror to a port hvnet owns is not implemented)",
        )


@dataclass(frozen=True)
class Probe:
    """One frame an audit sends: from ``sender``'s port, untagged (``vlan`` None) or tagged."""

    sender: str  # the sender's label
    vlan: int | None
    tagged: bool  # sent with an 802.1Q header (a trunked VLAN) rather than untagged

    @property
    def key(self) -> str:
        """The probe's column in the matrix: the sender's label, ``LABEL@vlanN`` for a tagged probe."""
        return f"{self.sender}@vlan{self.vlan}" if self.tagged else self.sender


# -- which VIFs ---------------------------------------------------------------------


def parse_selectors(texts: list[str]) -> list[Selector]:
    """``vm:NAME``, ``mac:…``, ``port:…`` or a bare word (matching a port, VM or MAC); exit 2 on a bad one."""
    out = []
    for text in texts:
        try:
            kind, pattern = parse_selector(text, default_kind="any")
        except ValueError as exc:
            raise UsageError(
                f"selector {text!r}: {exc}", hint="a selector is NAME, vm:NAME, mac:MAC, port:NAME or a glob"
            ) from None
        out.append(Selector(kind, pattern.lower() if kind == "mac" else pattern))
    return out


def _matches(sel: Selector, v: Vif) -> bool:
    if sel.kind == "any":
        mac = v.mac.lower() if v.mac else None
        return any(replace(sel, kind=k).matches(val) for k, val in (("port", v.port), ("vm", v.vm_name), ("mac", mac)))
    value = {"vm": v.vm_name, "vm_uuid": v.vm_uuid, "mac": v.mac.lower() if v.mac else None, "port": v.port}[sel.kind]
    return sel.matches(value)


def select(inv: Inventory, selectors: list[Selector]) -> list[AuditPort]:
    """The VIFs the selectors pick (every VIF when there are none), labelled; exit 2 when a selector picks
    nothing or fewer than two VIFs take part."""
    return select_hosts({None: inv}, selectors)


def select_hosts(invs: dict[str | None, Inventory], selectors: list[Selector]) -> list[AuditPort]:
    """:func:`select` over several hosts' switches: one audit, a selector picking on any of them; a label
    two hosts would share is prefixed with its host's name."""
    found = [(h, v) for h, inv in invs.items() for v in inv.vifs if v.is_vif]
    if selectors:
        for sel in selectors:
            if not any(_matches(sel, v) for _h, v in found):
                known = ", ".join(sorted(v.port for _h, v in found)[:8]) or "none"
                where = "on this switch" if list(invs) == [None] else "on any of the hosts"
                raise UsageError(f"selector {sel.pattern!r} matches no VIF {where}", hint=f"VIFs: {known}")
        found = [(h, v) for h, v in found if any(_matches(sel, v) for sel in selectors)]
    if len(found) < 2:
        raise UsageError(
            f"an isolation audit needs at least two VIFs; {len(found)} selected",
            hint="name more VIFs, or none to audit every VIF of the host",
        )
    out: list[AuditPort] = []
    for h in invs:
        mine = sorted((v for hh, v in found if hh == h), key=lambda v: (v.bridge, _natural(v.port)))
        out += [replace(p, host=h) for p in label(mine)]
    seen: dict[str, int] = {}
    for p in out:
        seen[p.label] = seen.get(p.label, 0) + 1
    return [replace(p, label=f"{p.host}/{p.label}") if seen[p.label] > 1 else p for p in out]


def uplinks(inv: Inventory) -> dict[str, list[model.PortVlan]]:
    """Each bridge's physical ports (not a VIF, a kernel device: a NIC, a bond), as the switch has them set:
    what joins this host's bridge to the other hosts' bridges of that name."""
    out: dict[str, list[model.PortVlan]] = {}
    for v in inv.vifs:
        if not v.is_vif and (v.type or "") in KERNEL_TYPES and v.port != v.bridge:
            pv = model.PortVlan(v.bridge, v.vlan_mode_configured, v.tag, tuple(v.trunks))
            out.setdefault(v.bridge, []).append(pv)
    return out


def uplink_names(inv: Inventory) -> dict[str, list[str]]:
    """Each bridge's physical ports by name (see :func:`uplinks`)."""
    out: dict[str, list[str]] = {}
    for v in inv.vifs:
        if not v.is_vif and (v.type or "") in KERNEL_TYPES and v.port != v.bridge:
            out.setdefault(v.bridge, []).append(v.port)
    return out


def across(sender_up: list[model.PortVlan], listener_up: list[model.PortVlan], vlan: int) -> int | None:
    """The VLAN a frame of ``vlan`` has on the other host after leaving one uplink and entering another
    (None: no uplink pair carries it)."""
    for out in sender_up:
        how = model.egress(out, vlan)
        if how is None:
            continue
        for inp in listener_up:
            if how == "untagged":
                arrived = model.ingress_vlan(inp)
            else:
                tagged_ok = inp.effective_mode != "access" and (inp.trunks_vlan(vlan) or inp.tag == vlan)
                arrived = vlan if tagged_ok else None
            if arrived is not None:
                return arrived
    return None


def _natural(name: str) -> list[tuple[int, str]]:
    """``vif10.0`` after ``vif9.0``: digits compared as numbers."""
    return [(int(part), "") if part.isdigit() else (-1, part) for part in re.split(r"([0-9]{1,9})", name)]


def label(vifs: list[Vif]) -> list[AuditPort]:
    """Each VIF's name in the matrix: its VM's name when the VM has one VIF here and no other VM shares
    the name, ``VM/port`` when it has several, the port's name when no VM is known."""
    count: dict[str, int] = {}
    for v in vifs:
        if v.vm_name:
            count[v.vm_name] = count.get(v.vm_name, 0) + 1
    taken = {v.port for v in vifs}
    out = []
    for v in vifs:
        if v.vm_name and count[v.vm_name] == 1 and v.vm_name not in taken:
            out.append(AuditPort(v.vm_name, v))
        elif v.vm_name:
            out.append(AuditPort(f"{v.vm_name}/{v.port}", v))
        else:
            out.append(AuditPort(v.port, v))
    return out


# -- which probes -------------------------------------------------------------------


def vlans_in_use(ports: list[AuditPort]) -> set[int]:
    """The VLANs the selected ports name (tags and explicit trunks): what a trunk of every VLAN is probed in."""
    out: set[int] = set()
    for p in ports:
        if p.vif.tag is not None:
            out.add(p.vif.tag)
        out.update(p.vif.trunks)
    return out - {0}


def probes(ports: list[AuditPort]) -> list[Probe]:
    """Every probe of the audit, senders in order: untagged first, then each trunked VLAN's tagged probe."""
    used = vlans_in_use(ports)
    out = []
    for p in ports:
        out.append(Probe(p.label, None, False))
        pv = p.vlan
        mode = pv.effective_mode
        if mode == "access":
            continue
        trunked = set(pv.trunks) if pv.trunks else set(used)
        if mode != "trunk" and pv.tag is not None:
            trunked.discard(pv.tag)  # its native VLAN: the untagged probe tests it
        out += [Probe(p.label, v, True) for v in sorted(trunked - {0})]
    return out


# -- what to expect -----------------------------------------------------------------


def _ingress(pv: model.PortVlan, probe: Probe) -> int | None:
    """The VLAN a probe belongs to once the port admits it (None: dropped on entry)."""
    if not probe.tagged:
        return model.ingress_vlan(pv)
    return None if probe.vlan is None else model.tagged_ingress_vlan(pv, probe.vlan)


def derive(
    ports: list[AuditPort],
    plan: list[Probe],
    mirrors: list[model.MirrorSpec],
    links: dict[tuple[str | None, str], list[model.PortVlan]] | None = None,
) -> model.Expected:
    """Who should hear which probe, from the ports' VLAN settings; mirror copies are declared exceptions.

    ``links``: each (host, bridge)'s uplinks, in an audit across hosts: the bridges of one name are taken
    as one network joined through them (the physical switches between carry what the uplinks carry).
    """
    by_label = {p.label: p for p in ports}
    vlans = {p.label: p.vlan for p in ports}
    outputs = {m.output for m in mirrors if m.output}
    cells: dict[tuple[str, str], str] = {}
    exceptions: dict[tuple[str, str], list[str]] = {}
    for probe in plan:
        s = by_label[probe.sender]
        vlan = _ingress(s.vlan, probe)
        for p in ports:
            if p.label == probe.sender:
                continue
            cell = (p.label, probe.key)
            if p.host != s.host:
                far = _across_hosts(links or {}, s, p, vlan)
                heard = far is not None and p.label not in outputs and model.egress(vlans[p.label], far) is not None
                cells[cell] = model.YES if heard else model.NO
                continue
            same = p.vif.bridge == s.vif.bridge and vlan is not None and probe.sender not in outputs
            if same and p.label not in outputs and model.egress(vlans[p.label], vlan) is not None:
                cells[cell] = model.YES
                continue
            via = _mirrored(mirrors, vlans, p.label, probe.sender, vlan, s.vif.bridge) if same else []
            if via:
                cells[cell], exceptions[cell] = model.EXCEPTION, via
            else:
                cells[cell] = model.NO
    return model.Expected(guests=[p.label for p in ports], cells=cells, exceptions=exceptions)


def _across_hosts(
    links: dict[tuple[str | None, str], list[model.PortVlan]], s: AuditPort, p: AuditPort, vlan: int | None
) -> int | None:
    """The VLAN ``s``'s frame of ``vlan`` has when it reaches ``p``'s bridge on another host, or None."""
    if vlan is None or p.vif.bridge != s.vif.bridge:
        return None
    return across(links.get((s.host, s.vif.bridge), []), links.get((p.host, p.vif.bridge), []), vlan)


def _mirrored(
    mirrors: list[model.MirrorSpec],
    vlans: dict[str, model.PortVlan],
    listener: str,
    sender: str,
    vlan: int,
    bridge: str,
) -> list[str]:
    """Mirrors copying a frame of ``vlan`` from ``sender`` to ``listener`` (its output port)."""
    outputs = {m.output for m in mirrors if m.output}
    names = []
    for m in mirrors:
        if m.output != listener or m.bridge != bridge or (m.select_vlans and vlan not in m.select_vlans):
            continue
        hit = m.select_all or sender in m.select_src
        if not hit and m.select_dst:
            hit = any(
                d != sender and d in vlans and d not in outputs and vlans[d].bridge == bridge
                and model.egress(vlans[d], vlan) is not None
                for d in m.select_dst
            )  # fmt: skip
        if hit:
            names.append(m.name)
    return names


def mirror_specs(inv: Inventory, ports: list[AuditPort]) -> list[model.MirrorSpec]:
    """The bridges' mirrors in audit labels (ports outside the audit left out)."""
    by_port = {p.port: p.label for p in ports}
    return [model.MirrorSpec.of(m, by_port) for m in inv.mirrors]


def given(doc: yamldoc.Document, ports: list[AuditPort], plan: list[Probe]) -> model.Expected:
    """An expected matrix given by VM or VIF name: ``matrix: {LISTENER: {SENDER: yes|no}}`` for every pair.

    A row or column names a VIF by its label, its port or its VM's name.  A
    tagged probe's column is ``SENDER@vlanN``; when the file leaves it out the
    sender's untagged value stands for it.  Every problem is reported at once
    as ``file:line: field`` (exit 2).
    """
    problems: list[Problem] = []
    raw = doc.data.get("matrix") if isinstance(doc.data, dict) and set(doc.data) == {"matrix"} else None
    if not isinstance(raw, dict):
        raise ConfigError([doc.problem((), "an expected matrix is {matrix: {LISTENER: {SENDER: yes|no}}}")])
    names: dict[str, str] = {}
    for p in ports:
        for alias in (p.label, p.port, p.vif.vm_name):
            if alias:
                names.setdefault(alias, p.label)
    rows: dict[str, dict[str, Any]] = {}
    for key, row in raw.items():
        if key not in names:
            problems.append(doc.problem(("matrix", key), f"not a VIF or VM of this audit ({_known(names)})"))
        elif not isinstance(row, dict):
            problems.append(doc.problem(("matrix", key), "a row maps senders to yes or no"))
        else:
            for col, value in row.items():
                base, at, vlan = str(col).partition("@")
                if base not in names:
                    problems.append(
                        doc.problem(("matrix", key, col), f"not a VIF or VM of this audit ({_known(names)})")
                    )
                else:
                    rows.setdefault(names[key], {})[names[base] + at + vlan] = (value, ("matrix", key, col))
    cells = {}
    for p in ports:
        row = rows.get(p.label, {})
        for probe in plan:
            if probe.sender == p.label:
                continue
            value, path = row.get(probe.key, row.get(probe.sender, (None, ("matrix", p.label))))
            if value not in ("yes", "no"):
                problems.append(
                    doc.problem(
                        path,
                        render.terminal(f"{probe.key}: must be yes or no (does {p.label} hear it?), not {value!r}"),
                    )
                )
            cells[(p.label, probe.key)] = value
    if problems:
        raise ConfigError(problems)
    return model.Expected(guests=[p.label for p in ports], cells=cells)


def _known(names: dict[str, str]) -> str:
    listed = sorted(render.terminal(n) for n in names)  # VM names: a line end in one is shown, not obeyed
    return "known: " + ", ".join(listed[:8]) + (", ..." if len(listed) > 8 else "")
