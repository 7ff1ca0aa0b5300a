"""Whether a VIF's limits are enforced, as observed on the switch: the meter, the tc police action, the htb.

A committed ``ingress_policing_rate`` or QoS says what was asked, not what the
datapath does: the meter may be missing from the bridge, the kernel may lack
the police action, the htb qdisc may not be there.  This reads each one back
(the bridge's meters and flows from :mod:`~appliance.policy.apply.openflow`,
the interface's tc state from :mod:`~appliance.policy.apply.tcpolice`) and
gives one verdict per port and direction, with the evidence in words.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from appliance.core.runner import CommandRunner
from appliance.policy.apply import openflow, tcpolice
from appliance.policy.plan.state import PortState, State


@dataclass
class Enforcement:
    """What a VIF's limits are enforced by, and whether that was observed."""

    port: str
    kind: str  # "ingress" | "egress"
    mechanism: str  # "meter" | "tc" | "htb"
    verified: bool | None  # None: could not be checked
    detail: str

    @property
    def verdict(self) -> str:
        return {True: "enforced", False: "NOT ENFORCED", None: "not verified"}[self.verified]

    def to_json(self) -> dict[str, Any]:
        return self.__dict__.copy()

    def problem(self) -> str:
        """The verification finding an apply reports when this is not enforced."""
        return _PROBLEM[(self.kind, self.mechanism)].format(name=self.port, detail=self.detail)


_PROBLEM = {
    ("ingress", "meter"): "{name}: ingress policing not installed ({detail})",
    ("ingress", "tc"): "{name}: ingress policing configured but not enforced by tc ({detail})",
    ("egress", "htb"): "{name}: egress shaping configured but no htb qdisc on the interface",
}


def observe(
    runner: CommandRunner, of: openflow.OpenFlow | None, state: State, touched: set[tuple[str, str]]
) -> list[Enforcement]:
    """How each ``(port, "ingress" | "egress")`` in ``touched`` is enforced, read once per bridge and interface."""
    out: list[Enforcement] = []
    by_bridge: dict[str, openflow.Installed] = {}
    by_interface: dict[str, tcpolice.TcReading] = {}

    def tc_state(interface: str) -> tcpolice.TcReading:
        """Both directions' tc state from one pair of ``tc`` runs per interface."""
        if interface not in by_interface:
            by_interface[interface] = tcpolice.tc_enforcement(runner, interface)
        return by_interface[interface]

    for name, kind in sorted(touched):
        p = state.ports.get(name)
        if p is None:
            continue
        if kind == "ingress":
            eff = p.police.effective()
            if eff is None:
                continue
            if eff.mechanism == "meter":
                out.append(_meter(of, p, by_bridge))
            else:
                verified, detail = tc_police_evidence(tc_state(p.interface).police, eff.rate_kbps)
                out.append(Enforcement(name, kind, "tc", verified, detail))
        else:
            eff = p.qos.effective() if p.qos else None
            if eff is None:
                continue
            reading = tc_state(p.interface)
            htb = reading.htb_installed
            detail = (
                f"{reading.htb.describe()}; its rate ({eff.rate_kbps} kbit/s configured) not read back"
                if reading.htb is not None
                else ("tc cannot inspect this interface here" if htb is None else "NOT enforced: no htb qdisc")
            )
            out.append(Enforcement(name, kind, "htb", htb, detail))
    return out


def _meter(of: openflow.OpenFlow | None, p: PortState, by_bridge: dict[str, openflow.Installed]) -> Enforcement:
    """A meter's verdict: installed at the configured rate and burst, with its flow, and what its band dropped."""
    eff = p.police.effective()
    assert eff is not None
    if of is None or not of.available(p.bridge):
        return Enforcement(p.name, "ingress", "meter", None, "no OpenFlow access")
    inst = by_bridge.get(p.bridge) or of.read(p.bridge, stats=True)
    by_bridge[p.bridge] = inst
    meter = inst.flows.get(p.ofport or -1)
    ok = meter is not None and inst.meters.get(meter) == (eff.rate_kbps, eff.burst_kbit)
    detail = (
        f"meter {meter}: {eff.rate_kbps} kbit/s burst {eff.burst_kbit} kbit installed, "
        f"flow in_port={p.ofport}; band has dropped {inst.band_drops.get(meter, 0)} packets"
        if ok
        else "meter or its flow is missing from the switch"
    )
    return Enforcement(p.name, "ingress", "meter", ok, detail)


def tc_police_evidence(police: tuple[tcpolice.Police, ...] | None, rate_kbps: int) -> tuple[bool | None, str]:
    """Whether tc polices at the configured rate, and what its own counters say (passed, dropped, never hit)."""
    if police is None:
        return None, f"tc cannot inspect this interface here; {rate_kbps} kbit/s configured, enforcement not verified"
    if not police:
        return False, (
            "NOT enforced: no tc police action on the interface's ingress (OVS could not install it: "
            "this kernel lacks it?); use mechanism meter"
        )
    shown = "; ".join(a.describe() for a in police)
    if not any(a.rate_kbit == rate_kbps for a in police):
        return False, f"NOT enforced as configured: {rate_kbps} kbit/s configured, installed {shown}"
    return True, shown
