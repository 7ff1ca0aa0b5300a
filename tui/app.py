"""The Textual application: wiring only.  Screens hold the views, the backend holds the engine."""

from __future__ import annotations

from collections.abc import Iterable
from functools import partial

from textual.app import App, SystemCommand
from textual.binding import Binding
from textual.screen import Screen

from appliance.host import Host
from appliance.ovsdb import Connection

from .backend import Backend
from .screens import available
from .widgets.banner import ConnectionBanner

CONNECTION_CHECK_S = 0.5
_SCREENS = Binding.Group("Screens", compact=True)


class HvnetApp(App[int]):
    """hvnet operator console."""

    CSS_PATH = "app.tcss"
    TITLE = "hvnet"
    BINDINGS = [
        *(Binding(s.key, f"switch_mode('{s.mode}')", s.title, group=_SCREENS) for s in available()),
        Binding("q", "quit", "Quit"),
    ]

    def __init__(self, conn: Connection, host: Host | None = None, *, start: str = "vifs") -> None:
        super().__init__()
        self.backend = Backend(conn, host)
        self.sections = available()
        self._start_mode = start
        for s in self.sections:
            self.add_mode(s.mode, partial(_make, s))
        self.connected = True

    def on_mount(self) -> None:
        self.sub_title = self.backend.describe()
        self.backend.start(lambda: self.call_from_thread_safe(self._db_changed))
        self.set_interval(CONNECTION_CHECK_S, self._check_connection)
        self.switch_mode(self._start_mode)

    def call_from_thread_safe(self, callback) -> None:
        """Run ``callback`` on the UI thread (the IDL loop calls this from its thread)."""
        try:
            self.call_from_thread(callback)
        except RuntimeError:  # the app is shutting down
            pass

    def _db_changed(self) -> None:
        """The replica changed: tell whichever screens care (they re-read in workers)."""
        for screen in self._live_screens():
            handler = getattr(screen, "db_changed", None)
            if handler is not None:
                handler()

    def _live_screens(self) -> Iterable[Screen]:
        seen = set()
        for stack in self._screen_stacks.values():
            for screen in stack:
                if id(screen) not in seen:
                    seen.add(id(screen))
                    yield screen

    def _check_connection(self) -> None:
        """Show or hide the banner; reconnecting is the IDL session's job (it backs off and retries)."""
        connected = self.backend.connected
        if connected == self.connected:
            return
        self.connected = connected
        for screen in self._live_screens():
            for banner in screen.query(ConnectionBanner):
                banner.set_connected(connected, self.backend.remote)
        if connected:
            self.backend.note(f"reconnected to {self.backend.remote}")
            self._db_changed()
        else:
            self.backend.note(f"OVSDB connection to {self.backend.remote} lost; reconnecting")

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        for s in self.sections:
            yield SystemCommand(f"{s.title} screen", s.help, partial(self.switch_mode, s.mode))
        # every binding of the current screen, so the palette lists each action
        for binding in getattr(screen, "BINDINGS", []):
            if isinstance(binding, Binding) and binding.description and binding.show:
                yield SystemCommand(
                    f"{binding.description} ({binding.key})",
                    f"{screen.__class__.__name__.removesuffix('Screen')}: {binding.description}",
                    partial(self.run_action, binding.action, screen),
                )

    async def on_unmount(self) -> None:
        self.backend.close()


def _make(section) -> Screen:
    return section.load()()


def run(conn: Connection, host: Host, start: str = "vifs") -> int:
    """Open the UI on ``conn`` (made from ``host``) until the operator quits."""
    HvnetApp(conn, host, start=start).run()
    return 0
