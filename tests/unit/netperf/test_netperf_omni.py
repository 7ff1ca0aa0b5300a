"""netperf omni: the argument list one instance runs, and what real netperf 2.7.0 output parses to
(tests/unit/data/netperf: NAME.out / NAME.err / NAME.rc captured in the lab)."""

from __future__ import annotations

from pathlib import Path

import pytest

from appliance.netperf.define.tests import Confidence
from appliance.netperf.define.tests import Test as NetperfTest
from appliance.netperf.parse import omni
from appliance.netperf.parse.omni import MBPS_UNITS, SELECTORS, TPS_UNITS, Instance

DATA = Path(__file__).resolve().parents[1] / "data" / "netperf"

TCP_STREAM = NetperfTest("ts", "TCP_STREAM", 2, (1,))
UDP_STREAM = NetperfTest("us", "UDP_STREAM", 2, (1,))
TCP_RR = NetperfTest("rr", "TCP_RR", 2, (1,), request_size=64, response_size=1024)
TCP_CRR = NetperfTest("crr", "TCP_CRR", 2, (1,), request_size=1, response_size=1)
UDP_RR = NetperfTest("urr", "UDP_RR", 2, (1,), request_size=1, response_size=1)
TYPES = {t.type: t for t in (TCP_STREAM, UDP_STREAM, TCP_RR, TCP_CRR, UDP_RR)}


def captured(name: str) -> tuple[str, str, int]:
    return (
        (DATA / f"{name}.out").read_text(),
        (DATA / f"{name}.err").read_text(),
        int((DATA / f"{name}.rc").read_text()),
    )


def parse(name: str, test: NetperfTest, **kw) -> Instance:
    out, err, rc = captured(name)
    return omni.parse(0, test, out, err, rc, **kw)


def split(argv: list[str]) -> tuple[list[str], list[str]]:
    """netperf's global options, and the test-specific ones after ``--``."""
    i = argv.index("--")
    return argv[:i], argv[i + 1 :]


# -- argv --------------------------------------------------------------------------


def test_argv_common_part() -> None:
    argv = omni.argv("/usr/bin/netperf", TCP_STREAM, "192.168.0.151", 12865, message_size=None, seconds=30)
    glob, test = split(argv)
    assert glob == ["/usr/bin/netperf", "-H", "192.168.0.151", "-p", "12865", "-t", "TCP_STREAM", "-l", "30", "-P", "0"]
    assert test == ["-k", ",".join(SELECTORS)]  # netperf's default message size: no -m


def test_argv_stream_gets_message_size() -> None:
    glob, test = split(omni.argv("netperf", TCP_STREAM, "10.0.0.2", 12865, message_size=10000, seconds=2))
    assert test[test.index("-m") + 1] == "10000"
    assert "-j" not in glob and "-r" not in test and "-R" not in test


def test_argv_udp_stream_allows_routing() -> None:
    glob, test = split(omni.argv("netperf", UDP_STREAM, "10.0.0.2", 12865, message_size=1400, seconds=2))
    assert test[-4:] == ["-m", "1400", "-R", "1"]
    assert "-j" not in glob


@pytest.mark.parametrize("test", [TCP_RR, TCP_CRR, UDP_RR], ids=lambda t: t.type)
def test_argv_rr_gets_latency_stats_and_sizes(test: NetperfTest) -> None:
    glob, specific = split(omni.argv("netperf", test, "10.0.0.2", 12865, message_size=999, seconds=2))
    assert "-j" in glob and glob[glob.index("-t") + 1] == test.type
    assert specific[specific.index("-r") + 1] == f"{test.request_size},{test.response_size}"
    assert "-m" not in specific and "-R" not in specific  # a message size means nothing to an RR test


def test_argv_confidence_is_a_global_option_and_left_out_of_warmups() -> None:
    rr = NetperfTest("rr", "TCP_RR", 5, (1,), request_size=1, response_size=1, confidence=Confidence(99, 5.0, 3, 10))
    glob, specific = split(omni.argv("netperf", rr, "10.0.0.2", 12865, message_size=None, seconds=5))
    assert glob[-4:] == ["-I", "99,5", "-i", "10,3"]
    assert "-I" not in specific
    warm = omni.argv("netperf", rr, "10.0.0.2", 12865, message_size=None, seconds=1, confidence=False)
    assert "-I" not in warm and "-i" not in warm
    rr95 = NetperfTest("rr", "TCP_RR", 5, (1,), request_size=1, response_size=1, confidence=Confidence(95, 2.5, 4, 6))
    glob, _ = split(omni.argv("netperf", rr95, "10.0.0.2", 12865, message_size=None, seconds=5))
    assert glob[-4:] == ["-I", "95,2.5", "-i", "6,4"]


def test_argv_is_a_list_of_strings_no_shell() -> None:
    hostile = "10.0.0.2; touch /tmp/pwned"
    argv = omni.argv("netperf", TCP_STREAM, hostile, 12865, message_size=100, seconds=2)
    assert isinstance(argv, list) and all(isinstance(a, str) for a in argv)
    assert argv[argv.index("-H") + 1] == hostile  # one argument, never split or interpreted


def test_reachability_argv_is_one_transaction() -> None:
    argv = omni.reachability_argv("netperf", "10.0.0.2", 12866)
    assert argv[argv.index("-t") + 1] == "TCP_RR" and argv[argv.index("-l") + 1] == "-1"
    assert argv[argv.index("-p") + 1] == "12866"


def test_netperf_2_7_printed_every_selector_hvnet_asks_for() -> None:
    fields = omni.parse_fields(captured("tcp_rr")[0])
    assert set(SELECTORS) <= set(fields)


# -- parse: results ------------------------------------------------------------------


def test_parse_tcp_stream() -> None:
    i = parse("tcp_stream", TCP_STREAM)
    assert i.ok and i.lost is None and i.returncode == 0
    assert i.throughput == 1670.67 and i.units == MBPS_UNITS
    assert i.elapsed_s == 2.01
    assert (i.sent_mbps, i.received_mbps) == (1670.61, 1670.67)
    assert (i.bytes_sent, i.bytes_received) == (419119104, 419133736)
    assert i.retransmissions == 52333
    assert i.loss_pct is None  # TCP: nothing is lost
    assert i.latency_us is None and i.confidence is None  # -j figures of a stream test are not kept


def test_parse_udp_stream_throughput_is_the_received_side() -> None:
    i = parse("udp_stream", UDP_STREAM)
    assert i.ok
    assert i.throughput == 0.52 == i.received_mbps
    assert i.sent_mbps == pytest.approx(16191.92)
    assert i.loss_pct == pytest.approx(100 * (1 - 131014 / 4048201586))
    assert 99.99 < i.loss_pct < 100
    assert i.retransmissions is None  # UDP; netperf prints -1


@pytest.mark.parametrize(
    "name, throughput, mean, p50, p90, p99, retrans",
    [
        ("tcp_rr", 7550.11, 132.37, 137, 173, 289, 0),
        ("tcp_crr", 5242.72, 190.64, 186, 230, 516, 0),
        ("udp_rr", 8377.75, 119.31, 130, 159, 253, None),
    ],
)
def test_parse_rr(name, throughput, mean, p50, p90, p99, retrans) -> None:
    i = parse(name, TYPES[name.upper()])
    assert i.ok and i.units == TPS_UNITS
    assert i.throughput == throughput and i.elapsed_s == 2.0
    assert i.latency_us is not None
    assert set(i.latency_us) == {"mean", "min", "max", "p50", "p90", "p99", "stddev"}
    assert (i.latency_us["mean"], i.latency_us["p50"], i.latency_us["p90"], i.latency_us["p99"]) == (
        mean,
        p50,
        p90,
        p99,
    )
    assert i.retransmissions == retrans
    assert i.sent_mbps is None and i.loss_pct is None and i.confidence is None


def test_parse_udp_stream_with_nothing_received_is_a_result_not_a_loss() -> None:
    i = parse("udp-zero", UDP_STREAM)
    assert i.ok and i.lost is None
    assert i.throughput == 0.0 and i.received_mbps == 0.0 and i.bytes_received == 0.0
    assert i.sent_mbps == pytest.approx(7490.67)
    assert i.loss_pct == 100.0


def test_parse_confidence() -> None:
    i = parse("tcp-rr-confidence", TCP_RR)
    assert i.ok and i.throughput == 7853.22
    assert i.confidence == {"level": 99, "iterations": 3, "interval_pct": 5.0, "achieved_width_pct": 116.066}


def test_instance_json_round_trip() -> None:
    i = parse("tcp-rr-confidence", TCP_RR)
    data = i.to_json()
    assert None not in data.values()
    assert Instance.from_json(data) == i


def test_selectors_are_read_by_name_not_position() -> None:
    out, err, rc = captured("tcp_stream")
    shuffled = "\n".join(reversed(out.splitlines()))
    noisy = "MIGRATED TCP STREAM TEST from 0.0.0.0 () port 0 AF_INET\n!!! WARNING: banner = yes\n" + shuffled
    assert omni.parse(0, TCP_STREAM, noisy, err, rc) == parse("tcp_stream", TCP_STREAM)


# -- parse: lost instances -------------------------------------------------------------


@pytest.mark.parametrize(
    "name, address, port",
    [("noserver", "192.168.0.151", "12999"), ("unreach", "192.168.0.152", "12865")],
)
def test_parse_no_netserver_is_lost(name, address, port) -> None:
    out, err, rc = captured(name)
    assert rc == 255
    i = omni.parse(3, TCP_STREAM, out, err, rc)
    assert not i.ok and i.index == 3 and i.returncode == 255
    assert "establish control" in i.lost and address in i.lost and port in i.lost
    assert i.lost == f"establish control: no netserver answered at {address} port {port}"
    assert i.throughput is None


def test_establish_control_on_stderr_is_recognised() -> None:
    out, err, rc = captured("noserver")
    i = omni.parse(0, TCP_RR, err, out, rc)
    assert i.lost == "establish control: no netserver answered at 192.168.0.151 port 12999"


@pytest.mark.parametrize(
    "name, test", [("netserver-killed-tcp-stream", TCP_STREAM), ("netserver-killed-udp-rr", UDP_RR)]
)
def test_parse_netserver_killed_is_lost_with_netperfs_message(name, test) -> None:
    out, err, rc = captured(name)
    assert rc == 1
    i = omni.parse(0, test, out, err, rc)
    assert not i.ok and i.throughput is None
    assert i.lost == "netperf exited 1: recv_response: partial response received: 0 bytes"


def test_parse_stopped_by_the_runner_is_lost_even_with_figures() -> None:
    out, err, _ = captured("tcp_stream")
    i = omni.parse(0, TCP_STREAM, out, err, -9, stopped="no result after 32 s: stopped")
    assert i.lost == "no result after 32 s: stopped"
    assert i.throughput is None and i.sent_mbps is None  # a partial test's figures are not kept
    i = omni.parse(0, TCP_STREAM, "", "", None, stopped="stopped by the operator")
    assert i.lost == "stopped by the operator" and i.returncode is None


@pytest.mark.parametrize("rc, name", [(-9, "SIGKILL"), (-15, "SIGTERM"), (-11, "SIGSEGV")])
def test_parse_killed_by_a_signal(rc, name) -> None:
    i = omni.parse(0, TCP_RR, "", "", rc)
    assert i.lost == f"killed by {name}" and i.returncode == rc


def test_parse_killed_by_a_signal_after_printing_a_result_is_lost() -> None:
    out, err, _ = captured("tcp_rr")
    assert omni.parse(0, TCP_RR, out, err, -15).lost == "killed by SIGTERM"


def test_parse_empty_output_with_success_is_lost_without_result() -> None:
    i = omni.parse(0, TCP_STREAM, "", "", 0)
    assert not i.ok and i.lost == "no result in netperf's output"
    assert omni.parse(0, TCP_STREAM, "THROUGHPUT=-1.00\n", "", 0).lost == "no result in netperf's output"


def test_parse_nonzero_exit_without_a_message() -> None:
    assert omni.parse(0, TCP_STREAM, "", "", 2).lost == "netperf exited 2: no message"


def test_parse_refuses_figures_in_unexpected_units() -> None:
    # a netperf run with -f k would report kbit/s: summing it with Mbit/s figures would be wrong
    out = captured("tcp_stream")[0].replace("THROUGHPUT_UNITS=10^6bits/s", "THROUGHPUT_UNITS=10^3bits/s")
    inst = omni.parse(0, TCP_STREAM, out, "", 0)
    assert not inst.ok and "unexpected throughput units '10^3bits/s'" in (inst.lost or "")


def test_parse_names_a_real_time_signal() -> None:
    assert omni.parse(0, TCP_RR, "", "", -40).lost == "killed by signal 40"
