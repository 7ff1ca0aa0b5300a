"""libvirt as a VM source: domain XML parsing, state words, matching VIFs to
domain interfaces, and the source's cache and failure handling.

The XML under data/ is real ``virsh dumpxml`` output of a two-NIC domain on
an OVS bridge (running, then defined but shut off).  The source itself runs
against libvirt's in-process ``test:`` driver, which speaks the same API as
a libvirtd; tests that need the binding skip without it.
"""

from __future__ import annotations

import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path

import pytest

from appliance.switch import inventory, names
from appliance.switch.counters import Counters
from appliance.switch.inventory import Vif
from tests.conftest import ROOT

DATA = Path(__file__).parents[1] / "data"
RUNNING_XML = (DATA / "virsh-dumpxml-running.xml").read_text()
SHUTOFF_XML = (DATA / "virsh-dumpxml-shutoff.xml").read_text()
UUID = "4054bc08-3d63-43d1-8e3c-8c07cf52beb9"  # the captured domain's

WEB = "11111111-2222-4333-8444-555555555501"
DB = "11111111-2222-4333-8444-555555555502"
NODE_XML = f"""<node>
  <domain type='test'>
    <name>web-01</name><uuid>{WEB}</uuid><memory>65536</memory><os><type>hvm</type></os>
    <devices>
      <interface type='bridge'><mac address='52:54:00:aa:00:01'/><source bridge='br0'/>
        <model type='virtio'/></interface>
      <interface type='bridge'><mac address='52:54:00:aa:00:02'/><source bridge='br0'/>
        <model type='e1000'/></interface>
    </devices>
  </domain>
  <domain type='test' xmlns:test='http://libvirt.org/schemas/domain/test/1.0'>
    <name>db-01</name><uuid>{DB}</uuid><memory>65536</memory><os><type>hvm</type></os>
    <devices>
      <interface type='network'><mac address='52:54:00:bb:00:01'/><source network='default'/>
        <model type='virtio'/></interface>
    </devices>
    <test:runstate>3</test:runstate>
  </domain>
</node>
"""


def vif(port: str, vm_uuid: str | None, mac: str | None) -> Vif:
    return Vif(
        bridge="br0", port=port, interface=port, type="system", is_vif=True, ofport=1, mac=mac, mac_in_use=None,
        hypervisor="libvirt", vm_uuid=vm_uuid, vm_name=None, vm_name_source=None, ids={},
        xen_domid=None, xen_devid=None, alias_ports=[],
        vlan_mode="access", vlan_mode_configured=None, tag=5, trunks=[], trunks_all_vlans=False,
        ingress_policing_rate_kbps=0, ingress_policing_burst_kbit=0, egress_qos_type=None,
        egress_max_rate_kbps=None, mirrors=[], link_state="up", admin_state="up", mtu=1500, error=None,
        counters=Counters(),
    )  # fmt: skip


# -- pure: XML, states, matching ----------------------------------------------------


def test_running_domain_xml_gives_both_interfaces_in_order() -> None:
    ifaces = names.parse_interfaces(RUNNING_XML)
    assert ifaces == (
        names.DomainInterface("52:54:00:12:34:01", "bridge", "vnet0", "virtio", "brv"),
        names.DomainInterface("52:54:00:12:34:02", "bridge", "vnet1", "e1000", "brv"),
    )
    assert [i.describe() for i in ifaces] == ["vnet0 virtio on brv", "vnet1 e1000 on brv"]


def test_shut_off_domain_has_no_target_device() -> None:
    ifaces = names.parse_interfaces(SHUTOFF_XML)
    assert [i.target for i in ifaces] == [None, None]
    assert [i.describe() for i in ifaces] == ["virtio on brv", "e1000 on brv"]


def test_other_interface_kinds_are_described() -> None:
    xml = """<domain><devices>
      <interface type='network'><mac address='52:54:00:00:00:01'/><source network='default'/></interface>
      <interface type='direct'><source dev='eth0' mode='vepa'/><target dev='macvtap0'/></interface>
      <interface type='user'/>
    </devices></domain>"""
    assert [i.describe() for i in names.parse_interfaces(xml)] == [
        "on network default",
        "macvtap0 on eth0 (direct)",
        "user",
    ]


def test_state_words_are_virsh_words() -> None:
    assert [names.state_name(n) for n in range(8)] == [
        "no state", "running", "idle", "paused", "in shutdown", "shut off", "crashed", "pmsuspended",
    ]  # fmt: skip
    assert names.state_name(42) == "no state"


def test_interface_is_matched_by_mac_case_insensitively() -> None:
    dom = names.Domain(UUID, "hvnet-inv-test", "running", names.parse_interfaces(RUNNING_XML))
    assert dom.interface_for("52:54:00:12:34:02").target == "vnet1"  # type: ignore[union-attr]
    assert dom.interface_for("52:54:00:12:34:01".upper()).target == "vnet0"  # type: ignore[union-attr]
    assert dom.interface_for("52:54:00:99:99:99") is None
    assert dom.interface_for(None) is None


class FixedDomains(names.LibvirtDomains):
    """A libvirt source answering from captured XML (for the matching rules alone)."""

    def __init__(self, domains: dict[str, names.Domain]) -> None:
        super().__init__("test:///captured")
        self.fixed = domains

    def domains(self, wanted):  # type: ignore[no-untyped-def,override]
        return {u: d for u, d in self.fixed.items() if u in wanted}


def test_vifs_matched_by_vm_id_then_attached_mac() -> None:
    dom = names.Domain(UUID, "hvnet-inv-test", "running", names.parse_interfaces(RUNNING_XML))
    vifs = [
        vif("vnet0", UUID, "52:54:00:12:34:01"),
        vif("vnet1", UUID, "52:54:00:12:34:02"),  # the same domain's second NIC
        vif("vnet7", UUID, "52:54:00:99:99:99"),  # a MAC the domain does not have
        vif("vnet8", "00000000-0000-4000-8000-000000000000", "52:54:00:12:34:01"),  # another VM's id
        vif("vif3.0", None, None),
    ]
    lab = names.StaticNames({"00000000-0000-4000-8000-000000000000": "from-lab"})
    inventory.attach_vms(vifs, [FixedDomains({UUID: dom}), lab])
    got = [(v.port, v.vm_name, v.vm_name_source, v.vm_state, v.vm_interface) for v in vifs]
    assert got == [
        ("vnet0", "hvnet-inv-test", "libvirt", "running", "vnet0 virtio on brv"),
        ("vnet1", "hvnet-inv-test", "libvirt", "running", "vnet1 e1000 on brv"),
        ("vnet7", "hvnet-inv-test", "libvirt", "running", None),
        ("vnet8", "from-lab", "lab", None, None),
        ("vif3.0", None, None, None, None),
    ]


def test_json_has_the_new_keys() -> None:
    v = replace(vif("vnet0", UUID, "52:54:00:12:34:01"), vm_state="paused", vm_interface="vnet0 virtio on brv")
    d = v.to_json()
    assert (d["vm_state"], d["vm_interface"]) == ("paused", "vnet0 virtio on brv")


# -- URIs: which are chosen, which are not worth a connect ------------------------


def test_unreachable_local_uris_are_known_without_connecting() -> None:
    assert names.uri_unreachable("qemu+unix:///system?socket=/nonexistent") is not None
    assert names.uri_unreachable("test:///default") is None


def test_refused_remote_uri_is_known_quickly() -> None:
    started = time.monotonic()
    assert names.uri_unreachable("qemu+tcp://127.0.0.1:1/system") is not None
    assert time.monotonic() - started < 1.5


def test_uri_choice(tmp_path: Path) -> None:
    assert names.libvirt_uri("test:///default", {"HVNET_LIBVIRT_URI": "qemu:///system"}) == "test:///default"
    assert names.libvirt_uri(None, {"HVNET_LIBVIRT_URI": "qemu+ssh://h/system"}) == "qemu+ssh://h/system"
    assert names.libvirt_uri(None, {"LIBVIRT_DEFAULT_URI": "xen:///system"}) == "xen:///system"
    assert names.libvirt_uri("none", {"HVNET_LIBVIRT_URI": "qemu:///system"}) is None
    assert names.libvirt_uri(None, {"HVNET_LIBVIRT_URI": "none"}) is None
    assert names.libvirt_uri(None, {"HVNET_LIBVIRT_URI": ""}) == "qemu:///system"
    env = {"HVNET_LIBVIRT_URI": "none"}
    assert [s.name for s in names.default_sources({"u": "n"}, env)] == ["lab"]


# -- the source on libvirt's test driver ---------------------------------------------


@pytest.fixture()
def node_uri(tmp_path: Path) -> str:
    pytest.importorskip("libvirt")
    node = tmp_path / "node.xml"
    node.write_text(NODE_XML)
    return f"test://{node}"


def test_source_gives_names_states_and_interfaces(node_uri: str) -> None:
    src = names.LibvirtDomains(node_uri)
    try:
        got = src.domains({WEB: {"52:54:00:aa:00:02"}, DB: {"52:54:00:bb:00:01"}, "not-a-domain": set()})
    finally:
        src.close()
    assert sorted(got) == [WEB, DB]
    assert (got[WEB].name, got[WEB].state) == ("web-01", "running")
    # The test driver names target devices itself (testnetN), as libvirtd does (vnetN).
    assert got[WEB].interface_for("52:54:00:aa:00:02").describe() == "testnet1 e1000 on br0"  # type: ignore[union-attr]
    assert (got[DB].name, got[DB].state) == ("db-01", "paused")
    assert got[DB].interface_for("52:54:00:bb:00:01").model == "virtio"  # type: ignore[union-attr]


def test_interfaces_are_read_only_when_asked_for(node_uri: str) -> None:
    src = names.LibvirtDomains(node_uri)
    try:
        assert src.lookup([WEB, DB]) == {WEB: "web-01", DB: "db-01"}
        assert src._xml == {}  # names alone: no XMLDesc
        src.domains({WEB: {"52:54:00:aa:00:01"}})
        assert list(src._xml) == [WEB]
    finally:
        src.close()


def test_answers_are_reused_within_the_ttl_and_refreshed_after() -> None:
    libvirt = pytest.importorskip("libvirt")
    rw = libvirt.open("test:///default")  # the default test node is shared within the process
    dom = rw.lookupByName("test")
    src = names.LibvirtDomains("test:///default")
    src.ttl = 0.2
    try:
        assert src.domains({dom.UUIDString(): ()})[dom.UUIDString()].state == "running"
        dom.suspend()
        assert src.domains({dom.UUIDString(): ()})[dom.UUIDString()].state == "running"  # cached
        time.sleep(0.25)
        assert src.domains({dom.UUIDString(): ()})[dom.UUIDString()].state == "paused"
    finally:
        dom.resume()
        src.close()
        rw.close()


def test_a_domain_gone_since_the_listing_costs_only_its_interfaces() -> None:
    libvirt = pytest.importorskip("libvirt")
    rw = libvirt.open("test:///default")
    xml = NODE_XML.split("<node>")[1].split("</domain>")[0] + "</domain>"
    dom = rw.createXML(xml.replace(WEB, "11111111-2222-4333-8444-5555555555ff").replace("web-01", "brief"), 0)
    src = names.LibvirtDomains("test:///default")
    try:
        uuid = dom.UUIDString()
        assert uuid in src.domains({uuid: ()})  # listed (no MAC asked: no XML read)
        dom.destroy()  # transient: gone
        got = src.domains({uuid: {"52:54:00:aa:00:01"}})  # within the ttl: still listed
        assert got[uuid].interfaces == () and src._conn is not None
    finally:
        src.close()
        rw.close()


def test_a_broken_connection_is_reopened(node_uri: str) -> None:
    src = names.LibvirtDomains(node_uri)
    src.ttl = 0.0
    try:
        assert WEB in src.domains({WEB: ()})
        src._conn.close()  # the daemon went away under an open connection
        assert src.domains({WEB: ()}) == {}  # this refresh: nothing, and no exception
        assert WEB in src.domains({WEB: ()})  # the next one reconnects
    finally:
        src.close()


def test_unreachable_uri_gives_nothing_fast() -> None:
    pytest.importorskip("libvirt")
    src = names.LibvirtDomains("qemu+unix:///system?socket=/nonexistent")
    started = time.monotonic()
    assert src.domains({WEB: ()}) == {}
    assert names.resolve_vms([src, names.StaticNames({WEB: "lab-web"})], {WEB: ()})[WEB].source == "lab"
    assert time.monotonic() - started < 0.5


_IMPORTED = """
import sys
from appliance.switch import names
src = names.LibvirtDomains(sys.argv[1])
src.domains({"11111111-2222-4333-8444-555555555501": ()})
print("libvirt" in sys.modules)
"""


def _imports_libvirt(uri: str) -> bool:
    """Whether asking ``uri`` for domains imports the binding (in a fresh process: this one may have it)."""
    res = subprocess.run([sys.executable, "-c", _IMPORTED, uri], capture_output=True, text=True, cwd=ROOT,
                         timeout=60, check=True)  # fmt: skip
    return res.stdout.strip() == "True"


def test_the_binding_is_imported_only_where_a_daemon_can_answer(tmp_path: Path) -> None:
    """No socket: the same answer as a stopped daemon (no names), without paying for ``import libvirt``."""
    pytest.importorskip("libvirt")
    assert not _imports_libvirt(f"qemu+unix:///system?socket={tmp_path}/libvirt-sock")
    assert not _imports_libvirt("qemu+tcp://127.0.0.1:1/system")  # a remote host that refuses
    assert _imports_libvirt("test:///default")  # in-process: always worth asking


def test_remote_and_default_uris_keep_their_source() -> None:
    """The source is kept even where its daemon is not there yet: a console left open sees it start."""
    pytest.importorskip("libvirt")
    for uri in ("qemu+ssh://hv1.example.invalid/system", "qemu:///system"):
        assert [s.name for s in names.default_sources(None, {"HVNET_LIBVIRT_URI": uri})] == ["libvirt"]


def test_one_source_per_uri() -> None:
    assert names.libvirt_source("test:///a") is names.libvirt_source("test:///a")
    assert names.libvirt_source("test:///a") is not names.libvirt_source("test:///b")


# -- what the front ends show ----------------------------------------------------------


def test_front_ends_show_the_state_only_when_libvirt_said_it() -> None:
    from appliance.cli.status import _vm_text
    from tui.widgets.vif_table import vm_cell

    v = replace(vif("vnet0", UUID, None), vm_name="web-01")
    assert (_vm_text(v), vm_cell(v)) == ("web-01", "web-01")
    assert (_vm_text(replace(v, vm_state="running")), vm_cell(replace(v, vm_state="running"))) == (
        "web-01 (running)",
        "web-01",
    )
    assert (_vm_text(replace(v, vm_state="paused")), vm_cell(replace(v, vm_state="paused"))) == (
        "web-01 (paused)",
        "‖ web-01",
    )
