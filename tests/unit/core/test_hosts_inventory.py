"""The host inventory: every problem named with file:line and field, before any host is contacted."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.core.errors import ConfigError, UsageError
from appliance.core.hostlist import load

GOOD = """\
hosts:
  - name: xs01
    address: 192.0.2.11
    user: root
    kind: xenserver
    group: pool-a
  - name: xs02
    address: 2001:db8::12
    port: 2222
    kind: xenserver
    group: pool-a
  - name: kvm1
"""


def _write(tmp_path: Path, text: str) -> Path:
    f = tmp_path / "hosts.yaml"
    f.write_text(text)
    return f


def test_a_good_inventory(tmp_path: Path) -> None:
    inv = load(_write(tmp_path, GOOD))
    assert [h.name for h in inv.hosts] == ["xs01", "xs02", "kvm1"]
    assert inv.get("xs01").ssh == "root@192.0.2.11"
    assert inv.get("xs02").ssh == "[2001:db8::12]:2222"
    assert inv.get("kvm1").address == "kvm1" and inv.get("kvm1").kind == "kvm"
    assert [h.name for h in inv.select("pool-a")] == ["xs01", "xs02"]
    assert [h.name for h in inv.select("kvm1,xs01")] == ["kvm1", "xs01"]
    assert len(inv.select("all")) == 3
    with pytest.raises(UsageError, match="no host or group 'nope'"):
        inv.select("xs01,nope")


def test_every_problem_is_named_with_its_line(tmp_path: Path) -> None:
    bad = """\
hosts:
  - name: xs01
    port: 70000
    kind: hyperv
    colour: blue
  - name: xs01
  - address: 10.0.0.1
  - name: "-oProxyCommand=x"
  - name: ok
    user: "a;b"
    ovs_rundir: relative/path
"""
    with pytest.raises(ConfigError) as exc:
        load(_write(tmp_path, bad))
    text = str(exc.value)
    for expected in ("hosts.yaml:3: hosts[0].port: a TCP port", "hosts.yaml:4: hosts[0].kind: allowed: xenserver, kvm",
                     "hosts.yaml:5: hosts[0].colour: unknown key", "hosts.yaml:6: hosts[1].name: 'xs01' is listed twice",
                     "hosts[2].name: required", "hosts[3].name:", "hosts.yaml:10: hosts[4].user:",
                     "hosts.yaml:11: hosts[4].ovs_rundir: an absolute path"):  # fmt: skip
        assert expected in text, text


def test_not_an_inventory(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="a mapping with 'hosts'"):
        load(_write(tmp_path, "- just a list\n"))


def test_a_hosts_policy_file_is_relative_to_the_inventory(tmp_path: Path) -> None:
    text = GOOD.replace(
        "    group: pool-a\n  - name: xs02", "    group: pool-a\n    policy: pools/a.yaml\n  - name: xs02", 1
    )
    text += "    policy: /etc/hvnet/kvm.yaml\n"
    inv = load(_write(tmp_path, text))
    assert inv.get("xs01").policy == str(tmp_path / "pools" / "a.yaml")
    assert inv.get("kvm1").policy == "/etc/hvnet/kvm.yaml" and inv.get("xs02").policy is None


@pytest.mark.parametrize("bad", ["12", "''", "[a.yaml]", '"a\\nb"'])
def test_a_bad_policy_field_is_named_with_its_line(tmp_path: Path, bad: str) -> None:
    with pytest.raises(ConfigError) as err:
        load(_write(tmp_path, GOOD + f"    policy: {bad}\n"))
    assert "hosts.yaml:13: hosts[2].policy: a policy file's path" in str(err.value), str(err.value)


def test_xapi_url_and_credentials_go_together(tmp_path: Path) -> None:
    text = "hosts:\n  - name: xs01\n    xapi_url: https://192.0.2.11\n  - name: xs02\n    xapi_credentials: /etc/x\n"
    with pytest.raises(ConfigError) as exc:
        load(_write(tmp_path, text))
    assert "hosts.yaml:3: hosts[0].xapi_url: needs 'xapi_credentials' too" in str(exc.value)
    assert "hosts.yaml:5: hosts[1].xapi_credentials: needs 'xapi_url' too" in str(exc.value)
    both = "hosts:\n  - name: xs01\n    xapi_url: https://192.0.2.11\n    xapi_credentials: /etc/hvnet/xapi\n"
    assert load(_write(tmp_path, both)).get("xs01").xapi_url == "https://192.0.2.11"
