"""The Captures screen's calls into the capture service: list, start, stop.

Everything goes through :mod:`appliance.services.captures` (what ``hvnet
capture`` runs), so a refusal here is the CLI's refusal in the same words and a
capture started here is listed, stopped and deleted by the CLI too.  The rate
of a running capture is measured between two refreshes (packets counted by
tcpdump itself); until two counts are in it is the average since the start.
Plain Python called from worker threads; nothing here touches widgets.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import TYPE_CHECKING

from appliance.core import render
from appliance.services import captures as svc
from appliance.services.captures import CaptureForm, Completeness

# The start dialog builds the service's form through the console's backend.
__all__ = ["CaptureForm"]

if TYPE_CHECKING:
    from appliance.services.captures import CaptureRecord
    from tui.backend import Backend


@dataclass(frozen=True)
class CaptureRow:
    """One capture as the table shows it (every figure measured, or "-")."""

    name: str
    state: str
    on: str
    packets: int | None
    rate_pps: float | None
    dropped: int | None
    size: int
    complete: str
    files: str
    reason: str | None
    live: bool

    def cells(self) -> tuple[str, ...]:
        rate = "-" if self.rate_pps is None else render.si(self.rate_pps, "pkt/s")
        return (self.name, self.state, self.on, render.count(self.packets), rate, render.count(self.dropped),
                render.si(self.size, "B"), self.complete, self.files)  # fmt: skip


def complete_text(data: dict | None) -> str:
    """captured ÷ offered once the capture has ended; "-" while it runs, "unknown" when it cannot be said."""
    if not data:
        return "-"
    comp = Completeness(**data)
    return "unknown" if comp.ratio is None else f"{comp.ratio:.1%}"


class LiveRates:
    """Packets per second of each running capture between two refreshes."""

    def __init__(self) -> None:
        self._seen: dict[str, tuple[int, float]] = {}

    def update(self, name: str, packets: int | None, running: bool, now: float) -> float | None:
        previous = self._seen.get(name)
        if not running or packets is None:
            self._seen.pop(name, None)
            return None
        self._seen[name] = (packets, now)
        if previous is None or packets < previous[0] or now <= previous[1]:
            return None
        return (packets - previous[0]) / (now - previous[1])


def rows(backend: Backend, rates: LiveRates) -> list[CaptureRow]:
    """Every capture on the host (running ones asked for their counts), oldest first."""
    now = time.monotonic()
    out = []
    for v in svc.list_captures(backend.host):
        live = rates.update(v.record.name, v.packets, v.state == "running", now)
        out.append(row_of(v, live if live is not None else v.rate_pps))
    return out


def row_of(v: svc.CaptureView, rate_pps: float | None) -> CaptureRow:
    spec = v.record.spec
    running = v.state == "running"
    files = ", ".join(v.record.files) if v.record.files else ("being written" if running else "-")
    return CaptureRow(
        name=v.record.name, state=v.state, on=f"{spec.kind}:{spec.target}", packets=v.packets, rate_pps=rate_pps,
        dropped=v.dropped, size=v.bytes, complete=complete_text(v.record.completeness), files=files,
        reason=v.reason, live=running,
    )  # fmt: skip


def start(backend: Backend, form: CaptureForm) -> CaptureRecord:
    """Start the capture (everything checked first, by the service: nothing is started on a refusal)."""
    return svc.start_form(backend.host, form)


def stop(backend: Backend, name: str) -> CaptureRow:
    """Stop the capture; its final figures."""
    view = svc.stop_view(backend.host, name)
    return row_of(view, view.rate_pps)


def ports(backend: Backend) -> list[tuple[str, str]]:
    """(label, port) of every port of the switch, VIFs first: what a capture may listen on."""
    state = backend.snapshot()
    found = sorted(state.ports.values(), key=lambda p: (not p.is_vif, p.name))
    return [(f"{p.name} ({p.vm_name})" if p.vm_name else p.name, p.name) for p in found]
