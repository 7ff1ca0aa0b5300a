"""The words and bounds the command line's parser offers: choices, defaults, limits in its help.

Named by the service layer so that the parser depends on it and not on the
engine's inside, and kept light: every hvnet command builds the whole parser,
and ``status`` or the agent must not load the capture workflows or the policy
engine to say what ``tap add --direction`` accepts.  Only constants of the
engine's pure, import-light modules belong here.
"""

from __future__ import annotations

from appliance.capture.spec import DEFAULT_MAX_MB, DEFAULT_RING, RING_MAX_MB
from appliance.policy.plan.model import TAP_DIRECTIONS, TAP_METHODS

__all__ = ["DEFAULT_MAX_MB", "DEFAULT_RING", "RING_MAX_MB", "TAP_DIRECTIONS", "TAP_METHODS"]
