"""The bottleneck verdict on real recorded steps (captured in the lab, see data/netperf/README.md):
an open switch, a policed TCP stream, the seed-2010 study's UDP stream into a 10 Mbit/s policer."""

from __future__ import annotations

import copy
import dataclasses
import re
from pathlib import Path

import pytest

from appliance.netperf.figures import verdict
from appliance.netperf.report import text as report
from appliance.netperf.store import results
from appliance.netperf.store.records import RepetitionResult, StepResult, SuiteResult

DATA = Path(__file__).resolve().parents[1] / "data" / "netperf" / "verdict"
OPEN = DATA / "open-rr-stream-crr.json"  # no limit: TCP_RR, TCP_STREAM 5 s and TCP_CRR 12 s, one instance
SEED = DATA / "seed-2010-policed.json"  # 10240 kbit/s meters: UDP_STREAM -m 10000 x 10 and x 40, TCP_STREAM x 1


def _run(path: Path) -> SuiteResult:
    return results.load(path)


def _step(doc: SuiteResult, key: str) -> StepResult:
    return next(s for s in doc.steps if s.key == key)


def _verdict(doc: SuiteResult, step: StepResult) -> verdict.Verdict:
    found = verdict.of_step(step, facts=doc.meta.preflight["facts"], client_vif=doc.meta.client.vif)
    assert found is not None
    return found


def test_tcp_rr_without_a_limit_is_the_switch() -> None:
    doc = _run(OPEN)
    v = _verdict(doc, _step(doc, "tcp-rr/default/m-/c1"))
    assert v.verdict == "switch"
    assert v.evidence[0] == "ovs-vswitchd's main thread at 94% of a core"  # the userspace datapath's thread
    assert v.lost is None


def test_tcp_crr_beyond_the_ports_ceiling_is_not_put_down_to_ports() -> None:
    # 64,640 connections in 12 s from 28,232 ports: ports came back early; the switch's thread was at 89%
    doc = _run(OPEN)
    v = _verdict(doc, _step(doc, "tcp-crr/default/m-/c1"))
    assert v.verdict == "switch"
    assert any("not capped by them" in e for e in v.evidence)


def test_tcp_crr_at_the_ports_ceiling_is_ports() -> None:
    doc = _run(OPEN)
    step = copy.deepcopy(_step(doc, "tcp-crr/default/m-/c1"))
    step.repetitions[0].aggregate.transactions = 27_000  # of a ceiling of 28,232 in 12 s
    v = _verdict(doc, step)
    assert v.verdict == "ports"
    assert "27,000 connections in 12 s against 28,232 ephemeral ports" in v.evidence[0]


def test_policed_tcp_stream_is_the_policer() -> None:
    doc = _run(SEED)
    v = _verdict(doc, _step(doc, "tcp-stream/default/m10000/c1"))
    assert v.verdict == "policer"
    assert v.evidence == [
        "the meter on vif1.0 dropped 2,291 packets",
        "received 4.84 Mbit/s of the 10.24 Mbit/s configured (0.47)",
        "its 1,024 kbit burst lets 0.10 Mbit/s more through over a 10 s test: 0.47 of rate plus burst",
    ]


@pytest.mark.parametrize(("key", "delivered", "received"), [("c10", "10.42", "0.76"), ("c40", "13.98", "0.00")])
def test_seed_2010_udp_into_the_policer_is_a_starved_receiver(key: str, delivered: str, received: str) -> None:
    # The case: ~13 Gbit/s sent into a 10 Mbit/s meter, both cores at 100%, netserver at 0%:
    # the switch delivered about the policed rate towards VM2, and netserver received almost none of it.
    doc = _run(SEED)
    v = _verdict(doc, _step(doc, f"udp-stream/default/m10000/{key}"))
    assert v.verdict == "receiver-cpu"
    assert v.evidence[0] == "netserver at 0% of a core while the host's cores were at 100/100%"
    assert v.evidence[1] == (
        f"the switch delivered {delivered} Mbit/s towards the server, netserver received {received} Mbit/s"
    )
    assert any(e.startswith("the meter on vif1.0 dropped") for e in v.evidence)  # the policer's part is said too


def _lose(rep: RepetitionResult, n: int, reason: str) -> None:
    """The runner's record of ``n`` instances it stopped: no result, the reason kept."""
    agg = rep.aggregate
    agg.lost, agg.ok = n, agg.instances - n
    agg.lost_reasons = {reason: n}


def test_lost_instances_share_the_steps_verdict() -> None:
    doc = _run(SEED)
    step = copy.deepcopy(_step(doc, "udp-stream/default/m10000/c10"))
    _lose(step.repetitions[0], 2, "no result after 25 s: stopped")
    v = _verdict(doc, step)
    assert v.lost == {
        "instances": 2,
        "verdict": "receiver-cpu",
        "evidence": ["2 of 10 lost (2 x no result after 25 s: stopped) while the step was limited by receiver-cpu"],
    }


def test_lost_to_an_unanswering_netserver_on_an_idle_host_is_unknown() -> None:
    doc = _run(OPEN)
    step = copy.deepcopy(_step(doc, "tcp-rr/default/m-/c1"))
    _lose(step.repetitions[0], 1, "establish control: no netserver answered at 192.168.0.151 port 12865")
    v = _verdict(doc, step)
    assert v.verdict == "switch"
    assert v.lost is not None and v.lost["verdict"] == "unknown"


def test_an_idle_step_is_unknown_and_says_what_was_checked() -> None:
    doc = _run(OPEN)
    step = copy.deepcopy(_step(doc, "tcp-rr/default/m-/c1"))
    rep = step.repetitions[0]
    rep.cpu = {**rep.cpu, "vswitchd_threads_pct": {"ovs": 40.0, "handler": 0.0}, "per_core_pct": [30.0, 20.0]}
    v = _verdict(doc, step)
    assert v.verdict == "unknown"
    assert v.evidence[0].startswith("no process at its cores (ovs-vswitchd's busiest thread (main) 40%")


def test_policing_not_enforced_is_never_the_policer() -> None:
    doc = _run(SEED)
    step = copy.deepcopy(_step(doc, "tcp-stream/default/m10000/c1"))
    assert step.policing is not None
    step.policing.verified = False
    v = _verdict(doc, step)
    assert v.verdict != "policer"
    assert "configured but NOT enforced" in " ".join(v.evidence)


def test_repetitions_that_disagree_are_said() -> None:
    doc = _run(OPEN)
    step = copy.deepcopy(_step(doc, "tcp-rr/default/m-/c1"))
    idle = copy.deepcopy(step.repetitions[0])
    idle.repetition = 2
    idle.cpu = {**idle.cpu, "vswitchd_threads_pct": {"ovs": 40.0}}
    step.repetitions = [step.repetitions[0], idle, dataclasses.replace(step.repetitions[0], repetition=3)]
    v = _verdict(doc, step)
    assert v.verdict == "switch"
    assert v.evidence[-1] == "repetitions disagree: rep 1 switch, rep 2 unknown, rep 3 switch"


def test_the_verdict_round_trips_through_results_json(tmp_path: Path) -> None:
    doc = _run(SEED)
    step = _step(doc, "udp-stream/default/m10000/c10")
    step.verdict = _verdict(doc, step).to_json()
    step.absent = step.absent - {"verdict"}  # as the runner's own record: the key is written
    results.write(tmp_path, doc)
    again = _step(results.load(tmp_path), "udp-stream/default/m10000/c10")
    assert again.verdict == step.verdict
    assert verdict.Verdict.from_json({"verdict": "nonsense"}) is None  # a hand-edited file: recomputed instead


def test_report_shows_the_verdict_and_hvnets_own_cpu() -> None:
    doc = _run(SEED)
    text = report.text(doc)
    # the label column is as wide as the longest label (the per-thread rows' too): spacing is not the point
    assert re.search(r"bottleneck \(see below\) +receiver-cpu +receiver-cpu", text), text
    assert re.search(r"hvnet's own CPU \(% of a core\) +0\.5 +0\.8", text), text
    assert "  bottleneck at 10: receiver-cpu: netserver at 0% of a core" in text
    assert "  bottleneck at 1: policer: the meter on vif1.0 dropped 2,291 packets" in text
    assert all(s.verdict is None for s in doc.steps)  # a run from before verdicts: computed, the doc untouched


VMHOST = DATA / "seed-2010-tc-vmhost.json"  # seed-2010 at c10, 10 s, on the lab's kernel-datapath VM host: tc police
VMHOST_LATE = DATA / "seed-2010-tc-vmhost-late.json"  # the same, another run: udp-stream's senders ran 17.6 s


def test_tc_policing_on_the_kernel_datapath_is_the_policer_by_tcs_own_drop_count() -> None:
    doc = _run(VMHOST)
    step = _step(doc, "tcp-stream/default/m10000/c10")
    assert step.policing is not None and step.policing.mechanism == "tc"
    v = _verdict(doc, step)
    assert v.verdict == "policer"
    assert v.evidence == [
        "the tc police action on vif1.0 dropped 2,475 packets",
        "received 10.20 Mbit/s of the 10.24 Mbit/s configured (1.00)",
        "its 1,024 kbit burst lets 0.10 Mbit/s more through over a 10 s test: 0.99 of rate plus burst",
    ]
    assert v.verdict == verdict.Verdict.from_json(step.verdict).verdict  # as the run itself recorded it


def test_the_burst_of_a_short_test_is_counted_not_hidden() -> None:
    """3 s at 10240 kbit/s with the 8192 kbit default burst: 1.2 of the rate passes, 0.95 of rate plus burst."""
    doc = _run(VMHOST)
    step = copy.deepcopy(_step(doc, "tcp-stream/default/m10000/c10"))
    assert step.policing is not None
    step.duration, step.policing.burst_bits = 3, 8192000
    step.repetitions[0].aggregate.sum = 12.29
    v = _verdict(doc, step)
    assert v.verdict == "policer"
    assert v.evidence[1:] == [
        "received 12.29 Mbit/s of the 10.24 Mbit/s configured (1.20)",
        "its 8,192 kbit burst lets 2.73 Mbit/s more through over a 3 s test: 0.95 of rate plus burst",
    ]


def test_without_a_drop_count_only_rate_plus_burst_is_the_policer() -> None:
    doc = _run(VMHOST)
    step = copy.deepcopy(_step(doc, "tcp-stream/default/m10000/c10"))
    assert step.policing is not None
    step.duration, step.policing.burst_bits = 3, 8192000
    step.repetitions[0].meter_drops = None
    step.repetitions[0].aggregate.sum = 12.29  # within rate + burst over 3 s
    v = _verdict(doc, step)
    assert (v.verdict, v.evidence[-1]) == ("policer", "(drops of tc policing are not counted here)")
    step.repetitions[0].aggregate.sum = 40.0  # far beyond what the policer could let through
    assert _verdict(doc, step).verdict != "policer"


def test_udp_datagrams_in_fragments_through_a_policer_lose_whole_datagrams() -> None:
    """The study's -m 10000: the switch delivered about the rate in fragments, netserver got almost nothing;
    with no CPU measured on the VM host, the policer's fragments explain it."""
    doc = _run(VMHOST)
    step = _step(doc, "udp-stream/default/m10000/c10")
    v = _verdict(doc, step)
    assert v.verdict == "policer"
    assert v.evidence == [
        "the tc police action on vif1.0 dropped 737,785 packets",
        "10,000-byte datagrams leave as 7 IP fragments: the switch delivered 10.14 Mbit/s of them towards the "
        "server over the 10.8 s its counters span (the rate is 10.24), netserver received 0.17 Mbit/s of whole "
        "datagrams -- one fragment dropped loses its datagram",
    ]


def test_fragments_are_set_against_the_time_the_senders_really_sent() -> None:
    """Another run of the same step: TCG held the 10 s senders for 17.6 s, and the switch's counters span all
    of it. Over the test's 10 s the switch would seem to have delivered 17.9 Mbit/s, beyond any policer."""
    doc = _run(VMHOST_LATE)
    step = _step(doc, "udp-stream/default/m10000/c10")
    assert step.repetitions[0].wall_s == 17.626
    v = _verdict(doc, step)
    assert v.verdict == "policer"
    assert (
        "the switch delivered 10.18 Mbit/s of them towards the server over the 17.6 s its counters span"
        in (v.evidence[1])
    )


def test_datagrams_that_fit_a_frame_are_not_put_down_to_fragments() -> None:
    doc = _run(VMHOST)
    step = copy.deepcopy(_step(doc, "udp-stream/default/m10000/c10"))
    step.message_size = 1400
    assert _verdict(doc, step).verdict == "unknown"


def test_request_response_steps_through_an_idle_policer_are_not_the_policer() -> None:
    doc = _run(VMHOST)
    v = _verdict(doc, _step(doc, "tcp-crr/default/m-/c10"))
    assert v.verdict == "unknown" and v.evidence[0] == "the tc police action on vif1.0 dropped 0 packets"
