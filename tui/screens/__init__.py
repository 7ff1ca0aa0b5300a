"""The console's screens, one module each, and the keys that switch between them.

Screens are imported when first shown, so opening the UI costs only the
VIF table's imports (the netperf and isolation code loads on demand).
"""

from __future__ import annotations

import importlib
import importlib.util
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Section:
    mode: str
    key: str
    title: str
    target: str  # "module:Class"
    help: str

    def load(self) -> Any:
        module, _, cls = self.target.partition(":")
        return getattr(importlib.import_module(module), cls)


SECTIONS = (
    Section("fleet", "0", "Fleet", "tui.screens.fleet:FleetScreen", "hosts: reachable, OVS, VIFs, drift, agent; pick"),
    Section("host", "1", "Host", "tui.screens.host:HostScreen", "OVS, bridges, CPU, memory, agent, last audit entries"),
    Section("vifs", "2", "VIFs", "tui.screens.vifs:VifsScreen", "every VIF: VLAN, policing, shaping, mirrors, rates"),
    Section("mirrors", "3", "Mirrors", "tui.screens.mirrors:MirrorsScreen", "mirrors with statistics; add, delete"),
    Section("suites", "4", "Suites", "tui.screens.suites:SuitesScreen", "netperf suites: run, past runs, compare"),
    Section("isolation", "5", "Isolation", "tui.screens.isolation:IsolationScreen", "ARP/VLAN isolation matrix"),
    Section("log", "6", "Log", "tui.screens.log:LogScreen", "the audit log and hvnet's own messages"),
)


def available() -> list[Section]:
    """The sections whose screen module is present (each ships with its capability)."""
    return [s for s in SECTIONS if importlib.util.find_spec(s.target.partition(":")[0]) is not None]
