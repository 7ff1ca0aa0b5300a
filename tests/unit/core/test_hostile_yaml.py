"""Hostile YAML ends in a clear ``file:line: field`` error (exit 2), quickly, never a traceback.

The cases are the ones that used to escape: alias bombs, recursive aliases,
deep nesting, ``!!python`` tags, numbers that are not finite or too long.  A
property test then feeds every loader generated documents.
"""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from appliance.core import yamldoc
from appliance.core.errors import ConfigError, HvnetError
from tests.conftest import ROOT

LAUGHS = "a: &a [x,x,x,x,x,x,x,x,x]\n" + "".join(
    f"{n}: &{n} [{','.join(['*' + p] * 9)}]\n" for p, n in zip("abcdef", "bcdefg")
)
HOSTILE = {
    "alias bomb": (LAUGHS, "more than 100,000 values"),
    "recursive alias": ("a: &a [*a]\n", "recursive alias"),
    "deep nesting": ("a: " + "[" * 5000 + "]" * 5000 + "\n", "nested deeper than 64 levels"),
    "python tag": ("a: !!python/object/apply:os.system ['true']\n", "unsupported tag"),
    "python scalar": ("a: !!python/name:os.system\n", "unsupported tag"),
    "binary tag": ("a: !!binary aGk=\n", "unsupported tag"),
    "infinite": ("rate: 1e400\n", "not a finite number"),
    "long integer": ("rate: " + "9" * 5000 + "\n", "cannot read"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_documents_are_refused_with_file_line_and_field(name: str) -> None:
    text, fragment = HOSTILE[name]
    started = time.monotonic()
    with pytest.raises(ConfigError) as info:
        yamldoc.parse(text, "hostile.yaml")
    assert time.monotonic() - started < 3
    message = str(info.value)
    assert message.startswith("hostile.yaml:") and fragment in message


def test_oversized_file_is_refused_before_it_is_read(tmp_path) -> None:
    big = tmp_path / "big.yaml"
    big.write_text("# " + "x" * (yamldoc.MAX_BYTES + 1))
    with pytest.raises(ConfigError, match="at most"):
        yamldoc.load(big)


@pytest.mark.parametrize("verb", [["plan"], ["suite", "validate"], ["isolation", "check"]])
def test_the_cli_says_what_is_wrong_and_exits_2(tmp_path, verb) -> None:
    f = tmp_path / "bomb.yaml"
    f.write_text(LAUGHS)
    res = subprocess.run([sys.executable, "-m", "appliance", *verb, str(f)], capture_output=True, text=True,
                         cwd=ROOT, timeout=60, check=False)  # fmt: skip
    assert res.returncode == 2, res.stderr
    assert "Traceback" not in res.stderr and "bomb.yaml:" in res.stderr and "more than 100,000 values" in res.stderr


# -- generated documents through every loader ---------------------------------------

_scalars = st.one_of(
    st.integers(), st.floats(allow_nan=True, allow_infinity=True), st.booleans(), st.none(), st.text(max_size=20)
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=30,
)
_fragments = st.sampled_from(
    ["vifs:", "- vm: VM1", "  vlan: 5", "bridges:", "  xenbr0:", "    mirrors:", "tests:", "guests:", "&a", "*a",
     "!!python/none", "[", "]", "{", "}", ": ", "- ", "  ", "\t", "1e400", "0x10", "null", "~", "'", '"', "#", "\n"]
)  # fmt: skip


def _loaders():
    from appliance.core import hostlist as hosts
    from appliance.endpoints import topology
    from appliance.isolation import scenario
    from appliance.netperf.define import suite
    from appliance.policy.plan import document

    return {
        "policy": lambda p: document.load(p),
        "suite": lambda p: suite.load(p),
        "scenario": lambda p: scenario.load(p),
        "topology": lambda p: topology.load(p),
        "inventory": lambda p: hosts.load(p),
    }


def _try_all(tmp_path, text: str) -> None:
    f = tmp_path / "fuzz.yaml"
    f.write_text(text)
    for name, load in _loaders().items():
        started = time.monotonic()
        try:
            load(f)
        except HvnetError:
            pass  # a clear error, as wanted
        assert time.monotonic() - started < 5, f"{name} took too long"


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=_values)
def test_any_yaml_value_gives_a_result_or_a_clear_error(tmp_path, data) -> None:
    import yaml

    _try_all(tmp_path, yaml.safe_dump({"vifs": data, "tests": data, "guests": data, "bridges": data, "hosts": data}))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(parts=st.lists(_fragments, max_size=40))
def test_any_text_gives_a_result_or_a_clear_error(tmp_path, parts) -> None:
    _try_all(tmp_path, "".join(parts))
