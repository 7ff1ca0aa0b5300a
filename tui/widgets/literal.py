"""Text from outside shown literally in the console: never read as markup, never obeyed by the terminal.

VM, port and mirror names, audit lines, tool output and error messages may
hold Rich markup (``x[/]`` raised ``MarkupError`` over the whole screen) and
control characters (ESC, C1, bidi overrides).  Everything the console shows
of them goes through here: a :class:`~rich.text.Text` (never parsed as
markup) of :func:`appliance.core.render.terminal`'s escaped text, as the command
line shows it.
"""

from __future__ import annotations

from typing import Any, Union

from rich.text import Text
from textual.markup import escape
from textual.widgets import Static

from appliance.core.render import terminal

Cell = Union[str, Text]


def literal(cell: Cell) -> Text:
    """A table cell as shown; a ``Text`` (built by the console itself, styled) is kept as it is.

    DataTable parses a plain ``str`` cell as Rich markup: a mirror named
    ``x[/]`` would raise ``MarkupError`` and ``[b]VM`` would print bold.
    Parsing markup for every cell is also most of a 1000-row table's fill.
    """
    return Text(terminal(cell)) if isinstance(cell, str) else cell


def shown(text: str) -> Text:
    """A block of text (a message, a plan, tool output): its lines kept, nothing else obeyed."""
    return Text(terminal(text, keep="\n"))


def notice(text: str) -> str:
    """A notification's text (``App.notify`` reads markup): escaped as markup and for the terminal."""
    return escape(terminal(text, keep="\n"))


class Literal(Static):
    """A Static whose text, given at creation or by :meth:`update`, is shown by :func:`shown`."""

    def __init__(self, content: Any = "", **kwargs: Any) -> None:
        super().__init__(shown(content) if isinstance(content, str) else content, markup=False, **kwargs)

    def update(self, content: Any = "", *, layout: bool = True) -> None:
        super().update(shown(content) if isinstance(content, str) else content, layout=layout)
