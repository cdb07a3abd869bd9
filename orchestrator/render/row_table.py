"""A collection's rows for a terminal (``catalog-upgrade read`` without ``--json``).

The rows follow :mod:`orchestrator.render.fitted`: a table when every column fits whole, text
wrapping; otherwise one block per row (``column: value`` lines), as ``psql``'s expanded
display. Values are shown as written, never read as rich markup.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Final

import pyarrow as pa
from rich.console import Group, RenderableType
from rich.text import Text

from catalog.shard import TS
from orchestrator.render.fitted import FittedTable

__all__ = ["render_rows"]

#: The narrowest a text column wraps to before the rows turn into blocks.
TEXT_MIN: Final = 12


def render_rows(table: pa.Table, title: str, caption: str) -> RenderableType:
    """``table``'s rows under ``title`` (every column but ``_ts``), then ``caption``."""
    names = [n for n in table.column_names if n != TS]
    rows: list[dict[str, str | Text]] = [
        {name: _cell(row[name]) for name in names} for row in table.to_pylist()
    ]
    text = [n for n in names if not _numeric(table.schema.field(n).type)]
    view = FittedTable(title, names, rows, folded=dict.fromkeys(text, TEXT_MIN))
    return Group(view, Text(caption, style="italic"))


def _cell(value: Any) -> str | Text:
    if value is None:
        return Text("null", style="dim")
    if isinstance(value, (dict, list)):
        return json.dumps(value, default=str)
    return str(value)


def _numeric(dtype: pa.DataType) -> bool:
    checks: Sequence[Any] = (pa.types.is_integer, pa.types.is_floating, pa.types.is_boolean)
    return any(check(dtype) for check in checks)
