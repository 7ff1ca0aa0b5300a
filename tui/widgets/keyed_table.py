"""A DataTable whose rows are keyed and refreshed in place, so the cursor and scroll survive live updates."""

from __future__ import annotations

from collections.abc import Iterable

from textual.widgets import DataTable
from textual.widgets.data_table import RowKey

from tui.widgets.literal import Cell, literal

__all__ = ["Cell", "KeyedTable", "literal"]


class KeyedTable(DataTable):
    """Rows keyed by a string; :meth:`show` rebuilds only when rows come, go or move."""

    UPDATE_WIDTH = False  # widen a column when a refreshed cell is longer (fixed widths stay as they are)

    @property
    def selected_key(self) -> str | None:
        keys = list(self.rows)
        if keys and 0 <= self.cursor_row < len(keys):
            return keys[self.cursor_row].value
        return None

    def show(self, rows: dict[str, tuple[Cell, ...]]) -> None:
        """Show ``rows`` (key -> cells, one per column) in the given order; ``str`` cells literally."""
        rows = {key: tuple(literal(c) for c in cells) for key, cells in rows.items()}
        current = [k.value for k in self.rows]
        if current != list(rows):
            # Rows came or went, or the order or filter changed: rebuild and
            # keep the cursor on the same row.
            selected = self.selected_key
            self.clear()
            for key, cells in rows.items():
                self.add_row(*cells, key=key)
            if selected in rows:
                self.move_cursor(row=list(rows).index(selected))
            return
        columns = [c.value for c in self.columns]
        for key, cells in rows.items():
            for col, cell in zip(columns, cells):
                if self.get_cell(key, col) != cell:
                    self.update_cell(key, col, cell, update_width=self.UPDATE_WIDTH)

    def _update_dimensions(self, new_rows: Iterable[RowKey]) -> None:
        """Measure new rows only where a measurement can change something.

        DataTable measures every cell of every new row to widen auto-width
        columns.  When every column has a fixed width and no row has a label
        (all of hvnet's tables but the ones sized to their content), the
        widths cannot change: on a 1000-VIF host those 11,000 measurements
        were a third of the first paint.  The virtual size is still computed.
        """
        if any(c.auto_width for c in self.columns.values()) or any(r.label is not None for r in self.rows.values()):
            super()._update_dimensions(new_rows)
        else:
            super()._update_dimensions(())
