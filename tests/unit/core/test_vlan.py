"""A VLAN's grammar: tags, trunk lists, modes (core/vlan.py, beside the value they define)."""

import pytest

from appliance.core import vlan


@pytest.mark.parametrize(
    "text, expected",
    [("10,20-22", [10, 20, 21, 22]), ("5", [5]), ([3, 1, 3], [1, 3]), (7, [7]), (" 1 , 2-3", [1, 2, 3])],
)
def test_vlan_list(text, expected) -> None:
    assert vlan.vlan_list(text) == expected


@pytest.mark.parametrize(
    "text, message",
    [
        ("10,,20", "empty element"),
        ("10-", "malformed"),
        ("30-20", "backwards"),
        ("1-4095", "reserved"),
        ("4096", "outside 0..4094"),
        ([1, "x"], "integer"),
        (True, "VLAN list"),
    ],
)
def test_vlan_list_errors(text, message) -> None:
    with pytest.raises(ValueError, match=message):
        vlan.vlan_list(text)


def test_format_vlan_list_round_trips() -> None:
    assert vlan.format_vlan_list([10, 20, 21, 22, 30]) == "10,20-22,30"
    assert vlan.vlan_list(vlan.format_vlan_list([1, 2, 3, 9])) == [1, 2, 3, 9]


def test_vlan_id_rules() -> None:
    assert vlan.vlan_id(0) == 0 and vlan.vlan_id(4094) == 4094
    with pytest.raises(ValueError, match="reserved"):
        vlan.vlan_id(4095)
    with pytest.raises(ValueError, match="integer"):
        vlan.vlan_id(True)


def test_vlan_mode() -> None:
    assert vlan.vlan_mode("native-untagged") == "native-untagged"
    with pytest.raises(ValueError, match="allowed: access, trunk, native-tagged, native-untagged"):
        vlan.vlan_mode("hybrid")
