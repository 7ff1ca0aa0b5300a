"""The audit's planning, frames and verdicts (pure), the frames checked against tcpdump's own decoding."""

from __future__ import annotations

import shutil
import struct
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from appliance.core import yamldoc
from appliance.core.errors import EXIT_USAGE, ConfigError, UsageError
from appliance.isolation import model
from appliance.isolation import ofproto as trace
from appliance.isolation.audit import inject
from appliance.isolation.audit import plan as audit
from appliance.isolation.audit import trace as audittrace
from appliance.isolation.audit import traffic as audittraffic
from appliance.isolation.pcap import ArpFrame, TcpdumpCounts, parse_frame, read_arp
from appliance.switch.counters import Counters
from appliance.switch.inventory import HostInfo, Inventory, MirrorInfo, Vif


def vif(port: str, *, tag: int | None = None, mode: str | None = None, trunks: tuple[int, ...] = (),
        vm: str | None = None, mac: str | None = None, ofport: int = 1, kind: str = "system",
        bridge: str = "br0") -> Vif:  # fmt: skip
    n = int("".join(c for c in port if c.isdigit()) or 0)
    return Vif(
        bridge=bridge, port=port, interface=port, type=kind, is_vif=True, ofport=ofport,
        mac=mac or f"02:00:00:00:00:{n:02x}", mac_in_use=None, hypervisor="xenserver", vm_uuid=None, vm_name=vm,
        vm_name_source=None, ids={}, xen_domid=None, xen_devid=None, alias_ports=[], vlan_mode=mode or "access",
        vlan_mode_configured=mode, tag=tag, trunks=list(trunks), trunks_all_vlans=not trunks and mode != "access",
        ingress_policing_rate_kbps=0, ingress_policing_burst_kbit=0, egress_qos_type=None,
        egress_max_rate_kbps=None, mirrors=[], link_state="up", admin_state="up", mtu=1500, error=None,
        counters=Counters(),
    )  # fmt: skip


def inv(vifs: list[Vif], mirrors: list[MirrorInfo] | None = None) -> Inventory:
    host = HostInfo("h", None, "3.1.0", None, None, None, [], [], "unix:x", False)
    return Inventory(host=host, bridges=[], vifs=vifs, mirrors=mirrors or [], read_at=0.0)


# The lab's trunk-and-native topology as its ports are configured.
TN = [
    vif("vif1.0", tag=10, vm="a10", ofport=1),
    vif("vif2.0", tag=10, vm="b10", ofport=2),
    vif("vif3.0", tag=20, vm="c20", ofport=3),
    vif("vif4.0", tag=30, vm="d30", ofport=4),
    vif("vif5.0", mode="trunk", trunks=(10, 20), vm="trunk", ofport=5),
    vif("vif6.0", mode="native-untagged", tag=10, trunks=(20,), vm="nu10", ofport=6),
    vif("vif7.0", mode="native-tagged", tag=20, trunks=(30,), vm="nt20", ofport=7),
]


# -- frames ----------------------------------------------------------------------------


def _pcap(path: Path, frames: list[bytes]) -> Path:
    out = struct.pack("<IHHiIII", 0xA1B2C3D4, 2, 4, 0, 0, 262144, 1)
    for i, f in enumerate(frames):
        out += struct.pack("<IIII", 1700000000 + i, 0, len(f), len(f)) + f
    path.write_bytes(out)
    return path


def _tcpdump() -> str:
    found = shutil.which("tcpdump") or shutil.which("tcpdump", path="/usr/sbin:/usr/bin")
    if found is None:
        pytest.skip("tcpdump is not installed")
    return found


def test_probe_frames_decode_in_tcpdump_as_one_who_has_from_the_vif(tmp_path: Path) -> None:
    untagged = inject.frame("02:aa:bb:cc:dd:01", 0x1234, inject.KIND_PROBE)
    tagged = inject.frame("02:aa:bb:cc:dd:01", 0x1234, inject.KIND_PROBE, 20, send_tagged=True)
    assert len(untagged) == 60 and len(tagged) == 64
    pcap = _pcap(tmp_path / "p.pcap", [untagged, tagged])
    out = subprocess.run([_tcpdump(), "-r", str(pcap), "-nn", "-e"], capture_output=True, text=True, check=True).stdout
    lines = out.splitlines()
    assert (
        "02:aa:bb:cc:dd:01 > ff:ff:ff:ff:ff:ff" in lines[0]
        and "Request who-has 192.0.2.1 (68:76:12:34:ff:ff) tell 0.0.0.0" in lines[0]
    )
    assert "vlan 20" in lines[1] and "Request who-has 192.0.2.1 (68:76:12:34:00:14) tell 0.0.0.0" in lines[1]
    marks = [inject.mark_of(f) for f in read_arp(pcap)]
    assert marks == [inject.Mark(0x1234, None, 1), inject.Mark(0x1234, 20, 1)]


def test_capture_filter_keeps_only_this_audits_frames(tmp_path: Path) -> None:
    mine = inject.frame("02:aa:bb:cc:dd:01", 7, inject.KIND_PROBE)
    mine_tagged = inject.frame("02:aa:bb:cc:dd:01", 7, inject.KIND_PROBE, 30, send_tagged=True)
    closing = inject.frame(inject.CONTROL_MAC, 7, inject.KIND_CLOSING)
    other_run = inject.frame("02:aa:bb:cc:dd:01", 8, inject.KIND_PROBE)
    tenant = bytes.fromhex("ffffffffffff02aabbccdd010806000108000604000102aabbccdd010a000001000000000000" + "0a000002")
    tenant += bytes(60 - len(tenant))
    pcap = _pcap(tmp_path / "all.pcap", [tenant, mine, other_run, mine_tagged, closing])
    kept = tmp_path / "kept.pcap"
    subprocess.run([_tcpdump(), "-r", str(pcap), "-w", str(kept), inject.capture_filter(7)],
                   capture_output=True, check=True)  # fmt: skip
    marks = [inject.mark_of(f) for f in read_arp(kept)]
    assert marks == [inject.Mark(7, None, 1), inject.Mark(7, 30, 1), inject.Mark(7, None, 255)]


def test_a_tenant_arp_has_no_mark() -> None:
    f = ArpFrame(0.0, None, 1, "02:00:00:00:00:01", "ff:ff:ff:ff:ff:ff", "02:00:00:00:00:01", "0.0.0.0", "192.0.2.1")
    assert inject.mark_of(f) is None  # no target MAC mark: someone else's RFC 5227 probe
    assert inject.mark_of(replace(f, target_mac="68:76:00:07:ff:ff", sender_ip="10.0.0.1")) is None


def test_packet_out_lines() -> None:
    data = inject.frame("02:00:00:00:00:01", 1, inject.KIND_PROBE)
    assert inject.probe_line(5, data) == f"in_port=5,packet={data.hex()},actions=resubmit(,0)"
    assert inject.control_line([3, 4], data).endswith("actions=output:3,output:4")
    assert inject.bundle(["a", "b"]) == "packet-out a\npacket-out b\n"


def test_old_open_vswitch_is_refused_naming_its_version() -> None:
    assert inject.version_problem("ovs-ofctl (Open vSwitch) 3.1.0\nOpenFlow versions 0x1:0x6\n") is None
    why = inject.version_problem("ovs-ofctl (Open vSwitch) 2.5.12\nCompiled ...")
    assert why and "Open vSwitch 2.5" in why and "older than 2.8" in why
    assert "cannot tell" in (inject.version_problem("garbage") or "")


# -- selection and planning -------------------------------------------------------------


def test_selectors_pick_by_port_vm_mac_and_glob() -> None:
    i = inv(TN)
    assert [p.label for p in audit.select(i, audit.parse_selectors(["a10", "vif2.0"]))] == ["a10", "b10"]
    assert [p.port for p in audit.select(i, audit.parse_selectors(["vm:n*"]))] == ["vif6.0", "vif7.0"]
    assert [p.port for p in audit.select(i, audit.parse_selectors([TN[3].mac or "", "port:vif1.*"]))] == [
        "vif1.0",
        "vif4.0",
    ]
    assert len(audit.select(i, [])) == 7


@pytest.mark.parametrize("selectors", [["a10"], ["vm:nobody*", "a10"], []])
def test_an_audit_of_fewer_than_two_vifs_is_refused(selectors: list[str]) -> None:
    vifs = TN if selectors else TN[:1]
    with pytest.raises(UsageError) as exc:
        audit.select(inv(vifs), audit.parse_selectors(selectors))
    assert exc.value.exit_code == EXIT_USAGE


def test_labels_stay_unique() -> None:
    vifs = [vif("vif1.0", vm="web"), vif("vif1.1", vm="web"), vif("vif2.0", vm="vif3.0"), vif("vif3.0")]
    assert [p.label for p in audit.label(vifs)] == ["web/vif1.0", "web/vif1.1", "vif3.0/vif2.0", "vif3.0"]


def test_probes_untagged_for_every_vif_tagged_for_each_trunked_vlan() -> None:
    keys = [p.key for p in audit.probes(audit.label(TN))]
    assert keys == ["a10", "b10", "c20", "d30", "trunk", "trunk@vlan10", "trunk@vlan20", "nu10", "nu10@vlan20",
                    "nt20", "nt20@vlan30"]  # fmt: skip
    # A trunk of every VLAN is probed in each VLAN the audited ports use.
    every = audit.label([vif("vif1.0", tag=10), vif("vif2.0", tag=30), vif("vif3.0", mode="trunk")])
    assert [p.key for p in audit.probes(every)] == ["vif1.0", "vif2.0", "vif3.0", "vif3.0@vlan10", "vif3.0@vlan30"]


def test_untagged_expectations_agree_with_the_checks_model() -> None:
    ports = audit.label(TN)
    plan = audit.probes(ports)
    exp = audit.derive(ports, plan, [])
    pv = {p.label: p.vlan for p in ports}
    ref = model.derive(pv, [], [p.label for p in ports])
    for (listener, sender), value in ref.cells.items():
        assert exp.cells[(listener, sender)] == value, (listener, sender)
    assert exp.cells[("a10", "trunk@vlan10")] == "yes" and exp.cells[("c20", "trunk@vlan10")] == "no"
    assert exp.cells[("trunk", "nu10@vlan20")] == "yes" and exp.cells[("d30", "nt20@vlan30")] == "yes"
    assert ("nt20", "nt20@vlan30") not in exp.cells  # a VIF does not hear itself


def test_dead_vlan_hears_no_one_and_a_mirror_is_an_exception() -> None:
    vifs = [vif("vif1.0", tag=10), vif("vif2.0", tag=10), vif("vif3.0", mode="trunk", trunks=(4095,))]
    mirror = MirrorInfo("m", "br0", False, ["vif1.0"], [], [], "vif3.0", None, None, None, None)
    ports = audit.label(vifs)
    plan = audit.probes(ports)
    exp = audit.derive(ports, plan, audit.mirror_specs(inv(vifs, [mirror]), ports))
    assert exp.cells[("vif3.0", "vif1.0")] == "exception" and exp.exceptions[("vif3.0", "vif1.0")] == ["m"]
    assert exp.cells[("vif3.0", "vif2.0")] == "no"
    assert exp.cells[("vif1.0", "vif3.0@vlan4095")] == "no"


def test_given_matrix_by_vm_or_vif_name_and_its_errors(tmp_path: Path) -> None:
    ports = audit.label(TN[:3])
    plan = audit.probes(ports)
    text = "matrix:\n  a10: {b10: yes, c20: no}\n  vif2.0: {a10: yes, vif3.0: no}\n  c20: {a10: no, b10: no}\n"
    exp = audit.given(yamldoc.parse(text, "e.yaml"), ports, plan)
    assert exp.cells[("b10", "a10")] == "yes" and exp.cells[("c20", "b10")] == "no"
    bad = "matrix:\n  a10: {b10: yes, c20: maybe}\n  nobody: {}\n"
    with pytest.raises(ConfigError) as exc:
        audit.given(yamldoc.parse(bad, "e.yaml"), ports, plan)
    text = str(exc.value)
    assert "e.yaml:2: matrix.a10.c20" in text and "maybe" in text
    assert "e.yaml:3: matrix.nobody" in text and "not a VIF or VM" in text
    assert exc.value.exit_code == EXIT_USAGE


# -- the trace batch's output -------------------------------------------------------------


def test_trace_batch_output_is_split_at_its_markers() -> None:
    m = audittrace.MARKER
    text = f"{m}\nline a\nline b\n{m} rc=0\n{m}\novs-appctl: no such bridge\n{m} rc=2\n"
    assert audittrace.split(text, 2) == [(0, "line a\nline b"), (2, "ovs-appctl: no such bridge")]
    with pytest.raises(ValueError, match="1 of 3"):
        audittrace.split(f"{m}\nx\n{m} rc=0\n", 3)


# -- traffic verdicts -----------------------------------------------------------------------


def _listen(label: str, run: int, frames: list[bytes], counts: TcpdumpCounts | None, tmp: Path) -> audittraffic.Listen:
    lst = audittraffic.Listen(label, label, _pcap(tmp / f"{label}.pcap", frames))
    lst.frames, lst.counts, lst.settled = read_arp(lst.pcap), counts, True
    return lst


def test_traffic_cells_yes_no_and_unknown_with_reasons(tmp_path: Path) -> None:
    ports = audit.label([vif("vif1.0", tag=10), vif("vif2.0", tag=10), vif("vif3.0", tag=20)])
    plan = audit.probes(ports)
    run = 99
    ok = TcpdumpCounts(3, 3, 0, 0)
    ctl = [inject.frame(inject.CONTROL_MAC, run, k) for k in (inject.KIND_CONTROL, inject.KIND_CLOSING)]
    probe1 = inject.frame(ports[0].vif.mac or "", run, inject.KIND_PROBE)
    stale = inject.frame(ports[2].vif.mac or "", run + 1, inject.KIND_PROBE)  # an earlier audit's frame
    listens = {
        "vif1.0": _listen("vif1.0", run, ctl, ok, tmp_path),
        "vif2.0": _listen("vif2.0", run, [ctl[0], probe1, stale, ctl[1]], ok, tmp_path),
        "vif3.0": _listen("vif3.0", run, ctl, TcpdumpCounts(2, 3, 1, 0), tmp_path),
    }
    inj = audittraffic.Injection(run=run, probes_sent=3, controls={"vif1.0", "vif2.0", "vif3.0"},
                                 closing={"vif1.0", "vif2.0", "vif3.0"})  # fmt: skip
    res = audittraffic.cells(ports, plan, inj, listens, {})
    assert res.cells[("vif2.0", "vif1.0")] == "yes" and ("vif2.0", "vif1.0") in res.evidence
    assert res.cells[("vif2.0", "vif3.0")] == "no"  # the stale frame does not count
    assert res.cells[("vif1.0", "vif2.0")] == "no"
    assert res.cells[("vif3.0", "vif1.0")] == "unknown" and "dropped" in res.reasons[("vif3.0", "vif1.0")]
    # A listener without its positive control proves no "No".
    listens["vif1.0"].frames = read_arp(_pcap(tmp_path / "x.pcap", [ctl[1]]))
    res = audittraffic.cells(ports, plan, inj, listens, {"vif2.0": "vif2.0 was replugged during the audit"})
    assert res.cells[("vif1.0", "vif3.0")] == "unknown" and "positive control" in res.reasons[("vif1.0", "vif3.0")]
    assert res.cells[("vif3.0", "vif2.0")] == "unknown" and "replugged" in res.reasons[("vif3.0", "vif2.0")]
    assert res.cells[("vif2.0", "vif1.0")] == "unknown"  # a replugged listener decides nothing


# -- the sender-side control -----------------------------------------------------------------

DATA = Path(__file__).parents[1] / "data"


@pytest.mark.parametrize(
    ("name", "stop"),
    [
        ("normal", None),  # table 0's NORMAL: flooded
        ("tagged", None),  # a trunk's tagged probe, NORMAL
        ("output", None),  # an operator's flow sending it straight out of a port
        # XenServer's VIF locking mode: an arp_spa allow-list, then a drop of every other ARP from the port
        ("locked", "table 0 rule 'arp,in_port=1, priority 199' (drop)"),
        ("no-match", "table 1: no flow matches (drop)"),  # resubmitted to a table with no flow for it
    ],
)
def test_a_probe_trace_shows_whether_it_reaches_forwarding(name: str, stop: str | None) -> None:
    """Real ``ofproto/trace-packet-out BR FLOW resubmit(,0)`` outputs of Open vSwitch 3.1."""
    text = (DATA / f"trace-packet-out-probe-{name}.txt").read_text()
    assert trace.forwarding_stop(text) == stop


def test_the_traced_flow_is_the_injected_frame() -> None:
    """Every field the probe's frame carries is in the flow traced for it (tagged too)."""
    for vlan, tagged in ((None, False), (20, True)):
        data = inject.frame("02:00:00:00:00:04", 0x1234, inject.KIND_PROBE, vlan, send_tagged=tagged)
        f = parse_frame(0.0, data)
        assert f is not None
        flow = trace.probe_flow(
            4, "02:00:00:00:00:04", inject.mark_mac(0x1234, vlan), "192.0.2.1", vlan if tagged else None
        )
        fields = dict(kv.split("=", 1) for kv in flow.split(","))
        assert fields["arp_tha"] == f.target_mac and fields["arp_spa"] == f.sender_ip == "0.0.0.0"
        assert fields["arp_sha"] == fields["dl_src"] == f.sender_mac and fields["arp_tpa"] == f.target_ip
        assert fields.get("dl_vlan") == (str(vlan) if tagged else None) and f.vlan == (vlan if tagged else None)
        assert fields["in_port"] == "4"


def test_a_sender_whose_probe_is_dropped_before_forwarding_has_no_no(tmp_path: Path) -> None:
    """A listener that did not hear a locked sender proves nothing: unknown, naming the sender and the rule."""
    ports = audit.label([vif("vif1.0", tag=10), vif("vif2.0", tag=10), vif("vif3.0", tag=20)])
    plan = audit.probes(ports)
    run = 7
    ok = TcpdumpCounts(3, 3, 0, 0)
    ctl = [inject.frame(inject.CONTROL_MAC, run, k) for k in (inject.KIND_CONTROL, inject.KIND_CLOSING)]
    probe2 = inject.frame(ports[1].vif.mac or "", run, inject.KIND_PROBE)
    listens = {
        "vif1.0": _listen("vif1.0", run, [ctl[0], probe2, ctl[1]], ok, tmp_path),
        "vif2.0": _listen("vif2.0", run, ctl, ok, tmp_path),
        "vif3.0": _listen("vif3.0", run, ctl, ok, tmp_path),
    }
    why = "vif1.0's probe does not reach the switch's forwarding decision: table 0 rule 'arp,in_port=1, priority 199' (drop)"
    everyone = {"vif1.0", "vif2.0", "vif3.0"}
    inj = audittraffic.Injection(run=run, probes_sent=3, controls=everyone, closing=everyone,
                                 unreached={"vif1.0": why, "vif2.0": "vif2.0's probe ..."})  # fmt: skip
    res = audittraffic.cells(ports, plan, inj, listens, {})
    assert res.cells[("vif2.0", "vif1.0")] == res.cells[("vif3.0", "vif1.0")] == "unknown"
    assert res.reasons[("vif3.0", "vif1.0")] == why
    assert res.cells[("vif1.0", "vif2.0")] == "yes"  # heard: a trace's doubt does not undo a capture
    assert res.cells[("vif1.0", "vif3.0")] == res.cells[("vif2.0", "vif3.0")] == "no"  # vif3.0 reached forwarding


def test_a_port_without_a_kernel_device_is_unknown_with_the_reason() -> None:
    p = audit.label([vif("dpdk0", kind="dpdkvhostuserclient")])[0]
    assert p.capture()[0] is None and "no kernel device" in (p.capture()[1] or "")
    assert audit.label([vif("tap1", kind="tap")])[0].capture() == ("in", None)


def test_a_remote_captures_hex_dump_gives_back_its_frames(tmp_path: Path) -> None:
    """What the remote read-back gets: tcpdump's own ``-r -xx`` text of two pcaps, one batch."""
    from appliance.isolation.audit import remote as auditremote

    frames = [inject.frame("02:aa:bb:cc:dd:01", 5, inject.KIND_PROBE),
              inject.frame("02:aa:bb:cc:dd:02", 5, inject.KIND_PROBE, 30, send_tagged=True)]  # fmt: skip
    a, b = _pcap(tmp_path / "a.pcap", frames), _pcap(tmp_path / "b.pcap", [])
    text = subprocess.run(
        ["sh", "-c", auditremote.READ, "sh", _tcpdump(), str(a), str(b), str(tmp_path / "none")],
        capture_output=True,
        text=True,
    ).stdout  # the missing file: tcpdump fails, nothing printed; fmt: skip
    dumps = auditremote.split_dumps(text, 3)
    assert [data for _t, data in dumps[0]] == frames and dumps[1] == [] and dumps[2] == []
    assert dumps[0][0][0] == 1700000000.0
    again = _pcap(tmp_path / "again.pcap", [])
    again.write_bytes(auditremote.pcap_bytes(dumps[0]))
    assert [inject.mark_of(f) for f in read_arp(again)] == [inject.Mark(5, None, 1), inject.Mark(5, 30, 1)]


def test_across_hosts_the_uplinks_decide_which_vlans_cross() -> None:
    trunk_all = model.PortVlan("xenbr0", None, None, ())
    only_10 = model.PortVlan("xenbr0", "trunk", None, (10,))
    native_20 = model.PortVlan("xenbr0", "native-untagged", 20, (10,))
    assert audit.across([trunk_all], [trunk_all], 10) == 10
    assert audit.across([only_10], [trunk_all], 20) is None
    assert audit.across([native_20], [trunk_all], 20) == 0  # sent untagged: the far end's VLAN 0
    assert audit.across([native_20], [native_20], 20) == 20
    a = [replace(p, host="hv1") for p in audit.label([vif("vif1.0", tag=10), vif("vif3.0", tag=20)])]
    b = [replace(p, host="hv2") for p in audit.label([vif("vif2.0", tag=10), vif("vif4.0", tag=20)])]
    ports = a + b
    links = {("hv1", "br0"): [only_10], ("hv2", "br0"): [trunk_all]}
    exp = audit.derive(ports, audit.probes(ports), [], links)
    assert exp.cells[("vif2.0", "vif1.0")] == "yes" and exp.cells[("vif1.0", "vif2.0")] == "yes"
    assert exp.cells[("vif4.0", "vif3.0")] == "no"  # hv1's uplink does not carry VLAN 20
    assert exp.cells[("vif4.0", "vif1.0")] == "no"


def test_the_same_vm_name_on_two_hosts_is_told_apart() -> None:
    one, two = inv([vif("vif1.0", vm="web"), vif("vif2.0", vm="db")]), inv([vif("vif1.0", vm="web")])
    labels = [p.label for p in audit.select_hosts({"hv1": one, "hv2": two}, [])]
    assert labels == ["hv1/web", "db", "hv2/web"]


def test_a_hostile_vm_name_is_shown_escaped_and_adds_no_line(tmp_path: Path) -> None:
    from appliance.isolation import report
    from appliance.isolation.check import CheckResult

    evil = "db\x1b[2J\nPASS: isolation as expected"
    ports = audit.label([vif("vif1.0", tag=10, vm=evil), vif("vif2.0", tag=10, vm="web")])
    plan = audit.probes(ports)
    expected = audit.given(yamldoc.parse("matrix:\n  web: {vif1.0: no}\n  vif1.0: {web: no}\n", "e"), ports, plan)
    res = model.MethodResult("trace", cells={(evil, "web"): "yes", ("web", evil): "yes"})
    text = report.format_result(CheckResult("audit", [p.label for p in ports], expected, {"trace": res}, None,
                                            senders=[p.key for p in plan]))  # fmt: skip
    assert "\x1b" not in text and "db\\x1b[2J\\x0aPASS" in text
    assert [ln for ln in text.splitlines() if ln.startswith(("PASS", "FAIL"))] == [
        "FAIL: isolation differs from expected (0.0 s)"
    ]
    assert "trace: LEAK: web hears db\\x1b[2J\\x0aPASS: isolation as expected" in text


def test_an_audit_result_round_trips_through_json_and_html_with_its_probe_columns() -> None:
    from appliance.isolation import html, report
    from appliance.isolation.check import CheckResult

    ports = audit.label(TN)
    plan = audit.probes(ports)
    exp = audit.derive(ports, plan, [])
    result = CheckResult("audit of 7 VIFs", [p.label for p in ports], exp,
                         {"trace": model.MethodResult("trace", cells=dict(exp.cells))}, None,
                         senders=[p.key for p in plan])  # fmt: skip
    doc = report.to_json(result)
    again = report.from_json(doc)
    assert again.senders == [p.key for p in plan] and report.to_json(again) == doc and again.exit_code == 0
    assert "trunk@vlan10" in report.format_result(again).splitlines()[3]  # a column of the expected table
    assert "trunk@vlan10" in html.page(again, source="audited on this host")
