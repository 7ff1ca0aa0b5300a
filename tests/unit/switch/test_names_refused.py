"""A name given to hvnet holding control characters is refused at file:line with exit 2, before any connection.

Such a name would be shown to the operator (and logged) as given, and it
selects nothing an operator can type; a real port named so is still
selected by its MAC or VM.  Policy, inventory, suite, scenario and topology
files share one reader (:mod:`appliance.core.yamldoc`), and the command line's
arguments are checked before they are parsed.
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from appliance.cli.main import main
from appliance.core import validate, yamldoc
from appliance.core.errors import ConfigError
from appliance.core.hostlist import load as load_inventory
from appliance.policy.plan import document

CONTROLS = [chr(c) for c in [*range(0x20), 0x7F, *range(0x80, 0xA0)]]
OTHERS = ["\u2028", "\u2029", "\u202e", "\u2066", "\u200f", "\u061c"]


def _problems(exc: pytest.ExceptionInfo[ConfigError]) -> str:
    return "\n".join(str(p) for p in exc.value.problems)


@settings(max_examples=300, deadline=None)
@given(st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=8), st.sampled_from([*CONTROLS, *OTHERS]))
def test_a_policy_names_any_control_character_in_a_selector_at_its_line(prefix: str, bad: str) -> None:
    name = prefix.replace('"', "").replace("\\", "") + bad
    text = f'version: 1\nvifs:\n  - vlan: 10\n    vm: "{name.encode("unicode_escape").decode()}"\n'
    with pytest.raises(ConfigError) as exc:
        document.parse(text, "p.yaml")
    assert "p.yaml:4: vifs[0].vm: holds the control character" in _problems(exc), _problems(exc)


def test_mirror_names_and_port_patterns_are_refused_too_and_text_keeps_its_lines() -> None:
    text = ('version: 1\nvifs:\n  - port: "vif*\\e[2J"\n    vlan: 10\nbridges:\n  xenbr0:\n    mirrors:\n'
            '      "span\\t1": {select: all, output: {port: vif3.0}}\n')  # fmt: skip
    with pytest.raises(ConfigError) as exc:
        document.parse(text, "p.yaml")
    found = _problems(exc)
    assert "p.yaml:3: vifs[0].port: holds the control character U+001B at position 5" in found, found
    assert "p.yaml:8: bridges.xenbr0.mirrors: holds the control character U+0009" in found, found
    assert len(exc.value.problems) == 2  # one problem each, not a second one from the selector's own check
    doc = yamldoc.parse("description: |\n  two\n  lines\tand a tab\n", "s.yaml")
    assert doc.data == {"description": "two\nlines\tand a tab\n"}


def test_an_inventory_host_named_with_an_escape_is_refused_at_its_line(tmp_path: Path) -> None:
    inv = tmp_path / "hosts.yaml"
    inv.write_text('hosts:\n  - name: hv1\n  - name: "hv2\\e]0;owned\\a"\n')
    with pytest.raises(ConfigError) as exc:
        load_inventory(inv)
    assert f"{inv}:3: hosts[1].name: holds the control character U+001B at position 4" in _problems(exc)


def test_no_control_names_what_it_refuses() -> None:
    assert validate.no_control("web-01 (Ünïcødé)") == "web-01 (Ünïcødé)"
    with pytest.raises(ValueError, match="U\\+009B at position 2"):
        validate.no_control("a\x9bb")
    assert validate.no_control("a\tb\n", allow=validate.TEXT_ALLOWS) == "a\tb\n"


class _Listener:
    """A TCP port that counts who connects to it (what an OVSDB server would have seen)."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.connections = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._accept, daemon=True)
        self.thread.start()

    def _accept(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except (TimeoutError, socket.timeout):
                continue
            self.connections += 1
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.sock.close()


@pytest.mark.parametrize("selector", ['vm: "web\\e[2J"', 'port: "vif*\\u202e"', 'mac: "02:00:00:00:00:01\\x85"'])
def test_plan_refuses_such_a_name_with_exit_2_before_connecting(tmp_path: Path, capsys, selector: str) -> None:
    policy = tmp_path / "p.yaml"
    policy.write_text(f"version: 1\nvifs:\n  - {selector}\n    vlan: 10\n")
    server = _Listener()
    try:
        code = main(["--db", f"tcp:127.0.0.1:{server.sock.getsockname()[1]}", "--timeout", "1", "plan", str(policy)])
    finally:
        server.close()
    err = capsys.readouterr().err
    assert code == 2 and f"{policy}:3: vifs[0]." in err and "holds the control character" in err, err
    assert server.connections == 0
    assert "\x1b" not in err and "\u202e" not in err  # the message itself shows nothing raw


def test_a_name_on_the_command_line_is_refused_before_connecting(capsys) -> None:
    server = _Listener()
    try:
        port = server.sock.getsockname()[1]
        code = main(["--db", f"tcp:127.0.0.1:{port}", "--timeout", "1", "vif", "set", "vif1\x1b[2J", "--tag", "3"])
    finally:
        server.close()
    err = capsys.readouterr().err
    assert code == 2 and "argument 7 ('vif1\\x1b[2J'): holds the control character U+001B" in err, err
    assert server.connections == 0
