"""The VIF table: one row per VM interface, keyed by port name."""

from __future__ import annotations

from textual.widgets import DataTable

from appliance import render
from appliance.inventory import Vif

COLUMNS = ("VM", "Port", "MAC", "VLAN", "Ingress", "Egress", "RX", "TX", "Drop/Err")


def row_for(v: Vif) -> tuple[str, ...]:
    rx = render.si(v.rates.rx_bps, "bit/s") if v.rates else "-"
    tx = render.si(v.rates.tx_bps, "bit/s") if v.rates else "-"
    return (
        v.vm_name or (v.vm_uuid[:8] if v.vm_uuid else "-"),
        v.port,
        v.mac or "-",
        v.vlan_summary(),
        render.kbps(v.ingress_policing_rate_kbps),
        render.kbps(v.egress_max_rate_kbps),
        rx,
        tx,
        f"{v.drops}/{v.errors}",
    )


class VifTable(DataTable):
    """Updates rows in place so the cursor and scroll position survive refreshes."""

    def on_mount(self) -> None:
        self.cursor_type = "row"
        self.zebra_stripes = True
        for name in COLUMNS:
            self.add_column(name, key=name)

    def show(self, vifs: list[Vif]) -> None:
        wanted = {v.port: row_for(v) for v in vifs}
        current = [k.value for k in self.rows]
        if current != list(wanted):
            # Rows came or went (or the filter changed): rebuild in inventory
            # order and keep the cursor on the same VIF.
            selected = current[self.cursor_row] if current and 0 <= self.cursor_row < len(current) else None
            self.clear()
            for port, cells in wanted.items():
                self.add_row(*cells, key=port)
            if selected in wanted:
                self.move_cursor(row=list(wanted).index(selected))
            return
        for port, cells in wanted.items():
            for col, cell in zip(COLUMNS, cells):
                if self.get_cell(port, col) != cell:
                    self.update_cell(port, col, cell)
