"""The Mirrors screen's calls into the engine: listing mirrors, building add/delete policies.

Kept out of the screen so the rules stay the CLI's (``hvnet mirror add/del/list``):
the form's fields go through :func:`appliance.services.mirrors.mirror_form_rule`
(``hvnet mirror add``'s builder), an existing name is refused the same way,
and a delete is the same one-rule policy.  Everything here is plain Python
that the screens call from worker threads; nothing touches widgets.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from appliance.core import render
from appliance.services import mirrors as svc
from appliance.services.mirrors import MirrorForm, MirrorRule, describe_mirror, mirror_form_errors, mirror_form_rule
from appliance.services.policy import ApplyResult, Plan, State

if TYPE_CHECKING:
    from tui.backend import Backend

# What the Mirrors screen and its dialog build, named here so that they depend on the console's backend.
__all__ = ["MirrorForm", "MirrorRule", "mirror_form_errors", "mirror_form_rule"]

SOURCE = "Mirrors screen"
# OVS writes Mirror statistics every stats-update-interval (5 s by default).
# A counter that has not moved for longer than this is really idle (0/s);
# before that, an unchanged counter only means OVS has not written it yet.
STATS_STALE_S = 12.0


@dataclass(frozen=True)
class MirrorRow:
    """One mirror as the table shows it."""

    bridge: str
    name: str
    owner: str  # "hvnet" | "other"
    selects: str
    output: str
    tx_packets: int | None
    tx_bytes: int | None
    kind: str = "mirror"  # "mirror" | "tap" (a flow TAP: counts are its flows' matches)

    @property
    def key(self) -> str:
        return f"{self.bridge}/{self.name}" if self.kind == "mirror" else f"{self.bridge}/tap:{self.name}"

    def packets_text(self) -> str:
        return "-" if self.tx_packets is None else f"{render.count(self.tx_packets)} pkt"

    def bytes_text(self) -> str:
        return render.si(self.tx_bytes, "B")


@dataclass(frozen=True)
class PortChoice:
    """A port a mirror may select or output to, labelled with its VM."""

    port: str
    vm: str | None
    is_vif: bool

    @property
    def label(self) -> str:
        return f"{self.port} ({self.vm})" if self.vm else self.port


@dataclass
class Choices:
    """What the create dialog offers: bridges, their ports, and the mirrors that exist."""

    bridges: dict[str, list[PortChoice]] = field(default_factory=dict)
    existing: set[tuple[str, str]] = field(default_factory=set)


def mirror_rows(state: State) -> list[MirrorRow]:
    """Every mirror on the switch with its statistics (the rows of ``hvnet mirror list``)."""
    rows = []
    for (bridge, name), m in sorted(state.mirrors.items()):
        selects, _, output = describe_mirror(m.cols).partition(" -> ")
        rows.append(
            MirrorRow(
                bridge=bridge,
                name=name,
                owner="hvnet" if m.cols.owned else "other",
                selects=selects,
                output=output,
                tx_packets=m.statistics.get("tx_packets"),
                tx_bytes=m.statistics.get("tx_bytes"),
            )
        )
    return rows


def list_mirrors(backend: Backend) -> list[MirrorRow]:
    """The mirrors, then the TAPs (read with their flows' counts only when a bridge has TAPs)."""
    state = backend.snapshot()
    rows = mirror_rows(state)
    if any(b.taps for b in state.bridges.values()):
        rows += tap_rows(backend)
    return rows


def tap_rows(backend: Backend) -> list[MirrorRow]:
    """Every flow TAP as a row beside the mirrors (the rows of ``hvnet tap list``)."""
    from appliance.services import taps

    out = []
    for r in taps.list_taps(backend.engine):
        selects, _, output = r.cols.describe().partition(" -> ")
        out.append(MirrorRow(r.bridge, r.name, "hvnet TAP", selects, output, r.packets, r.bytes, kind="tap"))
    return out


def apply_delete_tap(backend: Backend, bridge: str, name: str) -> ApplyResult:
    """Delete the TAP (its flows, group and any tunnel port hvnet made for it)."""
    from appliance.services import taps

    return backend.run_apply(f"tap del {name} on {bridge}", lambda: taps.delete_tap(backend.engine, name, bridge))


def choices(backend: Backend) -> Choices:
    """Bridges and their ports (tunnel ports hvnet made for mirrors left out), VIFs first."""
    state = backend.snapshot()
    result = Choices(existing=set(state.mirrors))
    for name in sorted(state.bridges):
        ports = [p for p in state.ports.values() if p.bridge == name and not p.owner_mirror]
        ports.sort(key=lambda p: (not p.is_vif, p.name))
        result.bridges[name] = [PortChoice(p.name, p.vm_name, p.is_vif) for p in ports]
    return result


class MirrorPacketRates:
    """Packets per second between two *changes* of a mirror's tx_packets counter.

    OVS refreshes the counter every few seconds, so two reads 2 s apart often
    see the same value: that is "not measured yet" (``None``), not 0.  The
    rate is taken between the moments two different values were first seen.
    """

    def __init__(self, stale_s: float = STATS_STALE_S) -> None:
        self.stale_s = stale_s
        self._seen: dict[str, tuple[int, float]] = {}  # key -> (value, first seen)
        self._rate: dict[str, float | None] = {}

    def update(self, key: str, packets: int | None, now: float | None = None) -> float | None:
        now = time.monotonic() if now is None else now
        if packets is None:
            self._seen.pop(key, None)
            self._rate.pop(key, None)
            return None
        previous = self._seen.get(key)
        if previous is None or packets < previous[0]:  # new mirror, or recreated: start over
            self._seen[key] = (packets, now)
            self._rate[key] = None
            return None
        value, since = previous
        if packets != value:
            self._rate[key] = (packets - value) / max(now - since, 1e-3)
            self._seen[key] = (packets, now)
        elif now - since > self.stale_s and self._rate.get(key) is not None:
            self._rate[key] = 0.0  # measured before, and idle for longer than OVS's update interval
        return self._rate.get(key)

    def forget_except(self, keys: set[str]) -> None:
        for key in set(self._seen) - keys:
            self._seen.pop(key, None)
            self._rate.pop(key, None)


def rate_text(rate: float | None) -> str:
    return "-" if rate is None else render.si(rate, "pkt/s")


ORIGIN = svc.Origin(source=SOURCE, bridge_field="bridge", delete_hint="delete it first")


def plan_add(backend: Backend, rule: MirrorRule) -> Plan:
    """What adding the mirror would change; a name that exists now is refused (re-read, not remembered)."""
    return svc.plan_mirror_add(backend.engine, rule, ORIGIN)


def apply_add(backend: Backend, rule: MirrorRule, confirm_within: float | None = None) -> ApplyResult:
    """Add the mirror (one transaction); ``confirm_within``: rolled back unless confirmed in time."""
    return backend.run_apply(
        f"mirror add {rule.name} on {rule.bridge}",
        lambda: svc.add_mirror(backend.engine, rule, ORIGIN, confirm_within=confirm_within),
    )


def apply_delete(backend: Backend, bridge: str, name: str, confirm_within: float | None = None) -> ApplyResult:
    """Delete the mirror (and the tunnel port hvnet made for it); refused when it is gone."""
    return backend.run_apply(
        f"mirror del {name} on {bridge}",
        lambda: svc.delete_mirror(backend.engine, name, bridge, ORIGIN, confirm_within=confirm_within),
    )
