"""A scenario's settings as policy changes (pure): what the isolation check hands the policy writer."""

from __future__ import annotations

import pytest

from appliance.core.errors import HvnetError
from appliance.core.vlan import VlanCols
from appliance.isolation.check import setting_changes
from appliance.isolation.scenario import MirrorDef, Scenario, VlanOverride
from appliance.policy.plan.state import MirrorCols, MirrorState, State
from tests.unit.policy_states import vif

VIF_OF = {"VM1": "vif1.0", "VM2": "vif2.0", "VM3": "vif3.0"}


def _state() -> State:
    ports = [vif("vif1.0", "VM1", 1, 1), vif("vif2.0", "VM2", 2, 1), vif("vif3.0", "VM3", 3, 2)]
    return State(ports={p.name: p for p in ports})


def _scenario(vlans=(), mirrors=()) -> Scenario:
    return Scenario("sc", "sc.yaml", "", None, ["VM1", "VM2", "VM3"], list(vlans), list(mirrors))  # type: ignore[arg-type]


def test_vlan_overrides_keep_what_they_do_not_name() -> None:
    changes = setting_changes(_state(), _scenario([VlanOverride("VM3", tag=None), VlanOverride("VM2", tag=1)]), VIF_OF)
    assert len(changes) == 1  # VM2 already has tag 1: nothing to change
    c = changes[0]
    assert (c.kind, c.name, c.before, c.after) == ("vlan", "vif3.0", VlanCols(None, 2, ()), VlanCols(None, None, ()))
    trunk = setting_changes(_state(), _scenario([VlanOverride("VM1", trunks=(20, 10), vlan_mode="trunk")]), VIF_OF)
    assert trunk[0].after == VlanCols("trunk", 1, (10, 20))  # sorted, as the state reads trunks back


def test_mirrors_are_owned_by_the_check_and_read_back_equal() -> None:
    m = MirrorDef("spy", output="VM3", select_src=("VM2", "VM1"), select_vlans=(2, 1))
    (c,) = setting_changes(_state(), _scenario(mirrors=[m]), VIF_OF)
    assert (c.kind, c.bridge, c.name, c.before) == ("mirror", "xenbr0", "spy", None)
    assert c.after == MirrorCols(src=("vif1.0", "vif2.0"), vlans=(1, 2), output_port="vif3.0",
                                 external_ids=(("hvnet-owner", "isolation:sc"),))  # fmt: skip


def test_refused_before_anything_is_written() -> None:
    state = _state()
    state.mirrors[("xenbr0", "spy")] = MirrorState("xenbr0", "spy", MirrorCols())
    with pytest.raises(HvnetError, match="already has a mirror named 'spy'"):
        setting_changes(state, _scenario(mirrors=[MirrorDef("spy", output="VM3")]), VIF_OF)
    with pytest.raises(HvnetError, match=r"port vif9\.0 of guest VM1 is not on the switch"):
        setting_changes(_state(), _scenario([VlanOverride("VM1", tag=5)]), {**VIF_OF, "VM1": "vif9.0"})
