import pytest

from appliance.core import validate


@pytest.mark.parametrize(
    "text, expected",
    [("10,20-22", [10, 20, 21, 22]), ("5", [5]), ([3, 1, 3], [1, 3]), (7, [7]), (" 1 , 2-3", [1, 2, 3])],
)
def test_vlan_list(text, expected) -> None:
    assert validate.vlan_list(text) == expected


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
        validate.vlan_list(text)


def test_format_vlan_list_round_trips() -> None:
    assert validate.format_vlan_list([10, 20, 21, 22, 30]) == "10,20-22,30"
    assert validate.vlan_list(validate.format_vlan_list([1, 2, 3, 9])) == [1, 2, 3, 9]


@pytest.mark.parametrize("name", ["vif1.0", "tap12.3", "xenbr0", "a", "vnet_12-x"])
def test_ifname_ok(name) -> None:
    assert validate.ifname(name) == name


@pytest.mark.parametrize("name", ["", "a" * 16, "bad name", "x/y", "-opt", ".", "..", "a:b", 5, None])
def test_ifname_bad(name) -> None:
    with pytest.raises(ValueError, match="1-15 characters"):
        validate.ifname(name)


def test_vlan_id_rules() -> None:
    assert validate.vlan_id(0) == 0 and validate.vlan_id(4094) == 4094
    with pytest.raises(ValueError, match="reserved"):
        validate.vlan_id(4095)
    with pytest.raises(ValueError, match="integer"):
        validate.vlan_id(True)


def test_mac_rules() -> None:
    assert validate.mac("02:AB:00:00:00:01") == "02:ab:00:00:00:01"
    with pytest.raises(ValueError, match="multicast"):
        validate.mac("01:00:5e:00:00:01")
    with pytest.raises(ValueError, match="six hex pairs"):
        validate.mac("02:00:00:00:00")
    with pytest.raises(ValueError, match="not a usable"):
        validate.mac("00:00:00:00:00:00")


def test_vlan_mode() -> None:
    assert validate.vlan_mode("native-untagged") == "native-untagged"
    with pytest.raises(ValueError, match="allowed: access, trunk, native-tagged, native-untagged"):
        validate.vlan_mode("hybrid")
