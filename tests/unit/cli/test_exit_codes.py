"""Exit codes mean one thing each: the code's table is what ``--help`` and the manual say (hvnet(8):
tests/unit/docs/test_build.py),
an undecided isolation check is 7 (2 is invalid input), an unreachable host is 3 for ``hvnet hosts``
as for every verb, and a fan-out reports its worst host in the documented order.

isolation-guest-down.json is ``hvnet isolation check vlan-tests/seed-three-vm.yaml --json`` in the
built-in lab with VM2's eth0 down: the traffic method cannot decide VM2's cells, the trace method can.
"""

from __future__ import annotations

import json
import re
import socket
from collections.abc import Iterator
from pathlib import Path

import pytest

from appliance.cli import main as cli
from appliance.cli.main import main
from appliance.core import errors
from appliance.core.hostlist import InventoryHost
from appliance.core.ssh import HostUnreachable
from appliance.isolation import report
from appliance.isolation.check import MethodResult
from appliance.services import fleet

DATA = Path(__file__).resolve().parents[1] / "data"
ROOT = DATA.parent.parent.parent
GUEST_DOWN = DATA / "isolation-guest-down.json"
LEAK = DATA / "isolation-misconfigured.json"


# -- one table, documented as it is ------------------------------------------------------------------


def _constants() -> dict[str, int]:
    return {k: v for k, v in vars(errors).items() if k.startswith("EXIT_") and isinstance(v, int)}


def test_every_code_is_in_the_table_once_and_in_the_worst_of_order() -> None:
    codes = [e.code for e in errors.EXIT_CODES]
    assert sorted(codes) == sorted(set(codes)) == sorted(_constants().values())
    assert sorted(errors.SEVERITY) == sorted(codes)  # every code has its place in the fan-out order
    assert errors.EXIT_UNDECIDED not in (errors.EXIT_USAGE, errors.EXIT_FAILED)
    raised = {cls.exit_code for cls in _subclasses(errors.HvnetError)}
    assert raised <= set(codes), raised - set(codes)


def _subclasses(cls: type) -> Iterator[type]:
    import appliance.core.ssh  # noqa: F401  (its errors carry codes too)

    for sub in cls.__subclasses__():
        yield sub
        yield from _subclasses(sub)


def test_help_lists_the_table_and_the_order() -> None:
    text = cli.build_parser().format_help()
    listed = dict(re.findall(r"^  (\d)  (.+)$", text, re.M))
    assert {int(c): m for c, m in listed.items()} == {e.code: e.meaning for e in errors.EXIT_CODES}
    order = text[text.index("most severe first:") :].split("\n\n")[0]
    assert [int(c) for c in re.findall(r"\b(\d)\b", order)] == list(errors.SEVERITY)


def test_hosts_help_states_the_order(capsys) -> None:
    with pytest.raises(SystemExit):
        main(["hosts", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert errors.HOSTS_EXIT_HELP in text


def test_the_manual_lists_the_table_and_the_order() -> None:
    text = (ROOT / "docs" / "reference" / "exit-codes.md").read_text()
    para = " ".join(text[text.index("Exit codes (also in `hvnet --help`") :].split("\n\n")[0].split())
    assert [int(c) for c in re.findall(r"[:;] (\d) ", para)] == [e.code for e in errors.EXIT_CODES]
    for page in ("reference/exit-codes.md", "guide/many-hosts.md"):
        text = (ROOT / "docs" / page).read_text()
        order = text[text.index("the worst host's, most severe first:") :].split("\n\n")[0]
        assert [int(c) for c in re.findall(r"\*\*(\d)\*\*", order)] == list(errors.SEVERITY), page


# -- isolation: undecided is 7 ----------------------------------------------------------------------


def test_a_check_with_undecided_cells_is_7_and_a_finding_outranks_it() -> None:
    result = report.from_json(json.loads(GUEST_DOWN.read_text()))
    assert set(result.verdicts("traffic").values()) == {"ok", "unknown"}
    assert set(result.verdicts("trace").values()) == {"ok"}
    assert result.exit_code == 7 == errors.EXIT_UNDECIDED
    assert report.format_result(result).splitlines()[-1].startswith("INCOMPLETE")
    leak = report.from_json(json.loads(LEAK.read_text()))
    assert leak.exit_code == 1
    leak.methods["trace"] = MethodResult("trace", error="ovs-appctl: no such bridge")  # one method could not run
    assert leak.exit_code == 1  # the leak the other method found still decides
    del leak.methods["traffic"]
    assert leak.exit_code == 7  # nothing found, nothing decided


def test_isolation_report_exits_7_for_a_saved_undecided_check(tmp_path: Path, capsys) -> None:
    assert main(["isolation", "report", str(GUEST_DOWN)]) == 7
    assert "INCOMPLETE: not every cell could be decided" in capsys.readouterr().out
    page = tmp_path / "r.html"
    assert main(["isolation", "report", str(GUEST_DOWN), "--html", str(page)]) == 7
    assert 'class="verdict warn"' in page.read_text()


# -- many hosts: 3 for unreachable, the worst in the documented order --------------------------------


@pytest.mark.parametrize(
    ("codes", "expected"),
    [([7, 0], 7), ([1, 7], 1), ([7, 2], 7), ([7, 3], 3), ([4, 7], 4), ([7, 6, 5], 6), ([9, 6], 9)],
)
def test_undecided_has_its_place_in_the_worst_of_order(codes: list[int], expected: int) -> None:
    assert fleet.worst(codes) == expected  # an undefined code (9) is never hidden behind a known one


class _Host:
    def close(self) -> None:
        pass


def test_a_fan_out_mixing_undecided_and_unreachable_hosts_reports_the_worst() -> None:
    def connect(entry: InventoryHost) -> _Host:
        if entry.name == "down":
            raise HostUnreachable("down: cannot connect over SSH")
        return _Host()

    def work(_host: _Host, entry: InventoryHost) -> tuple[str, int]:
        return entry.name, {"undecided": 7, "drift": 1}.get(entry.name, 0)

    def outcome(*names: str) -> tuple[list[int], int]:
        out = fleet.run([InventoryHost(n, n) for n in names], work, connect)  # type: ignore[arg-type]
        return [o.exit for o in out], fleet.worst([o.exit for o in out])

    assert outcome("ok", "undecided", "down") == ([0, 7, 3], 3)
    assert outcome("undecided", "drift") == ([7, 1], 1)
    assert outcome("ok", "undecided") == ([0, 7], 7)


@pytest.fixture
def refusing_inventory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """An inventory of one host whose SSH port refuses connections (bound, never listening)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
        inv = tmp_path / "hosts.yaml"
        inv.write_text(f"hosts:\n  - name: shut\n    address: 127.0.0.1\n    port: {port}\n    user: root\n")
        monkeypatch.setenv("HVNET_INVENTORY", str(inv))
        monkeypatch.setenv("HVNET_STATE_DIR", str(tmp_path / "state"))
        yield


def test_hosts_exits_3_for_an_unreachable_host_as_every_verb_does(refusing_inventory: None, capsys) -> None:
    assert main(["--timeout", "2", "hosts", "--json"]) == 3
    (row,) = json.loads(capsys.readouterr().out)["hosts"]
    assert row["name"] == "shut" and not row["reachable"] and "cannot connect over SSH" in row["error"]
    assert main(["--timeout", "2", "status", "--hosts", "all"]) == 3
    assert "unreachable" in capsys.readouterr().out
