"""The collector guest's interface counters, read around a repetition of a case with a remote mirror.

A case that mirrors over GRE/ERSPAN names the guest its tunnel leads to
(``collector_guest``); before and after each measured repetition hvnet reads
that guest's own receive counters (``ip -s -j link`` inside it: what its NIC
received, whatever a capture would have kept).  What they say against what
was mirrored is :mod:`appliance.netperf.figures.arrival`'s.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Optional

from appliance.core.errors import HvnetError
from appliance.core.runner import CommandRunner
from appliance.netperf.parse.iplink import INTERFACE, parse_link_stats
from appliance.netperf.run.launch import Endpoint

SETTLE_S = 0.5  # after the senders stop: the uplink's queue drains into the collector before it is read


@dataclass
class CollectorCounters:
    """The collector guest's receive counters, read inside it through the host's runner."""

    endpoint: Endpoint
    runner: CommandRunner
    ifname: str = INTERFACE

    def read(self) -> tuple[Optional[dict[str, int]], Optional[str]]:
        """The counters now, or None and why not (a reading that failed is never a zero)."""
        argv = self.endpoint.wrap(["ip", "-s", "-j", "link", "show", "dev", self.ifname])
        try:
            res = self.runner.run(argv, check=False, timeout=10)
        except HvnetError as exc:
            return None, f"collector {self.endpoint.name}: counters not read: {exc}"
        if res.returncode != 0:
            why = (res.stderr or res.stdout).strip() or f"exit {res.returncode}"
            return None, f"collector {self.endpoint.name}: counters not read: {why}"
        try:
            return parse_link_stats(res.stdout, self.ifname), None
        except ValueError as exc:
            return None, f"collector {self.endpoint.name}: {exc}"

    def after(self) -> tuple[Optional[dict[str, int]], Optional[str]]:
        """The counters once the uplink's queue had time to drain (the repetition's last copies included)."""
        time.sleep(SETTLE_S)
        return self.read()
