"""Probe specs, marks and the guest-source choice: pure rules, no switch."""

from __future__ import annotations

import pytest

from appliance.core import yamldoc
from appliance.core.errors import ConfigError, UsageError
from appliance.frontdoor.guests import choose
from appliance.netperf.define import suite as suite_mod
from appliance.probes import lifecycle
from appliance.probes import spec as sp
from appliance.switch.reader import is_vif_port

GOOD = """\
version: 1
name: p
probes:
  - {name: P1, like: vif3.0, ip: 10.0.0.201/24}
  - {name: P2, vlan: 10, bridge: xenbr0, ip: 10.0.0.202/24, limit: {ingress: {rate: 10mbit}, egress: {rate: 20mbit}}}
endpoints: {client: P1, server: P2}
tests:
  - {name: rr, type: TCP_RR}
"""


def load(text: str) -> suite_mod.Suite:
    return suite_mod.from_document(yamldoc.parse(text, "s.yaml"))


def problems(text: str) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        load(text)
    return [str(p) for p in exc.value.problems]


def test_a_suite_names_probes_as_its_endpoints() -> None:
    s = load(GOOD)
    assert [p.name for p in s.probes] == ["P1", "P2"]
    p1, p2 = s.probes
    assert (p1.like, p1.netns, p1.dev, p1.address) == ("vif3.0", "hvnet-probe-P1", "hvp-P1", "10.0.0.201")
    assert p2.ingress is not None and p2.ingress.rate_kbps == 10000 and p2.egress.rate_kbps == 20000
    assert s.topology.guest("P1").vif == "hvp-P1" and s.topology.guest("P2").kind == sp.GUEST_KIND


@pytest.mark.parametrize(
    ("probe", "line", "field", "words"),
    [
        ("{name: P1, like: vif3.0, vlan: 3, ip: 10.0.0.1/24}", 4, "probes[0]", "exactly one of"),
        ("{name: P1, like: vif3.0, ip: 10.0.0.1}", 4, "probes[0].ip", "with its prefix"),
        ("{name: P1, vlan: 4095, ip: 10.0.0.1/24}", 4, "probes[0].vlan", "1..4094"),
        ("{name: 'a;rm -rf /', vlan: 3, ip: 10.0.0.1/24}", 4, "probes[0].name", "letters, digits"),
        ("{name: P1, vlan: 3, ip: 10.0.0.1/24, mac: '01:00:5e:00:00:01'}", 4, "probes[0].mac", "unicast"),
        ("{name: P1, vlan: 3, ip: 10.0.0.1/24, limit: {egress: {rate: 0}}}", 4, "probes[0].limit.egress.rate",
         "rate 0"),
        ("{name: P1, vlan: 3, ip: 10.0.0.1/24, colour: red}", 4, "probes[0].colour", "unknown key"),
    ],
)  # fmt: skip
def test_bad_probes_name_file_line_and_field(probe: str, line: int, field: str, words: str) -> None:
    text = f"version: 1\nname: p\nprobes:\n  - {probe}\nendpoints: {{client: P1, server: P1}}\ntests: [{{name: r, type: TCP_RR}}]\n"
    found = [p for p in problems(text) if p.startswith(f"s.yaml:{line}: {field}:")]
    assert found and words in found[0], problems(text)


def test_probes_and_a_topology_are_refused_together() -> None:
    text = GOOD.replace("probes:\n", "topology: x.yaml\nprobes:\n")
    assert any("or on probes and real VMs: not both" in p for p in problems(text))


def test_two_probes_cannot_share_an_address() -> None:
    text = GOOD.replace("10.0.0.202/24", "10.0.0.201/24")
    assert any("same address as probe P1" in p for p in problems(text))


def test_probe_ports_are_never_vifs() -> None:
    ids = sp.marks(sp.ProbeSpec("P1", "10.0.0.1/24", vlan=1), "h:1:2", 0)
    assert "attached-mac" in ids  # what would make it a VIF, but for the mark
    assert not is_vif_port("hvp-P1", ids, 1)
    assert not is_vif_port("vif9.0", {sp.MARK: "P1"}, 1)


def test_stale_when_the_owner_here_is_gone_or_expired() -> None:
    alive = {(10, "100")}

    def is_alive(pid: int, start: str) -> bool:
        return (pid, start) in alive

    def probe(owner: str, expires: int | None) -> sp.FoundProbe:
        return sp.FoundProbe("P1", "br0", "hvp-P1", owner, expires, "hvnet-probe-P1")

    assert probe("here:10:100", 2000).stale(1000, "here", is_alive) is None
    assert "is gone" in probe("here:10:999", 2000).stale(1000, "here", is_alive)  # the PID was reused
    assert "is gone" in probe("here:11:100", 2000).stale(1000, "here", is_alive)
    assert probe("there:11:100", 2000).stale(1000, "here", is_alive) is None  # another machine's: its expiry
    assert "expired" in probe("there:11:100", 900).stale(1000, "here", is_alive)
    assert "no expiry" in probe("there:11:100", None).stale(1000, "here", is_alive)


def test_a_namespace_is_only_ever_one_hvnet_would_have_named() -> None:
    assert sp.FoundProbe("P1", "b", "hvp-P1", "", 0, "x").namespace() == "hvnet-probe-P1"
    assert sp.FoundProbe("../../etc", "b", "p", "", 0, "/etc").namespace() is None
    assert sp.found_probe("b", "p", {sp.MARK: "P1", sp.EXPIRES: "soon"}).expires is None


def test_derived_macs_are_local_unicast_and_stable() -> None:
    mac = sp.derived_mac("P1")
    assert mac == sp.derived_mac("P1") != sp.derived_mac("P2")
    first = int(mac[:2], 16)
    assert first & 2 and not first & 1


def test_dad_reads_either_arping() -> None:
    assert lifecycle.dad_argv("iputils", "10.0.0.1")[:2] == ["arping", "-D"]
    assert "-0" in lifecycle.dad_argv("habets", "10.0.0.1")
    assert lifecycle.dad_taken("iputils", 1) and not lifecycle.dad_taken("iputils", 0)
    assert lifecycle.dad_taken("habets", 0) and not lifecycle.dad_taken("habets", 1)


def test_the_guest_source_is_chosen_once() -> None:
    assert choose(None, names_probes=False, real_target=None, what="suite q") == "lab"
    assert choose(None, names_probes=True, real_target="--host hv1", what="suite q") == "probes"
    assert choose("lab", names_probes=False, real_target="--host hv1", what="suite q") == "lab"  # said so
    with pytest.raises(UsageError, match="does not fall back to the lab"):
        choose(None, names_probes=False, real_target="--host hv1", what="suite q")
    with pytest.raises(UsageError, match="needs a file with 'probes:'"):
        choose("probes", names_probes=False, real_target=None, what="suite q")
    with pytest.raises(UsageError, match="names probes"):
        choose("lab", names_probes=True, real_target=None, what="suite q")
    # a VM inventory named: its VMs, on a real target too; never with a file of probes
    assert choose(None, names_probes=False, real_target="--host hv1", what="suite q", vms_given=True) == "vms"
    assert choose("vms", names_probes=False, real_target=None, what="suite q") == "vms"
    assert choose("lab", names_probes=False, real_target=None, what="suite q", vms_given=True) == "lab"
    with pytest.raises(UsageError, match="names probes, not VMs"):
        choose("vms", names_probes=True, real_target=None, what="suite q")


def test_a_bad_guests_setting_is_refused_naming_where(monkeypatch: pytest.MonkeyPatch, tmp_path) -> None:
    from types import SimpleNamespace

    from appliance.frontdoor.guests import choice_of

    (tmp_path / "hvnet.conf").write_text("")
    (tmp_path / "hvnet.conf").chmod(0o644)
    monkeypatch.setenv("HVNET_CONFIG", str(tmp_path / "hvnet.conf"))
    monkeypatch.setenv("HVNET_GUESTS", "cloud")
    with pytest.raises(UsageError, match=r"HVNET_GUESTS.*'cloud' is not allowed; allowed: lab, probes or vms"):
        choice_of(SimpleNamespace(guests=None))
    monkeypatch.setenv("HVNET_GUESTS", "probes")
    assert choice_of(SimpleNamespace(guests=None)) == "probes"
    assert choice_of(SimpleNamespace(guests="lab")) == "lab"  # the flag outranks the variable
