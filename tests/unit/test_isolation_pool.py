"""The isolation check on an OVN pool, its pure parts: the pool scenario's validation, each guest's port found
in a real pool's NB/SB snapshots (captured from the lab's ovn-pool), the expectation a logical network implies."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from appliance import snapshot
from appliance.errors import ConfigError, UsageError
from appliance.isolation import model
from appliance.isolation import scenario as scenario_mod
from appliance.ovn.view import PoolView, build
from appliance.services import isolation_pool
from appliance.target import DbTarget

ROOT = Path(__file__).resolve().parents[2]
DATA = Path(__file__).parent / "data"
SCENARIO = ROOT / "vlan-tests" / "ovn-pool.yaml"


def _snap(db: str) -> snapshot.Snapshot:
    doc = json.loads((DATA / f"ovn-pool-{db}.json").read_text())
    return snapshot.build(DbTarget(f"unix:/{db}.sock", "test"), doc["tables"], doc["present"], doc["raw"])


def view() -> PoolView:
    return build("ovn-pool", _snap("nb"), _snap("sb"), "unix:/nb.sock", "unix:/sb.sock", "7.0.0")


def _scenario(tmp_path: Path, body: str) -> Path:
    f = tmp_path / "sc.yaml"
    f.write_text(f"topology: {ROOT / 'vlan-tests' / 'topologies' / 'ovn-pool.yaml'}\n{body}")
    return f


def test_the_shipped_pool_scenario_expects_the_studys_matrix() -> None:
    sc = scenario_mod.load(SCENARIO)
    assert sc.topology.ovn and sc.guests == ["VM1", "VM2", "VM3"]
    assert sc.matrix == {("VM1", "VM2"): "yes", ("VM2", "VM1"): "yes", ("VM1", "VM3"): "no",
                         ("VM3", "VM1"): "no", ("VM2", "VM3"): "no", ("VM3", "VM2"): "no"}  # fmt: skip
    assert set(sc.guest_lines) == {"VM1", "VM2", "VM3"}


def test_each_guest_is_found_as_its_port_on_the_pool() -> None:
    sc = scenario_mod.load(SCENARIO)
    ports = isolation_pool.resolve(sc, view())
    assert {g: (p.switch, p.chassis) for g, p in ports.items()} == {
        "VM1": ("vlan1", "hv1"), "VM2": ("vlan1", "hv2"), "VM3": ("vlan2", "hv3")}  # fmt: skip
    assert ports["VM1"].port == sc.topology.guest("VM1").vif_uuid("ovn-pool")
    assert (ports["VM2"].mac, ports["VM2"].ip) == (sc.topology.guest("VM2").mac, "192.168.0.151")


def test_the_vm_a_chassis_names_wins_over_the_labs_labels() -> None:
    sc = scenario_mod.load(SCENARIO)
    v = view()
    by_vm = {p.external_ids["hvnet-vm"]: p for _, p in v.ports()}
    # an operator's pool: ports named by uuid, the VM behind each known only from its chassis
    for p in by_vm.values():
        p.external_ids.pop("hvnet-vm")
        p.name = "renamed-" + p.name[:8]
    by_vm["VM1"].vm, by_vm["VM2"].vm, by_vm["VM3"].vm = "VM1", "VM2", "VM3"
    ports = isolation_pool.resolve(sc, v)
    assert ports["VM3"].port == by_vm["VM3"].name and ports["VM3"].switch == "vlan2"


def test_a_guest_the_pool_lacks_is_refused_at_its_line(tmp_path: Path) -> None:
    f = _scenario(tmp_path, "guests:\n  - VM1\n  - VM2\nexpect: derive\n")
    sc = scenario_mod.load(f)
    v = view()
    v.switches[0].ports = [p for p in v.switches[0].ports if p.external_ids.get("hvnet-vm") != "VM2"]
    with pytest.raises(UsageError) as exc:
        isolation_pool.resolve(sc, v)
    assert exc.value.args[0] == f"{f}:4: guests: pool ovn-pool has no port for VM2"
    assert exc.value.exit_code == 2 and "VM1, VM3" in (exc.value.hint or "")


def test_a_pool_scenario_takes_no_vlan_settings_or_mirrors(tmp_path: Path) -> None:
    f = _scenario(tmp_path, "vlans:\n  VM1: {tag: 5}\nmirrors:\n  - {name: m, output: VM3, select_all: true}\n"
                            "expect: derive\n")  # fmt: skip
    with pytest.raises(ConfigError) as exc:
        scenario_mod.load(f)
    text = "\n".join(str(p) for p in exc.value.problems)
    assert f"{f}:2: vlans: on an OVN pool" in text and "a port's network is its logical switch" in text
    assert f"{f}:4: mirrors: on an OVN pool" in text


def test_derive_on_a_pool_is_logical_switch_membership(tmp_path: Path) -> None:
    sc = scenario_mod.load(_scenario(tmp_path, "expect: derive\n"))
    exp = isolation_pool.expected(sc, isolation_pool.resolve(sc, view()))
    assert exp.cells == scenario_mod.load(SCENARIO).matrix
    assert all(v in (model.YES, model.NO) for v in exp.cells.values())
