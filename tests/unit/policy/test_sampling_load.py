"""sFlow and IPFIX in a policy file: what is read, and every bad value named at file:line: field."""

from __future__ import annotations

import textwrap

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.core.errors import EXIT_USAGE, ConfigError, Problem
from appliance.policy.plan import document
from appliance.policy.plan.model import REMOVE
from appliance.policy.plan.planner import describe
from appliance.switch import sampling

FILE = "p.yaml"

GOOD = """\
bridges:
  xenbr0:
    sflow: {targets: ["192.0.2.9:6343"], sampling: 64, polling: 10, header: 128, agent: eth0}
    ipfix: {targets: ["192.0.2.9:4739"], sampling: 400, obs_domain_id: 1, obs_point_id: 1,
            cache_active_timeout: 60, cache_max_flows: 1000}
"""


def problems(text: str) -> list[Problem]:
    with pytest.raises(ConfigError) as exc:
        document.parse(textwrap.dedent(text), FILE)
    assert exc.value.exit_code == EXIT_USAGE
    return exc.value.problems


def test_the_issue_example_is_read_as_written() -> None:
    policy = document.parse(GOOD, FILE)
    rules = {r.kind: r for r in policy.sampling}
    assert rules["sflow"].bridge == "xenbr0" and rules["sflow"].path == ("bridges", "xenbr0", "sflow")
    assert rules["sflow"].value == sampling.SflowCols(("192.0.2.9:6343",), 64, 10, 128, "eth0")
    assert rules["ipfix"].value == sampling.IpfixCols(("192.0.2.9:4739",), 400, 1, 1, 60, 1000)
    assert policy.bridges == {"xenbr0": ("bridges", "xenbr0")}  # the planner checks it exists


@pytest.mark.parametrize("word", ["remove", "absent", "null"])
def test_remove_takes_it_away(word: str) -> None:
    policy = document.parse(f"bridges:\n  xenbr0:\n    sflow: {word}\n    ipfix: {word}\n", FILE)
    assert [(r.kind, r.value) for r in policy.sampling] == [("sflow", REMOVE), ("ipfix", REMOVE)]


def test_one_string_target_and_ipv6_and_names() -> None:
    text = (
        "bridges:\n  br0:\n    sflow: {targets: '[2001:db8::9]:6343'}\n    ipfix: {targets: [collector.example:4739]}\n"
    )
    policy = document.parse(text, FILE)
    assert policy.sampling[0].value.targets == ("[2001:db8::9]:6343",)
    assert policy.sampling[1].value.targets == ("collector.example:4739",)


@pytest.mark.parametrize(
    ("spec", "field", "fragment"),
    [
        ("{targets: ['192.0.2.9']}", "targets", "not host:port"),
        ("{targets: ['192.0.2.9:0']}", "targets", "1..65535"),
        ("{targets: ['192.0.2.9:65536']}", "targets", "1..65535"),
        ("{targets: ['192.0.2.300:6343']}", "targets", "not an IPv4 address"),
        ("{targets: ['2001:db8::9:6343']}", "targets", "in brackets"),
        ("{targets: ['[2001:db8::zz]:6343']}", "targets", "not an IPv6 address"),
        ("{targets: ['bad_name:6343']}", "targets", "neither an IP address nor a host name"),
        ("{targets: []}", "targets", "one or more collectors"),
        ("{targets: ['a:1', 'a:1']}", "targets", "listed twice"),
        ("{sampling: 64}", "targets", "required"),
        ("{targets: ['a:1'], sampling: 0}", "sampling", "1..4294967295"),
        ("{targets: ['a:1'], sampling: -4}", "sampling", "1..4294967295"),
        ("{targets: ['a:1'], sampling: 'often'}", "sampling", "integer"),
        ("{targets: ['a:1'], sampling: true}", "sampling", "integer"),
        ("{targets: ['a:1'], polling: 0}", "polling", "1..3600"),
        ("{targets: ['a:1'], polling: 3601}", "polling", "1..3600"),
        ("{targets: ['a:1'], header: 13}", "header", "14..600"),
        ("{targets: ['a:1'], header: 601}", "header", "14..600"),
        ("{targets: ['a:1'], agent: 'not an interface'}", "agent", "interface name or an IP address"),
        ("{targets: ['a:1'], rate: 5}", "rate", "allowed: targets, sampling, polling, header, agent"),
        ("{targets: ['a:1'], remove: true}", "remove", "either it alone or settings, not both"),
        ("[a]", None, "mapping"),
    ],
)
def test_bad_sflow(spec: str, field: str | None, fragment: str) -> None:
    found = problems(f"bridges:\n  xenbr0:\n    sflow: {spec}\n")
    assert len(found) == 1, found
    p = found[0]
    assert p.file == FILE and p.line == 3
    assert p.field == "bridges.xenbr0.sflow" + (f".{field}" if field else "")
    assert fragment in p.message, p.message


@pytest.mark.parametrize(
    ("spec", "field", "fragment"),
    [
        ("{targets: ['a:1'], cache_active_timeout: -1}", "cache_active_timeout", "0..4200"),
        ("{targets: ['a:1'], cache_active_timeout: 4201}", "cache_active_timeout", "0..4200"),
        ("{targets: ['a:1'], cache_max_flows: -1}", "cache_max_flows", "0..4294967295"),
        ("{targets: ['a:1'], obs_domain_id: 4294967296}", "obs_domain_id", "0..4294967295"),
        ("{targets: ['a:1'], obs_point_id: -1}", "obs_point_id", "0..4294967295"),
        ("{targets: ['a:1'], sampling: 0}", "sampling", "1..4294967295"),
        ("{targets: ['a:1'], polling: 10}", "polling", "allowed: targets, sampling, obs_domain_id"),
    ],
)
def test_bad_ipfix(spec: str, field: str, fragment: str) -> None:
    found = problems(f"bridges:\n  xenbr0:\n    ipfix: {spec}\n")
    assert [(p.line, p.field) for p in found] == [(3, f"bridges.xenbr0.ipfix.{field}")]
    assert fragment in found[0].message, found[0].message


def test_every_bad_field_at_once_with_its_own_line() -> None:
    found = problems(
        """\
        bridges:
          xenbr0:
            sflow:
              targets: ["192.0.2.9:99999"]
              sampling: 0
              header: 5000
            ipfix:
              targets: ["192.0.2.9:4739"]
              cache_active_timeout: -5
        """
    )
    assert [(p.line, p.field) for p in found] == [
        (4, "bridges.xenbr0.sflow.targets"),
        (5, "bridges.xenbr0.sflow.sampling"),
        (6, "bridges.xenbr0.sflow.header"),
        (9, "bridges.xenbr0.ipfix.cache_active_timeout"),
    ]


def test_describe_says_what_ovs_will_do_with_unset_fields() -> None:
    cols = sampling.SflowCols(("192.0.2.9:6343",), 64)
    assert describe("sflow", cols) == "sFlow to 192.0.2.9:6343 1-in-64 polling 30 s header 128 B, not hvnet's"
    assert describe("ipfix", None) == "IPFIX off"
    no_cache = sampling.IpfixCols(("a:1",), 1, cache_active_timeout=0, external_ids=(("hvnet-owner", "hvnet"),))
    assert describe("ipfix", no_cache) == "IPFIX to a:1 1-in-1 no flow cache"


_scalars = st.one_of(st.integers(), st.floats(), st.booleans(), st.none(), st.text(max_size=12))
_values = st.recursive(
    _scalars, lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3)
)
_specs = st.one_of(
    _values,
    st.fixed_dictionaries({}, optional={k: _values for k in (*sampling.SFLOW_KEYS, *sampling.IPFIX_KEYS, "remove")}),
)


@settings(max_examples=300, deadline=None)
@given(sflow=_specs, ipfix=_specs)
def test_any_spec_is_read_or_refused_at_its_field(sflow: object, ipfix: object) -> None:
    text = yaml.safe_dump({"bridges": {"xenbr0": {"sflow": sflow, "ipfix": ipfix}}})
    try:
        policy = document.parse(text, FILE)
    except ConfigError as exc:
        assert all(p.field.startswith("bridges.xenbr0.") and p.line for p in exc.problems), exc.problems
        return
    for rule in policy.sampling:
        assert rule.value is REMOVE or rule.value.targets


def test_the_cli_refuses_bad_values_before_it_connects(capsys: pytest.CaptureFixture[str]) -> None:
    from appliance.cli.main import main

    argv = ["--db", "unix:/nonexistent/db.sock", "sflow", "set", "xenbr0", "--target", "192.0.2.9", "--sampling", "0"]
    assert main(argv) == EXIT_USAGE
    err = capsys.readouterr().err
    assert "command line: --target: '192.0.2.9' is not host:port" in err
    assert "command line: --sampling: must be an integer 1..4294967295" in err
    assert "Traceback" not in err
