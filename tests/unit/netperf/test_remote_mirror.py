"""Remote mirroring: a lab bridge's tunnel-endpoint address, a case's collector guest, what arrived there
(``ip -s -j link`` of a lab guest, captured in tests/unit/data/arrival) against what was mirrored, the
tunnels' header sizes, and the report's, CSV's and comparison's arrival figures."""

from __future__ import annotations

import io
import textwrap
from pathlib import Path

import pytest

from appliance.core.errors import ConfigError
from appliance.endpoints import topology
from appliance.netperf.define import suite
from appliance.netperf.figures import aggregate, arrival, compare, pps
from appliance.netperf.parse import iperf, iplink
from appliance.netperf.report import text as report
from appliance.netperf.store import results
from appliance.netperf.store.records import Aggregate, MirrorInfo, RepetitionResult, StepResult, SuiteResult

ROOT = Path(__file__).resolve().parents[3]
DATA = Path(__file__).parents[1] / "data"
TOPOLOGY = ROOT / "netperf-suites" / "topologies" / "remote-mirror.yaml"
GRE = MirrorInfo("r1", "br-rm", "mir0123abcd", ["vif1.0"], ["vif1.0"], tunnel={"type": "gre", "options": {
    "remote_ip": "10.93.0.2"}})  # fmt: skip
ERSPAN = MirrorInfo("r1", "br-rm", "mir0123abcd", ["vif1.0"], ["vif1.0"], tunnel={"type": "erspan", "options": {
    "remote_ip": "10.93.0.2", "erspan_ver": "1", "erspan_idx": "1"}})  # fmt: skip


# -- the lab's tunnel endpoint -------------------------------------------------------------------


def test_the_remote_mirror_lab_has_a_tunnel_endpoint_and_a_collector() -> None:
    t = topology.load(TOPOLOGY)
    assert [(b.name, b.address) for b in t.bridges] == [("br-rm", None), ("br-phy", "10.93.0.1/24")]
    assert t.guest("COL").bridge == "br-phy" and t.guest("VM1").bridge == "br-rm"


@pytest.mark.parametrize(
    ("address", "fragment"),
    [
        ("10.93.0.1", "with prefix length"),
        ("10.93.0.0/24", "network or broadcast address"),
        ("fd00::1/64", "IPv4"),
        ("nope/24", "does not appear to be"),
    ],
)
def test_a_bad_bridge_address_is_refused_with_its_line(tmp_path: Path, address: str, fragment: str) -> None:
    f = tmp_path / "t.yaml"
    f.write_text(f"bridges:\n  - name: br0\n    address: {address}\nguests: []\n")
    with pytest.raises(ConfigError) as exc:
        topology.load(f)
    found = [str(p) for p in exc.value.problems]
    assert any(p.startswith(f"{f}:3: bridges[0].address: ") and fragment in p for p in found), found


def test_a_tunnel_endpoint_belongs_to_the_one_switch_lab(tmp_path: Path) -> None:
    f = tmp_path / "t.yaml"
    f.write_text("hosts: [{name: hv1}]\nbridges: [{name: br0, address: 10.0.0.1/24}]\nguests: []\n")
    with pytest.raises(ConfigError) as exc:
        topology.load(f)
    assert "bridges[0].address: a tunnel endpoint belongs to the one-switch lab" in str(exc.value.problems[0])


# -- the suite's collector guest -----------------------------------------------------------------


def _suite(tmp_path: Path, case: str) -> Path:
    f = tmp_path / "s.yaml"
    f.write_text(f"version: 1\ntopology: {TOPOLOGY}\nendpoints: {{client: VM1, server: VM2}}\n" + textwrap.dedent(case)
                 + "tests: [{type: UDP_PPS, frame_size: 1400, offered_mbps: [50]}]\n")  # fmt: skip
    return f


def test_the_shipped_suites_name_the_collector_of_their_tunnels() -> None:
    for name in ("remote-mirror", "remote-mirror-quick"):
        s = suite.load(ROOT / "netperf-suites" / f"{name}.yaml")
        assert [(c.name, c.collector_guest) for c in s.cases] == [("gre", "COL"), ("erspan", "COL")]
        assert [m.output.kind for c in s.cases for m in (c.policy.mirrors if c.policy else []) if m.output] == [
            "gre", "erspan"]  # fmt: skip


@pytest.mark.parametrize(
    ("case", "fragment"),
    [
        ("cases: [{name: c, collector_guest: NOPE}]\n", "a lab guest receiving the tunnel's packets, not 'NOPE'; "
         "guests: COL, VM1, VM2"),
        ("cases: [{name: c, collector_guest: COL}]\n", "no mirror or TAP with a gre or erspan output"),
        ("cases:\n  - name: c\n    collector_guest: COL\n    policy: {bridges: {br-rm: {mirrors: {m: {select: "
         "{src: [vm:VM1]}, output: {port: vm:VM2}, allow_isolation_exception: true}}}}}\n",
         "no mirror or TAP with a gre or erspan output"),
    ],
)  # fmt: skip
def test_a_bad_collector_guest_is_refused_with_its_line(tmp_path: Path, case: str, fragment: str) -> None:
    f = _suite(tmp_path, case)
    with pytest.raises(ConfigError) as exc:
        suite.load(f)
    found = [str(p) for p in exc.value.problems]
    assert any(p.startswith(f"{f}:") and "cases[0].collector_guest: " in p and fragment in p for p in found), found


# -- what arrived ----------------------------------------------------------------------------------


def test_receive_counters_from_ip_json_of_a_lab_guest() -> None:
    got = iplink.parse_link_stats((DATA / "arrival" / "ip-s-j-link-eth0.json").read_text())
    assert set(got) == {"rx_packets", "rx_bytes", "rx_dropped"}
    assert got["rx_packets"] > 0 and got["rx_bytes"] > 60 * got["rx_packets"]


@pytest.mark.parametrize(
    ("text", "fragment"),
    [("", "not JSON"), ("[]", "no interface eth0"), ('[{"ifname": "eth0"}]', "no receive counters")],
)
def test_unreadable_counters_say_why(text: str, fragment: str) -> None:
    with pytest.raises(ValueError, match=fragment):
        iplink.parse_link_stats(text)


def test_each_tunnel_adds_its_headers() -> None:
    assert arrival.overhead(GRE.tunnel) == 14 + 20 + 4
    assert arrival.overhead({"type": "gre", "options": {"key": "7"}}) == 14 + 20 + 8
    assert arrival.overhead(ERSPAN.tunnel) == 14 + 20 + 8 + 8
    assert arrival.overhead(None) is None


def test_arrived_against_mirrored() -> None:
    agg = Aggregate()
    before = {"rx_packets": 1000, "rx_bytes": 1_000_000, "rx_dropped": 0}
    # 2 s: 10,000 GRE packets of 1400 + 38 bytes arrived of the 15,000 the mirror selected (VM1 sent 14,900
    # and received 100); the tunnel port's own counter says twice that, as OVS's userspace datapath counts it
    after = {"rx_packets": 11_000, "rx_bytes": 1_000_000 + 10_000 * 1438, "rx_dropped": 0}
    counters = {
        "mir0123abcd": {"tx_packets": 30_000, "tx_bytes": 30_000 * 1419},
        "vif1.0": {"rx_packets": 14_900, "rx_bytes": 14_900 * 1396, "tx_packets": 100, "tx_bytes": 100 * 1396},
    }
    rec = arrival.figures(agg, "COL", before, after, [GRE], counters, 2.0)
    assert agg.mirrored_pps == 7500.0 and agg.mirrored_mbps == pytest.approx(15_000 * 1400 * 8 / 2 / 1e6)
    assert agg.arrived == 10_000 and agg.arrived_pps == 5000.0
    assert agg.arrived_mbps == pytest.approx(10_000 * 1442 * 8 / 2 / 1e6)  # as carried, FCS included
    assert agg.arrived_inner_mbps == pytest.approx(10_000 * 1404 * 8 / 2 / 1e6)
    assert agg.arrived_ratio == pytest.approx(10_000 / 15_000, abs=1e-4)
    assert rec == {"guest": "COL", "interface": "eth0", "encapsulation": "gre", "overhead_bytes": 38,
                   "tunnel_ports": ["mir0123abcd"], "rx_packets": 10_000, "rx_bytes": 10_000 * 1438,
                   "rx_dropped": 0, "tunnel_tx_packets": 30_000, "mirrored": 15_000,
                   "mirrored_bytes": 15_000 * 1396}  # fmt: skip


def test_a_reading_missing_is_no_figure() -> None:
    selected = {"vif1.0": {"rx_packets": 5, "rx_bytes": 500, "tx_packets": 0, "tx_bytes": 0}}
    for before, after, counters in (
        (None, {"rx_packets": 1, "rx_bytes": 1}, selected),
        ({"rx_packets": 1, "rx_bytes": 1}, None, selected),
    ):
        agg = Aggregate()
        rec = arrival.figures(agg, "COL", before, after, [GRE], counters, 2.0)
        assert agg.arrived is None and agg.arrived_mbps is None and agg.arrived_ratio is None
        assert "rx_packets" not in rec
    agg = Aggregate()  # the selected port's counters unread: arrived, but nothing mirrored to divide by
    arrival.figures(agg, "COL", {"rx_packets": 0, "rx_bytes": 0}, {"rx_packets": 4, "rx_bytes": 4000}, [GRE], {}, 2.0)
    assert agg.arrived == 4 and agg.arrived_ratio is None and agg.mirrored_pps is None


def test_a_taps_copies_are_counted_at_its_tunnel_port() -> None:
    tap = MirrorInfo("t1", "br-rm", "tap0123abcd", ["vif1.0"], [], kind="tap-flows", tunnel=GRE.tunnel)
    agg = Aggregate()
    counters = {"tap0123abcd": {"tx_packets": 400, "tx_bytes": 400 * 1400}, "vif1.0": {"rx_packets": 9, "rx_bytes": 9}}
    arrival.figures(agg, "COL", {"rx_packets": 0, "rx_bytes": 0}, {"rx_packets": 200, "rx_bytes": 200 * 1438},
                    [tap], counters, 2.0)  # fmt: skip
    assert agg.mirrored_pps == 200.0 and agg.arrived_ratio == 0.5


# -- the report ------------------------------------------------------------------------------------


def _doc() -> SuiteResult:
    doc = SuiteResult(results.SCHEMA, results.SCHEMA_VERSION, "complete", False)
    raw = (DATA / "iperf3" / "loopback-64B-8Mbps.json").read_text()
    for case, copy, arrived in (("gre", GRE, 9_000), ("erspan", ERSPAN, 8_000)):
        step = StepResult(key=f"offered/{case}/f1400/o150Mbps/c1", test="offered", type="UDP_PPS", case=case,
                          concurrency=1, duration=2, metric="packets/s", units="packets/s", frame_size=1400,
                          generator="iperf3 3.12", mirrors=[copy], collector_guest="COL")  # fmt: skip
        agg = pps.repetition([iperf.parse(0, 64, raw, "", 0)], None)
        counters = {
            "mir0123abcd": {"tx_packets": 24_000, "tx_bytes": 24_000 * 1400},
            "vif1.0": {"rx_packets": 12_000, "rx_bytes": 12_000 * 1396, "tx_packets": 0, "tx_bytes": 0},
        }
        pps.add_monitor(agg, counters, ["mir0123abcd"], 2.0)
        over = arrival.overhead(copy.tunnel) or 0
        rec = arrival.figures(
            agg,
            "COL",
            {"rx_packets": 0, "rx_bytes": 0},
            {"rx_packets": arrived, "rx_bytes": arrived * (1396 + over)},
            [copy],
            counters,
            2.0,
        )
        step.repetitions.append(RepetitionResult(repetition=1, aggregate=agg, arrival=rec))  # fmt: skip
        step.summary = aggregate.summary(step.repetitions)
        doc.steps.append(step)
    return doc


def test_the_report_shows_mirrored_and_arrived_side_by_side() -> None:
    doc = _doc()
    text = report.text(doc)
    assert "arrived ÷ mirrored" in text and "0.750" in text and "0.667" in text
    assert "gre: arrived Mbit/s" in text and "erspan: mirrored Mbit/s" in text and "counts each" in text
    assert "COL's eth0 receive counters" in text and "less 38 B of outer headers per packet (computed)" in text
    gre = next(t for t in report.tables(doc) if t.case == "gre")
    cell = gre.rows[0][gre.headers.index("arrived Mbit/s encap./decap.")]
    assert cell == f"{9_000 * 1438 * 8 / 2 / 1e6:.1f}/{9_000 * 1400 * 8 / 2 / 1e6:.1f}"
    buf = io.StringIO()
    results.write_csv(buf, doc)
    lines = buf.getvalue().splitlines()
    header = lines[0].split(",")
    assert lines[1].split(",")[header.index("arrived_ratio")] == "0.75"
    # a run compared with itself: arrived ÷ mirrored is one of the figures compared
    assert any(r.figure == "arrived_ratio" for r in compare.compare(doc, doc).rows)


def test_a_step_without_a_collector_shows_no_arrival_columns() -> None:
    doc = _doc()
    for s in doc.steps:
        s.collector_guest = None
    assert "arrived ÷ mirrored" not in report.text(doc)
