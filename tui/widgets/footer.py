"""The key bar: one line, one widget, redrawn only when the keys it shows change."""

from __future__ import annotations

from rich.style import Style
from rich.text import Text
from textual.binding import Binding
from textual.screen import Screen
from textual.widget import Widget


def shown_keys(screen: Screen) -> tuple[tuple[Binding, bool], ...]:
    """What a footer on ``screen`` shows: each visible binding and whether it is enabled."""
    return tuple((b, enabled) for (_node, b, enabled, _tooltip) in screen.active_bindings.values() if b.show)


class Footer(Widget):
    """The screen's keys, as Textual's footer shows them, drawn as one line of text.

    Textual's footer is a container of one widget per key, each styled by the
    stylesheet when it mounts and again when its ``compact`` flag is set:
    about a fifth of a second of the VIF screen's first paint on a 2-core
    host, for a line of text.  This one renders the same keys itself; a key
    is still clickable (it simulates the key press), and a disabled one is
    dimmed.  It redraws only when the keys shown change.
    """

    COMPONENT_CLASSES = {"footer--key", "footer--description"}
    DEFAULT_CSS = """
    Footer {
        dock: bottom;
        height: 1;
        color: $footer-foreground;
        background: $footer-background;
        .footer--key {
            color: $footer-key-foreground;
            background: $footer-key-background;
            text-style: bold;
        }
        .footer--description {
            color: $footer-description-foreground;
            background: $footer-description-background;
        }
    }
    """
    ALLOW_SELECT = False

    _shown: tuple[tuple[Binding, bool], ...] | None = None

    def on_mount(self) -> None:
        self.screen.bindings_updated_signal.subscribe(self, self.bindings_changed)
        self.bindings_changed(self.screen)

    def on_unmount(self) -> None:
        self.screen.bindings_updated_signal.unsubscribe(self)

    def bindings_changed(self, screen: Screen) -> None:
        if screen is not self.screen or not self.is_attached:
            return
        shown = shown_keys(screen)
        if shown != self._shown:
            self._shown = shown
            self.refresh()

    def __init__(self, *, compact: bool = False, id: str | None = None, classes: str | None = None) -> None:
        super().__init__(id=id, classes=classes)
        self.compact = compact  # less space around the keys (a screen with many)

    def render(self) -> Text:
        key_style = self.get_component_rich_style("footer--key")
        description_style = self.get_component_rich_style("footer--description")
        pad = "" if self.compact else " "
        text = Text(no_wrap=True, overflow="ellipsis", end="")
        for group, bindings in _grouped(self._shown or ()):
            if group is not None:
                text.append(pad, key_style)
            for binding, enabled in bindings:
                dim = Style(dim=True) if not enabled else Style()
                click = Style.from_meta({"@click": f"app.simulate_key({binding.key!r})"})
                around = "" if group is not None else pad  # a group's keys sit side by side: "123456"
                text.append(f"{around}{self.app.get_key_display(binding)}{around}", key_style + dim + click)
                if group is None:  # " r Refresh ", compact "r Refresh ", as Textual's footer spaces them
                    text.append(f"{' ' if self.compact else ''}{binding.description} ", description_style + dim + click)
            if group is not None:
                text.append(pad, key_style)
                text.append(f" {group} ", description_style)
        palette = self._palette()
        if palette is None:
            return text
        # the command palette's key, kept at the right as Textual's footer has it; the keys give way
        key, description = palette
        text.rstrip()
        room = self.size.width - text.cell_len - 1  # what is left beside the keys, "▏" included
        label = f"{key} {description} " if room >= len(key) + len(description) + 2 else key  # squeezed: the key
        text.truncate(max(0, self.size.width - 1 - len(label)), overflow="ellipsis", pad=True)
        click = Style.from_meta({"@click": "app.command_palette"})
        text.append("▏", description_style)
        text.append(key, key_style + click)
        text.append(label[len(key) :], description_style + click)
        return text

    def _palette(self) -> tuple[str, str] | None:
        app = self.app
        if not app.ENABLE_COMMAND_PALETTE or not self.is_attached:
            return None
        found = self.screen.active_bindings.get(app.COMMAND_PALETTE_BINDING)
        if found is None:
            return None
        binding = found[1]
        return app.get_key_display(binding), binding.description


def _grouped(shown: tuple[tuple[Binding, bool], ...]) -> list[tuple[str | None, list[tuple[Binding, bool]]]]:
    """One entry per action, consecutive bindings of one group together under its description
    (the screen keys 1-6: "123456 Screens"), as Textual's footer shows them."""
    out: list[tuple[str | None, list[tuple[Binding, bool]]]] = []
    seen: set[str] = set()
    for binding, enabled in shown:
        if binding.action in seen:
            continue
        seen.add(binding.action)
        group = binding.group.description if binding.group is not None else None
        if group is not None and out and out[-1][0] == group:
            out[-1][1].append((binding, enabled))
        else:
            out.append((group, [(binding, enabled)]))
    # a group of one shows as a plain key with its own description
    return [(g if len(b) > 1 else None, b) for g, b in out]
