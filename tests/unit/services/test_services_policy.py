"""services.policy without a switch: the Edit VIF form's fields become the rule ``hvnet vif set``/``qos set`` build."""

from __future__ import annotations

import pytest

from appliance.core.errors import ConfigError
from appliance.policy.plan.model import REMOVE, Selector
from appliance.policy.plan.state import PoliceCols
from appliance.services.policy import VifForm, vif_form_rule
from tests.unit.policy_states import vif


def test_a_vif_form_filled_from_the_port_asks_for_what_it_has() -> None:
    port = vif("vif1.0", "VM1", 1, 5, police=PoliceCols(10000, 1000))
    form = VifForm.of(port)
    assert (form.mode, form.tag, form.trunks, form.ingress_rate, form.ingress_burst, form.egress_rate) == (
        "access", "5", "", "10000", "1000", "",
    )  # fmt: skip
    rule = vif_form_rule(port, form)
    assert rule.selector == Selector("port", "vif1.0")
    assert (rule.vlan.mode, rule.vlan.tag) == ("access", 5)
    assert (rule.ingress.rate_kbps, rule.ingress.burst_kbit, rule.ingress.mechanism) == (10000, 1000, "tc")
    assert rule.egress is None


def test_an_emptied_rate_removes_that_limit() -> None:
    port = vif("vif1.0", "VM1", 1, 5, police=PoliceCols(10000, 1000))
    rule = vif_form_rule(port, VifForm(mode="access", tag="5"))
    assert rule.ingress is REMOVE


def test_every_bad_vif_field_is_named_at_once() -> None:
    port = vif("vif1.0", "VM1", 1, 5)
    with pytest.raises(ConfigError) as caught:
        vif_form_rule(port, VifForm(mode="access", tag="x", ingress_burst="100"))
    assert [p.field for p in caught.value.problems] == ["tag", "ingress burst"]
    assert all(p.file == "Edit VIF" for p in caught.value.problems)
