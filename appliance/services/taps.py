"""TAPs as imperative intents (``hvnet tap add|del|list``, the console's Mirrors screen): the service layer.

An add is a one-TAP policy, planned and applied like a policy file's TAP
(same refusals, same transaction, rollback record and audit line); the
counts in :func:`list_taps` are the switch's own, from the TAP's flows
(a group TAP's copies are counted by the flow that sends packets to it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Optional

from appliance.core.errors import HvnetError, UsageError
from appliance.core.validate import int_or_text
from appliance.policy.plan.records import has_taps
from appliance.switch.host import Host

# The policy (its vocabulary, the TAP grammar, the engine) and OpenFlow are imported where a TAP is
# changed or counted: ``hvnet status`` asks for the TAPs (host_taps) on every run, and most switches
# have none.
if TYPE_CHECKING:
    from appliance.policy import ApplyResult, PolicyEngine
    from appliance.policy.plan.model import TapRule
    from appliance.policy.plan.taps import TapCols


@dataclass
class TapRow:
    """One TAP as listed: its record and the packets/bytes its flows matched (None: not measured)."""

    bridge: str
    name: str
    cols: TapCols
    packets: Optional[int]
    bytes: Optional[int]
    note: str = ""

    def to_json(self) -> dict[str, Any]:
        return {
            "bridge": self.bridge,
            "name": self.name,
            **self.cols.to_json(),
            "config": self.cols.describe(),
            "packets": self.packets,
            "bytes": self.bytes,
            "note": self.note,
        }


def tap_rule(bridge: str, name: str, spec: dict[str, Any]) -> TapRule:
    """The rule of a TAP given as the policy file's mapping; UsageError naming the first bad field."""
    from appliance.policy.plan.taps import rule_from_fields

    rule, problems = rule_from_fields(bridge, name, spec, ("taps", name))
    if problems:
        field, message = problems[0]
        raise UsageError(f"{field}: {message}")
    return rule


def add_tap(engine: PolicyEngine, rule: TapRule, *, dry_run: bool = False) -> ApplyResult:
    """Add the TAP ``rule``; a name that exists on the bridge is refused (checked again inside the commit)."""
    from appliance.policy.plan.model import Policy
    from appliance.services.policy import apply

    def still_free(state: Any) -> None:
        br = state.bridges.get(rule.bridge)
        if br is not None and rule.name in br.taps:
            raise UsageError(f"TAP {rule.name} already exists on {rule.bridge}", hint="hvnet tap del it first")

    still_free(engine.snapshot())
    policy = Policy(source="(command line)", taps=[rule], bridges={rule.bridge: ("--bridge",)})
    return apply(engine, policy, dry_run=dry_run, guard=still_free)


def delete_tap(engine: PolicyEngine, name: str, bridge: Optional[str] = None, *, dry_run: bool = False) -> ApplyResult:
    """Delete the TAP ``name`` (its flows, group and any tunnel port hvnet made for it)."""
    from appliance.policy.plan.model import Policy, TapRule
    from appliance.services.policy import apply

    state = engine.snapshot()
    found = [br for br, b in state.bridges.items() if name in b.taps and (not bridge or br == bridge)]
    if not found:
        raise UsageError(f"no TAP named {name}" + (f" on {bridge}" if bridge else ""))
    if len(found) > 1:
        raise UsageError(f"TAP {name} exists on {', '.join(sorted(found))}", hint="give --bridge")
    policy = Policy(source="(command line)", taps=[TapRule(found[0], name, remove=True)])
    return apply(engine, policy, dry_run=dry_run)


def list_taps(engine: PolicyEngine) -> list[TapRow]:
    """Every TAP with its flows' counts (one dump-flows per bridge with TAPs); unknown when unreadable."""
    state = engine.snapshot()
    return _rows(engine.host, {br: b.taps for br, b in state.bridges.items()})


def host_taps(host: Host, bridge_ids: Optional[Mapping[str, Mapping[str, str]]] = None) -> list[TapRow]:
    """Every TAP on ``host``'s switch with its counts, for ``hvnet status``.

    Reads only the bridges' TAP records (no policy engine: a status must stay cheap).
    ``bridge_ids``: each bridge's external_ids, when the caller has read them already (status's one
    consistent read); else one small OVSDB read here.  A switch without TAPs costs nothing more: no
    policy vocabulary, no ovs-ofctl.
    """
    if bridge_ids is None:
        with host.connect({"Bridge": ["name", "external_ids"]}) as conn, conn.lock:
            bridge_ids = {str(br.name): dict(br.external_ids) for br in conn.idl.tables["Bridge"].rows.values()}
    if not any(has_taps(ids) for ids in bridge_ids.values()):
        return []
    from appliance.policy.plan.taps import read_bridge

    return _rows(host, {br: read_bridge(dict(ids)) for br, ids in bridge_ids.items()})


def _rows(host: Host, taps_by_bridge: dict[str, dict[str, TapCols]]) -> list[TapRow]:
    """Rows for the TAPs given by bridge, counted from each bridge's flows (TAP i is table TAP_TABLE0 + i, by name)."""
    taps_by_bridge = {br: taps for br, taps in taps_by_bridge.items() if taps}
    if not taps_by_bridge:
        return []
    from appliance.policy.apply import openflow as of
    from appliance.policy.plan import pipeline

    rows: list[TapRow] = []
    ofl = of.OpenFlow.for_host(host)
    for br, taps in sorted(taps_by_bridge.items()):
        counts: dict[int, tuple[int, int]] | None = None
        note = ""
        if ofl is None or not ofl.available(br):
            note = "counts not measured: no OpenFlow access to this bridge"
        else:
            try:
                counts = ofl.read(br).tap_counts
            except HvnetError as exc:
                note = f"counts not measured: {exc.message}"
        for i, (name, cols) in enumerate(sorted(taps.items())):
            packets = bytes_ = None
            if counts is not None:
                packets, bytes_ = counts.get(pipeline.tap_table(i), (0, 0))
            rows.append(TapRow(br, name, cols, packets, bytes_, note))
    return rows


# -- the console's Add TAP form --------------------------------------------------------
# The operator's text as typed, made the mapping a policy file's TAP holds and judged by tap_rule, as
# ``hvnet tap add``'s flags are: the dialog refuses what the CLI and a policy file refuse, in the same words.


@dataclass
class TapForm:
    """The Add TAP dialog's fields as typed (strings; empty = not given)."""

    MATCH_FIELDS: ClassVar[tuple[str, ...]] = ("src_mac", "dst_mac", "src_ip", "dst_ip", "vlan", "protocol",
                                               "src_port", "dst_port")  # fmt: skip
    INT_FIELDS: ClassVar[tuple[str, ...]] = ("vlan", "src_port", "dst_port")
    # an RSPAN VLAN is a mirror's output, not a TAP's
    OUTPUT_KINDS: ClassVar[dict[str, str]] = {"port": "port", "gre": "GRE", "erspan": "ERSPAN"}
    METHODS: ClassVar[dict[str, str]] = {
        "flows": "flows (one copy action per flow)",
        "group": "group (OpenFlow group of type ALL)",
    }
    DIRECTIONS: ClassVar[dict[str, str]] = {
        "in": "what the VM sends",
        "out": "what the VM receives",
        "both": "both directions",
    }

    bridge: str = ""
    name: str = ""
    vifs: str = ""  # selectors separated by spaces or commas: vif1.0, vm:VM1, ...
    direction: str = "both"
    match: dict[str, str] = field(default_factory=dict)  # MATCH_FIELDS -> text
    output_kind: str = "port"
    output_value: str = ""
    key: str = ""
    method: str = "flows"
    allow_isolation_exception: bool = False


def tap_form_spec(form: TapForm) -> dict[str, Any]:
    """The policy file's mapping for the form (nothing judged here but what the mapping cannot hold).

    It is what a policy file's ``bridges.BR.taps.NAME`` holds, and what ``hvnet tap add``'s flags build.
    """
    spec: dict[str, Any] = {
        "vifs": [v for v in form.vifs.replace(",", " ").split() if v],
        "direction": form.direction,
        "method": form.method,
        "allow_isolation_exception": form.allow_isolation_exception,
    }
    match = {}
    for key in TapForm.MATCH_FIELDS:
        text = form.match.get(key, "").strip()
        if text:
            match[key] = int_or_text(text) if key in TapForm.INT_FIELDS else text
    if match:
        spec["match"] = match
    value = form.output_value.strip()
    if value:
        output: dict[str, Any] = {form.output_kind: value}
        if form.key.strip() and form.output_kind in ("gre", "erspan"):
            output["key"] = int_or_text(form.key.strip())
        spec["output"] = output
    return spec


def tap_form_rule(form: TapForm) -> TapRule:
    """The TAP the form asks for, or the service's UsageError (``field: message``)."""
    if not form.bridge.strip():
        raise UsageError("bridge: choose a bridge")
    if not form.name.strip():
        raise UsageError("name: give the TAP a name")
    return tap_rule(form.bridge.strip(), form.name.strip(), tap_form_spec(form))
