"""Names that could steer a terminal are shown escaped: tables, ``hvnet status``, pool output, the console.

A VM named ``ESC [2J`` used to clear the operator's screen and ``ESC ]0;...BEL`` to set the window
title.  Every character a terminal acts on (C0, DEL, C1, line separators, bidi controls, lone
surrogates) is shown as ``\\xNN``/``\\uNNNN``; ``--json`` keeps the name exact.
"""

from __future__ import annotations

import io
import json
import re
from dataclasses import replace

from hypothesis import given, settings
from hypothesis import strategies as st
from rich.console import Console

from appliance.cli.main import main
from appliance.cli.pool import format_pool
from appliance.cli.status import format_status
from appliance.core import render
from appliance.switch.inventory import BridgeInfo, HostInfo, Inventory, MirrorInfo
from tests.unit.ovn.test_ovn_view import _view as pool_view
from tests.unit.switch.test_inventory_rules import vif
from tui.widgets.literal import literal, shown

CONTROLS = [chr(c) for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)]]
OTHERS = ["\u2028", "\u2029", "\u202e", "\u2066", "\u200f", "\u061c", "\ud800"]
UNSHOWN = re.compile("[\x00-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028-\u202e\u2066-\u2069\ud800-\udfff]")
NAMES = st.one_of(st.text(), st.text(alphabet=st.sampled_from([*CONTROLS, *OTHERS, "a", "[", "/", "]", "\\"])))
CLEAR, TITLE = "vm\x1b[2J\x1b[H", "vm\x1b]0;owned\x07"
EXAMPLES = settings(max_examples=300, deadline=None)


def _shows_nothing_unshown(text: str, keep: str = "") -> bool:
    return not any(UNSHOWN.fullmatch(c) for c in text if c not in keep)


@EXAMPLES
@given(NAMES)
def test_every_character_a_terminal_acts_on_is_shown_escaped(name: str) -> None:
    out = render.terminal(name)
    assert _shows_nothing_unshown(out)
    assert out.count("\\") == name.count("\\") + len(UNSHOWN.findall(name))  # one escape per character
    assert render.terminal(out) == out
    one = name.replace("\n", "")  # lines hvnet made itself keep their ends; the rest is escaped
    assert render.terminal(f"{one}\n{one}", keep="\n").split("\n") == [render.terminal(one)] * 2


def test_plain_names_are_shown_as_they_are() -> None:
    for name in ("web-01", "vif3.0", "Ünïcødé VM", "x[/]", "tab-less name"):
        assert render.terminal(name) == name
    assert render.terminal(CLEAR) == "vm\\x1b[2J\\x1b[H" and render.terminal(TITLE) == "vm\\x1b]0;owned\\x07"
    assert render.terminal("\x9b31m\u202eabc") == "\\x9b31m\\u202eabc"


@EXAMPLES
@given(st.lists(st.tuples(NAMES, NAMES), min_size=1, max_size=5))
def test_a_table_of_any_names_stays_one_line_per_row_and_aligned(rows: list[tuple[str, str]]) -> None:
    text = render.table(["VM", "PORT"], [list(r) for r in rows])
    assert _shows_nothing_unshown(text, keep="\n")
    lines = text.split("\n")
    assert len(lines) == len(rows) + 1
    second = lines[0].index("PORT")
    for (vm, port), line in zip(rows, lines[1:]):  # the port's column starts where its heading does
        assert line == (render.terminal(vm).ljust(second - 2) + "  " + render.terminal(port)).rstrip()


def _inventory(vm: str, port: str, mirror: str) -> Inventory:
    host = HostInfo("hv1", None, "3.1.0", None, None, None, ["system"], ["system"], "unix:/db.sock", True)
    v = replace(vif("vif1.0"), vm_name=vm, port=port, mac="02:00:00:00:00:01", error=f"odd {vm}")
    m = MirrorInfo(mirror, "xenbr0", False, [port], [], [], port, None, 3, 300, "hvnet")
    return Inventory(host, [BridgeInfo("xenbr0", "system", 2, [mirror], [], None)], [v], [m], 0.0)


@EXAMPLES
@given(NAMES, NAMES, NAMES)
def test_status_shows_any_vm_port_and_mirror_name_escaped_and_json_exactly(vm: str, port: str, mirror: str) -> None:
    inv = _inventory(vm, port, mirror)
    text = format_status(inv, all_ports=True, with_rates=False)
    assert _shows_nothing_unshown(text, keep="\n")
    assert f"mirror {render.terminal(mirror)} on xenbr0" in text
    doc = inv.to_json(all_ports=True)
    assert doc["vifs"][0]["vm_name"] == vm and doc["vifs"][0]["port"] == port


def test_status_names_a_screen_clearing_vm_visibly() -> None:
    text = format_status(_inventory(CLEAR, "vif1.0", TITLE), all_ports=True, with_rates=False)
    assert "vm\\x1b[2J\\x1b[H" in text and "mirror vm\\x1b]0;owned\\x07 on xenbr0" in text
    assert "\x1b" not in text and "\x07" not in text


def test_status_shows_a_dom0_and_its_product_escaped() -> None:
    inv = _inventory("VM1", "vif1.0", "m")
    inv.host.platform = {"product": "XCP-ng", "version": "8.2.1", "dom0": True, "build": None}
    assert format_status(inv, all_ports=True, with_rates=False).splitlines()[0].endswith("  XCP-ng 8.2.1 dom0")
    inv.host.platform = {"product": CLEAR, "version": None, "dom0": True, "build": None}
    text = format_status(inv, all_ports=True, with_rates=False)
    assert "\x1b" not in text and "\\x1b[2J" in text.splitlines()[0]
    inv.host.platform = {"product": "Rocky Linux", "version": "9.4", "dom0": False, "build": None}
    assert "Rocky" not in format_status(inv, all_ports=True, with_rates=False)  # only a dom0 is worth the line


@EXAMPLES
@given(NAMES, NAMES)
def test_the_pool_shows_any_vm_and_logical_port_name_escaped(vm: str, port: str) -> None:
    v = pool_view()
    first = v.switches[0].ports[0]
    first.vm, first.name = vm, port
    v.notes.append(f"VMs on {vm} not read")
    assert _shows_nothing_unshown(format_pool(v), keep="\n")


def _on_a_terminal(cell: object) -> str:
    """What a Rich renderable puts on a terminal that takes no colour (what the console's table draws)."""
    out = io.StringIO()
    Console(file=out, force_terminal=True, color_system=None, width=400, legacy_windows=False).print(cell, end="")
    return out.getvalue()


@EXAMPLES
@given(NAMES)
def test_a_console_cell_is_never_markup_and_never_obeyed(name: str) -> None:
    cell = literal(name)
    assert cell.plain == render.terminal(name)  # markup such as [/] or [b] is text, as written
    assert _shows_nothing_unshown(_on_a_terminal(cell), keep="\n")
    one = name.replace("\n", "")
    assert shown(f"{one}\n{one}").plain.split("\n") == [render.terminal(one)] * 2


def test_the_command_line_shows_messages_escaped_and_json_exactly(capsys) -> None:
    code = main(["--db", "unix:/nonexistent/\x1b]0;owned\x07.sock", "status"])
    err = capsys.readouterr().err
    assert code != 0 and "\\x1b]0;owned\\x07" in err and "\x1b" not in err, err
    stream = render.TerminalStream(io.StringIO())
    stream.write("name \x1b[2J\n")
    assert stream.exact.getvalue() == "name \\x1b[2J\n"
    exact = io.StringIO()
    import sys

    saved = sys.stdout
    sys.stdout = render.TerminalStream(exact)  # type: ignore[assignment]
    try:
        render.print_json({"name": "a\x7fb\x1b"})
    finally:
        sys.stdout = saved
    assert json.loads(exact.getvalue()) == {"name": "a\x7fb\x1b"}
