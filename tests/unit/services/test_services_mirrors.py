"""services.mirrors without a switch: the mirror checks, and the Add mirror form's fields as the CLI's rule."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

import pytest

from appliance.core.errors import UsageError
from appliance.services import mirrors as svc
from appliance.services.mirrors import MirrorForm, mirror_form_errors, mirror_form_rule


def test_mirror_taken_and_find_mirror_word_refusals_once() -> None:
    assert svc.mirror_taken({("br0", "m1")}, "br0", "m1") == "mirror m1 already exists on br0"
    assert svc.mirror_taken({("br0", "m1")}, "br1", "m1") is None
    state: Any = SimpleNamespace(mirrors={("br0", "m1"): None, ("br1", "m1"): None, ("br1", "m2"): None})
    assert svc.find_mirror(state, "m2") == "br1"
    assert svc.find_mirror(state, "m1", "br0") == "br0"
    with pytest.raises(UsageError, match="no mirror named m3 on br0"):
        svc.find_mirror(state, "m3", "br0")
    with pytest.raises(UsageError, match="mirror m1 exists on br0, br1"):
        svc.find_mirror(state, "m1")


def _mirror(**kw: object) -> MirrorForm:
    base = {"bridge": "xenbr0", "name": "m1", "sources": ("vif1.0",), "output_value": "vif3.0"}
    return MirrorForm(**{**base, **kw})  # type: ignore[arg-type]


def test_a_mirror_form_selects_by_direction() -> None:
    assert mirror_form_errors(_mirror()) == {}
    sends = mirror_form_rule(_mirror(direction="sends"))
    assert [s.pattern for s in sends.src] == ["vif1.0"] and sends.dst == ()
    both = mirror_form_rule(_mirror())
    assert [s.pattern for s in both.src] == [s.pattern for s in both.dst] == ["vif1.0"]


def test_every_bad_mirror_field_is_named_at_once() -> None:
    errors = mirror_form_errors(_mirror(name="", vlans="x", output_value=""), existing=set())
    assert sorted(errors) == ["name", "output", "vlans"]
    taken = mirror_form_errors(_mirror(), existing={("xenbr0", "m1")})
    assert taken == {"name": "mirror m1 already exists on xenbr0; delete it first"}
