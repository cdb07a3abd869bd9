"""A table that fits the terminal: the rule every wide table of the CLI follows.

Each column is never narrower than its widest value (no ``servin``, no ``0.10.``). When the
terminal is too narrow, the optional columns give way first, in the order given; the folded
columns (free text: an error, a phase) may shrink to their minimum and wrap; the worded columns
(``pending 0.11.0``) may wrap between their words, never inside one, and the hyphenated ones
(names: ``eu-1/env-042``) after a hyphen or a slash. When even that does not
fit, the table turns into one block per row (``id`` then ``column: value`` lines, a long value
wrapping under itself), so an 80-column terminal always reads it whole.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable, Mapping, Sequence

import attrs
from rich.console import Console, ConsoleOptions, RenderableType, RenderResult
from rich.table import Table
from rich.text import Text


def _plain(_column: str, value: str) -> Text:
    return Text(value)


def _pieces(value: str) -> list[str]:
    """``value`` cut after each ``-`` and ``/``: where a name may break (``eu-``, ``1/``)."""
    return re.findall(r"[^/-]*[/-]|[^/-]+", value) or [value]


def _broken(value: str, width: int) -> str:
    """``value`` in lines of at most ``width``, broken after a ``-`` or ``/`` only."""
    lines = [""]
    for piece in _pieces(value):
        if lines[-1] and len(lines[-1]) + len(piece) > width:
            lines.append("")
        lines[-1] += piece
    return "\n".join(lines)


@attrs.frozen
class FittedTable:
    """``rows`` (column -> text) under ``columns``; ``gives_way``: the optional columns, the
    first to go first; ``folded``: column -> the narrowest it may wrap to; ``wide``: the
    folded column that keeps its width longest; ``worded``: the columns that may wrap between
    words; ``hyphenated``: the columns that may break after a ``-`` or ``/``; ``cell``: how a
    plain value is styled (a rich ``Text`` value keeps its own style)."""

    title: str
    columns: Sequence[str]
    rows: Sequence[Mapping[str, str | Text]]
    gives_way: Sequence[str] = ()
    folded: Mapping[str, int] = attrs.field(factory=dict)
    wide: str | None = None
    worded: Sequence[str] = ()
    hyphenated: Sequence[str] = ()
    cell: Callable[[str, str], Text] = _plain
    # Each column's longest line, measured once (a table may be measured for several layouts).
    _longest: dict[str, int] = attrs.field(init=False, factory=dict, eq=False, repr=False)

    def width(self, columns: Iterable[str]) -> int:
        """The width a table of ``columns`` needs: each column its widest cell (the folded
        and worded ones their minimum), plus padding and borders."""
        return 1 + sum(self._narrowest(c) + 3 for c in columns)

    def _narrowest(self, column: str) -> int:
        """The narrowest ``column`` may be: its folded minimum, its longest word, or its widest
        cell."""
        widest = self._widest(column)
        if column in self.folded:
            return min(widest, self.folded[column])
        if column in self.worded:
            return self._widest(column, split=str.split)
        if column in self.hyphenated:
            return self._widest(column, split=_pieces)
        return widest

    def _widest(self, column: str, *, split: Callable[[str], list[str]] | None = None) -> int:
        """The longest line (or word, or piece: ``split``) of ``column``'s header and values."""
        key = f"{column} {getattr(split, '__name__', '')}"
        longest = self._longest.get(key)
        if longest is None:
            values = [column, *(str(row[column]) for row in self.rows)]
            cut = split or (lambda value: value.split("\n"))
            longest = max(len(part) for value in values for part in cut(value))
            self._longest[key] = longest
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
            wraps = column in self.folded or column in self.worded
            table.add_column(column, no_wrap=not wraps, overflow="fold", width=widths[column])
        for row in self.rows:
            table.add_row(
                *[
                    self._styled(column, _broken(str(row[column]), widths[column]))
                    if column in self.hyphenated and not isinstance(row[column], Text)
                    else self._styled(column, row[column])
                    for column in columns
                ]
            )
        return table

    def _widths(self, columns: list[str], max_width: int) -> dict[str, int]:
        """Each column's width: its widest cell; where that is too wide for ``max_width``, the
        folded and worded columns give up width down to their minimum, one after the other,
        ``wide`` last."""
        widths = {column: self._widest(column) for column in columns}
        excess = 1 + sum(width + 3 for width in widths.values()) - max_width
        shrinking = [c for c in columns if c in self.folded or c in self.worded
                     or c in self.hyphenated]  # fmt: skip
        # Names break last: a wrapped note reads better than a broken name.
        for column in sorted(shrinking, key=lambda c: (c in self.hyphenated, c == self.wide)):
            if excess <= 0:
                break
            cut = min(excess, widths[column] - self._narrowest(column))
            widths[column] -= cut
            excess -= cut
        return widths

    def _styled(self, column: str, value: str | Text) -> Text:
        return value if isinstance(value, Text) else self.cell(column, value)

    def _blocks(self) -> Iterable[RenderableType]:
        yield Text(self.title, style="italic")
        first, *rest = self.columns
        for row in self.rows:
            yield Text(str(row[first]), style="bold")
            for column in rest:
                if str(row[column]) not in ("", "-", "-/-"):
                    field = Table.grid(padding=(0, 1))
                    field.add_column(no_wrap=True)  # "  name:"; a long value wraps under itself
                    field.add_column(overflow="fold")
                    field.add_row(f"  {column}:", self._styled(column, row[column]))
                    yield field
