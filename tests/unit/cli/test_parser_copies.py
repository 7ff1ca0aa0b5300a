"""Building the parser loads no engine code, so the few engine words and bounds its arguments
show are copies kept in the front end's parser modules; these tests keep the copies true."""

from __future__ import annotations

from appliance.capture import limits, spec
from appliance.cli import capture_args, tap_args
from appliance.policy.plan import model


def test_tap_words_match_the_policy_model() -> None:
    assert tap_args.TAP_DIRECTIONS == model.TAP_DIRECTIONS
    assert tap_args.TAP_METHODS == model.TAP_METHODS
    assert tap_args.MATCH_FLAGS == model.TAP_MATCH_KEYS


def test_capture_bounds_match_the_capture_spec() -> None:
    assert capture_args.DEFAULT_RING == spec.DEFAULT_RING
    assert capture_args.RING_MAX_MB == spec.RING_MAX_MB
    assert capture_args.DEFAULT_MAX_MB == spec.DEFAULT_MAX_MB
    assert capture_args.BUFFER_KIB_RANGE == limits.BUFFER_KIB_RANGE
    assert capture_args.DEFAULT_BUFFER_KIB == limits.DEFAULT_BUFFER_KIB
