"""The VM inventory: every problem named with file:line and field before any VM is contacted; globs; data
that a hypervisor may name a VM with kept as data."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.core.errors import ConfigError
from appliance.core.vmlist import load

GOOD = """\
vms:
  - name: vm1
    vm: web-01
    ssh: web-01.mgmt
    user: root
    port: 2200
    identity: keys/vm_key
    known_hosts: /etc/hvnet/vm_known_hosts
  - name: db1
    agent: libvirt
    libvirt: qemu+ssh://kvm01/system
    ip: 10.0.0.2/24
    vif: vnet3
  - name: "web-*"
    mac: 52:54:00:AA:BB:CC
"""


def _write(tmp_path: Path, text: str) -> Path:
    f = tmp_path / "vms.yaml"
    f.write_text(text)
    return f


def test_a_good_inventory(tmp_path: Path) -> None:
    inv = load(_write(tmp_path, GOOD))
    vm1 = inv.get("vm1")
    assert vm1 is not None and vm1.method == "ssh" and vm1.vm == "web-01" and vm1.ssh == "web-01.mgmt"
    assert vm1.port == 2200 and vm1.identity == str(tmp_path / "keys/vm_key")  # relative: to the file
    assert vm1.known_hosts == "/etc/hvnet/vm_known_hosts" and vm1.where == f"{tmp_path / 'vms.yaml'}:2"
    db1 = inv.get("db1")
    assert db1 is not None and db1.method == "agent" and db1.vm == "db1" and db1.ssh is None
    assert db1.libvirt == "qemu+ssh://kvm01/system" and db1.address == "10.0.0.2" and db1.vif == "vnet3"


def test_a_glob_entry_is_each_vm_it_matches_by_its_own_name(tmp_path: Path) -> None:
    inv = load(_write(tmp_path, GOOD))
    w = inv.get("web-07")
    assert w is not None and not w.pattern and (w.name, w.vm, w.ssh) == ("web-07", "web-07", "web-07")
    assert w.mac == "52:54:00:aa:bb:cc"
    assert inv.get("web-01") is not None and inv.get("vm1").vm == "web-01"  # an exact name first
    assert inv.get("db2") is None


@pytest.mark.parametrize(
    ("text", "where", "what"),
    [
        ("vms:\n  - name: a\n    agent: qemu\n", ":3", "vms[0].agent"),
        ("vms:\n  - name: a\n    agent: libvirt\n    ssh: a.mgmt\n", ":3", "not both"),
        ("vms:\n  - name: a\n    agent: libvirt\n    user: root\n", ":4", "belongs to 'ssh'"),
        ("vms:\n  - name: a\n    ssh: a.mgmt\n    libvirt: qemu:///system\n", ":4", "belongs to 'agent'"),
        ("vms:\n  - name: a\n    ssh: '-oProxyCommand=x'\n", ":3", "vms[0].ssh"),
        ("vms:\n  - name: a\n    ssh: root@a\n", ":3", "no user@"),
        ("vms:\n  - name: a\n    port: 70000\n", ":3", "1-65535"),
        ("vms:\n  - name: a\n    port: true\n", ":3", "1-65535"),
        ("vms:\n  - name: a\n    ip: 10.0.0.1\n", ":3", "prefix length"),
        ("vms:\n  - name: a\n    vif: 'eth0; rm -rf /'\n", ":3", "vms[0].vif"),
        ("vms:\n  - name: a\n    mac: 01:00:5e:00:00:01\n", ":3", "multicast"),
        ('vms:\n  - name: a\n    vm: "evil\\e[2J"\n', ":3", "control character"),
        ("vms:\n  - name: 'a;b'\n", ":2", "vms[0].name"),
        ("vms:\n  - vm: a\n", ":2", "required"),
        ("vms:\n  - name: a\n  - name: a\n", ":3", "listed twice"),
        ("vms:\n  - name: a\n    colour: red\n", ":3", "unknown key"),
        ("vms:\n  - name: a\n    libvirt: 'qemu:///system;reboot'\n", ":3", "libvirt URI"),
        ("hosts: []\n", ":1", "'vms'"),
    ],
)
def test_every_problem_names_file_line_and_field(tmp_path: Path, text: str, where: str, what: str) -> None:
    with pytest.raises(ConfigError) as exc:
        load(_write(tmp_path, text))
    shown = str(exc.value)
    assert f"vms.yaml{where}" in shown and what in shown, shown


def test_a_vm_name_with_shell_text_stays_data(tmp_path: Path) -> None:
    inv = load(_write(tmp_path, 'vms:\n  - name: a\n    vm: "x\'; reboot; $(id) `id`"\n    agent: libvirt\n'))
    assert inv.get("a").vm == "x'; reboot; $(id) `id`"


def test_every_problem_of_the_file_is_listed_at_once(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as exc:
        load(_write(tmp_path, "vms:\n  - name: a\n    port: 0\n  - name: b\n    agent: x\n"))
    assert len(exc.value.problems) == 2
