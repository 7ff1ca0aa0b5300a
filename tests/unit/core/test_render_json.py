"""``--json`` output: render.indented_json writes the bytes ``json.dumps(indent=2, default=str)`` writes."""

import enum
import json
import math
from collections import OrderedDict
from pathlib import Path

import pytest

from appliance.core import render


class Colour(enum.IntEnum):
    RED = 1


class Mode(str, enum.Enum):
    ACCESS = "access"


CASES = [
    {},
    [],
    (),
    "text",
    3,
    None,
    {"a": 1},
    [1, "two", 3.5, True, False, None],
    {"a": {}, "b": [], "c": {"d": []}, "e": [[], {}]},
    {"nested": {"deeper": {"deepest": [1, [2, [3, {"x": "y"}]]]}}},
    [[1, 2], [3, [4, 5]], {"k": (6, 7)}],
    {"tuple": (1, (2, 3)), "list": [(), ((),)]},
    {3: "int key", 2.5: "float key", True: "bool key", None: "none key"},
    {"floats": [0.1, 1e300, -0.0, math.inf, -math.inf, math.nan]},
    {"enum": Colour.RED, "strenum": Mode.ACCESS, "keys": {Colour.RED: Mode.ACCESS}},
    {"path": Path("/tmp/x"), "set": {1}, "bytes": b"raw"},
    OrderedDict([("z", OrderedDict([("y", [1])])), ("a", 2)]),
    {"unicode": "é\u202e\x1b\ud800", "quote": 'a"b\\c', "brackets": "},\n  {"},
    {"marker": "\x00hvnet:nested\x00", "then": {"a": [1]}},
    {"\x00hvnet:nested\x00": [1], "after": {"b": 2}},
    [{"ids": {"a": "b"}, "counters": {"rx": 1}, "mirrors": [], "tag": 2} for _ in range(3)],
]


@pytest.mark.parametrize("obj", CASES, ids=range(len(CASES)))
def test_indented_json_is_json_dumps_byte_for_byte(obj) -> None:
    assert render.indented_json(obj) == json.dumps(obj, indent=2, default=str)


def test_indented_json_refuses_what_json_dumps_refuses() -> None:
    for bad in ({(1, 2): "tuple key"}, {"inner": {(1, 2): "tuple key"}}):
        with pytest.raises(TypeError):
            json.dumps(bad, indent=2, default=str)
        with pytest.raises(TypeError):
            render.indented_json(bad)


def test_print_json_writes_one_line_end(capsys) -> None:
    render.print_json({"a": [1, {"b": None}]})
    assert capsys.readouterr().out == json.dumps({"a": [1, {"b": None}]}, indent=2) + "\n"
