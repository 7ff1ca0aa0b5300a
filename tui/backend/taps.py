"""The Add TAP dialog's calls into the engine: the form as a policy file's TAP, planned and applied.

The form's fields become the mapping a policy file's ``bridges.BR.taps.NAME``
holds (what ``hvnet tap add``'s flags build too), and that mapping goes
through :func:`appliance.services.taps.tap_rule` (see
:func:`appliance.services.taps.tap_form_rule`): the dialog refuses what the
CLI and a policy file refuse, in the same words.  Plain Python called from
worker threads; nothing here touches widgets.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from appliance.services import taps
from appliance.services.policy import ApplyResult, Plan
from appliance.services.taps import TapForm, tap_form_rule, tap_form_spec

if TYPE_CHECKING:
    from appliance.services.taps import TapRule
    from tui.backend import Backend

# What the Add TAP dialog builds, named here so that it depends on the console's backend.
__all__ = ["TapForm", "tap_form_rule", "tap_form_spec"]


def plan_add(backend: Backend, rule: TapRule) -> Plan:
    """What adding the TAP would change (a dry run of the same apply); touches nothing."""
    return taps.add_tap(backend.engine, rule, dry_run=True).plan


def apply_add(backend: Backend, rule: TapRule) -> ApplyResult:
    """Add the TAP: one transaction, its flows installed, verified and audited as ``hvnet tap add``."""
    return backend.run_apply(f"tap add {rule.name} on {rule.bridge}", lambda: taps.add_tap(backend.engine, rule))


def bridges(backend: Backend) -> list[str]:
    """The bridges the dialog offers."""
    return sorted(backend.snapshot().bridges)
