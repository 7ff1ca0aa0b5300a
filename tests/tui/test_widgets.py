"""The console's own widgets where they depart from Textual's: pure Pilot tests, no switch."""

from __future__ import annotations

from textual.app import App, ComposeResult
from textual.binding import Binding
from textual.widgets import DataTable, Input

from tui.widgets.footer import Footer
from tui.widgets.keyed_table import KeyedTable

ROWS = {f"vif{i}.0": (f"vif{i}.0", f"VM{i}" * (i % 3 + 1), f"access {i}") for i in range(1, 60)}


class _Tables(App[None]):
    def compose(self) -> ComposeResult:
        yield KeyedTable(id="keyed")
        yield DataTable(id="plain")

    def on_mount(self) -> None:
        for table in self.query(DataTable):
            for name, width in (("Port", 9), ("VM", 10), ("VLAN", 13)):
                table.add_column(name, key=name, width=width)


async def test_fixed_width_table_lays_out_as_datatable_does_without_measuring() -> None:
    """The skipped measurements change nothing: same widths, same virtual size, same rows shown."""
    app = _Tables()
    async with app.run_test(size=(120, 40)) as pilot:
        keyed, plain = app.query_one("#keyed", KeyedTable), app.query_one("#plain", DataTable)
        keyed.show(ROWS)
        for key in ROWS:
            plain.add_row(*(keyed.get_cell(key, c) for c in ("Port", "VM", "VLAN")), key=key)
        await pilot.pause()
        assert keyed.virtual_size == plain.virtual_size
        assert [c.get_render_width(keyed) for c in keyed.ordered_columns] == [
            c.get_render_width(plain) for c in plain.ordered_columns
        ]
        assert [keyed.render_line(y).text for y in range(5)] == [plain.render_line(y).text for y in range(5)]


async def test_auto_width_columns_are_still_measured() -> None:
    class _Auto(App[None]):
        def compose(self) -> ComposeResult:
            yield KeyedTable()

        def on_mount(self) -> None:
            self.query_one(KeyedTable).add_column("Name", key="Name")

    app = _Auto()
    async with app.run_test(size=(80, 24)) as pilot:
        table = app.query_one(KeyedTable)
        table.show({"a": ("a" * 30,)})
        await pilot.pause()
        assert table.ordered_columns[0].content_width == 30


class _SortableTable(DataTable):
    BINDINGS = [Binding("s", "sort", "Sort")]


class _Keys(App[None]):
    BINDINGS = [Binding("f2", "noop", "Ex")]

    def compose(self) -> ComposeResult:
        yield Input(id="box")
        yield _SortableTable(id="table")
        yield Footer()

    def action_noop(self) -> None:
        pass


async def test_footer_redraws_only_when_its_keys_change_and_its_keys_click() -> None:
    app = _Keys()
    async with app.run_test(size=(80, 24)) as pilot:
        footer = app.query_one(Footer)
        await pilot.pause()
        first = footer._shown
        assert first is not None and any(b.key == "f2" for b, _ in first)
        assert footer.render().plain.split() == ["f2", "Ex", "▏^p", "palette"]
        drawn = []
        real = footer.refresh

        def counted(*args, **kwargs):
            drawn.append(1)
            return real(*args, **kwargs)

        footer.refresh = counted  # type: ignore[method-assign]
        app.screen.refresh_bindings()  # nothing changed: no redraw
        await pilot.pause()
        assert drawn == [] and footer._shown == first
        app.query_one("#table").focus()  # the table shows a key the box does not: one redraw
        await pilot.pause()
        assert drawn and any(b.key == "s" for b, _ in footer._shown or ())
        assert "Sort" in footer.render().plain
        sorted_ = []
        app.query_one("#table").action_sort = lambda: sorted_.append(1)  # type: ignore[attr-defined]
        offset = footer.render().plain.index("Sort")
        await pilot.click(Footer, offset=(offset, 0))  # a key in the bar is a button
        await pilot.pause()
        assert sorted_ == [1]
