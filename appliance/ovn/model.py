"""What hvnet wants of a pool's NB, in OVN's own terms: QoS limits, logical switch membership, mirror rows.

A policy file is translated into a :class:`Desired` (:mod:`.intent`), which
:func:`appliance.ovn.plan.diff` compares with the pool's NB.  A rollback
record holds a :class:`Desired` too -- the values an apply replaced -- so
undoing an apply is planned and committed like any apply.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from appliance.core import ovnmatch as ovn_match

# QoS rows' direction -> the policy's word for it
DIRECTION_WORD = {"from-lport": "ingress", "to-lport": "egress"}
# A policy mirror's src selectors become a from-lport Mirror row (what the VM sends: OVS select_src_port),
# its dst selectors a to-lport one (what it receives: select_dst_port); OVN 23.03 has no "both".
FILTER_SUFFIX = {"from-lport": "from", "to-lport": "to"}
MIRROR_NAME_KEY = "hvnet-mirror"  # Mirror external_ids: the policy's name for the mirror the row is half of


@dataclass(frozen=True)
class Limit:
    """One rule hvnet wants on one port: the direction (``from-lport``/``to-lport``), rate and burst."""

    switch: str
    port: str
    vm: str | None
    direction: str
    rate_kbps: int
    burst_kbit: int

    @property
    def match(self) -> str:
        """The rule's own match: this one port, its name quoted (whatever characters it holds)."""
        return ovn_match.port_is("inport" if self.direction == "from-lport" else "outport", self.port)

    def describe(self) -> str:
        who = self.vm or self.port
        what = "ingress policing" if self.direction == "from-lport" else "egress (policed by a meter, not shaped)"
        return f"{who}: {what} {self.rate_kbps} kbit/s burst {self.burst_kbit} kbit"


@dataclass(frozen=True)
class Move:
    """A logical switch port leaving one logical switch for another (the row itself is kept)."""

    port: str
    vm: str | None
    src: str
    dst: str
    vlan: int | None  # the VLAN ``dst`` stands for, when it stands for one

    def describe(self) -> str:
        to = f"{self.dst} (VLAN {self.vlan})" if self.vlan is not None else self.dst
        return f"{self.vm or self.port}: logical switch {self.src} -> {to}"


@dataclass(frozen=True)
class OvnMirror:
    """One NB Mirror row hvnet wants, and the logical ports whose ``mirror_rules`` name it."""

    row: str  # the NB Mirror's name: POLICYNAME-from or POLICYNAME-to
    policy_name: str
    type: str  # gre | erspan
    filter: str  # from-lport | to-lport
    sink: str
    index: int
    ports: tuple[str, ...]

    def same_row(self, other: OvnMirror) -> bool:
        return (self.type, self.filter, self.sink, self.index) == (other.type, other.filter, other.sink, other.index)

    def describe(self) -> str:
        what = "sent by" if self.filter == "from-lport" else "received by"
        return (f"mirror {self.row}: what {len(self.ports)} port(s) {what} to {self.type.upper()} {self.sink} "
                f"(index {self.index})")  # fmt: skip


def mirror_row_name(policy_name: str, filter_: str) -> str:
    return f"{policy_name}-{FILTER_SUFFIX[filter_]}"


@dataclass
class Desired:
    """The pool as hvnet wants it, only where it wants something; None means "take it away".

    ``limits``: (port, direction) -> (rate kbit/s, burst kbit) or None;
    ``switches``: port -> the logical switch it must be on;
    ``mirrors``: NB Mirror name -> the row or None.
    """

    limits: dict[tuple[str, str], tuple[int, int] | None] = field(default_factory=dict)
    switches: dict[str, str] = field(default_factory=dict)
    mirrors: dict[str, OvnMirror | None] = field(default_factory=dict)

    def to_json(self) -> dict[str, Any]:
        return {
            "limits": [[p, d, list(v) if v else None] for (p, d), v in sorted(self.limits.items())],
            "switches": dict(sorted(self.switches.items())),
            "mirrors": {k: (asdict(m) if m else None) for k, m in sorted(self.mirrors.items())},
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Desired:
        limits = {(p, d): (int(v[0]), int(v[1])) if v else None for p, d, v in data.get("limits", [])}
        mirrors = {k: OvnMirror(**{**m, "ports": tuple(m["ports"])}) if m else None
                   for k, m in data.get("mirrors", {}).items()}  # fmt: skip
        return cls(limits, dict(data.get("switches", {})), mirrors)
