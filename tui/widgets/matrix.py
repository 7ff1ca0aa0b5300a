"""The isolation matrix: one method's verdicts, sender rows by receiver columns.

Each cell carries a text marker as well as a colour (``+ yes``, ``! LEAK``...),
because with NO_COLOR, or on a monochrome console, the colour is gone.  The
cursor moves cell by cell (keys or mouse); the screen shows the evidence of
the highlighted cell.
"""

from __future__ import annotations

from rich.text import Text
from textual.message import Message
from textual.widgets import DataTable

from appliance.core.render import terminal
from tui.backend import isolation as iso
from tui.backend.isolation import CheckResult
from tui.widgets.literal import literal

CORNER = "from↓ to→"


class MatrixTable(DataTable):
    """One method's matrix; rows are senders, columns are the guests that would hear them."""

    class CellChosen(Message):
        """The operator moved to (or clicked) a cell: show its evidence."""

        def __init__(self, table: MatrixTable, method: str, listener: str, sender: str) -> None:
            super().__init__()
            self.table = table
            self.method = method
            self.listener = listener
            self.sender = sender

    def __init__(self, method: str, *, id: str | None = None) -> None:
        super().__init__(id=id, cursor_type="cell", zebra_stripes=False)
        self.method = method
        self.guests: list[str] = []

    def show(self, result: CheckResult) -> None:
        """Fill the matrix from ``result`` (every cell is a measured verdict or unknown)."""
        self.clear(columns=True)
        self.guests = list(result.guests)
        verdicts = result.verdicts(self.method)
        self.add_column(CORNER, key="sender")
        for g in self.guests:
            self.add_column(literal(g), key=g)
        for sender in self.guests:
            cells: list[Text] = [Text(terminal(sender), style="bold")]
            for listener in self.guests:
                if listener == sender:
                    cells.append(Text(iso.SELF, justify="center"))
                    continue
                cell = (listener, sender)
                expected = result.expected.cells[cell]
                verdict = verdicts[cell]
                style = iso.STYLES[iso.cell_kind(expected, verdict)].style
                cells.append(Text(iso.cell_text(expected, verdict), style=style))
            self.add_row(*cells, key=sender)
        if len(self.guests) > 1:
            self.move_cursor(row=0, column=2)

    def chosen(self) -> tuple[str, str] | None:
        """(listener, sender) under the cursor, or None on the sender column."""
        row, column = self.cursor_coordinate
        if not self.guests or column == 0 or row >= len(self.guests) or column > len(self.guests):
            return None
        return self.guests[column - 1], self.guests[row]

    def _announce(self) -> None:
        cell = self.chosen()
        if cell is not None:
            self.post_message(self.CellChosen(self, self.method, *cell))

    def on_data_table_cell_highlighted(self, event: DataTable.CellHighlighted) -> None:
        event.stop()
        self._announce()

    def on_data_table_cell_selected(self, event: DataTable.CellSelected) -> None:
        event.stop()
        self._announce()

    def on_focus(self) -> None:
        self._announce()
