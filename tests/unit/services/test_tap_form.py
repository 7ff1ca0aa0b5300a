"""The console's Add TAP form: its fields become the policy file's mapping, judged by the service's code."""

from __future__ import annotations

import pytest

from appliance.core.errors import UsageError
from appliance.services.taps import TapForm, tap_form_rule, tap_form_spec


def _form(**kw: object) -> TapForm:
    base = {"bridge": "xenbr0", "name": "t1", "vifs": "vif1.0, vm:VM2", "output_value": "vif3.0"}
    return TapForm(**{**base, **kw})  # type: ignore[arg-type]


def test_a_full_form_is_the_policy_files_mapping() -> None:
    form = _form(
        direction="in", method="group", output_kind="gre", output_value="192.0.2.9", key="7",
        match={"src_ip": "10.0.0.0/24", "protocol": "udp", "dst_port": "53", "vlan": "", "src_mac": " "},
    )  # fmt: skip
    assert tap_form_spec(form) == {
        "vifs": ["vif1.0", "vm:VM2"], "direction": "in", "method": "group", "allow_isolation_exception": False,
        "match": {"src_ip": "10.0.0.0/24", "protocol": "udp", "dst_port": 53},
        "output": {"gre": "192.0.2.9", "key": 7},
    }  # fmt: skip
    rule = tap_form_rule(form)
    assert (rule.bridge, rule.name, rule.method, rule.direction) == ("xenbr0", "t1", "group", "in")
    assert rule.match.dst_port == 53 and rule.output.kind == "gre"


@pytest.mark.parametrize(
    ("change", "words"),
    [
        ({"bridge": ""}, "bridge: choose a bridge"),
        ({"name": " "}, "name: give the TAP a name"),
        ({"vifs": ""}, "vifs: required"),
        ({"match": {"dst_port": "80"}}, "match.dst_port: dst_port needs protocol tcp or udp"),
        ({"match": {"src_ip": "10.0.0.1/24"}}, "match.src_ip: '10.0.0.1/24' is not an IP address or network prefix"),
        ({"match": {"vlan": "x"}}, "match.vlan: vlan must be an integer 0..4094"),
        ({"output_value": ""}, "output: required"),
        ({"output_kind": "erspan", "output_value": "not-an-ip"}, "output.erspan"),
        ({"match": {"src_mac": "[red]zz[/red]"}}, "match.src_mac: "),
    ],
)
def test_bad_fields_are_refused_in_the_services_words(change: dict[str, object], words: str) -> None:
    with pytest.raises(UsageError) as caught:
        tap_form_rule(_form(**change))
    assert caught.value.message.startswith(words), caught.value.message
    if "src_mac" in str(change):
        assert "[red]zz[/red]" in caught.value.message  # the text as typed: the dialog shows it literally
