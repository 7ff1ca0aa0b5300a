"""A pool's current intent as a policy file (``hvnet --pool NAME export``) that plans no change.

What is written is what :mod:`.intent` reads back to the same NB: each VM
port's VLAN (when its logical switch stands for exactly one), its limits
from the QoS rules hvnet owns, and hvnet's mirrors under
``bridges.br-int.mirrors`` (the two rows of a mirror, ``NAME-from`` and
``NAME-to``, as one policy mirror).  QoS and Mirror rows that hvnet did
not make are not the policy's, so they are left out and named in a comment.
"""

from __future__ import annotations

from typing import Any

import yaml

from appliance.core import validate
from appliance.endpoints.topology import OVN_BRIDGE
from appliance.ovn.model import DIRECTION_WORD, MIRROR_NAME_KEY
from appliance.ovn.view import PoolView, PortView
from appliance.policy.plan.model import OWNER, OWNER_KEY


def _owned(ids: dict[str, str]) -> bool:
    return ids.get(OWNER_KEY) == OWNER


def _mac(p: PortView) -> str | None:
    for a in p.addresses:
        word = a.split()[0] if a.split() else ""
        if word.count(":") == 5:
            return word.lower()
    return None


def _selector(p: PortView, by: str, macs: dict[str, int], vms: dict[str, int]) -> str:
    """A selector that picks ``p`` alone: by MAC, VM or port name as ``by`` prefers, falling back to the
    others (a policy's ``port`` takes interface-like names, and OVN names ports by UUIDs)."""
    mac = _mac(p)
    by_mac = f"mac:{mac}" if mac and macs.get(mac) == 1 else None
    by_vm = f"vm:{p.vm}" if p.vm and vms.get(p.vm) == 1 and not any(c in p.vm for c in "*?[") else None
    try:
        by_port: str | None = f"port:{validate.ifname(p.name)}"
    except ValueError:
        by_port = None
    order = (by_mac, by_vm, by_port) if by == "mac" else (by_port, by_vm, by_mac)
    return next((s for s in order if s), f"port:{p.name[:-1]}[{p.name[-1]}]")  # an exact glob: the last resort


def to_policy(view: PoolView, *, by: str = "mac") -> dict[str, Any]:
    """The policy document (plain data) describing the pool's NB."""
    vifs = [(s, p) for s in view.switches for p in s.ports if p.is_vif]
    macs, vms = _counts(view)
    per_vlan: dict[int, int] = {}
    for s in view.switches:
        if s.vlan is not None:
            per_vlan[s.vlan] = per_vlan.get(s.vlan, 0) + 1
    limits: dict[str, dict[str, Any]] = {}
    for s in view.switches:
        for q in s.qos:
            port = q.external_ids.get("hvnet-port")
            if _owned(q.external_ids) and port and q.rate_kbps and q.direction in DIRECTION_WORD:
                limits.setdefault(port, {})[DIRECTION_WORD[q.direction]] = {"rate": q.rate_kbps,
                                                                            "burst": q.burst_kbit}  # fmt: skip
    rules = []
    for s, p in vifs:
        rule: dict[str, Any] = {}
        if s.vlan is not None and per_vlan[s.vlan] == 1:
            rule["vlan"] = {"tag": s.vlan}
        rule.update(limits.get(p.name, {}))
        if rule:
            kind, _, pattern = _selector(p, by, macs, vms).partition(":")
            rules.append({kind: pattern, **rule})
    doc: dict[str, Any] = {"version": 1, "vifs": rules}
    mirrors = _mirrors(view, by, macs, vms)
    if mirrors:
        doc["bridges"] = {OVN_BRIDGE: {"mirrors": mirrors}}
    return doc


def _counts(view: PoolView) -> tuple[dict[str, int], dict[str, int]]:
    """How many VM ports have each MAC and each VM name (a selector must pick one port)."""
    macs: dict[str, int] = {}
    vms: dict[str, int] = {}
    for _, p in view.ports():
        if not p.is_vif:
            continue
        mac = _mac(p)
        if mac:
            macs[mac] = macs.get(mac, 0) + 1
        if p.vm:
            vms[p.vm] = vms.get(p.vm, 0) + 1
    return macs, vms


def _mirrors(view: PoolView, by: str, macs: dict[str, int], vms: dict[str, int]) -> dict[str, Any]:
    attached: dict[str, list[str]] = {}
    for _, p in view.ports():
        for m in p.mirrors:
            attached.setdefault(m, []).append(_selector(p, by, macs, vms))
    out: dict[str, Any] = {}
    for m in view.mirrors:
        name = m.external_ids.get(MIRROR_NAME_KEY)
        if not _owned(m.external_ids) or not name:
            continue
        spec = out.setdefault(name, {"select": {}, "output": {}})
        spec["select"]["src" if m.filter == "from-lport" else "dst"] = sorted(attached.get(m.name, []))
        if m.type == "gre":
            spec["output"] = {"gre": m.sink, **({"key": m.index} if m.index else {})}
        else:
            spec["output"] = {"erspan": m.sink, "idx": m.index}
    return out


def not_exported(view: PoolView) -> list[str]:
    """Rows the policy does not describe because hvnet did not make them."""
    out = [f"QoS {q.direction} {q.match!r} on {s.name}" for s in view.switches for q in s.qos
           if not _owned(q.external_ids)]  # fmt: skip
    out += [f"Mirror {m.name}" for m in view.mirrors if not _owned(m.external_ids)]
    return out


def to_yaml(view: PoolView, *, by: str = "mac", header: str = "") -> str:
    doc = to_policy(view, by=by)
    text = yaml.safe_dump(doc, sort_keys=False, default_flow_style=None, width=100)
    names = sorted((p.name, p.vm, sw) for sw, p in view.ports() if p.is_vif)
    comment = "".join(f"#   {port}: {vm or '(VM not known)'} on {sw}\n" for port, vm, sw in names)
    foreign = "".join(f"#   {line}\n" for line in not_exported(view))
    return (header + ("# logical ports of this pool:\n" + comment if comment else "")
            + ("# not hvnet's, left out:\n" + foreign if foreign else "") + text)  # fmt: skip
