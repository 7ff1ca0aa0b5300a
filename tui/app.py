"""The Textual application: wiring only.  Screens hold the views, the backend holds the engine."""

from __future__ import annotations

import logging
from collections.abc import Iterable
from functools import partial
from typing import TYPE_CHECKING, Any

from textual import events, work
from textual.app import App, ComposeResult, SystemCommand
from textual.binding import Binding
from textual.screen import ModalScreen, Screen
from textual.timer import Timer

from appliance.core.errors import HvnetError
from appliance.core.ovsdb import Connection
from appliance.core.render import terminal
from appliance.switch.host import Host
from tui.backend import Backend, fleet
from tui.screens import available
from tui.widgets.banner import ConnectionBanner
from tui.widgets.literal import Literal, notice

if TYPE_CHECKING:
    from tui.backend.plans import Pending  # annotations only: the dialogs load the module when first used

CONNECTION_CHECK_S = 0.5
_SWITCHING = "_switching"  # the mode shown while the screens are rebuilt on another host
_SCREENS = Binding.Group("Screens", compact=True)


class HvnetApp(App[int]):
    """hvnet operator console."""

    CSS_PATH = "app.tcss"
    TITLE = "hvnet"
    BINDINGS = [
        *(Binding(s.key, f"switch_mode('{s.mode}')", s.title, group=_SCREENS) for s in available()),
        Binding("h", "pick_host", "Switch host", show=False),
        Binding("q", "quit", "Quit"),
        Binding("ctrl+o", "keep_change", "Keep change", show=False),
    ]

    def __init__(
        self,
        conn: Connection,
        host: Host | None = None,
        *,
        start: str = "vifs",
        timeout: float = 5.0,
        name: str | None = None,
        local: fleet.LocalFactory | None = None,
    ) -> None:
        """``name``: what the operator called the host (an inventory name); ``local``: how to reach this
        machine's switch again (default: the starting host when it is local, else the machine's own)."""
        super().__init__()
        self.backend = Backend(conn, host, timeout=timeout)
        first = self.backend.host
        self.host_name = name or (fleet.LOCAL if first.label is None else first.label)
        self.local_host: fleet.LocalFactory = local or ((lambda: first) if first.label is None else fleet.default_local)
        self._switching: str | None = None  # the host being opened
        self.leaving = False  # the operator quit
        if start == "vifs":
            self.backend.prefetch()  # the first screen's table
        self.sections = available()
        self._start_mode = start
        for s in self.sections:
            self.add_mode(s.mode, partial(_make, s))
        self.connected = True
        self.pending: Pending | None = None  # an apply of this console's waiting for ctrl+o
        self._pending_timer: Timer | None = None

    def on_mount(self) -> None:
        self._measure_at(self.size.width, self.size.height)
        self._show_host()
        self.backend.start(lambda: self.call_from_thread_safe(self._db_changed))
        self.set_interval(CONNECTION_CHECK_S, self._check_connection)
        self.switch_mode(self._start_mode)

    def on_resize(self, event: events.Resize) -> None:
        self._measure_at(event.size.width, event.size.height)

    def _measure_at(self, width: int, height: int) -> None:
        """Give the Rich console the screen's size.

        Every table cell is measured on its console; a console without a size
        asks the terminal for it each time (three failing calls per cell
        without one), which was a good part of filling a 1000-VIF table.
        """
        self.console.size = (width, height)

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
            if handler is not None and screen.is_mounted:  # a screen made but not yet shown reads on mount
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

    # -- apply with automatic rollback -------------------------------------------------

    def watch_pending(self, pending: Pending) -> None:
        """An apply made here awaits confirmation: say how long is left and how to keep it."""
        self.pending = pending
        self.notify(
            f"{pending.changes} change(s) roll back automatically in {pending.seconds_left:.0f} s "
            "unless confirmed: ctrl+o keeps them",
            title="Not confirmed yet",
            timeout=max(pending.seconds_left, 1.0),
        )
        if self._pending_timer is None:
            self._pending_timer = self.set_interval(1.0, self._pending_tick)

    def _pending_tick(self) -> None:
        """Past the deadline, say what became of the change once the journal knows."""
        pending = self.pending
        if pending is None or pending.seconds_left > 0:
            return
        result = self.backend.outcome(pending)  # two small local files
        if result is None:
            return
        self.pending = None
        if result == "rolled back":
            self.notify(f"{pending.changes} change(s) not confirmed in time: rolled back", severity="warning")
        else:
            self.notify(f"{pending.changes} change(s) kept (confirmed elsewhere)")
        self._notify_pending_changed()

    def action_keep_change(self) -> None:
        """Confirm (commit) the pending change, whichever screen or dialog is open."""
        self.commit_pending()

    @work(thread=True, exclusive=True, group="commit")
    def commit_pending(self) -> None:
        try:
            done = self.backend.commit()
        except HvnetError as exc:
            self.call_from_thread(self._committed, None, f"✗ {exc}")
            return
        self.call_from_thread(self._committed, done, None)

    def _committed(self, done: Pending | None, error: str | None) -> None:
        if error is not None:
            self.pending = None
            self.notify(notice(error), severity="error")
        elif done is None:
            self.notify("nothing to confirm: no change is waiting")
        else:
            self.pending = None
            self.clear_notifications()
            self.notify(f"kept {done.changes} change(s); automatic rollback cancelled")
        self._notify_pending_changed()

    def _notify_pending_changed(self) -> None:
        for screen in self._live_screens():
            handler = getattr(screen, "pending_changed", None)
            if handler is not None:
                handler()

    def get_system_commands(self, screen: Screen) -> Iterable[SystemCommand]:
        yield from super().get_system_commands(screen)
        if self.pending is not None:
            yield SystemCommand("Keep change (ctrl+o)", "Confirm the change that rolls back unless confirmed",
                                self.action_keep_change)  # fmt: skip
        for s in self.sections:
            yield SystemCommand(f"{s.title} screen", s.help, partial(self.switch_mode, s.mode))
        yield SystemCommand("Switch host (h)", f"now {self.host_name}: pick local or an inventory host",
                            self.action_pick_host)  # fmt: skip
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
        self.backend.host.close()

    # -- the host the console works on ---------------------------------------------------

    def _show_host(self) -> None:
        self.sub_title = terminal(f"{self.host_name} · {self.backend.describe()}")  # plain text: escaped

    def action_pick_host(self) -> None:
        """Open the host picker (the Fleet screen's enter does the same for its row)."""
        from tui.dialogs.host_picker import HostPicker  # loaded when first used

        if isinstance(self.screen, HostPicker):
            return
        if isinstance(self.screen, ModalScreen):
            self.notify("close this dialog first, then switch hosts", severity="warning")
            return
        self.push_screen(HostPicker(self.host_name), callback=lambda name: self.select_host(name) if name else None)

    def select_host(self, name: str, then: str | None = None) -> None:
        """Switch every screen to host ``name`` (then show screen ``then``); the current host stays on failure."""
        if name == self.host_name:
            if then is not None:
                self.switch_mode(then)
            return
        refused = self._cannot_switch()
        if refused is not None:
            self.notify(notice(refused), severity="warning")
            return
        if self._switching is not None:
            self.notify(notice(f"already connecting to {self._switching}"), severity="warning")
            return
        self._switching = name
        self.notify(notice(f"connecting to {name}..."), timeout=2)
        self._open_host(name, then)

    def _cannot_switch(self) -> str | None:
        """Why the console must stay on its host now (None: it may switch).

        A change waiting for ctrl+o belongs to this host, and a dialog may be
        in the middle of an apply on this host's connection: neither is left
        behind by a switch.
        """
        if self.pending is not None:
            return (f"a change on {self.host_name} waits for confirmation: ctrl+o keeps it; switch hosts once it "
                    "is kept or rolled back")  # fmt: skip
        if isinstance(self.screen, ModalScreen):
            return "a dialog is open: close it, then switch hosts"
        return None

    @work(thread=True, exclusive=True, group="switch-host")
    def _open_host(self, name: str, then: str | None) -> None:
        try:
            host, conn = fleet.open_host(name, self.local_host, self.backend.timeout)
        except (HvnetError, OSError) as exc:
            self.call_from_thread(self._host_failed, name, getattr(exc, "message", None) or str(exc))
            return
        self.call_from_thread(self._host_opened, name, host, conn, then)

    def _host_failed(self, name: str, error: str) -> None:
        self._switching = None
        text = f"✗ cannot switch to {name}: {error}; still on {self.host_name}"
        self.backend.note(text, logging.WARNING)
        self.notify(notice(text), severity="error", timeout=8)

    def exit(self, *args: Any, **kwargs: Any) -> None:
        self.leaving = True  # a host switch under way stops rebuilding the screens Textual is closing
        super().exit(*args, **kwargs)

    async def _host_opened(self, name: str, host: Host, conn: Connection, then: str | None) -> None:
        """Rebuild every screen but the Fleet on the new backend, then close the old host."""
        refused = self._cannot_switch()  # the operator went on working while the host was being opened
        if refused is not None or self.leaving:
            self._switching = None
            if refused is not None:
                self.notify(notice(f"not switched to {name}: {refused}"), severity="warning")
            self._close_host(conn, host)  # quick: its replica never started
            return
        old = self.backend
        target = then or self.current_mode
        self.add_mode(_SWITCHING, partial(Switching, name))
        await self.switch_mode(_SWITCHING)
        for s in self.sections:
            if self.leaving:
                self._close_host(conn, host)
                return
            if s.mode != "fleet":
                await self.remove_mode(s.mode)  # its screens go, their workers cancelled
                self.add_mode(s.mode, partial(_make, s))
        old.release_logging()
        self.backend = Backend(conn, host, timeout=old.timeout, messages=old.messages)
        self.backend.start(lambda: self.call_from_thread_safe(self._db_changed))
        self.host_name, self._switching = name, None
        self.connected = True
        self._show_host()
        self._close_old(old)
        if self.leaving:  # the new backend is closed with the app
            return
        if target == "vifs":
            self.backend.prefetch()
        await self.switch_mode(target)
        if not self.leaving:
            await self.remove_mode(_SWITCHING)
        self.backend.note(f"console switched to host {name} ({self.backend.describe()})")
        for screen in self._live_screens():
            handler = getattr(screen, "host_changed", None)
            if handler is not None and screen.is_mounted:
                handler()

    def _close_host(self, conn: Connection, host: Host) -> None:
        """A host opened but not switched to (its replica never started: an SSH ``-O exit`` at most)."""
        conn.close()
        if host is not self.backend.host:
            host.close()

    @work(thread=True, group="close-host")
    def _close_old(self, old: Backend) -> None:
        """The previous host's OVSDB connection, then its SSH master (seconds when the host went away)."""
        old.close_connection()
        if old.host is not self.backend.host:
            old.host.close()


def _make(section) -> Screen:
    return section.load()()


class Switching(Screen[None]):
    """Shown for the moment the screens are rebuilt on another host."""

    def __init__(self, name: str) -> None:
        super().__init__()
        self.host = name

    def compose(self) -> ComposeResult:
        yield Literal(f"switching to {self.host}...")


def run(
    conn: Connection,
    host: Host,
    start: str = "vifs",
    timeout: float = 5.0,
    name: str | None = None,
    local: fleet.LocalFactory | None = None,
) -> int:
    """Open the UI on ``conn`` (made from ``host``; its replica synced or not) until the operator quits."""
    HvnetApp(conn, host, start=start, timeout=timeout, name=name, local=local).run()
    return 0
