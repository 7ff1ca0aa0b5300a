"""The desired-state vocabulary: what a policy file (or a CLI command) asks for.

Everything here is plain, immutable data.  Three states exist for every
setting of a VIF or bridge: ``None`` leaves the switch alone, a value sets it,
and :data:`REMOVE` takes it away.  The planner compares these with the
switch's current state (:mod:`.state`); nothing in this module touches OVS.
"""

from __future__ import annotations

import fnmatch
from dataclasses import dataclass, field
from functools import cached_property
from typing import Any, Union

from appliance.core.vlan import Vlan

OWNER_KEY = "hvnet-owner"
OWNER = "hvnet"
# Interface external_ids that record meter-enforced policing (the switch has
# no column for it; the OpenFlow meter and flow are derived from these).
POLICE_RATE_KEY = "hvnet-police-rate-kbps"
POLICE_BURST_KEY = "hvnet-police-burst-kbit"
TUNNEL_MIRROR_KEY = "hvnet-mirror"
# A TAP's record is kept on its Bridge (the flows are derived from it, as meters are): see .records.

MIN_BURST_KBIT = 12  # one 1500-byte frame
MAX_MIRRORS_PER_BRIDGE = 32
MAX_TAPS_PER_BRIDGE = 32  # one OpenFlow table each (see :mod:`.pipeline`)
TAP_DIRECTIONS = ("in", "out", "both")
TAP_METHODS = ("flows", "group")
TAP_MATCH_KEYS = ("src_mac", "dst_mac", "src_ip", "dst_ip", "vlan", "protocol", "src_port", "dst_port")
MECHANISMS = ("auto", "tc", "meter")


class _Remove:
    """The explicit "take this away" value (``remove`` or ``null`` in YAML)."""

    _instance: _Remove | None = None

    def __new__(cls) -> _Remove:
        if cls._instance is None:
            cls._instance = super().__new__(cls)
        return cls._instance

    def __repr__(self) -> str:
        return "REMOVE"


REMOVE = _Remove()


@dataclass(frozen=True)
class Selector:
    """Which VIF(s) a rule is about: by VM name, VM uuid, MAC or port name.

    Exact by default; ``*``, ``?`` and ``[...]`` make it a glob.  ``where`` is
    the ``file:line: field`` the selector came from, for messages.
    """

    kind: str  # "vm" | "vm_uuid" | "mac" | "port"
    pattern: str
    optional: bool = False
    path: tuple[Any, ...] = ()

    KINDS = ("vm", "vm_uuid", "mac", "port")

    @cached_property
    def is_glob(self) -> bool:
        return any(c in self.pattern for c in "*?[")

    def matches(self, value: str | None) -> bool:
        if value is None:
            return False
        if self.kind == "mac":
            value = value.lower()
        if self.is_glob:
            return fnmatch.fnmatchcase(value, self.pattern)
        return value == self.pattern

    def __str__(self) -> str:
        return f"{self.kind} {self.pattern}"


@dataclass(frozen=True)
class Ingress:
    """Ingress policing (what the VM may send): kbit/s and burst in kbit."""

    rate_kbps: int
    burst_kbit: int
    mechanism: str = "auto"  # auto | tc | meter (resolved by the planner)

    def describe(self) -> str:
        return f"{self.rate_kbps} kbit/s burst {self.burst_kbit} kbit"


@dataclass(frozen=True)
class Egress:
    """Egress shaping (what the VM may receive): linux-htb max-rate."""

    rate_kbps: int
    burst_kbit: int | None = None

    def describe(self) -> str:
        burst = f" burst {self.burst_kbit} kbit" if self.burst_kbit else ""
        return f"max {self.rate_kbps} kbit/s{burst}"


Setting = Union[None, _Remove, Any]


@dataclass
class VifRule:
    """One ``vifs:`` entry: a selector and what to set on what it selects."""

    selector: Selector
    vlan: Vlan | _Remove | None = None
    ingress: Ingress | _Remove | None = None
    egress: Egress | _Remove | None = None
    path: tuple[Any, ...] = ()


@dataclass(frozen=True)
class TunnelCols:
    """A tunnel port hvnet creates as a mirror's remote output."""

    name: str
    type: str  # gre | erspan
    options: tuple[tuple[str, str], ...] = ()


@dataclass(frozen=True)
class MirrorOutput:
    """Where a mirror's copies go: a port, an RSPAN VLAN, or a GRE/ERSPAN collector."""

    kind: str  # "port" | "vlan" | "gre" | "erspan"
    port: Selector | None = None
    vlan: int | None = None
    remote_ip: str | None = None
    erspan_idx: int = 1
    key: int | None = None

    def tunnel_options(self) -> tuple[tuple[str, str], ...]:
        """A GRE/ERSPAN output's tunnel Interface options, sorted (mirrors and TAPs make the same port)."""
        options = {"remote_ip": str(self.remote_ip)}
        if self.key is not None:
            options["key"] = str(self.key)
        if self.kind == "erspan":
            options.update({"erspan_ver": "1", "erspan_idx": str(self.erspan_idx)})
        return tuple(sorted(options.items()))

    def describe(self) -> str:
        if self.kind == "port":
            return f"port {self.port.pattern if self.port else '?'}"
        if self.kind == "vlan":
            return f"RSPAN VLAN {self.vlan}"
        return f"{self.kind.upper()} to {self.remote_ip}"


@dataclass
class MirrorRule:
    """One mirror on one bridge (``bridges.<br>.mirrors.<name>``)."""

    bridge: str
    name: str
    remove: bool = False
    select_all: bool = False
    src: tuple[Selector, ...] = ()
    dst: tuple[Selector, ...] = ()
    vlans: tuple[int, ...] = ()
    output: MirrorOutput | None = None
    snaplen: int | None = None
    filter: str | None = None
    allow_isolation_exception: bool = False
    path: tuple[Any, ...] = ()


@dataclass(frozen=True)
class TapMatch:
    """What a TAP copies, field by field (None: any); IPs are an address or a network prefix."""

    src_mac: str | None = None
    dst_mac: str | None = None
    src_ip: str | None = None
    dst_ip: str | None = None
    vlan: int | None = None
    protocol: str | None = None  # tcp | udp | icmp | icmp6 | a number 0..255
    src_port: int | None = None
    dst_port: int | None = None

    def items(self) -> tuple[tuple[str, Any], ...]:
        """The fields that are set, in the documented order."""
        return tuple((k, getattr(self, k)) for k in TAP_MATCH_KEYS if getattr(self, k) is not None)

    def describe(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.items()) or "everything"


@dataclass
class TapRule:
    """One TAP on one bridge (``bridges.<br>.taps.<name>``): a flow match copied from some VIFs."""

    bridge: str
    name: str
    remove: bool = False
    match: TapMatch = field(default_factory=TapMatch)
    vifs: tuple[Selector, ...] = ()
    direction: str = "both"
    output: MirrorOutput | None = None
    method: str = "flows"
    allow_isolation_exception: bool = False
    path: tuple[Any, ...] = ()


@dataclass
class SamplingRule:
    """``bridges.<br>.sflow`` or ``.ipfix``: the row wanted (:mod:`appliance.switch.sampling`) or REMOVE."""

    bridge: str
    kind: str  # "sflow" | "ipfix"
    value: Any  # SflowCols | IpfixCols (external_ids empty) | REMOVE
    path: tuple[Any, ...] = ()


@dataclass
class Policy:
    """A whole policy file (or the fragment a CLI command builds)."""

    source: str = "(command line)"
    vifs: list[VifRule] = field(default_factory=list)
    mirrors: list[MirrorRule] = field(default_factory=list)
    sampling: list[SamplingRule] = field(default_factory=list)
    taps: list[TapRule] = field(default_factory=list)
    bridges: dict[str, tuple[Any, ...]] = field(default_factory=dict)  # named bridges -> path
    policing: str = "auto"
    lines: dict[tuple[Any, ...], int] = field(default_factory=dict)

    def line(self, path: tuple[Any, ...]) -> int | None:
        p = tuple(path)
        while p:
            if p in self.lines:
                return self.lines[p]
            p = p[:-1]
        return None


def is_owned(external_ids: Any) -> bool:
    """Whether a row with these ``external_ids`` (mapping or pairs) was created by hvnet."""
    return dict(external_ids).get(OWNER_KEY) == OWNER


def default_burst_kbit(rate_kbps: int) -> int:
    """80% of the rate, never below one MTU-sized frame (12 kbit)."""
    return max(MIN_BURST_KBIT, int(rate_kbps * 0.8))
