"""Isolation screen: run an ARP/VLAN isolation scenario and read its matrix.

The check is the CLI's ``hvnet isolation check`` run in a worker thread (it
changes the lab switch for a few seconds and captures real traffic), so the
console stays responsive and says that it is running.  Results come back by
message; a cell is only ever coloured from a measured verdict, and an invalid
scenario file shows its validation errors without anything being touched.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from rich.text import Text
from textual import work
from textual.app import ComposeResult
from textual.binding import Binding
from textual.containers import Horizontal, Vertical
from textual.message import Message
from textual.screen import Screen
from textual.widgets import Header, Input, Select, Static

from appliance.core.errors import HvnetError
from tui.backend import isolation as iso
from tui.backend.isolation import CheckResult
from tui.widgets.banner import ConnectionBanner
from tui.widgets.footer import Footer
from tui.widgets.literal import Literal
from tui.widgets.matrix import MatrixTable

TICK_S = 0.2
SEED = "seed-three-vm.yaml"
SPINNER = "|/-\\"


class CheckDone(Message):
    """The worker finished a check."""

    def __init__(self, result: CheckResult) -> None:
        super().__init__()
        self.result = result


class CheckFailed(Message):
    """The worker could not run the check (invalid scenario, no lab, missing tool...)."""

    def __init__(self, text: str) -> None:
        super().__init__()
        self.text = text


def _shown(path: Path) -> str:
    """A path as the operator would type it: relative to the working directory when under it."""
    rel = os.path.relpath(path)
    return path.as_posix() if rel.startswith("..") else rel


class IsolationScreen(Screen[None]):
    CSS_PATH = "isolation.tcss"
    BINDINGS = [
        Binding("r", "run", "Run check"),
        Binding("m", "cycle_method", "Method"),
        Binding("s", "pick_scenario", "Scenario"),
        Binding("p", "type_path", "Path"),
        Binding("escape", "focus_matrix", "Matrix", show=False),
    ]

    def __init__(self) -> None:
        super().__init__()
        self.scenarios = iso.shipped_scenarios()
        self.result: CheckResult | None = None
        self.running = False
        self._started = 0.0
        self._tick = 0
        self._what = ""

    def compose(self) -> ComposeResult:
        seed = next((p for p in self.scenarios if p.name == SEED), None)
        yield Header()
        yield ConnectionBanner()
        with Horizontal(id="controls"):
            yield Select(
                [(p.stem, _shown(p)) for p in self.scenarios],
                prompt="shipped scenario",
                value=_shown(seed) if seed else Select.NULL,
                id="scenario",
            )
            yield Input(value=_shown(seed) if seed else "", placeholder="scenario file (YAML)", id="path")
            yield Select([(m, m) for m in iso.METHOD_CHOICES], value="both", allow_blank=False, id="method")
        yield Literal("choose a scenario and a method, then r to run", id="status")
        with Horizontal(id="matrices"):
            for method in ("traffic", "trace"):
                with Vertical(id=f"col-{method}", classes="matrix-col"):
                    yield Static(f"{method} (row sends, column hears)", classes="matrix-title")
                    yield MatrixTable(method, id=f"matrix-{method}")
        yield Literal("", id="evidence")
        yield Static(self._legend(), id="legend")
        yield Footer()

    @staticmethod
    def _legend() -> Text:
        text = Text()
        for i, (words, style) in enumerate(iso.legend()):
            if i:
                text.append("  ")
            text.append(words, style=style)
        return text

    def on_mount(self) -> None:
        self.set_interval(TICK_S, self._show_progress)
        self.query_one("#scenario", Select).focus()

    # -- choosing ------------------------------------------------------------

    def on_select_changed(self, event: Select.Changed) -> None:
        if event.select.id == "scenario" and isinstance(event.value, str):
            self.query_one("#path", Input).value = event.value

    def on_input_submitted(self, event: Input.Submitted) -> None:
        if event.input.id == "path":
            self.action_run()

    def action_cycle_method(self) -> None:
        box = self.query_one("#method", Select)
        choices = iso.METHOD_CHOICES
        box.value = choices[(choices.index(str(box.value)) + 1) % len(choices)]

    def action_pick_scenario(self) -> None:
        box = self.query_one("#scenario", Select)
        box.focus()
        box.expanded = True

    def action_type_path(self) -> None:
        self.query_one("#path", Input).focus()

    def action_focus_matrix(self) -> None:
        for table in self.query(MatrixTable):
            if table.row_count:
                table.focus()
                return

    # -- running -------------------------------------------------------------

    def action_run(self) -> None:
        if self.running:
            self.notify("a check is already running; it finishes on its own", severity="warning")
            return
        path = self.query_one("#path", Input).value.strip()
        if not path:
            self._status("type a scenario path or pick a shipped scenario first", error=True)
            return
        method = str(self.query_one("#method", Select).value)
        self.running = True
        self._started = time.monotonic()
        self._what = f"{path} ({method})"
        self.result = None  # a verdict shown must come from this run, never the last one
        self._show_result()
        self.add_class("running")
        self._show_progress()
        self._run_check(path, method)

    @work(thread=True, exclusive=True, group="isolation")
    def _run_check(self, path: str, method: str) -> None:
        try:
            result = iso.run(self.app.backend, path, method)
        except HvnetError as exc:
            self.post_message(CheckFailed(str(exc)))
        except Exception as exc:  # a bug must not take the console down; say what it was
            self.post_message(CheckFailed(f"isolation check failed: {type(exc).__name__}: {exc}"))
        else:
            self.post_message(CheckDone(result))

    def _show_progress(self) -> None:
        if not self.running:
            return
        self._tick += 1
        spin = SPINNER[self._tick % len(SPINNER)]
        self._status(f"{spin} running {self._what}: {time.monotonic() - self._started:.1f} s")

    def _finished(self) -> None:
        self.running = False
        self.remove_class("running")

    def on_check_done(self, message: CheckDone) -> None:
        self._finished()
        self.result = message.result
        self._status(iso.summary(message.result), error=message.result.exit_code != 0)
        self._show_result()
        self.action_focus_matrix()

    def on_check_failed(self, message: CheckFailed) -> None:
        self._finished()
        self._status(message.text, error=True)
        self.app.backend.note(f"isolation check not run: {message.text.splitlines()[0]}")

    # -- showing -------------------------------------------------------------

    def _status(self, text: str, *, error: bool = False) -> None:
        status = self.query_one("#status", Static)
        status.update(text)
        status.set_class(error, "error")

    def _show_result(self) -> None:
        result = self.result
        for method in ("traffic", "trace"):
            col = self.query_one(f"#col-{method}", Vertical)
            table = self.query_one(f"#matrix-{method}", MatrixTable)
            if result is None or method not in result.methods:
                table.clear(columns=True)
                table.guests = []
                col.display = False
                continue
            col.display = True
            table.show(result)
        self.query_one("#evidence", Static).update("")

    def on_matrix_table_cell_chosen(self, message: MatrixTable.CellChosen) -> None:
        if self.result is None or message.method not in self.result.methods:
            return
        text = iso.evidence(self.result, message.method, (message.listener, message.sender))
        self.query_one("#evidence", Static).update(text)
