"""A case's ``cpus:``: which CPUs ovs-vswitchd and the measurement processes may run on during the case.

CloudNet 2018 (Fig. 5) saw the scheduler move ovs-vswitchd between cores
and pinned it, and each VM, with ``taskset``, to tell that variability from
the monitoring's own cost.  A case asks for the same::

    cases:
      - name: sflow-1-pinned
        monitor: {kind: sflow, sampling: 1}
        cpus: {ovs-vswitchd: "0", guests: "1"}

Each value is a CPU list in taskset's syntax (``0``, ``0-3``, ``0,2,4-5``).
Here only its grammar is checked (integers and ranges, each CPU below
:data:`MAX_CPU`); that the CPUs exist and are online is the machine's to
say, at the run's start.  Pure: nothing here reads a machine.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Callable, Optional

MAX_CPU = 4096  # the kernel's NR_CPUS at its largest common configuration: CPU numbers are below it
KEYS = ("ovs-vswitchd", "guests")
_ITEM = re.compile(r"^(\d{1,5})(?:-(\d{1,5}))?$")


@dataclass(frozen=True)
class CpuPlacement:
    """What a case pins: ovs-vswitchd's threads and the suite's netperf/netserver/iperf3 (None: left alone)."""

    vswitchd: Optional[str] = None  # a CPU list as given (taskset -c's syntax)
    guests: Optional[str] = None

    def to_json(self) -> dict[str, str]:
        return {k: v for k, v in (("ovs-vswitchd", self.vswitchd), ("guests", self.guests)) if v is not None}

    def describe(self) -> str:
        return ", ".join(f"{k} on CPU {v}" for k, v in self.to_json().items())


def cpu_set(text: str) -> Optional[frozenset[int]]:
    """The CPUs of a list in taskset's syntax (``0,2,4-5``); None when it is not one (or a CPU is out of
    range, or a range runs backwards)."""
    out: set[int] = set()
    for item in text.split(","):
        m = _ITEM.match(item.strip())
        if m is None:
            return None
        lo = int(m.group(1))
        hi = int(m.group(2)) if m.group(2) is not None else lo
        if hi < lo or hi >= MAX_CPU:
            return None
        out.update(range(lo, hi + 1))
    return frozenset(out)


def parse(value: Any, bad: Callable[[tuple[Any, ...], str], None], path: tuple[Any, ...]) -> Optional[CpuPlacement]:
    """``cpus: {ovs-vswitchd: LIST, guests: LIST}`` (either or both); problems through ``bad``."""
    if not isinstance(value, dict) or not value:
        bad(path, 'a mapping {ovs-vswitchd: CPUS, guests: CPUS}, CPU lists as taskset -c takes them ("0", "0-3", '
            '"0,2")')  # fmt: skip
        return None
    lists: dict[str, str] = {}
    for key, raw in value.items():
        if key not in KEYS:
            bad((*path, key), f"unknown key; allowed: {', '.join(KEYS)}")
            continue
        text = str(raw) if isinstance(raw, int) and not isinstance(raw, bool) else raw
        if not isinstance(text, str) or len(text) > 256 or cpu_set(text) is None:
            bad((*path, key), f"a CPU list like taskset -c's (\"0\", \"0-3\", \"0,2,4-5\"; CPUs 0..{MAX_CPU - 1}), "
                f"not {raw!r}")  # fmt: skip
            continue
        lists[key] = text.replace(" ", "")
    if len(lists) != len(value):
        return None
    return CpuPlacement(lists.get("ovs-vswitchd"), lists.get("guests"))
