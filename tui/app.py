"""The Textual application: wiring only.  Screens hold the views."""

from __future__ import annotations

from textual.app import App
from textual.binding import Binding

from appliance.ovsdb import Connection

from .screens.vifs import VifsScreen


class HvnetApp(App[int]):
    """hvnet operator console."""

    CSS_PATH = "app.tcss"
    TITLE = "hvnet"
    BINDINGS = [Binding("q", "quit", "Quit")]

    def __init__(self, conn: Connection) -> None:
        super().__init__()
        self.conn = conn

    def on_mount(self) -> None:
        self.sub_title = self.conn.target.describe()
        self.push_screen(VifsScreen(self.conn))


def run(conn: Connection) -> int:
    """Open the UI on ``conn`` until the operator quits."""
    try:
        HvnetApp(conn).run()
    finally:
        conn.close()
    return 0
