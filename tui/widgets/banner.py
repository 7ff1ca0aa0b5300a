"""The connection-loss banner every screen carries at its top."""

from __future__ import annotations

from textual.widgets import Static


class ConnectionBanner(Static):
    """Hidden while connected; says what is happening while the IDL reconnects."""

    def on_mount(self) -> None:
        app = self.app
        self.set_connected(getattr(app, "connected", True), app.backend.remote if hasattr(app, "backend") else "")

    def set_connected(self, connected: bool, remote: str) -> None:
        if connected:
            self.remove_class("visible")
            return
        self.update(f"! OVSDB connection lost ({remote}): reconnecting; nothing is applied until it is back")
        self.add_class("visible")
