"""The isolation parsers on any text: a result or a clear ValueError, never another exception.

The trace parser reads what ``ovs-appctl`` printed and the counts parser
what tcpdump printed; a format change or a truncated output must end in a
verdict of "unknown" with a reason, not a traceback.  Generated inputs mix
free text with the fragments real outputs are made of (tests/unit/data).
"""

from __future__ import annotations

from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.isolation import ofproto as trace
from appliance.isolation import pcap

DATA = Path(__file__).parents[1] / "data"
EXAMPLES = settings(max_examples=400, deadline=None)

_action_parts = st.sampled_from(
    ["1", "2", "65534", "99999999999", ",", "(", ")", "push_vlan(vid=10,pcp=0)", "push_vlan(tpid=0x88a8,vid=5,pcp=0)",
     "push_vlan(", "vid=", "pop_vlan", "clone(", "sample(sample=50.0%,actions(", "actions(", "check_pkt_len(size=200,",
     "gt(", "le(", "recirc(0x1)", "recirc(", "ct", "meter(0)", "trunc(128)", "drop", "set(eth(src=02:00:00:00:00:01))",
     "userspace(pid=0,slow_path(action))", "tnl_push(tnl_port(4),header(size=50),out_port(1))", "\u0663", " "]
)  # fmt: skip
_actions = st.one_of(st.text(max_size=200), st.lists(_action_parts, max_size=40).map("".join))

_trace_lines = st.sampled_from(
    [*(DATA / "trace-recirc.txt").read_text().splitlines(), *(DATA / "trace-patch-clone.txt").read_text().splitlines(),
     "Datapath actions: drop", "Datapath actions: ", "Datapath actions:", "recirc(0x2) - resume conntrack",
     "recirc(0xZZ)", "Translation failed (Recursion too deep), packet is dropped.", "=" * 79, ""]
)  # fmt: skip
_trace_text = st.one_of(
    st.text(max_size=300),
    st.lists(st.one_of(_trace_lines, _actions.map(lambda a: f"Datapath actions: {a}")), max_size=30).map("\n".join),
)

_dpif_lines = st.sampled_from(
    [*(DATA / "dpif-show-patch.txt").read_text().splitlines(), *(DATA / "dpif-show-many-vlans.txt").read_text().splitlines(),
     "system@ovs-system: hit:0 missed:0", "  br0:", "    p9 9/none: (patch: peer=x)", "    p9 x/y:", "    p1 1/1:"]
)  # fmt: skip

_tcpdump_lines = st.sampled_from(
    [*(DATA / "tcpdump-stderr-dropped-by-kernel.txt").read_text().splitlines(),
     "1 packet dropped by interface", "pcap_stats: eth0: No such device", "9" * 30 + " packets dropped by kernel",
     "tcpdump: 5 packets captured, 7 packets received by filter, 2 packets dropped by kernel", "packets", ""]
)  # fmt: skip
_odp = st.dictionaries(st.integers(0, 70000), st.text(min_size=1, max_size=8), max_size=8)


def _result_or_value_error(call) -> None:
    try:
        call()
    except ValueError:
        pass  # a clear error: the caller makes the cells unknown with it


@EXAMPLES
@given(actions=_actions, odp=_odp)
def test_datapath_actions_give_deliveries_or_a_clear_error(actions: str, odp: dict[int, str]) -> None:
    def call() -> None:
        out = trace.deliveries(actions, odp)
        assert all(isinstance(d, trace.Delivery) and (d.vlan is None or 0 <= d.vlan <= 4095) for d in out)

    _result_or_value_error(call)


@EXAMPLES
@given(text=_trace_text)
def test_any_trace_output_gives_passes_or_a_clear_error(text: str) -> None:
    def call() -> None:
        passes = trace.passes(text)
        assert passes and isinstance(trace.describe(passes), str)
        trace.deliveries(passes, {1: "a", 5: "b"})

    _result_or_value_error(call)


@EXAMPLES
@given(
    text=st.one_of(st.text(max_size=300), st.lists(_dpif_lines, max_size=30).map("\n".join)), bridge=st.text(max_size=6)
)
def test_any_dpif_show_gives_a_port_map(text: str, bridge: str) -> None:
    ports = trace.parse_dpif_show(text, bridge)
    assert all(isinstance(k, int) and isinstance(v, str) for k, v in ports.items())


@EXAMPLES
@given(text=st.one_of(st.text(max_size=300), st.lists(_tcpdump_lines, max_size=12).map("\n".join)))
def test_any_tcpdump_stderr_gives_counts_or_none(text: str) -> None:
    counts = pcap.parse_tcpdump_counts(text)
    assert counts is None or (counts.dropped >= 0 and isinstance(counts.describe_drops(), str))
    if counts is not None:
        assert "dropped by kernel" in text


@EXAMPLES
@given(captured=st.integers(0, 2**32), received=st.integers(0, 2**32), kernel=st.integers(0, 2**32),
       interface=st.integers(0, 2**32))  # fmt: skip
def test_counts_read_back_as_tcpdump_prints_them(captured: int, received: int, kernel: int, interface: int) -> None:
    def line(n: int, what: str) -> str:
        return f"{n} packet{'' if n == 1 else 's'} {what}\n"

    text = line(captured, "captured") + line(received, "received by filter") + line(kernel, "dropped by kernel")
    if interface:
        text += line(interface, "dropped by interface")  # printed only when not 0
    assert pcap.parse_tcpdump_counts(text) == pcap.TcpdumpCounts(captured, received, kernel, interface)
