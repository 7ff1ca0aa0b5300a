"""The key bar, rebuilt only when the keys it shows change."""

from __future__ import annotations

from typing import Any

from textual.screen import Screen
from textual.widgets import Footer as _Footer


def shown_keys(screen: Screen) -> tuple[Any, ...]:
    """What a footer on ``screen`` shows: each visible binding with its state."""
    return tuple(
        (b.key, b.action, b.description, b.group, enabled, tooltip)
        for (_node, b, enabled, tooltip) in screen.active_bindings.values()
        if b.show
    )


class Footer(_Footer):
    """Textual's footer, without the rebuilds that change nothing.

    Textual's footer removes and mounts all of its keys whenever the screen
    says its bindings may have changed: five times while the VIF screen
    starts (mount, focus, widgets arriving), a tenth of a second of styling
    on a 2-core host.  This one rebuilds when the keys shown are different.
    """

    _shown: tuple[Any, ...] | None = None

    def bindings_changed(self, screen: Screen) -> None:
        if screen is self.screen and self.is_attached and screen.app.app_focus:
            shown = shown_keys(screen)
            if shown == self._shown:
                return
            self._shown = shown
        super().bindings_changed(screen)
