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
    folded column that keeps its width longest; ``cell``: how a plain value is styled (a rich
    ``Text`` value keeps its own style)."""

    title: str
    columns: Sequence[str]
    rows: Sequence[Mapping[str, str | Text]]
    gives_way: Sequence[str] = ()
    folded: Mapping[str, int] = attrs.field(factory=dict)
    wide: str | None = None
    cell: Callable[[str, str], Text] = _plain
    # Each column's longest line, measured once (a table may be measured for several layouts).
    _longest: dict[str, int] = attrs.field(init=False, factory=dict, eq=False, repr=False)

    def width(self, columns: Iterable[str]) -> int:
        """The width a table of ``columns`` needs: each column its widest cell (the folded
        ones their minimum), plus padding and borders."""
        return 1 + sum(
            min(self._widest(c), self.folded.get(c, self._widest(c))) + 3 for c in columns
        )

    def _widest(self, column: str) -> int:
        """The longest line of ``column``'s header and values."""
        longest = self._longest.get(column)
        if longest is None:
            values = [column, *(str(row[column]) for row in self.rows)]
            longest = max(len(line) for value in values for line in value.split("\n"))
            self._longest[column] = longest
        return longest

    def __rich_console__(self, console: Console, options: ConsoleOptions) -> RenderResult:
        columns = list(self.columns)
        for optional in self.gives_way:
            if self.width(columns) <= options.max_width:
                break
            columns.remove(optional)
        if self.width(columns) <= options.max_width:
            yield self._table(columns, options.max_width)
        else:
            yield from self._blocks()

    def _table(self, columns: list[str], max_width: int) -> Table:
        widths = self._widths(columns, max_width)
        table = Table(title=self.title, title_justify="left")
        for column in columns:
            table.add_column(
                column, no_wrap=column not in self.folded, overflow="fold", width=widths[column]
            )
        for row in self.rows:
            table.add_row(*[self._styled(column, row[column]) for column in columns])
        return table

    def _widths(self, columns: list[str], max_width: int) -> dict[str, int]:
        """Each column's width: its widest cell; where that is too wide for ``max_width``, the
        folded columns give up width down to their minimum, one after the other, ``wide`` last."""
        widths = {column: self._widest(column) for column in columns}
        excess = 1 + sum(width + 3 for width in widths.values()) - max_width
        for column in sorted(
            (c for c in columns if c in self.folded), key=lambda c: c == self.wide
        ):
            if excess <= 0:
                break
            cut = min(excess, widths[column] - min(widths[column], self.folded[column]))
            widths[column] -= cut
            excess -= cut
        return widths

    def _styled(self, column: str, value: str | Text) -> Text:
        return value if isinstance(value, Text) else self.cell(column, value)

    def _blocks(self) -> Iterable[RenderableType]:
        yield Text(self.title, style="italic")
        first, *rest = self.columns
        for row in self.rows:
            lines = Text()
            lines.append(str(row[first]), style="bold")
            for column in rest:
                if str(row[column]) not in ("", "-", "-/-"):
                    lines.append(f"\n  {column}: ")
                    lines.append_text(self._styled(column, row[column]))
            yield lines
