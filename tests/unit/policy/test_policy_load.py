"""Policy files: what loads, what it loads as, and how bad input is reported."""

from __future__ import annotations

import textwrap

import pytest

from appliance.core.errors import EXIT_USAGE, ConfigError, Problem
from appliance.core.vlan import Vlan
from appliance.policy.plan import document, fields
from appliance.policy.plan.model import REMOVE, Egress, Ingress, MirrorOutput, Policy, Selector, default_burst_kbit

FILE = "p.yaml"


def _text(text: str) -> str:
    return textwrap.dedent(text)


def parse(text: str) -> Policy:
    return document.parse(_text(text), FILE)


def problems(text: str) -> list[Problem]:
    with pytest.raises(ConfigError) as exc:
        parse(text)
    assert exc.value.exit_code == EXIT_USAGE
    return exc.value.problems


def one_problem(text: str) -> Problem:
    found = problems(text)
    assert len(found) == 1, [str(p) for p in found]
    return found[0]


def line_of(text: str, needle: str) -> int:
    """1-based line of the only line of ``text`` containing ``needle``."""
    hits = [i for i, line in enumerate(_text(text).splitlines(), 1) if needle in line]
    assert len(hits) == 1, f"{needle!r} is on lines {hits}"
    return hits[0]


def vlan_of(spec: str) -> Vlan:
    return parse(f"vifs:\n  - vm: VM1\n    vlan: {spec}\n").vifs[0].vlan


def ingress_of(spec: str) -> Ingress:
    return parse(f"vifs:\n  - vm: VM1\n    ingress: {spec}\n").vifs[0].ingress


# -- valid policies -----------------------------------------------------------


def test_empty_file_is_an_empty_policy() -> None:
    policy = document.parse("", FILE)
    assert policy.vifs == [] and policy.mirrors == [] and policy.bridges == {}
    assert policy.source == FILE
    assert policy.policing == "auto"


def test_comment_only_and_empty_sections() -> None:
    policy = parse("# nothing yet\nversion: 1\nvifs: []\nbridges: {}\n")
    assert policy.vifs == [] and policy.mirrors == [] and policy.bridges == {}


def test_load_reads_a_file_and_names_it_in_problems(tmp_path) -> None:
    good = tmp_path / "policy.yaml"
    good.write_text("vifs:\n  - vm: VM1\n    vlan: 10\n")
    policy = document.load(good)
    assert policy.source == str(good)
    assert policy.vifs[0].vlan == Vlan("access", 10)

    bad = tmp_path / "bad.yaml"
    bad.write_text("vifs:\n  - vm: VM1\n    vlan: 5000\n")
    with pytest.raises(ConfigError) as exc:
        document.load(bad)
    assert exc.value.problems[0].file == str(bad)
    assert str(exc.value).startswith(f"{bad}:3: vifs[0].vlan.tag: ")


def test_selectors_of_every_kind() -> None:
    text = """\
        vifs:
          - vm: VM1
            vlan: 1
          - vm_uuid: 8d3f3c43-5b7e-4ad5-9a3a-4bb4f7c1d001
            vlan: 1
          - mac: "52:54:00:AA:BB:CC"
            vlan: 1
          - port: vif3.0
            vlan: 2
        """
    policy = parse(text)
    sels = [r.selector for r in policy.vifs]
    assert [(s.kind, s.pattern) for s in sels] == [
        ("vm", "VM1"),
        ("vm_uuid", "8d3f3c43-5b7e-4ad5-9a3a-4bb4f7c1d001"),
        ("mac", "52:54:00:aa:bb:cc"),  # normalised to lower case
        ("port", "vif3.0"),
    ]
    assert not any(s.optional or s.is_glob for s in sels)
    assert sels[2].path == ("vifs", 2, "mac")
    assert policy.line(sels[2].path) == line_of(text, "mac:")
    assert policy.line(policy.vifs[3].path) == line_of(text, "port: vif3.0")


def test_glob_and_optional_selectors() -> None:
    policy = parse(
        """\
        vifs:
          - vm: "VM*"
            optional: true
            vlan: 5
          - mac: "52:54:00:AB:*"
            vlan: 5
          - port: "vif[12].?"
            optional: false
            vlan: 5
        """
    )
    vm, mac, port = (r.selector for r in policy.vifs)
    assert (vm.kind, vm.pattern, vm.optional, vm.is_glob) == ("vm", "VM*", True, True)
    assert (mac.pattern, mac.is_glob) == ("52:54:00:ab:*", True)  # lower-cased, not validated as a MAC
    assert (port.pattern, port.optional, port.is_glob) == ("vif[12].?", False, True)
    assert vm.matches("VM12") and not vm.matches("vm12") and not vm.matches(None)
    assert mac.matches("52:54:00:AB:00:01") and not mac.matches("52:54:00:ac:00:01")
    assert port.matches("vif2.0") and not port.matches("vif3.0") and not port.matches("vif1.10")


def test_exact_selector_does_not_glob() -> None:
    sel = parse("vifs:\n  - vm: VM1\n    vlan: 1\n").vifs[0].selector
    assert sel.matches("VM1")
    assert not sel.matches("VM10")
    assert str(sel) == "vm VM1"


@pytest.mark.parametrize(
    "spec, expected",
    [
        ("10", Vlan("access", 10)),
        ("0", Vlan("access", 0)),
        ("4094", Vlan("access", 4094)),
        ("{tag: 7}", Vlan("access", 7)),
        ("{mode: access, tag: 7}", Vlan("access", 7)),
        ('{trunks: "10,20-30"}', Vlan("trunk", None, (10, *range(20, 31)))),
        ("{mode: trunk, trunks: [30, 10, 10]}", Vlan("trunk", None, (10, 30))),
        ("{mode: trunk, trunks: all}", Vlan("trunk", None, ())),
        ("{mode: trunk, trunks: ALL}", Vlan("trunk", None, ())),
        ('{mode: native-tagged, tag: 5, trunks: "1-3"}', Vlan("native-tagged", 5, (1, 2, 3))),
        ("{mode: native-untagged, tag: 0, trunks: [100, 200]}", Vlan("native-untagged", 0, (100, 200))),
        ("{mode: native-untagged, tag: 9, trunks: all}", Vlan("native-untagged", 9, ())),
    ],
)
def test_vlan_modes(spec, expected) -> None:
    assert vlan_of(spec) == expected


def test_trunks_all_means_every_vlan_and_a_list_does_not() -> None:
    assert vlan_of("{mode: trunk, trunks: all}").trunks_every_vlan
    assert not vlan_of('{trunks: "10"}').trunks_every_vlan
    assert not vlan_of("10").trunks_every_vlan


@pytest.mark.parametrize("word", ["remove", "Remove", "absent", "null", "~", ""])
def test_remove_and_null_mean_remove(word) -> None:
    rule = parse(f"vifs:\n  - vm: VM1\n    vlan: {word}\n    ingress: {word}\n    egress: {word}\n").vifs[0]
    assert rule.vlan is REMOVE and rule.ingress is REMOVE and rule.egress is REMOVE
    assert repr(REMOVE) == "REMOVE"


def test_unset_settings_stay_none() -> None:
    rule = parse("vifs:\n  - vm: VM1\n    vlan: 3\n").vifs[0]
    assert rule.vlan == Vlan("access", 3)
    assert rule.ingress is None and rule.egress is None


@pytest.mark.parametrize(
    "spec, rate",
    [
        ("10240", 10240),
        ("'10mbit'", 10000),
        ("'10 Mbit/s'", 10000),
        ("'10240kbit'", 10240),
        ("'1gbit'", 1_000_000),
        ("'1.5mbit'", 1500),
        ("'512k'", 512),
        ("'2Mbit/s'", 2000),
        ("'1250KiB/s'", 10240),
        ("{rate: 10mbit}", 10000),
        ("{rate: 300}", 300),
    ],
)
def test_ingress_rates_and_default_burst(spec, rate) -> None:
    ing = ingress_of(spec)
    assert ing == Ingress(rate, max(12, int(rate * 0.8)), "auto")


@pytest.mark.parametrize("rate, burst", [(1, 12), (10, 12), (15, 12), (16, 12), (20, 16), (1000, 800), (10000, 8000)])
def test_default_burst_is_80_percent_but_at_least_one_frame(rate, burst) -> None:
    assert default_burst_kbit(rate) == burst
    assert ingress_of(str(rate)).burst_kbit == burst


def test_explicit_burst_and_mechanism() -> None:
    assert ingress_of("{rate: 10mbit, burst: 1mbit, mechanism: tc}") == Ingress(10000, 1000, "tc")
    assert ingress_of("{rate: 2000, burst: 64, mechanism: meter}") == Ingress(2000, 64, "meter")
    # An explicit burst below one frame is allowed (with a warning from burst_warnings).
    rule = parse("vifs:\n  - vm: VM1\n    ingress: {rate: 2000, burst: 5}\n").vifs[0]
    assert rule.ingress == Ingress(2000, 5, "auto")
    warnings = fields.burst_warnings(rule)
    assert len(warnings) == 1 and "5 kbit" in warnings[0] and "12 kbit" in warnings[0]
    assert fields.burst_warnings(parse("vifs:\n  - vm: VM1\n    ingress: 2000\n").vifs[0]) == []


def test_top_level_policing_is_the_default_mechanism() -> None:
    policy = parse(
        """\
        policing: tc
        vifs:
          - vm: VM1
            ingress: 1000
          - vm: VM2
            ingress: {rate: 1000, mechanism: meter}
        """
    )
    assert policy.policing == "tc"
    assert [r.ingress.mechanism for r in policy.vifs] == ["tc", "meter"]


def test_egress() -> None:
    policy = parse(
        """\
        vifs:
          - vm: VM1
            egress: 20mbit
          - vm: VM2
            egress: {rate: 5000, burst: 100kbit}
          - vm: VM3
            egress: {rate: 5000}
        """
    )
    assert [r.egress for r in policy.vifs] == [Egress(20000, None), Egress(5000, 100), Egress(5000, None)]


def test_mirrors_of_every_shape() -> None:
    text = """\
        bridges:
          xenbr0:
            mirrors:
              everything:
                select: all
                output: {port: eth2}
              from-vm1:
                select: {src: [vm:VM1, "mac:52:54:00:00:00:02"], dst: vif3.0}
                output: {vlan: 100}
              web:
                select: {vlans: "10,20-22", all: true}
                output: {gre: 192.0.2.10, key: 42}
                snaplen: 128
                filter: "tcp,tp_dst=80"
              collector:
                select: {dst: [port:vif2.0]}
                output: {erspan: "2001:db8::1", idx: 7, key: 3}
              to-vm3:
                select: {src: vm:VM1}
                output: {port: vm:VM3}
                allow_isolation_exception: true
              old: remove
              older: null
          xenbr1: null
        """
    policy = parse(text)
    assert policy.bridges == {"xenbr0": ("bridges", "xenbr0"), "xenbr1": ("bridges", "xenbr1")}
    m = {r.name: r for r in policy.mirrors}
    assert list(m) == ["everything", "from-vm1", "web", "collector", "to-vm3", "old", "older"]
    assert all(r.bridge == "xenbr0" for r in policy.mirrors)

    assert m["everything"].select_all and not m["everything"].src
    assert m["everything"].output == MirrorOutput("port", port=Selector("port", "eth2"))
    assert not m["everything"].allow_isolation_exception

    f = m["from-vm1"]
    assert not f.select_all
    assert [(s.kind, s.pattern) for s in f.src] == [("vm", "VM1"), ("mac", "52:54:00:00:00:02")]
    assert [(s.kind, s.pattern) for s in f.dst] == [("port", "vif3.0")]
    assert f.src[1].path == ("bridges", "xenbr0", "mirrors", "from-vm1", "select", "src", 1)
    assert f.dst[0].path == ("bridges", "xenbr0", "mirrors", "from-vm1", "select", "dst")
    assert f.output == MirrorOutput("vlan", vlan=100)

    w = m["web"]
    assert w.select_all and w.vlans == (10, 20, 21, 22)
    assert w.output == MirrorOutput("gre", remote_ip="192.0.2.10", key=42)
    assert (w.snaplen, w.filter) == (128, "tcp,tp_dst=80")

    c = m["collector"]
    assert c.output == MirrorOutput("erspan", remote_ip="2001:db8::1", erspan_idx=7, key=3)
    assert c.snaplen is None and c.filter is None

    t = m["to-vm3"]
    assert t.output.port == Selector("vm", "VM3")
    assert t.allow_isolation_exception is True

    assert m["old"].remove and m["older"].remove and m["old"].output is None
    assert policy.line(m["web"].path) == line_of(text, "web:")
    assert policy.line((*m["web"].path, "filter")) == line_of(text, "filter:")


def test_erspan_index_defaults_to_1_and_gre_has_no_key_by_default() -> None:
    policy = parse(
        """\
        bridges:
          xenbr0:
            mirrors:
              a: {select: all, output: {erspan: 10.0.0.1}}
              b: {select: all, output: {gre: 10.0.0.1}}
        """
    )
    a, b = policy.mirrors
    assert (a.output.kind, a.output.erspan_idx, a.output.key) == ("erspan", 1, None)
    assert (b.output.kind, b.output.key) == ("gre", None)


def test_select_all_true_mapping() -> None:
    rule = parse("bridges:\n  xenbr0:\n    mirrors:\n      m: {select: {all: true}, output: {vlan: 9}}\n").mirrors[0]
    assert rule.select_all and rule.src == () and rule.vlans == ()


def _mirrors(n: int, extra: str = "") -> str:
    body = "".join(f"      m{i:02d}:\n        select: all\n        output: {{vlan: 10}}\n" for i in range(n))
    return "bridges:\n  xenbr0:\n    mirrors:\n" + body + extra


def test_32_mirrors_on_a_bridge_are_allowed() -> None:
    assert len(document.parse(_mirrors(32), FILE).mirrors) == 32


def test_removed_mirrors_do_not_count_against_the_limit() -> None:
    policy = document.parse(_mirrors(32, "      gone: remove\n      gone2: null\n"), FILE)
    assert len(policy.mirrors) == 34
    assert sum(r.remove for r in policy.mirrors) == 2


def test_15_character_interface_name_is_allowed() -> None:
    name = "a" * 15
    assert parse(f"vifs:\n  - port: {name}\n    vlan: 1\n").vifs[0].selector.pattern == name


@pytest.mark.parametrize(
    "value, expected",
    [
        (0, 0),
        (1000, 1000),
        ("1000", 1000),
        ("1000kbit", 1000),
        ("1000 kbit/s", 1000),
        ("125KB/s", 1000),
        ("10Mbit/s", 10000),
        ("2G", 2_000_000),
        ("2.5m", 2500),
        (1000.0, 1000),
    ],
)
def test_kbit_units(value, expected) -> None:
    assert fields.kbit(value, "rate") == expected


@pytest.mark.parametrize(
    "value, message",
    [
        (-1, "must not be negative"),
        ("-1", "must not be negative"),
        ("-2mbit", "must not be negative"),
        ("fast", "not a rate/size"),
        ("10 furlongs", "not a rate/size"),
        ("0.5", "whole number"),
        ("1000 kbps", "ambiguous"),
        (True, "must be a number of kbit"),
        ([1], "not list"),
        (None, "not NoneType"),
        (2**31 + 1, "larger than OVS accepts"),
    ],
)
def test_kbit_refuses(value, message) -> None:
    with pytest.raises(ValueError, match=message):
        fields.kbit(value, "rate")


# -- invalid policies: one problem each, located and explained ----------------


def check(p: Problem, line: int, field: str, *fragments: str) -> None:
    assert p.file == FILE
    assert (p.line, p.field) == (line, field), str(p)
    for frag in fragments:
        assert frag in p.message, f"{frag!r} not in {p.message!r}"
    assert str(p) == f"{FILE}:{line}: {field}: {p.message}"


def test_tag_outside_range() -> None:
    text = """\
        vifs:
          - vm: VM1
            vlan:
              mode: access
              tag: 5000
        """
    check(one_problem(text), line_of(text, "tag:"), "vifs[0].vlan.tag", "5000", "0..4094")


@pytest.mark.parametrize("tag", [-1, 4096])
def test_tag_outside_range_shorthand(tag) -> None:
    check(one_problem(f"vifs:\n  - vm: VM1\n    vlan: {tag}\n"), 3, "vifs[0].vlan.tag", str(tag), "0..4094")


def test_dead_vlan_4095_cannot_be_requested() -> None:
    text = """\
        vifs:
          - vm: VM1
            vlan: {tag: 4095}
          - vm: VM2
            vlan:
              trunks: "10,4095"
        """
    p1, p2 = problems(text)
    check(p1, 3, "vifs[0].vlan.tag", "4095", "reserved", "0..4094")
    check(p2, line_of(text, "trunks:"), "vifs[1].vlan.trunks", "4095", "reserved", "0..4094")


@pytest.mark.parametrize(
    "trunks, fragments",
    [
        ('"10-"', ("malformed", "'10-'", "10,20-30")),
        ('"30-20"', ("backwards", "'30-20'")),
        ('"a"', ("malformed", "'a'", "10,20-30")),
        ('"10,,20"', ("empty element", "10,20-30")),
        ("[1, x]", ("integer", "0..4094")),
        ("[]", ("empty trunk list", "'all'")),
    ],
)
def test_malformed_trunks(trunks, fragments) -> None:
    text = f"vifs:\n  - port: vif1.0\n    vlan:\n      mode: trunk\n      trunks: {trunks}\n"
    check(one_problem(text), 5, "vifs[0].vlan.trunks", *fragments)


@pytest.mark.parametrize(
    "vlan, field, fragments",
    [
        ("{mode: bogus, tag: 1}", "vifs[0].vlan.mode", ("'bogus'", "access, trunk, native-tagged, native-untagged")),
        ("{mode: trunk, tag: 1, trunks: all}", "vifs[0].vlan.tag", ("trunk port carries no tag",)),
        ("{mode: access}", "vifs[0].vlan.tag", ("needs a tag", "0..4094")),
        ("{mode: native-tagged, trunks: all}", "vifs[0].vlan.tag", ("needs a tag",)),
        ("{mode: native-tagged, tag: 3}", "vifs[0].vlan.trunks", ("needs trunks", "'all'")),
        ("{mode: trunk}", "vifs[0].vlan.trunks", ("needs trunks",)),
        ("{tag: 3, trunks: [4]}", "vifs[0].vlan.mode", ("native-tagged or native-untagged",)),
        ("{mode: access, tag: 3, trunks: [4]}", "vifs[0].vlan.trunks", ("access port has no trunks",)),
        ("{}", "vifs[0].vlan", ("give tag", "trunks", "'remove'")),
        ("ten", "vifs[0].vlan", ("mapping", "tag number", "'remove'")),
        ("[1, 2]", "vifs[0].vlan", ("mapping",)),
        ("true", "vifs[0].vlan", ("mapping",)),
        ('{tag: "5"}', "vifs[0].vlan.tag", ("integer", "0..4094")),
    ],
)
def test_inconsistent_vlan(vlan, field, fragments) -> None:
    check(one_problem(f"vifs:\n  - port: vif1.0\n    vlan: {vlan}\n"), 3, field, *fragments)


@pytest.mark.parametrize(
    "rate, fragments",
    [
        ("-5", ("must not be negative", "-5")),
        ("'-5mbit'", ("must not be negative", "'-5mbit'")),
        ("fast", ("'fast'", "not a rate/size", "'10mbit'")),
        ("0", ("rate 0", "'ingress: remove'")),
        ("'0.4kbit'", ("whole kbit",)),
        ("'1220KiB/s'", ("9994.24 kbit", "must come to a whole kbit", "write 9994")),
        ("'10MB'", ("'MB' is refused", "once read it as megabits", "'mbit' for bits", "'MiB'")),
        ("'1250KB/s'", ("'KB' is refused", "kilobits", "'KiB'")),
        ("'64B'", ("'B' is refused", "'10B' as 10 kbit")),
        ("true", ("must be a number",)),
        ("[1]", ("must be a number",)),
    ],
)
def test_bad_ingress_rate(rate, fragments) -> None:
    text = f"vifs:\n  - vm: VM1\n    ingress:\n      rate: {rate}\n"
    check(one_problem(text), 4, "vifs[0].ingress.rate", *fragments)


@pytest.mark.parametrize("rate", ["-5", "fast", "0"])
def test_bad_egress_rate(rate) -> None:
    text = f"vifs:\n  - vm: VM1\n    egress:\n      rate: {rate}\n"
    check(one_problem(text), 4, "vifs[0].egress.rate")


def test_burst_zero_with_a_rate_names_the_default() -> None:
    text = """\
        vifs:
          - vm: VM1
            ingress:
              rate: 1000
              burst: 0
        """
    check(one_problem(text), 5, "vifs[0].ingress.burst", "burst 0", "80%", "800 kbit")

    text = "vifs:\n  - vm: VM1\n    ingress: {rate: 10, burst: 0}\n"
    check(one_problem(text), 3, "vifs[0].ingress.burst", "(here 12 kbit)")


def test_egress_burst_zero_and_negative() -> None:
    check(one_problem("vifs:\n  - vm: VM1\n    egress: {rate: 10, burst: 0}\n"), 3, "vifs[0].egress.burst", "burst 0")
    check(
        one_problem("vifs:\n  - vm: VM1\n    egress: {rate: 10, burst: -3}\n"),
        3,
        "vifs[0].egress.burst",
        "negative",
    )


def test_bad_mechanism_and_policing() -> None:
    text = """\
        policing: fastest
        vifs:
          - vm: VM1
            ingress: {rate: 100, mechanism: hardware}
        """
    p1, p2 = problems(text)
    check(p1, 1, "policing", "'fastest'", "auto, tc, meter")
    check(p2, 4, "vifs[0].ingress.mechanism", "'hardware'", "auto, tc, meter")


def test_ingress_and_egress_wrong_shape() -> None:
    text = """\
        vifs:
          - vm: VM1
            ingress: [1000]
          - vm: VM2
            egress: {burst: 10}
        """
    p1, p2 = problems(text)
    check(p1, 3, "vifs[0].ingress", "mapping with rate")
    check(p2, 5, "vifs[1].egress", "mapping with rate")


def test_unsupported_version() -> None:
    check(one_problem("version: 2\n"), 1, "version", "unsupported version 2", "allowed: 1")


def test_unknown_top_level_key() -> None:
    text = "version: 1\nvif:\n  - vm: VM1\n"
    check(one_problem(text), 2, "vif", "unknown key", "bridges, policing, schema, version, vifs")


def test_unknown_vif_key() -> None:
    text = """\
        vifs:
          - vm: VM1
            vlan: 3
            egres: 100
        """
    check(
        one_problem(text),
        4,
        "vifs[0].egres",
        "unknown key",
        "egress, ingress, mac, optional, port, vlan, vm, vm_uuid",
    )


def test_unknown_vlan_key() -> None:
    text = """\
        vifs:
          - vm: VM1
            vlan:
              tag: 3
              native: 4
        """
    check(one_problem(text), 5, "vifs[0].vlan.native", "unknown key", "mode, tag, trunks")


def test_unknown_ingress_and_egress_keys() -> None:
    text = """\
        vifs:
          - vm: VM1
            ingress:
              rate: 1000
              peak: 2000
            egress:
              rate: 1000
              min: 10
        """
    p1, p2 = problems(text)
    check(p1, 5, "vifs[0].ingress.peak", "unknown key", "burst, mechanism, rate")
    check(p2, 8, "vifs[0].egress.min", "unknown key", "burst, rate")


def test_unknown_mirror_select_output_and_bridge_keys() -> None:
    text = """\
        bridges:
          xenbr0:
            stp: true
            mirrors:
              m1:
                select:
                  src: vif1.0
                  ingress: true
                output:
                  vlan: 10
                  priority: 3
                span: yes
        """
    found = problems(text)
    assert [(p.line, p.field) for p in found] == [
        (3, "bridges.xenbr0.stp"),
        (12, "bridges.xenbr0.mirrors.m1.span"),
        (8, "bridges.xenbr0.mirrors.m1.select.ingress"),
        (11, "bridges.xenbr0.mirrors.m1.output.priority"),
    ]
    assert "allowed: ipfix, mirrors, sflow" in found[0].message
    assert "allow_isolation_exception, filter, output, select, snaplen" in found[1].message
    assert "all, dst, src, vlans" in found[2].message
    assert "port, vlan, gre, erspan, key, idx" in found[3].message


@pytest.mark.parametrize(
    "text, line, field, fragment",
    [
        ("[1, 2]\n", 1, "(document)", "mapping"),
        ("vifs: {vm: VM1}\n", 1, "vifs", "list of VIF rules"),
        ("vifs:\n  - VM1\n", 2, "vifs[0]", "mapping"),
        ("vifs:\n  - vm: VM1\n    optional: 'yes'\n", 3, "vifs[0].optional", "true or false"),
        ("vifs:\n  - vm: 12\n", 2, "vifs[0].vm", "non-empty string"),
        ("vifs:\n  - vm: ''\n", 2, "vifs[0].vm", "non-empty string"),
        ("vifs:\n  - mac: '01:00:5e:00:00:01'\n", 2, "vifs[0].mac", "multicast"),
        ("vifs:\n  - mac: 'not-a-mac'\n", 2, "vifs[0].mac", "six hex pairs"),
        ("bridges: [xenbr0]\n", 1, "bridges", "mapping of bridge name"),
        ("bridges:\n  xenbr0: [m]\n", 2, "bridges.xenbr0", "mapping with keys: ipfix, mirrors, sflow"),
        ("bridges:\n  xenbr0:\n    mirrors: [m]\n", 3, "bridges.xenbr0.mirrors", "mapping of mirror name"),
        ("bridges:\n  xenbr0:\n    mirrors:\n      m: [1]\n", 4, "bridges.xenbr0.mirrors.m", "mapping"),
    ],
)
def test_wrong_types(text, line, field, fragment) -> None:
    check(one_problem(text), line, field, fragment)


@pytest.mark.parametrize(
    "key, value, fragment",
    [
        ("snaplen", "'128'", "14..65535"),
        ("snaplen", "10", "14..65535"),
        ("snaplen", "70000", "14..65535"),
        ("snaplen", "true", "14..65535"),
        ("filter", "''", "OpenFlow match"),
        ("filter", "[tcp]", "OpenFlow match"),
        ("allow_isolation_exception", "'yes'", "true or false"),
    ],
)
def test_bad_mirror_fields(key, value, fragment) -> None:
    text = f"bridges:\n  xenbr0:\n    mirrors:\n      m:\n        select: all\n        output: {{vlan: 5}}\n        {key}: {value}\n"
    check(one_problem(text), 7, f"bridges.xenbr0.mirrors.m.{key}", fragment)


def test_yaml_syntax_error() -> None:
    text = "vifs:\n  - vm: VM1\n    vlan: [1, 2\n  - vm: VM2\n"
    p = one_problem(text)
    assert p.field == "(syntax)"
    assert p.file == FILE
    assert p.line == 4
    assert "YAML syntax error" in p.message


def test_yaml_bad_indentation() -> None:
    p = one_problem("vifs:\n  - vm: VM1\n   vlan: 3\n")
    assert (p.field, p.line) == ("(syntax)", 3)


def _mirror(output: str) -> str:
    return f"bridges:\n  xenbr0:\n    mirrors:\n      m:\n        select: all\n        output: {output}\n"


@pytest.mark.parametrize(
    "output, field, fragments",
    [
        ("{port: eth2, vlan: 10}", "output", ("exactly one of port, vlan, gre, erspan", "found port, vlan")),
        ("{gre: 10.0.0.1, erspan: 10.0.0.2}", "output", ("found gre, erspan",)),
        ("{}", "output", ("found none",)),
        ("{key: 5}", "output", ("found none",)),
        ("eth2", "output", ("mapping with exactly one of",)),
        ("{port: 'vif*'}", "output.port", ("not a glob",)),
        ("{port: bad/name}", "output.port", ("invalid interface name",)),
        ("{vlan: 4095}", "output.vlan", ("reserved",)),
        ("{vlan: 5000}", "output.vlan", ("outside 0..4094",)),
        ("{gre: not-an-ip}", "output.gre", ("'not-an-ip'", "not an IP address")),
        ("{erspan: 10.0.0.300}", "output.erspan", ("not an IP address",)),
        ("{gre: 10.0.0.1, key: -1}", "output.key", ("0..4294967295",)),
        ("{gre: 10.0.0.1, key: 4294967296}", "output.key", ("0..4294967295",)),
        ("{gre: 10.0.0.1, key: '5'}", "output.key", ("0..4294967295",)),
        ("{gre: 10.0.0.1, idx: 2}", "output.idx", ("ERSPAN setting",)),
        ("{erspan: 10.0.0.1, idx: 1048576}", "output.idx", ("0..1048575",)),
        ("{erspan: 10.0.0.1, idx: true}", "output.idx", ("0..1048575",)),
    ],
)
def test_bad_mirror_output(output, field, fragments) -> None:
    check(one_problem(_mirror(output)), 6, f"bridges.xenbr0.mirrors.m.{field}", *fragments)


def test_mirror_without_output() -> None:
    text = """\
        bridges:
          xenbr0:
            mirrors:
              m:
                select: all
        """
    check(one_problem(text), 4, "bridges.xenbr0.mirrors.m.output", "required", "port, vlan (RSPAN), gre or erspan")


@pytest.mark.parametrize(
    "select, field, fragment",
    [
        ("{}", "select", "selects nothing"),
        ("{all: false}", "select", "selects nothing"),
        ("{all: yes}", "select.all", "true or false"),
        ("{all: true, src: vif1.0}", "select", "'all' already selects every port"),
        ("everything", "select", "required: 'all'"),
        ('{vlans: "5-"}', "select.vlans", "malformed"),
        ("{src: [{vm: VM1, port: vif1.0}]}", "select.src[0]", "exactly one of vm, vm_uuid, mac, port"),
    ],
)
def test_bad_mirror_select(select, field, fragment) -> None:
    text = f"bridges:\n  xenbr0:\n    mirrors:\n      m:\n        select: {select}\n        output: {{vlan: 5}}\n"
    found = problems(text)
    assert (found[0].line, found[0].field) == (5, f"bridges.xenbr0.mirrors.m.{field}")
    assert fragment in found[0].message


def test_mirror_select_missing() -> None:
    text = "bridges:\n  xenbr0:\n    mirrors:\n      m:\n        output: {vlan: 5}\n"
    check(one_problem(text), 4, "bridges.xenbr0.mirrors.m.select", "required")


def test_duplicate_mirror_names() -> None:
    text = """\
        bridges:
          xenbr0:
            mirrors:
              m1:
                select: all
                output: {vlan: 10}
              m1:
                select: all
                output: {vlan: 11}
        """
    check(one_problem(text), 7, "bridges.xenbr0.mirrors.m1", "duplicate key", "first given on line 4")


def test_duplicate_vif_setting() -> None:
    text = "vifs:\n  - vm: VM1\n    vlan: 1\n    vlan: 2\n"
    check(one_problem(text), 4, "vifs[0].vlan", "duplicate key (first given on line 3)")


def test_33_mirrors_on_one_bridge() -> None:
    p = one_problem(_mirrors(33))
    check(p, 3, "bridges.xenbr0.mirrors", "33 mirrors on bridge xenbr0", "at most 32")


def test_33_mirrors_spread_over_two_bridges_are_fine() -> None:
    text = (
        _mirrors(17)
        + "  xenbr1:\n    mirrors:\n"
        + "".join(f"      n{i:02d}: {{select: all, output: {{vlan: 10}}}}\n" for i in range(16))
    )
    policy = document.parse(text, FILE)
    assert sum(r.bridge == "xenbr0" for r in policy.mirrors) == 17
    assert sum(r.bridge == "xenbr1" for r in policy.mirrors) == 16


@pytest.mark.parametrize("name", ["bad/name", "abcdefghijklmnop", "-vif", ".hidden", "has space", "vif:1"])
def test_invalid_port_names(name) -> None:
    check(
        one_problem(f"vifs:\n  - port: '{name}'\n    vlan: 1\n"),
        2,
        "vifs[0].port",
        "invalid interface name",
        "1-15 characters",
    )


@pytest.mark.parametrize("name", ["bad/br", "abcdefghijklmnop"])
def test_invalid_bridge_names(name) -> None:
    check(one_problem(f"bridges:\n  {name}: {{}}\n"), 2, f"bridges.{name}", "invalid interface name")


def test_selector_with_two_kinds() -> None:
    text = """\
        vifs:
          - vm: VM1
            port: vif1.0
            vlan: 1
        """
    check(one_problem(text), 2, "vifs[0]", "exactly one selector of vm, vm_uuid, mac, port", "found 2")


def test_rule_without_selector() -> None:
    check(one_problem("vifs:\n  - vlan: 1\n"), 2, "vifs[0]", "exactly one selector", "found 0")


def test_many_problems_are_reported_together() -> None:
    text = """\
        version: 1
        colour: blue
        vifs:
          - vm: VM1
            vlan: {tag: 5000}
          - port: bad/name
            vlan: 1
          - vm: VM2
            port: vif2.0
          - vm: VM3
            ingress: {rate: -5}
            egress: {rate: 1000, burst: 0}
        bridges:
          xenbr0:
            mirrors:
              m1:
                select: all
                output: {port: eth2, vlan: 3}
        """
    with pytest.raises(ConfigError) as exc:
        parse(text)
    found = {(p.line, p.field) for p in exc.value.problems}
    assert found == {
        (2, "colour"),
        (5, "vifs[0].vlan.tag"),
        (6, "vifs[1].port"),
        (8, "vifs[2]"),
        (11, "vifs[3].ingress.rate"),
        (12, "vifs[3].egress.burst"),
        (18, "bridges.xenbr0.mirrors.m1.output"),
    }
    message = str(exc.value)
    assert message.startswith("7 problems:\n  ")
    assert "p.yaml:5: vifs[0].vlan.tag: VLAN tag 5000 is outside 0..4094" in message


def test_good_rules_are_kept_between_bad_ones() -> None:
    # The whole file is refused: no partial policy comes back.
    text = "vifs:\n  - vm: VM1\n    vlan: 1\n  - vm: VM2\n    vlan: 5000\n"
    check(one_problem(text), 5, "vifs[1].vlan.tag")


def test_duplicate_key_is_reported_with_the_other_problems() -> None:
    text = """\
        vifs:
          - vm: VM1
            vlan: 5000
        bridges:
          xenbr0:
            mirrors:
              m1: {select: all, output: {vlan: 10}}
              m1: {select: all, output: {vlan: 11}}
        """
    found = {(p.line, p.field) for p in problems(text)}
    assert found == {(3, "vifs[0].vlan.tag"), (8, "bridges.xenbr0.mirrors.m1")}


@pytest.mark.parametrize("output", ["{port: eth2, key: 5}", "{vlan: 10, idx: 2}"])
def test_tunnel_settings_on_a_local_output_are_refused(output) -> None:
    p = one_problem(_mirror(output))
    assert p.field in ("bridges.xenbr0.mirrors.m.output.key", "bridges.xenbr0.mirrors.m.output.idx")
