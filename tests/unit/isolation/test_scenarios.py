"""Every shipped scenario loads; bad scenarios are refused with file:line:field."""

from pathlib import Path

import pytest

from appliance.core.errors import ConfigError
from appliance.isolation import scenario

VLAN_TESTS = Path(__file__).resolve().parents[3] / "vlan-tests"
SHIPPED = sorted(VLAN_TESTS.glob("*.yaml"))
TOPOLOGY = VLAN_TESTS / "topologies" / "seed-2010.yaml"


def test_the_required_scenarios_are_shipped() -> None:
    names = {p.stem for p in SHIPPED}
    assert {"seed-three-vm", "trunk-and-native", "mirror-exception", "many-vlans", "misconfigured"} <= names


@pytest.mark.parametrize("path", SHIPPED, ids=lambda p: p.stem)
def test_shipped_scenario_loads(path) -> None:
    sc = scenario.load(path)
    assert len(sc.guests) >= 2 and sc.name == path.stem


def test_many_vlans_is_big_enough() -> None:
    sc = scenario.load(VLAN_TESTS / "many-vlans.yaml")
    vlans = {g.tag for g in sc.topology.guests}
    assert len(sc.guests) >= 12 and len(vlans) >= 4
    assert len(sc.guests) * len(sc.guests) * sc.probes_per_target >= 1000  # (n-1 peers + 1 unused) x n x probes


def test_misconfigured_clears_a_tag_and_expects_the_intended_table() -> None:
    sc = scenario.load(VLAN_TESTS / "misconfigured.yaml")
    assert [(v.guest, v.tag) for v in sc.vlans] == [("VM3", None)]
    assert sc.matrix is not None and sc.matrix[("VM3", "VM1")] == "no"


def write(tmp_path: Path, text: str) -> Path:
    (tmp_path / "topologies").mkdir(exist_ok=True)
    (tmp_path / "topologies" / "t.yaml").write_text(
        "bridges: [{name: br0}]\nguests:\n  - {name: A, ip: 10.0.0.1/24, tag: 1}\n"
        "  - {name: B, ip: 10.0.0.2/24, tag: 1}\n  - {name: C, ip: 10.0.0.3/24, tag: 2}\n"
    )
    f = tmp_path / "s.yaml"
    f.write_text("topology: topologies/t.yaml\n" + text)
    return f


def problems(tmp_path: Path, text: str) -> list[str]:
    with pytest.raises(ConfigError) as exc:
        scenario.load(write(tmp_path, text))
    return [str(p) for p in exc.value.problems]


def test_minimal_derive(tmp_path) -> None:
    sc = scenario.load(write(tmp_path, "expect: derive\n"))
    assert sc.guests == ["A", "B", "C"] and sc.derive


@pytest.mark.parametrize(
    "text, expected",
    [
        ("guests: [A, Z]\nexpect: derive\n", ":2: guests[1]: unknown guest 'Z'; guests: A, B, C"),
        ("expect: derive\ncolour: red\n", ":3: colour: unknown key; allowed:"),
        ("vlans:\n  A: {tag: 5000}\nexpect: derive\n", ":3: vlans.A.tag: VLAN tag 5000 is outside 0..4094"),
        ("vlans:\n  A: {trunks: '1-'}\nexpect: derive\n", ":3: vlans.A.trunks: malformed VLAN range"),
        ("vlans:\n  Q: {tag: 1}\nexpect: derive\n", ":3: vlans.Q: unknown guest 'Q'"),
        ("expect: guess\n", ":2: expect: required: 'derive', or {matrix"),
        ("expect:\n  matrix:\n    A: {B: yes, C: maybe}\n    B: {A: yes, C: no}\n    C: {A: no, B: no}\n",
         ":4: expect.matrix.A.C: must be yes or no"),
        ("expect:\n  matrix:\n    A: {B: yes, C: no}\n    B: {A: yes, C: no}\n", ":3: expect.matrix: row C missing"),
        ("mirrors:\n  - {name: m, select_src: [A], output: A}\nexpect: derive\n", "mirrors[0].output: output A is also a selected port"),
        ("mirrors:\n  - {name: m, output: C}\nexpect: derive\n", "mirrors[0]: selects nothing"),
        ("probes_per_target: 0\nexpect: derive\n", ":2: probes_per_target: must be an integer 1..100"),
    ],
)  # fmt: skip
def test_bad_scenarios(tmp_path, text, expected) -> None:
    out = problems(tmp_path, text)
    assert any(expected in p for p in out), out
    assert all(p.startswith(str(tmp_path / "s.yaml")) for p in out)


def test_unknown_topology(tmp_path) -> None:
    f = tmp_path / "s.yaml"
    f.write_text("topology: nowhere.yaml\nexpect: derive\n")
    with pytest.raises(ConfigError, match=r"s\.yaml:1: topology: topology nowhere\.yaml is invalid"):
        scenario.load(f)


@pytest.mark.parametrize("name", ["../../../../tmp/x", "a/b", "", ".hidden", "x" * 65, "sp ace"])
def test_a_scenario_name_never_becomes_a_path(tmp_path, name) -> None:
    """The name is part of the captures' directory (issue: ``../../tmp/x`` wrote pcaps outside it)."""
    f = tmp_path / "sc.yaml"
    f.write_text(f"name: {name!r}\ntopology: {TOPOLOGY}\nexpect: derive\n")
    with pytest.raises(ConfigError, match="name: must be 1-64 letters"):
        scenario.load(f)


def test_an_unnamed_scenario_is_named_after_its_file_safely(tmp_path) -> None:
    f = tmp_path / "my scenario (v2).yaml"
    f.write_text(f"topology: {TOPOLOGY}\nexpect: derive\n")
    assert scenario.load(f).name == "my-scenario--v2-"
