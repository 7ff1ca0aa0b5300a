"""Log screen: the audit log of changes to this switch, and hvnet's own messages.

The audit log is a file other hvnet processes append to, so it is re-read in
a worker when the OVSDB replica changes (every hvnet change commits there) --
once at once and once a moment later, because the CLI writes its audit line
just after its commit -- and slowly on a timer for changes that never touch
the database.  hvnet's messages arrive from any thread through
``backend.on_message`` and are posted to the screen as messages.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widgets import DataTable, Header, Input, Static

from tui.backend import MESSAGES_KEPT, LogLine
from tui.widgets.banner import ConnectionBanner
from tui.widgets.footer import Footer
from tui.widgets.literal import Literal, literal

AUDIT_KEPT = 200
AUDIT_POLL_S = 5.0
AUDIT_LATE_S = 1.0  # the CLI writes its audit line just after its commit
COMMAND_WIDTH = 36
RESULT_WIDTH = 24
VIEWS = ("both", "audit", "messages")


class AuditRead(Message):
    def __init__(self, entries: list[dict[str, Any]]) -> None:
        super().__init__()
        self.entries = entries


class MessageArrived(Message):
    def __init__(self, line: LogLine) -> None:
        super().__init__()
        self.line = line


def _clip(text: str, width: int) -> str:
    return text if len(text) <= width else text[: width - 1] + "…"


def _one_line(value: Any) -> str:
    """A value of the audit log on one line of the detail: its own line ends shown escaped."""
    return str(value).replace("\n", "\\x0a")


def _when(iso_time: str) -> str:
    """Audit times are UTC ISO; the operator reads local time."""
    try:
        return datetime.fromisoformat(iso_time.replace("Z", "+00:00")).astimezone().strftime("%m-%d %H:%M:%S")
    except (ValueError, AttributeError):
        return str(iso_time)


def changes_summary(entry: dict[str, Any]) -> str:
    """``vif3.0 vlan: access 2 -> access 7; ...`` from an audit entry's before/after lists."""
    before, after = entry.get("before") or [], entry.get("after") or []
    parts = []
    for i, a in enumerate(after):
        b = before[i] if i < len(before) and isinstance(before[i], dict) else {}
        if not isinstance(a, dict):
            continue
        parts.append(f"{a.get('name', '?')} {a.get('kind', '?')}: {b.get('value', '?')} -> {a.get('value', '?')}")
    if not parts:
        return "no change"
    return "; ".join(parts)


def audit_row(entry: dict[str, Any]) -> tuple[str, str, str, str, str]:
    """Time, user, command, result, changes: one audit entry as the table shows it."""
    return (
        _when(entry.get("time", "")),
        str(entry.get("user", "?")),
        _clip(str(entry.get("command", "?")), COMMAND_WIDTH),
        _clip(str(entry.get("result", "?")), RESULT_WIDTH),
        changes_summary(entry),
    )


def message_row(line: LogLine) -> tuple[str, str, str]:
    return (datetime.fromtimestamp(line.when).strftime("%H:%M:%S"), line.level, line.text)


def matches(cells: tuple[str, ...], text: str) -> bool:
    """Filter as you type: every word must appear somewhere in the row (case-insensitive)."""
    row = " ".join(cells).lower()
    return all(word in row for word in text.lower().split())


class LogScreen(Screen[None]):
    CSS_PATH = "log.tcss"
    BINDINGS = [
        Binding("v", "cycle_view", "View"),
        Binding("slash", "filter", "Filter"),
        Binding("escape", "clear_filter", "Clear filter", show=False),
        Binding("r", "refresh", "Refresh"),
        Binding("end", "bottom", "Newest", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.entries: list[dict[str, Any]] = []
        self.shown_entries: list[dict[str, Any]] = []
        self.lines: list[LogLine] = []
        self.filter_text = ""
        self.view = "both"

    def compose(self) -> ComposeResult:
        yield Header()
        yield ConnectionBanner()
        yield Input(placeholder="filter: user, command, port, message", id="filter")
        with Vertical(id="audit-pane", classes="pane"):
            yield Static("audit log (newest at the bottom)", id="audit-title", classes="pane-title")
            yield DataTable(id="audit", cursor_type="row", zebra_stripes=True)
            yield Literal("", id="audit-detail")
        with Vertical(id="messages-pane", classes="pane"):
            yield Static("hvnet messages", id="messages-title", classes="pane-title")
            yield DataTable(id="messages", cursor_type="row", zebra_stripes=True)
        yield Footer()

    def on_mount(self) -> None:
        audit = self.query_one("#audit", DataTable)
        for name in ("Time", "User", "Command", "Result", "Changes"):
            audit.add_column(name, key=name)
        messages = self.query_one("#messages", DataTable)
        for name in ("Time", "Level", "Message"):
            messages.add_column(name, key=name)
        backend = self.app.backend
        # listen first, then copy what is already there: nothing is lost between the two
        backend.on_message(self._from_any_thread)
        self.lines = list(backend.messages)
        self._show_messages()
        audit.focus()
        self.set_interval(AUDIT_POLL_S, self.action_refresh)
        self.action_refresh()

    def _from_any_thread(self, line: LogLine) -> None:
        """backend.on_message callback: post_message is safe from any thread, the UI's included."""
        self.post_message(MessageArrived(line))

    def db_changed(self) -> None:
        self.action_refresh()
        self.set_timer(AUDIT_LATE_S, self.action_refresh)

    # -- audit ---------------------------------------------------------------

    @work(thread=True, exclusive=True, group="audit")
    def action_refresh(self) -> None:
        self.post_message(AuditRead(self.app.backend.audit(last=AUDIT_KEPT)))

    def on_audit_read(self, message: AuditRead) -> None:
        if message.entries == self.entries:
            return
        self.entries = message.entries
        self._show_audit()

    def _show_audit(self) -> None:
        table = self.query_one("#audit", DataTable)
        shown = [(e, audit_row(e)) for e in self.entries]
        if self.filter_text:
            shown = [(e, r) for e, r in shown if matches(r, self.filter_text)]
        self.shown_entries = [e for e, _ in shown]
        rows = [r for _, r in shown]
        table.clear()
        for cells in rows:
            table.add_row(*map(literal, cells))
        self._show_detail()
        self.query_one("#audit-title", Static).update(
            f"audit log: {len(rows)} of the last {len(self.entries)} entries (newest at the bottom)"
            if self.filter_text
            else f"audit log: last {len(self.entries)} entries (newest at the bottom)"
        )
        if rows:
            table.move_cursor(row=len(rows) - 1)

    def on_data_table_row_highlighted(self, event: DataTable.RowHighlighted) -> None:
        if event.data_table.id == "audit":
            self._show_detail()

    def _show_detail(self) -> None:
        """The highlighted entry in full: the table cuts long commands and results at 80 columns."""
        row = self.query_one("#audit", DataTable).cursor_row
        detail = self.query_one("#audit-detail", Static)
        if not 0 <= row < len(self.shown_entries):
            detail.update("no audit entries yet" if not self.entries else "")
            return
        entry = self.shown_entries[row]
        detail.update(  # a Literal: audit lines are text from any hvnet run, never markup, never obeyed
            f"{_when(entry.get('time', ''))} {entry.get('user', '?')}: {_one_line(entry.get('command', '?'))}\n"
            f"  {_one_line(entry.get('result', '?'))}: {_one_line(changes_summary(entry))}"
        )

    # -- messages ------------------------------------------------------------

    def on_message_arrived(self, message: MessageArrived) -> None:
        line = message.line
        if any(line is seen for seen in self.lines[-50:]):
            return  # copied at mount and announced too
        self.lines.append(line)
        del self.lines[:-MESSAGES_KEPT]
        cells = message_row(line)
        if self.filter_text and not matches(cells, self.filter_text):
            return
        table = self.query_one("#messages", DataTable)
        follow = table.cursor_row >= table.row_count - 1
        table.add_row(*map(literal, cells))
        if table.row_count > MESSAGES_KEPT:
            table.remove_row(next(iter(table.rows)))
        if follow:
            table.move_cursor(row=table.row_count - 1)

    def _show_messages(self) -> None:
        table = self.query_one("#messages", DataTable)
        rows = [message_row(x) for x in self.lines]
        if self.filter_text:
            rows = [r for r in rows if matches(r, self.filter_text)]
        table.clear()
        for cells in rows:
            table.add_row(*map(literal, cells))
        if rows:
            table.move_cursor(row=len(rows) - 1)

    # -- view and filter -----------------------------------------------------

    def action_cycle_view(self) -> None:
        self.view = VIEWS[(VIEWS.index(self.view) + 1) % len(VIEWS)]
        self.query_one("#audit-pane").display = self.view in ("both", "audit")
        self.query_one("#messages-pane").display = self.view in ("both", "messages")
        self.query_one("#audit" if self.view != "messages" else "#messages", DataTable).focus()

    def action_bottom(self) -> None:
        for table in self.query(DataTable):
            if table.row_count:
                table.move_cursor(row=table.row_count - 1)

    def action_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.add_class("visible")
        box.focus()

    def action_clear_filter(self) -> None:
        box = self.query_one("#filter", Input)
        box.value = ""
        box.remove_class("visible")
        self.query_one("#audit" if self.view != "messages" else "#messages", DataTable).focus()

    def on_input_changed(self, event: Input.Changed) -> None:
        self.filter_text = event.value.strip()
        self._show_audit()
        self._show_messages()
