"""Every directive of hvnet's systemd units is one its target systemd reads: EL9's 252 for rpm/*.service,
a dom0's 219 (XenServer 8 / XCP-ng 8.x, CentOS 7) for rpm/dom0/units/*.service."""

from __future__ import annotations

from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
TABLE = ROOT / "rpm" / "systemd-directives.txt"
TARGETS = {"rpm": 252, "rpm/dom0/units": 219}


def versions() -> dict[str, int]:
    """``directive`` or ``directive=value-prefix`` -> the first systemd release that reads it."""
    out = {}
    for line in TABLE.read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            key, version = line.split()
            out[key] = int(version)
    return out


def directives(text: str) -> list[tuple[int, str, str]]:
    """(line number, directive, value) of every assignment in a unit file."""
    out = []
    for n, line in enumerate(text.splitlines(), 1):
        line = line.strip()
        if line and not line.startswith(("#", ";", "[")):
            key, _, value = line.partition("=")
            out.append((n, key.strip(), value.strip()))
    return out


def too_new(text: str, target: int, table: dict[str, int]) -> list[str]:
    """What a systemd ``target`` would not read in ``text``: each directive, and each value with its own
    entry (``ProtectSystem=strict``, ``ExecStartPre=+``), against the table; unknown ones too."""
    problems = []
    for n, key, value in directives(text):
        if key not in table:
            problems.append(f"line {n}: {key} is not in {TABLE.name}")
            continue
        need, what = table[key], key
        for entry, version in table.items():
            name, _, prefix = entry.partition("=")
            if name == key and prefix and value.startswith(prefix) and version > need:
                need, what = version, entry
        if need > target:
            problems.append(f"line {n}: {what} needs systemd {need}, the target is {target}")
    return problems


def units() -> list[tuple[Path, int]]:
    return [(p, t) for d, t in TARGETS.items() for p in sorted((ROOT / d).glob("*.service"))]


def test_both_unit_sets_are_there() -> None:
    names = {(p.parent.name, p.name) for p, _ in units()}
    assert {("rpm", "hvnet-agent.service"), ("units", "hvnet-agent.service")} <= names
    assert {("rpm", "hvnet-exporter.service"), ("units", "hvnet-exporter.service")} <= names


@pytest.mark.parametrize(("unit", "target"), units(), ids=lambda x: str(x))
def test_every_directive_is_read_by_the_target_systemd(unit: Path, target: int) -> None:
    assert too_new(unit.read_text(), target, versions()) == []


def test_the_check_catches_what_219_does_not_read() -> None:
    table = versions()
    text = "[Service]\nStateDirectory=hvnet\nProtectSystem=strict\nExecStartPre=+/bin/true\nProtectSystem=full\n"
    assert too_new(text, 219, table) == [
        "line 2: StateDirectory needs systemd 235, the target is 219",
        "line 3: ProtectSystem=strict needs systemd 232, the target is 219",
        "line 4: ExecStartPre=+ needs systemd 231, the target is 219",
    ]
    assert too_new("SystemCallFilter=@system-service\n", 219, table) == [
        "line 1: SystemCallFilter=@system-service needs systemd 239, the target is 219"
    ]
    assert too_new("Frobnicate=yes\n", 252, table) == [f"line 1: Frobnicate is not in {TABLE.name}"]
    # the shipped EL9 agent unit is exactly what a dom0 could not take
    el9 = (ROOT / "rpm" / "hvnet-agent.service").read_text()
    assert len(too_new(el9, 219, table)) > 10


def test_the_dom0_units_keep_the_el9_units_commands() -> None:
    for name in ("hvnet-agent.service", "hvnet-exporter.service"):
        el9 = {(k, v) for _, k, v in directives((ROOT / "rpm" / name).read_text()) if k.startswith("Exec")}
        dom0 = {(k, v.lstrip("+")) for _, k, v in directives((ROOT / "rpm/dom0/units" / name).read_text())
                if k.startswith("Exec")}  # fmt: skip
        assert {(k, v.lstrip("+")) for k, v in el9} == dom0, name
