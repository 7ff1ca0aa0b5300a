"""The pool view from snapshots of a real pool's NB and SB (captured from the lab's ovn-pool, after a QoS
rule on VM1's port and qos_max_rate on VM2's), and its rendering at 80 columns."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from appliance.cli.pool import format_pool
from appliance.core.errors import ConfigError
from appliance.core.hostlist import load
from appliance.core.target import DbTarget
from appliance.ovn.view import build
from appliance.switch import snapshot

DATA = Path(__file__).parents[1] / "data"


def _snap(db: str) -> snapshot.Snapshot:
    doc = json.loads((DATA / f"ovn-pool-{db}.json").read_text())
    return snapshot.build(DbTarget(f"unix:/{db}.sock", "test"), doc["tables"], doc["present"], doc["raw"])


def _view():
    return build("ovn-pool", _snap("nb"), _snap("sb"), "unix:/nb.sock", "unix:/sb.sock", "7.0.0")


def test_ports_are_joined_with_their_chassis_and_qos() -> None:
    v = _view()
    assert [s.name for s in v.switches] == ["vlan1", "vlan2"]
    ports = {p.external_ids["hvnet-vm"]: p for _, p in v.ports()}
    assert {vm: p.chassis for vm, p in ports.items()} == {"VM1": "hv1", "VM2": "hv2", "VM3": "hv3"}
    assert ports["VM2"].qos_max_rate_bps == 20_000_000 and ports["VM2"].qos_burst_bits == 2_000_000
    assert ports["VM1"].qos_max_rate_bps is None and all(p.up for p in ports.values())
    (rule,) = v.switches[0].qos
    assert (rule.direction, rule.priority, rule.rate_kbps, rule.burst_kbit) == ("from-lport", 100, 10000, 1000)
    assert ports["VM1"].name in rule.match
    assert [(c.name, c.encaps, c.ports) for c in v.chassis] == [
        ("hv1", ["geneve 10.254.0.1"], 1), ("hv2", ["geneve 10.254.0.2"], 1), ("hv3", ["geneve 10.254.0.3"], 1)]  # fmt: skip


def test_a_chassis_behind_the_nb_is_named() -> None:
    v = _view()
    assert v.behind == [] and v.nb_cfg == v.hv_cfg > 0
    v.nb_cfg += 1  # a newer NB configuration that no chassis has acknowledged yet
    assert v.behind == ["hv1", "hv2", "hv3"]
    assert "NOT acknowledged by hv1, hv2, hv3" in format_pool(v)


def test_the_pool_fits_80_columns_and_shortens_uuid_port_names() -> None:
    v = _view()
    for _, p in v.ports():
        p.vm = p.external_ids["hvnet-vm"]
    text = format_pool(v)
    assert max(len(ln) for ln in text.splitlines()[1:]) <= 80, text  # the first line names the NB remote
    assert "VM1" in text and "20000 kbit/s" in text and "every chassis caught up" in text
    assert all(p.name not in text and p.name[:8] + "…" in text for _, p in v.ports())
    assert "MIRRORS" not in text  # no port is mirrored: no column for it


def test_an_inventory_names_pools_and_refuses_bad_ones(tmp_path: Path) -> None:
    good = tmp_path / "hosts.yaml"
    good.write_text("hosts:\n  - {name: hv1, group: g}\npools:\n  - {name: p, nb: 'tcp:192.0.2.1:6641', "
                    "sb: 'ssl:192.0.2.1:6642', chassis: g}\n  - {name: q, nb: 'unix:/run/ovn/ovnnb_db.sock', "
                    "sb: 'unix:/run/ovn/ovnsb_db.sock', via: hv1}\n")  # fmt: skip
    inv = load(good)
    assert inv.pool("p").chassis == "g" and inv.pool("q").via == "hv1"
    bad = tmp_path / "bad.yaml"
    bad.write_text("hosts: []\npools:\n  - {name: p, nb: 'tcp:h', sb: 'unix:/x', via: nope, color: red}\n")
    with pytest.raises(ConfigError) as exc:
        load(bad)
    text = "\n".join(str(p) for p in exc.value.problems)
    assert "bad.yaml:3: pools[0].nb: required: unix:/PATH, tcp:HOST:PORT or ssl:HOST:PORT" in text
    assert "pools[0].via: not a host of this inventory: 'nope'" in text
    assert "pools[0].color: unknown key" in text


def test_host_only_apply_options_are_refused_on_a_pool(tmp_path: Path, monkeypatch, capsys) -> None:
    from appliance.cli.main import main

    inv = tmp_path / "hosts.yaml"
    inv.write_text(
        f"hosts: []\npools:\n  - {{name: p, nb: 'unix:{tmp_path}/nb.sock', sb: 'unix:{tmp_path}/sb.sock'}}\n"
    )
    policy = tmp_path / "p.yaml"
    policy.write_text("version: 1\nvifs:\n  - vm: VM1\n    ingress: {rate: 1000}\n")
    monkeypatch.setenv("HVNET_INVENTORY", str(inv))
    for flag, said in (("--no-commit", "no automatic rollback"), ("--no-wait", "waits for the chassis")):
        assert main(["--pool", "p", "apply", str(policy), flag]) == 2
        assert said in capsys.readouterr().err
    assert main(["--pool", "p", "apply", str(policy), "--dry-run"]) == 3  # a plan: the NB is read, not written
