"""Real VMs as a guest source: which VIF is a VM's, and which address inside it is the one under test
(real ``ip -j addr`` output of a guest with a data and a management interface)."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.core.errors import UsageError
from appliance.core.vmlist import InventoryVm
from appliance.services.vms import address_on, netperf_version, vif_for
from appliance.switch.counters import Counters
from appliance.switch.inventory import Vif

DATA = Path(__file__).resolve().parent.parent / "data"


def make_vif(port: str, *, vm_name: str, mac: str) -> Vif:
    return Vif(
        bridge="br0", port=port, interface=port, type="", is_vif=True, ofport=1, mac=mac, mac_in_use=None,
        hypervisor="libvirt", vm_uuid=None, vm_name=vm_name, vm_name_source="libvirt", ids={}, xen_domid=None,
        xen_devid=None, alias_ports=[], vlan_mode="access", vlan_mode_configured=None, tag=1, trunks=[],
        trunks_all_vlans=False, ingress_policing_rate_kbps=0, ingress_policing_burst_kbit=0, egress_qos_type=None,
        egress_max_rate_kbps=None, mirrors=[], link_state="up", admin_state="up", mtu=1500, error=None,
        counters=Counters(),
    )  # fmt: skip


def _entry(**kw: object) -> InventoryVm:
    base = {"name": "vm1", "method": "ssh", "vm": "web-01", "where": "vms.yaml:2"}
    return InventoryVm(**{**base, **kw})  # type: ignore[arg-type]


def test_the_address_under_test_is_on_the_interface_with_the_vifs_mac() -> None:
    text = (DATA / "ip-j-addr-guest.json").read_text()
    assert address_on(text, "02:00:00:00:00:0A") == "10.0.0.1/24"  # not mgmt0's 169.254.200.2
    assert address_on(text, "02:00:00:00:00:0b") == "169.254.200.2/30"
    assert address_on(text, "02:00:00:00:00:0c") is None
    assert address_on("not json", "02:00:00:00:00:0a") is None
    assert address_on('{"a": 1}', "02:00:00:00:00:0a") is None


def test_an_interface_with_only_ipv6_gives_its_global_address() -> None:
    text = '[{"address": "02:00:00:00:00:01", "addr_info": [{"family": "inet6", "local": "fe80::1", ' \
           '"prefixlen": 64, "scope": "link"}, {"family": "inet6", "local": "fd00::9", "prefixlen": 64, ' \
           '"scope": "global"}]}]'  # fmt: skip
    assert address_on(text, "02:00:00:00:00:01") == "fd00::9/64"


def test_the_vif_is_found_by_name_mac_or_vm_and_refused_when_ambiguous() -> None:
    vifs = [make_vif("vnet0", vm_name="web-01", mac="52:54:00:00:00:01"),
            make_vif("vnet1", vm_name="web-01", mac="52:54:00:00:00:02"),
            make_vif("vnet2", vm_name="db-01", mac="52:54:00:00:00:03")]  # fmt: skip
    assert vif_for(_entry(vm="db-01"), vifs, "hv1").port == "vnet2"
    assert vif_for(_entry(vif="vnet1"), vifs, "hv1").port == "vnet1"
    assert vif_for(_entry(mac="52:54:00:00:00:01"), vifs, "hv1").port == "vnet0"
    with pytest.raises(UsageError, match="2 VIFs on hv1 match its VM name 'web-01': vnet0, vnet1"):
        vif_for(_entry(), vifs, "hv1")
    with pytest.raises(UsageError, match="no VIF on hv1 matches its VM name"):
        vif_for(_entry(vm="gone"), vifs, "hv1")


def test_a_vm_name_holding_escape_sequences_is_shown_escaped() -> None:
    with pytest.raises(UsageError) as exc:
        vif_for(_entry(vm="x\x1b]0;owned\x07"), [], "hv1")
    assert "\x1b" not in str(exc.value) and "\\x1b" in str(exc.value)


def test_the_netperf_version_a_vm_reports() -> None:
    assert netperf_version("Netperf version 2.7.0") == (2, 7)
    assert netperf_version("netperf: command not found") is None


def test_the_vms_data_interface_is_the_one_with_its_vifs_mac() -> None:
    from appliance.isolation.vmtraffic import ifname_of

    text = (DATA / "ip-j-addr-guest.json").read_text()
    assert ifname_of(text, "02:00:00:00:00:0A") == "eth0"
    assert ifname_of(text, "02:00:00:00:00:0b") == "mgmt0"  # the management link: never chosen for the VIF
    assert ifname_of(text, "02:00:00:00:00:0c") is None and ifname_of("[", "02:00:00:00:00:0a") is None


def test_a_vm_without_the_tools_its_role_needs_exits_4_naming_vm_and_tool(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The check runs the VM's runner for real: here this machine's, with a PATH that has no netperf."""
    from appliance.core.errors import MissingTool
    from appliance.core.runner import LocalRunner
    from appliance.endpoints.guests import VmAccess
    from appliance.services.vms import VmSource

    monkeypatch.setenv("PATH", str(tmp_path))
    access = VmAccess("ssh", "VM vm1 (over SSH to web-01)", LocalRunner(), None)  # type: ignore[arg-type]
    source = VmSource(None, None, tools={"vm1": ("netserver", "iperf3")})  # type: ignore[arg-type]
    with pytest.raises(MissingTool) as exc:
        source._require_tools(_entry(), access)
    assert exc.value.exit_code == 4
    assert "VM vm1 (over SSH to web-01): netserver, iperf3 are not installed in the VM" in str(exc.value)
