"""The exporter's names follow Prometheus' conventions, checked on the exposition text itself (what
prometheus-client writes, read back by its own parser) of a switch read through a real snapshot:
base units (bytes, bytes/s, seconds), counters ending in ``_total``, VIF series labelled by ``vif``
alone with ``hvnet_vif_info`` to join, and ``host`` only where the switch is not this machine's."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from appliance.exporter import server as exporter
from appliance.services import metrics
from appliance.switch import inventory
from appliance.switch.inventory import Inventory
from appliance.switch.names import VmInfo
from tests.unit.switch_rows import lab_switch

Exposed = dict[str, list[tuple[dict[str, str], float]]]


class _One:
    """Stands where the Collector does: one scrape's families, given."""

    def __init__(self, fams: metrics.Families, host_label: bool) -> None:
        self.fams, self.host_label = fams, host_label

    def collect(self) -> Iterator[metrics.Family]:
        return iter(self.fams)


def _scrape(inv: Inventory, host_label: bool = False, checks: metrics.CheckResult | None = None) -> Exposed:
    fams = metrics.Families()
    fams.add("hvnet_up", ("hv1",), 1)
    metrics.add_inventory(fams, "hv1", inv)
    if checks is not None:
        metrics.add_checks(fams, "hv1", inv, checks, None)
    registry = CollectorRegistry(auto_describe=False)
    registry.register(exporter._Families(_One(fams, host_label)))  # type: ignore[arg-type]
    out: Exposed = {}
    for fam in text_string_to_metric_families(generate_latest(registry).decode()):
        for s in fam.samples:
            out.setdefault(s.name, []).append((s.labels, s.value))
    return out


def _lab() -> Inventory:
    return inventory.read(lab_switch().snapshot(), kernel_counters=False)


@pytest.mark.parametrize("name", sorted(metrics.FAMILIES))
def test_every_family_follows_the_naming_guide(name: str) -> None:
    kind, _, labels = metrics.FAMILIES[name]
    assert name.startswith("hvnet_") and labels[0] == "host"  # the exporter drops it by position
    assert (kind == "counter") == name.endswith("_total")
    assert "bits" not in name and "kbps" not in name and "millis" not in name  # base units: bytes, seconds
    if name.startswith("hvnet_vif_") and name != "hvnet_vif_info":
        assert labels in (metrics.VIF_LABELS, metrics.LIMIT_LABELS), labels  # no vm/vlan/bridge to split on


def test_vif_series_carry_only_the_vif_and_the_info_series_the_rest() -> None:
    got = _scrape(_lab())
    assert got["hvnet_vif_info"] == [
        ({"vif": "vif1.0", "bridge": "xenbr0", "vm": "", "vm_uuid": "0000-vm1", "vlan": "10",
          "mac": "02:00:00:00:00:01"}, 1.0),
        ({"vif": "vnet0", "bridge": "xenbr0", "vm": "", "vm_uuid": "0000-vm2", "vlan": "native-untagged 20 +21,30",
          "mac": ""}, 1.0),
    ]  # fmt: skip
    assert got["hvnet_vif_rx_bytes_total"] == [({"vif": "vif1.0"}, 100.0)]
    assert got["hvnet_vif_tx_packets_total"] == [({"vif": "vif1.0"}, 4.0)]
    assert got["hvnet_vif_link_up"] == [({"vif": "vif1.0"}, 1.0)]


def test_configured_limits_are_in_bytes() -> None:
    """OVSDB's 10240 kbit/s and 1024 kbit policing, htb's max-rate of 10,000,000 bit/s: divided by 8."""
    got = _scrape(_lab())
    assert got["hvnet_vif_ingress_policing_rate_bytes_per_second"] == [({"vif": "vif1.0"}, 1_280_000.0)]
    assert got["hvnet_vif_ingress_policing_burst_bytes"] == [({"vif": "vif1.0"}, 128_000.0)]
    assert got["hvnet_vif_egress_max_rate_bytes_per_second"] == [({"vif": "vif1.0"}, 1_250_000.0)]


def test_host_only_when_the_switch_is_not_this_machines() -> None:
    local, fleet = _scrape(_lab()), _scrape(_lab(), host_label=True)
    assert set(local) == set(fleet)
    assert not [name for name, samples in local.items() for labels, _ in samples if "host" in labels]
    assert all(labels["host"] == "hv1" for samples in fleet.values() for labels, _ in samples)
    assert local["hvnet_up"] == [({}, 1.0)] and fleet["hvnet_up"] == [({"host": "hv1"}, 1.0)]
    assert fleet["hvnet_vif_rx_bytes_total"] == [({"host": "hv1", "vif": "vif1.0"}, 100.0)]


def test_a_vm_name_that_comes_back_changes_the_info_series_alone() -> None:
    """XAPI late on one scrape (no name), back on the next: every data series keeps its labels."""
    inv = _lab()
    before = _scrape(inv)
    inventory.apply_vms(inv.vifs, {"0000-vm1": VmInfo("web-1", "xapi")})
    after = _scrape(inv)
    for name in set(before) | set(after):
        if name != "hvnet_vif_info":
            assert [labels for labels, _ in before[name]] == [labels for labels, _ in after[name]], name
    info = {labels["vif"]: labels for labels, _ in after["hvnet_vif_info"]}
    assert info["vif1.0"]["vm"] == "web-1" and info["vif1.0"]["vm_uuid"] == "0000-vm1"
    assert info["vnet0"]["vm"] == ""


def test_enforcement_is_per_vif_direction_and_mechanism() -> None:
    checks = metrics.CheckResult(
        enforcement=[("vif1.0", "ingress", "meter", True), ("vif1.0", "egress", "htb", False),
                     ("vnet0", "ingress", "tc", None), ("gone9.0", "ingress", "tc", False)],
        enforcement_at=1_700_000_000.0,
    )  # fmt: skip
    got = _scrape(_lab(), checks=checks)
    assert got["hvnet_vif_limit_enforced"] == [
        ({"vif": "vif1.0", "direction": "ingress", "mechanism": "meter"}, 1.0),
        ({"vif": "vif1.0", "direction": "egress", "mechanism": "htb"}, 0.0),
    ]  # not checked (None), or a VIF gone since the check: no series
    assert got["hvnet_limit_check_timestamp_seconds"] == [({}, 1_700_000_000.0)]
