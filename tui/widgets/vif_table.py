"""The VIF table: one row per VM interface, keyed by port name, sortable by any column."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Callable

from appliance.core import render
from tui.backend.vifs import Vif
from tui.widgets.keyed_table import KeyedTable
from tui.widgets.spark import sparkline

# Fixed widths: live figures changing length must not shift the columns to their right.
WIDTHS = {
    "VM": 10,
    "Port": 9,
    "VLAN": 13,
    "RX": 10,
    "TX": 10,
    "Ingress": 13,
    "Egress": 13,
    "Activity": 10,
    "Drop/Err": 8,
    "Mirrors": 14,
    "MAC": 17,
}
COLUMNS = tuple(WIDTHS)

# What an enforcement check found, as a mark after the limit (text, so NO_COLOR keeps it).
MARKS = {True: " ✓", False: " ✗", None: " ?"}


def limit_text(kbps: float | None, verified: bool | str | None) -> str:
    """``10.0 Mbit/s ✓`` (verified), ``✗`` (not enforced), ``?`` (could not check); no mark before a check."""
    if not kbps:
        return "-"
    text = render.si(kbps * 1000, "bit/s")
    return text if verified == "unchecked" else text + MARKS[verified]  # type: ignore[index]


# A domain that is not running, as a mark before its name (the 10-column cell keeps
# the name readable; the Edit VIF dialog spells the state out).  Running: no mark.
STATE_MARKS = {"paused": "‖", "shut off": "■", "in shutdown": "↓", "crashed": "✗", "pmsuspended": "z"}


def vm_cell(v: Vif) -> str:
    """The VM's name (or uuid prefix), marked when libvirt says its domain is not running."""
    name = v.vm_name or (v.vm_uuid[:8] if v.vm_uuid else "-")
    mark = STATE_MARKS.get(v.vm_state or "")
    return f"{mark} {name}" if mark else name


def row_for(v: Vif, history: Iterable[float], checked: dict[tuple[str, str], bool | None]) -> tuple[str, ...]:
    rx = render.si(v.rates.rx_bps, "bit/s") if v.rates else "-"
    tx = render.si(v.rates.tx_bps, "bit/s") if v.rates else "-"
    mirrors = ",".join(sorted({f"{m['mirror']}({m['role'][0]})" for m in v.mirrors})) or "-"
    return (
        vm_cell(v),
        v.port,
        v.vlan_summary(),
        rx,
        tx,
        limit_text(v.ingress_policing_rate_kbps, checked.get((v.port, "ingress"), "unchecked")),
        limit_text(v.egress_max_rate_kbps, checked.get((v.port, "egress"), "unchecked")),
        sparkline(list(history)),
        f"{v.drops}/{v.errors}",
        mirrors,
        v.mac or "-",
    )


def _rate(v: Vif, attr: str) -> float:
    return getattr(v.rates, attr) if v.rates else -1.0


SORT_KEYS: dict[str, Callable[[Vif], Any]] = {
    "VM": lambda v: (v.vm_name or "~", v.port),
    "Port": lambda v: v.port,
    "VLAN": lambda v: (v.vlan_mode, v.tag if v.tag is not None else -1, v.trunks),
    "Ingress": lambda v: v.ingress_policing_rate_kbps or 0,
    "Egress": lambda v: v.egress_max_rate_kbps or 0,
    "RX": lambda v: _rate(v, "rx_bps"),
    "TX": lambda v: _rate(v, "tx_bps"),
    "Activity": lambda v: _rate(v, "rx_bps") + _rate(v, "tx_bps"),
    "Drop/Err": lambda v: v.drops + v.errors,
    "Mirrors": lambda v: len(v.mirrors),
    "MAC": lambda v: v.mac or "",
}


class VifTable(KeyedTable):
    """Updates rows in place so the cursor and scroll position survive refreshes."""

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True
        for name in COLUMNS:
            self.add_column(name, key=name, width=WIDTHS[name])

    @property
    def selected_port(self) -> str | None:
        return self.selected_key
