import pytest

from appliance.core import yamldoc
from appliance.core.errors import ConfigError


def test_values_and_lines() -> None:
    doc = yamldoc.parse("a: 1\nb:\n  - x: 2\n    y: [1, 2]\n", "f.yaml")
    assert doc.data == {"a": 1, "b": [{"x": 2, "y": [1, 2]}]}
    assert doc.line(("b", 0, "y")) == 4
    assert doc.line(("b", 0, "missing")) == 3  # falls back to the parent


def test_duplicate_key_is_an_error_with_both_lines() -> None:
    with pytest.raises(ConfigError) as exc:
        yamldoc.parse("name: a\nguests: []\nname: b\n", "t.yaml")
    assert str(exc.value) == "t.yaml:3: name: duplicate key (first given on line 1)"


def test_syntax_error_names_file_and_line() -> None:
    with pytest.raises(ConfigError) as exc:
        yamldoc.parse("a: [1\nb: 2\n", "bad.yaml")
    assert str(exc.value).startswith("bad.yaml:")
    assert "YAML syntax error" in str(exc.value)


def test_yaml_1_2_scalars_keep_macs_and_words_as_strings() -> None:
    # YAML 1.1 would read the MAC as a base-60 integer and "no" as False.
    doc = yamldoc.parse("mac: 52:54:00:12:34:56\nflag: no\nok: true\nn: 10\nf: 1.5\n", "x")
    assert doc.data == {"mac": "52:54:00:12:34:56", "flag": "no", "ok": True, "n": 10, "f": 1.5}


def test_dotted() -> None:
    assert yamldoc.dotted(("guests", 2, "tag")) == "guests[2].tag"
    assert yamldoc.dotted(()) == "(document)"


def test_unreadable_file(tmp_path) -> None:
    with pytest.raises(ConfigError) as exc:
        yamldoc.load(tmp_path / "nope.yaml")
    assert "cannot read" in str(exc.value)
