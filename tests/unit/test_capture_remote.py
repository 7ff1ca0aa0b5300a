"""Captures on a host over SSH: what the host's probe printed, parsed, and the final record made from it.

``data/captures/remote-probe.txt`` is real output of the probe script
(:data:`appliance.capture.remote.PROBE`): one capture still running (asked for
its counts with SIGUSR1), one that tcpdump ended at its packet limit.
"""

from __future__ import annotations

from pathlib import Path

from appliance.capture import remote as rc

DATA = Path(__file__).parent / "data" / "captures"
MARK = "hvnet-0123456789abcdef"


def probes() -> dict[str, rc.Probe]:
    return rc.parse_probe((DATA / "remote-probe.txt").read_text(), MARK)


def test_a_running_capture_reports_tcpdumps_fresh_counts() -> None:
    run = probes()["run1"]
    assert run.record is not None and run.record.state == "running" and run.record.spec.port == "lo"
    assert run.tcpdump_alive and run.wrapper_alive and not run.ended
    counts = run.live_counts()
    assert counts is not None and (counts.captured, counts.dropped) == (10, 0)
    assert run.files == [("run1.pcap", 1164)] and run.bytes == 1164


def test_counts_that_did_not_arrive_are_not_shown() -> None:
    run = probes()["run1"]
    run.fresh = False  # the SIGUSR1 answer did not come within the probe's second: an older count is not shown
    assert run.live_counts() is None


def test_an_ended_capture_gets_its_final_record_from_what_the_host_recorded() -> None:
    cnt = probes()["cnt1"]
    assert cnt.ended and cnt.status == 0 and cnt.ended_at == 1795488255.0 and cnt.ended_by is None
    assert not cnt.tcpdump_alive and cnt.counters_after is not None and cnt.counters_after.rx_packets == 9180996
    rec = cnt.record
    assert rec is not None
    from appliance.capture.supervise import counters_of

    final = rc.finished(rec, cnt, counters_of(rec.counters_before), now=2e9)
    assert (final.state, final.reason) == ("finished", "tcpdump stopped at its limit of 4 packets")
    assert final.stopped == 1795488255.0  # when the host recorded the end, not when hvnet looked
    assert final.tcpdump == {"captured": 4, "received": 8, "dropped_by_kernel": 0, "dropped_by_interface": 0}
    assert final.files == ["cnt1.pcap"] and final.counters_after["rx_packets"] == 9180996
    assert final.completeness["ratio"] is None and final.completeness["offered"] == 16  # a filter: unknown


def test_outcomes_in_the_local_supervisors_words() -> None:
    rec = probes()["cnt1"].record
    assert rec is not None
    for ended_by, status, want in (
        ("stop", 0, ("stopped", "stopped by 'hvnet capture stop'")),
        (None, 137, ("dead", "tcpdump was killed by signal 9, not by hvnet")),
        (None, 1, ("dead", "tcpdump exited with status 1: tcpdump: vifX: No such device exists")),
    ):
        probe = rc.Probe("cnt1", ended_by=ended_by, status=status, log="tcpdump: vifX: No such device exists\n")
        assert rc.outcome(rec, probe) == want


def test_hostile_output_is_data() -> None:
    text = f"{MARK} x record\nnot json\n{MARK} x procs alive\n{MARK} x status 12\nbanana\n{MARK} x files\n12 \nq /a/b\n"
    x = rc.parse_probe(text, MARK)["x"]
    assert x.record is None and x.error and x.status == -1 and x.files == []
    assert rc.parse_probe("garbage\nwithout markers\n", MARK) == {}
