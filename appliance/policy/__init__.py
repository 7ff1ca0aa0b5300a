"""VIF policy: VLANs, ingress policing, egress shaping and mirrors, as desired state.

Public API (what the CLI, the TUI and the agent use)::

    policy = load("/etc/hvnet/policy.yaml")      # validated whole, file:line: field errors
    engine = PolicyEngine(conn)                  # on an open api.connect(...) connection
    plan = engine.plan(policy)                   # changes, before -> after; touches nothing
    result = engine.apply(policy)                # one transaction, meters, verified, audited
    text = export.to_yaml(engine.snapshot())     # current state as a policy that round-trips
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

# Each name is loaded from its module on first use (PEP 562): ``from appliance.policy
# import COLUMNS`` must not load the engine, the exporter and YAML for a verb that
# only reads the switch.
_WHERE = {
    "export": "plan.export",
    "DEFAULT_POLICY": "plan.document", "load": "plan.document", "parse": "plan.document",
    "ApplyResult": "apply.engine", "PolicyEngine": "apply.engine",
    "REMOVE": "plan.model", "Egress": "plan.model", "Ingress": "plan.model", "MirrorOutput": "plan.model",
    "MirrorRule": "plan.model", "Policy": "plan.model", "Selector": "plan.model", "VifRule": "plan.model",
    "Change": "plan.planner", "Plan": "plan.planner", "PlanOptions": "plan.planner", "describe": "plan.planner",
    "require_one": "plan.planner",
    "COLUMNS": "apply.read", "State": "plan.state",
}  # fmt: skip

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
    "describe",
    "export",
    "load",
    "parse",
    "require_one",
]


def __getattr__(name: str) -> Any:
    if name not in _WHERE:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    module = _WHERE[name]
    value = importlib.import_module(f"{__name__}.{module}")
    return value if module.endswith(f".{name}") else getattr(value, name)


if TYPE_CHECKING:
    from appliance.policy.apply.engine import ApplyResult, PolicyEngine
    from appliance.policy.apply.read import COLUMNS
    from appliance.policy.plan import export
    from appliance.policy.plan.document import DEFAULT_POLICY, load, parse
    from appliance.policy.plan.model import (
        REMOVE,
        Egress,
        Ingress,
        MirrorOutput,
        MirrorRule,
        Policy,
        Selector,
        VifRule,
    )
    from appliance.policy.plan.planner import Change, Plan, PlanOptions, describe, require_one
    from appliance.policy.plan.state import State
