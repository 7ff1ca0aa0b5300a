"""The traffic method's verdicts from real captures: when a missing frame proves a "No", and when not.

``seed-three-vm-VM*.pcap`` are the three captures of one ``hvnet isolation
check seed-three-vm.yaml`` on the 2010 study's lab (VM1, VM2 on VLAN 1, VM3
on VLAN 2), with both controls.  ``tcpdump-stderr-*.txt`` are what tcpdump
4.99.3 (libpcap 1.10.3) printed when stopped with SIGINT: in VM3's namespace
on the lab, and on a flooded loopback with ``-B 32`` (the drops).
"""

from __future__ import annotations

import ipaddress
import time
from pathlib import Path

import pytest

from appliance.core.errors import HvnetError
from appliance.endpoints.guests import GuestEndpoint
from appliance.isolation import check, model, pcap, scenario, traffic
from tests.conftest import ROOT

DATA = Path(__file__).parents[1] / "data"
CLEAN = pcap.parse_tcpdump_counts((DATA / "tcpdump-stderr-lab-VM3.txt").read_text())
DROPPED = pcap.parse_tcpdump_counts((DATA / "tcpdump-stderr-dropped-by-kernel.txt").read_text())


# -- tcpdump's counts ------------------------------------------------------------------


def test_counts_of_a_clean_capture() -> None:
    assert pcap.TcpdumpCounts(captured=0, received=0, dropped_by_kernel=0, dropped_by_interface=0) == CLEAN
    one = pcap.parse_tcpdump_counts((DATA / "tcpdump-stderr-one-packet.txt").read_text())
    assert one == pcap.TcpdumpCounts(captured=1, received=2, dropped_by_kernel=0, dropped_by_interface=0)


def test_counts_of_a_capture_that_dropped() -> None:
    assert DROPPED is not None and DROPPED.dropped == DROPPED.dropped_by_kernel == 3760
    assert (DROPPED.captured, DROPPED.received) == (58120, 120000)
    assert DROPPED.describe_drops() == "3760 packets dropped by kernel"


def test_interface_drops_and_the_one_line_form() -> None:
    """Both as tcpdump.c's info() prints them: verbose (on exit) and after SIGUSR1."""
    on_exit = (
        "3 packets captured\n3 packets received by filter\n0 packets dropped by kernel\n1 packet dropped by interface\n"
    )
    counts = pcap.parse_tcpdump_counts(on_exit)
    assert counts is not None and counts.dropped == 1 and counts.describe_drops() == "1 packet dropped by interface"
    usr1 = "tcpdump: 5 packets captured, 7 packets received by filter, 2 packets dropped by kernel\n"
    assert pcap.parse_tcpdump_counts(usr1) == pcap.TcpdumpCounts(5, 7, 2, 0)


@pytest.mark.parametrize(
    "stderr",
    ["", "tcpdump: listening on eth0, link-type EN10MB (Ethernet), snapshot length 128 bytes\n",
     "pcap_stats: eth0: No such device\n", "3 packets captured\n3 packets received by filter\n"],
)  # fmt: skip
def test_no_counts_is_none_not_zero(stderr: str) -> None:
    assert pcap.parse_tcpdump_counts(stderr) is None


# -- the cells ---------------------------------------------------------------------------


def endpoints() -> list[traffic.Endpoint]:
    topo = scenario.load(ROOT / "vlan-tests" / "seed-three-vm.yaml").topology
    eps = []
    for ofport, g in enumerate(("VM3", "VM2", "VM1"), 1):
        t = topo.guest(g)
        guest = GuestEndpoint(g, "netns", t.ip, t.mac, t.vif, netns=f"hvnet-{g}")
        eps.append(traffic.Endpoint(guest, t.address, "xenbr0", ofport))
    return eps[::-1]


def capture(guest: str, counts: pcap.TcpdumpCounts | None = CLEAN, path: Path | None = None) -> traffic.Capture:
    path = path or DATA / f"seed-three-vm-{guest}.pcap"
    return traffic.Capture(guest, path, pcap.read_arp(path), counts=counts, closing_sent=True, settled=True)


def cells(**changed: traffic.Capture) -> tuple[dict, dict]:
    caps = {g: capture(g) for g in ("VM1", "VM2", "VM3")} | changed
    run = traffic.TrafficRun(caps, {}, 9, 0.17, ["VM1", "VM2", "VM3"], ["VM1", "VM2", "VM3"], 0.1)
    res = check.traffic_cells(run, endpoints())
    return res.cells, res.reasons


def test_the_lab_captures_decide_every_cell() -> None:
    got, reasons = cells()
    assert got == {
        ("VM1", "VM2"): model.YES, ("VM1", "VM3"): model.NO,
        ("VM2", "VM1"): model.YES, ("VM2", "VM3"): model.NO,
        ("VM3", "VM1"): model.NO, ("VM3", "VM2"): model.NO,
    }  # fmt: skip
    assert reasons == {}


def test_a_capture_whose_tcpdump_dropped_packets_proves_no_no() -> None:
    got, reasons = cells(VM3=capture("VM3", DROPPED))
    assert got[("VM3", "VM1")] == got[("VM3", "VM2")] == model.UNKNOWN
    assert reasons[("VM3", "VM1")] == (
        "VM3's tcpdump reported 3760 packets dropped by kernel, so a frame may have been lost"
    )
    assert got[("VM1", "VM3")] == model.NO and got[("VM2", "VM1")] == model.YES  # other captures unaffected


def test_a_capture_without_counts_proves_no_no() -> None:
    got, reasons = cells(VM3=capture("VM3", None))
    assert got[("VM3", "VM1")] == model.UNKNOWN and "printed no packet counts" in reasons[("VM3", "VM1")]


def test_a_capture_stopped_before_the_closing_control_proves_no_no(tmp_path) -> None:
    """VM3's capture without its last record (the closing control): it may have stopped early."""
    data = (DATA / "seed-three-vm-VM3.pcap").read_bytes()
    closing = traffic.arp_request(traffic.CONTROL_MAC, "0.0.0.0", traffic.CLOSING_TARGET)[:42]
    cut = tmp_path / "VM3.pcap"
    cut.write_bytes(data[: data.rindex(closing) - 16])  # 16: the record header before the frame
    assert not capture("VM3", path=cut).closed and capture("VM3").closed
    got, reasons = cells(VM3=capture("VM3", path=cut))
    assert got[("VM3", "VM1")] == model.UNKNOWN and "does not show the closing control" in reasons[("VM3", "VM1")]


def test_a_capture_still_growing_or_never_closed_proves_no_no() -> None:
    growing = capture("VM3")
    growing.settled = False
    assert "still growing" in cells(VM3=growing)[1][("VM3", "VM2")]
    unsent = capture("VM3")
    unsent.closing_sent = False
    assert "no closing control could be put on VM3's port" in cells(VM3=unsent)[1][("VM3", "VM2")]


# -- the unused address ------------------------------------------------------------------


@pytest.mark.timeout(10)
@pytest.mark.parametrize(
    "ips, unused",
    [
        (["2001:db8::1/64", "2001:db8::2/64"], "2001:db8::ffff:ffff:ffff:ffff"),
        (["10.0.0.1/8", "10.255.255.254/8"], "10.255.255.253"),
        (["192.168.0.150/24", "192.168.0.151/24"], "192.168.0.254"),
        (["192.168.0.254/24", "192.168.0.253/24"], "192.168.0.252"),
    ],
)
def test_unused_address_is_found_without_enumerating_the_subnet(ips: list[str], unused: str) -> None:
    started = time.monotonic()
    assert check.unused_address(ips) == unused
    assert time.monotonic() - started < 0.1


def test_at_most_a_few_candidates_are_looked_at() -> None:
    net = ipaddress.ip_network("2001:db8::/64")
    assert len(check._top_hosts(net, check.MAX_UNUSED_CANDIDATES)) == check.MAX_UNUSED_CANDIDATES
    assert check._top_hosts(ipaddress.ip_network("10.0.0.0/30"), 256) == [
        ipaddress.ip_address("10.0.0.2"),
        ipaddress.ip_address("10.0.0.1"),
    ]
    with pytest.raises(HvnetError, match="no unused address left"):
        check.unused_address(["10.0.0.1/30", "10.0.0.2/30"])
