"""The Isolation screen's pure rules: cell states, markers that survive NO_COLOR, evidence text."""

from __future__ import annotations

from appliance.isolation import model
from appliance.isolation.check import CheckResult, Evidence, MethodResult
from tui.backend import isolation as iso

GUESTS = ["VM1", "VM2", "VM3"]


def result(**methods: MethodResult) -> CheckResult:
    expected = model.Expected(
        guests=GUESTS,
        cells={
            ("VM2", "VM1"): model.YES,
            ("VM1", "VM2"): model.YES,
            ("VM3", "VM1"): model.EXCEPTION,
            ("VM1", "VM3"): model.NO,
            ("VM2", "VM3"): model.NO,
            ("VM3", "VM2"): model.NO,
        },
        exceptions={("VM3", "VM1"): ["span-vm1"]},
    )
    return CheckResult("t", GUESTS, expected, dict(methods), out_dir=None)


def test_every_kind_has_a_distinct_marker_and_word() -> None:
    markers = {s.marker for s in iso.STYLES.values()}
    words = {s.word for s in iso.STYLES.values()}
    assert len(markers) == len(words) == len(iso.STYLES) == 5
    assert iso.cell_text(model.YES, "ok") == "+ yes"
    assert iso.cell_text(model.EXCEPTION, "ok") == "+ yes*"
    assert iso.cell_text(model.NO, "ok") == "- no"
    assert iso.cell_text(model.NO, "leak") == "! LEAK"
    assert iso.cell_text(model.YES, "blocked") == "x BLOCK"
    assert iso.cell_text(model.YES, "unknown") == "? unkn"
    assert all(text for text, _ in iso.legend())


def test_methods_for_choice() -> None:
    assert iso.methods_for("both") == ("traffic", "trace")
    assert iso.methods_for("trace") == ("trace",)


def test_evidence_for_a_frame_a_no_an_unknown_and_a_leak() -> None:
    traffic = MethodResult(
        "traffic",
        cells={
            ("VM2", "VM1"): model.YES,
            ("VM1", "VM2"): model.YES,
            ("VM3", "VM1"): model.YES,
            ("VM1", "VM3"): model.YES,
            ("VM2", "VM3"): model.NO,
            ("VM3", "VM2"): model.UNKNOWN,
        },
        reasons={("VM3", "VM2"): "VM3's capture heard no positive control, so a 'No' is not proven"},
        evidence={
            ("VM2", "VM1"): Evidence(0.0, "02:00:00:00:00:01", "192.168.0.150", 1, "/tmp/x/VM2.pcap"),
            ("VM1", "VM3"): Evidence(0.0, "02:00:00:00:00:03", "192.168.0.152", None, "/tmp/x/VM1.pcap"),
        },
        stats={"pcaps": {"VM2": "/tmp/x/VM2.pcap"}},
    )
    r = result(traffic=traffic)
    yes = iso.evidence(r, "traffic", ("VM2", "VM1"))
    assert "observed yes, expected yes: as expected" in yes
    assert "02:00:00:00:00:01 192.168.0.150 VLAN 1" in yes and "pcap /tmp/x/VM2.pcap" in yes
    leak = iso.evidence(r, "traffic", ("VM1", "VM3"))
    assert "LEAK" in leak and "untagged" in leak
    assert iso.cell_kind(model.NO, r.verdicts("traffic")[("VM1", "VM3")]) == "leak"
    no = iso.evidence(r, "traffic", ("VM2", "VM3"))
    assert "positive control" in no and "/tmp/x/VM2.pcap" in no
    unknown = iso.evidence(r, "traffic", ("VM3", "VM2"))
    assert "unknown: VM3's capture heard no positive control" in unknown
    mirrored = iso.evidence(r, "traffic", ("VM3", "VM1"))
    assert "mirror span-vm1" in mirrored


def test_a_method_that_could_not_run_is_unknown_everywhere() -> None:
    r = result(trace=MethodResult("trace", error="ovs-appctl failed"))
    assert set(r.verdicts("trace").values()) == {"unknown"}
    text = iso.evidence(r, "trace", ("VM2", "VM1"))
    assert "observed unknown" in text and "could not run: ovs-appctl failed" in text


def test_trace_evidence_is_the_datapath_actions() -> None:
    trace = MethodResult("trace", cells={("VM2", "VM1"): model.YES}, stats={"datapath_actions": {"VM1": "2,3"}})
    assert "datapath actions 2,3" in iso.evidence(result(trace=trace), "trace", ("VM2", "VM1"))
