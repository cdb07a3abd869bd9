"""A table that fits the terminal: the rule every wide table of the CLI follows.

Each column is never narrower than its widest value (no ``servin``, no ``0.10.``). When the
terminal is too narrow, the optional columns give way first, in the order given; the folded
columns (free text: an error, a phase) may shrink to their minimum and wrap. When even that does
not fit, the table turns into one block per row (``id`` then ``column: value`` lines), so an
80-column terminal always reads it whole.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence

import attrs
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.table import Table
from rich.text import Text


def _plain(_column: str, value: str) -> Text:
    return Text(value)


@attrs.frozen
class FittedTable:
    """``rows`` (column -> text) under ``columns``; ``gives_way``: the optional columns, the
    first to go first; ``folded``: column -> the narrowest it may wrap to; ``wide``: the
    folded column that takes the spare width; ``cell``: how a value is styled."""

    title: str
    columns: Sequence[str]
    rows: Sequence[Mapping[str, str]]
    gives_way: Sequence[str] = ()
    folded: Mapping[str, int] = attrs.field(factory=dict)
    wide: str | None = None
    cell: Callable[[str, str], Text] = _plain

    def width(self, columns: Iterable[str]) -> int:
        """The width a table of ``columns`` needs: each column its widest cell (the folded
        ones their minimum), plus padding and borders."""
        total = 1
        for column in columns:
            widest = max([len(column), *(len(row[column]) for row in self.rows)])
            total += min(widest, self.folded.get(column, widest)) + 3
        return total

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        columns = list(self.columns)
        for optional in self.gives_way:
            if self.width(columns) <= options.max_width:
                break
            columns.remove(optional)
        if self.width(columns) <= options.max_width:
            yield self._table(columns)
        else:
            yield from self._blocks()

    def _table(self, columns: list[str]) -> Table:
        table = Table(title=self.title, title_justify="left")
        for column in columns:
            folded = column in self.folded
            table.add_column(
                column,
                no_wrap=not folded,
                overflow="fold",
                min_width=None if folded else self.width([column]) - 4,
                ratio=2 if column == self.wide else None,
            )
        for row in self.rows:
            table.add_row(*[self.cell(column, row[column]) for column in columns])
        return table

    def _blocks(self) -> Iterable[RenderableType]:
        yield Text(self.title, style="italic")
        first, *rest = self.columns
        for row in self.rows:
            lines = Text()
            lines.append(row[first], style="bold")
            for column in rest:
                if row[column] and row[column] not in ("-", "-/-"):
                    lines.append(f"\n  {column}: ")
                    lines.append_text(self.cell(column, row[column]))
            yield lines
