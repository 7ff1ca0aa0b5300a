"""OVN match expressions from names and addresses: a name stays one string token, an address one address.

The lexer model below is OVN's own ``lex_parse_string`` (ovn/lib/lex.c): a
string runs to the first ``"`` not preceded by a backslash (a backslash
takes the next character along) and is then unescaped as a JSON string.
The tests in tests/lab/test_ovn_match.py check the same matches with the
real ovn-northd and ovn-trace.
"""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.core import ovnmatch
from appliance.core.hostlist import Inventory, InventoryPool
from appliance.isolation import ovntrace
from appliance.ovn import plan as ovn_plan
from appliance.ovn import write
from appliance.ovn.model import Limit
from appliance.services.ovn import pool as pools
from tests.unit.ovn.test_ovn_plan import _applied, _policy

INJECTIONS = [
    'p1" || ip4 || outport == "p2',
    "p1\\",
    'a\\" || 1 || "',
    "tab\there",
    "nl\nx",
    "\x1b[2J",
    "\x00",
    "é\u2028",
]
CONTROL = "".join(map(chr, [*range(0x20), 0x7F, *range(0x80, 0xA0)]))
# any text, and text made mostly of what could end a string or start a clause
NAMES = st.one_of(st.text(), st.text(alphabet=st.sampled_from([*CONTROL, '"', "\\", "|", "&", " ", "p", "1"])))


def lex_string(text: str) -> tuple[str, str]:
    """OVN's lexer on a string token at the start of ``text``: (the string's value, the rest of the text)."""
    assert text[0] == '"'
    i = 1
    while True:
        if i >= len(text):
            raise ValueError("Input ends inside quoted string.")
        if text[i] == '"':
            return json.loads(text[: i + 1]), text[i + 1 :]
        i += 2 if text[i] == "\\" else 1


@pytest.mark.parametrize("name", INJECTIONS)
def test_a_port_name_cannot_end_its_string_or_add_a_clause(name: str) -> None:
    match = Limit("sw", name, None, "from-lport", 1000, 100).match
    assert match.startswith("inport == ")
    value, rest = lex_string(match.removeprefix("inport == "))
    assert (value, rest) == (name, "")
    assert Limit("sw", name, None, "to-lport", 1000, 100).match == f"outport == {ovnmatch.string(name)}"


def test_the_injection_from_the_issue_is_written_escaped() -> None:
    assert Limit("sw", 'p1" || ip4 || outport == "p2', None, "from-lport", 1, 1).match == (
        'inport == "p1\\" || ip4 || outport == \\"p2"'
    )
    assert Limit("sw", "p1\\", None, "from-lport", 1, 1).match == 'inport == "p1\\\\"'


@settings(max_examples=500, deadline=None)
@given(NAMES)
def test_any_name_reads_back_as_exactly_itself_and_nothing_more(name: str) -> None:
    literal = ovnmatch.string(name)
    assert lex_string(literal) == (name, "")
    assert not any(c in literal for c in CONTROL[:0x20])  # no raw C0 character reaches the NB


@pytest.mark.parametrize(
    ("mac", "ip"),
    [("02:00:00:00:00:01 || ip4", "10.0.0.1"), ("02:00:00:00:00:01", "10.0.0.1 || 1"), ("02:00:00:00:00:1", "10.0.0.1"),
     ("02:00:00:00:00:01", "10.0.0.0/24"), ("02:00:00:00:00:01", "10.0.0.01"), ("02:00:00:00:00:01", "")],
)  # fmt: skip
def test_a_microflow_takes_only_an_address_where_an_address_goes(mac: str, ip: str) -> None:
    with pytest.raises(ValueError, match="not an"):
        ovntrace.arp_broadcast("p1", mac, ip, "10.0.0.99")


def test_the_microflow_quotes_the_port_and_normalises_the_mac() -> None:
    expr = ovntrace.arp_broadcast('p1" || ip4 || "', "02:AA:00:00:00:01", "10.0.0.1", "10.0.0.99")
    assert expr.startswith('inport == "p1\\" || ip4 || \\"" && eth.src == 02:aa:00:00:00:01 && ')
    assert expr.endswith("arp.sha == 02:aa:00:00:00:01 && arp.spa == 10.0.0.1 && arp.tpa == 10.0.0.99")


def _injected_view():
    """The applied lab pool with VM1's rule as a pasted name would have made it: it polices all IPv4."""
    v = _applied()
    rule = next(q for s in v.switches for q in s.qos if q.direction == "from-lport")
    rule.match = rule.match + ' || ip4 || outport == ""'
    return v, rule


def test_a_rule_whose_match_is_not_its_ports_own_is_planned_to_be_rewritten() -> None:
    v, rule = _injected_view()
    p = ovn_plan.plan(v, _policy("version: 1\nvifs:\n  - vm: VM1\n    ingress: {rate: 10000, burst: 1000}\n"))
    ((uuid, lim),) = [(u, lim) for u, lim in p.modify if lim.direction == "from-lport"]
    assert uuid == rule.uuid and lim.match == f"inport == {ovnmatch.string(lim.port)}"
    (update,) = [o for o in write.operations(v, p, "test") if o["op"] == "update" and o["table"] == "QoS"]
    assert update["row"]["match"] == lim.match


def test_enforcement_is_missing_when_the_nb_rule_matches_more_than_its_port() -> None:
    v, rule = _injected_view()
    port = rule.external_ids["hvnet-port"]
    switch = next(s.name for s in v.switches if rule in s.qos)
    lim = Limit(switch, port, "VM1", "from-lport", rule.rate_kbps or 0, rule.burst_kbit or 0)
    pool = InventoryPool("ovn-pool", "unix:/nb.sock", "unix:/sb.sock")
    inv = Inventory("inventory.yaml", (), (pool,))
    (e,) = pools.enforcement(v, [lim], inv, pool, connect=lambda _e: None, timeout=1.0)  # type: ignore[arg-type]
    assert e.state == "missing" and "not the port's own" in e.detail and "|| ip4" in e.detail
    rule.match = lim.match  # the port's own rule: what decides now is the chassis' meter (no chassis here)
    (e,) = pools.enforcement(v, [lim], inv, pool, connect=lambda _e: None, timeout=1.0)  # type: ignore[arg-type]
    assert e.state == "unknown"


ADDRESSY = st.one_of(st.text(max_size=24), st.text(alphabet="0123456789abcdefABCDEF:./ |&", max_size=24))


@settings(max_examples=500, deadline=None)
@given(NAMES, ADDRESSY, ADDRESSY)
def test_a_microflow_is_the_port_and_two_addresses_or_a_value_error(port: str, mac: str, ip: str) -> None:
    try:
        expr = ovntrace.arp_broadcast(port, mac, ip, "10.0.0.99")
    except ValueError:
        return
    value, rest = lex_string(expr.removeprefix("inport == "))
    assert value == port
    assert rest == (f" && eth.src == {mac.lower()} && eth.dst == ff:ff:ff:ff:ff:ff && arp.op == 1 && "
                    f"arp.sha == {mac.lower()} && arp.spa == {ip} && arp.tpa == 10.0.0.99")  # fmt: skip
