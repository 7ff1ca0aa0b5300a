import pytest

from appliance.core import validate


@pytest.mark.parametrize("name", ["vif1.0", "tap12.3", "xenbr0", "a", "vnet_12-x"])
def test_ifname_ok(name) -> None:
    assert validate.ifname(name) == name


@pytest.mark.parametrize("name", ["", "a" * 16, "bad name", "x/y", "-opt", ".", "..", "a:b", 5, None])
def test_ifname_bad(name) -> None:
    with pytest.raises(ValueError, match="1-15 characters"):
        validate.ifname(name)


def test_mac_rules() -> None:
    assert validate.mac("02:AB:00:00:00:01") == "02:ab:00:00:00:01"
    with pytest.raises(ValueError, match="multicast"):
        validate.mac("01:00:5e:00:00:01")
    with pytest.raises(ValueError, match="six hex pairs"):
        validate.mac("02:00:00:00:00")
    with pytest.raises(ValueError, match="not a usable"):
        validate.mac("00:00:00:00:00:00")
