"""Where a flow TAP is recorded: its Bridge's ``external_ids:hvnet-tap-NAME`` (OVS has no table for TAPs).

Apart from the policy's vocabulary (:mod:`.model`) and the TAP grammar (:mod:`.taps`), so that a
reader that only asks whether a bridge has any -- ``hvnet status`` on every run, and most switches
have none -- loads neither.
"""

from __future__ import annotations

from collections.abc import Mapping

TAP_KEY_PREFIX = "hvnet-tap-"


def has_taps(external_ids: Mapping[str, str]) -> bool:
    """Whether a bridge's external_ids hold a TAP record (whether it reads back: :func:`.taps.read_bridge`)."""
    return any(key.startswith(TAP_KEY_PREFIX) for key in external_ids)
