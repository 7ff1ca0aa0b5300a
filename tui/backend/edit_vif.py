"""The Edit VIF dialog's calls: one VIF's form as a rule, planned and applied through the backend.

The form's fields become one VIF's rule through
:func:`appliance.services.forms.vif_form_rule` (the field rules of ``hvnet vif
set`` and ``hvnet qos set``), so the dialog accepts and refuses exactly what
the CLI does.  The rule is planned and applied as a one-rule policy file would
be: planning touches nothing; applying is the service's ``edit_vif`` (one
transaction, verified, audited), refused while disconnected and noted in the
log by the backend.  Plain Python called from worker threads; nothing here
touches widgets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from appliance.services import policy as svc
from appliance.services.forms import VifForm, vif_form_rule
from appliance.services.policy import ApplyResult, Plan, Policy, State, VifRule

if TYPE_CHECKING:
    from tui.backend import Backend

# What the Edit VIF dialog shows and builds, named here so that it depends on the console's backend.
__all__ = ["State", "VifForm", "VifRule", "vif_form_rule"]


def plan_edit(backend: Backend, rule: VifRule) -> Plan:
    """What applying the VIF's rule would change, before -> after; touches nothing."""
    return backend.plan(Policy(vifs=[rule]))


def apply_edit(backend: Backend, port: str, rule: VifRule, confirm_within: float | None = None) -> ApplyResult:
    """Apply the VIF's rule in one transaction; ``confirm_within``: rolled back unless confirmed in time."""
    return backend.run_apply(f"edit {port}", lambda: svc.edit_vif(backend.engine, rule, confirm_within=confirm_within))
