"""VIF policy: VLANs, ingress policing, egress shaping and mirrors, as desired state.

Public API (what the CLI, the TUI and the agent use)::

    policy = load("/etc/hvnet/policy.yaml")      # validated whole, file:line: field errors
    engine = PolicyEngine(conn)                  # on an open api.connect(...) connection
    plan = engine.plan(policy)                   # changes, before -> after; touches nothing
    result = engine.apply(policy)                # one transaction, meters, verified, audited
    text = export.to_yaml(engine.snapshot())     # current state as a policy that round-trips
"""

from __future__ import annotations

from . import export
from .document import DEFAULT_POLICY, load, parse
from .engine import ApplyResult, PolicyEngine, require_one
from .model import REMOVE, Egress, Ingress, MirrorOutput, MirrorRule, Policy, Selector, VifRule, Vlan
from .planner import Change, Plan, PlanOptions, describe
from .state import COLUMNS, State

__all__ = [
    "COLUMNS",
    "DEFAULT_POLICY",
    "REMOVE",
    "ApplyResult",
    "Change",
    "Egress",
    "Ingress",
    "MirrorOutput",
    "MirrorRule",
    "Plan",
    "PlanOptions",
    "Policy",
    "PolicyEngine",
    "Selector",
    "State",
    "VifRule",
    "Vlan",
    "describe",
    "export",
    "load",
    "parse",
    "require_one",
]
