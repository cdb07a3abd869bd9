"""The update columns of a stored batch: its time bounds, times advanced to ``since``, its rows
sorted, whether it is consolidated as stored (used by appends, compaction and reads)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from catalog.consolidate import TS, is_nested
from catalog.schema import schema_diff
from catalog.shard.state import BatchRef, ShardState

__all__ = ["advance_times", "already_consolidated", "sort_rows", "time_bounds"]


def advance_times(table: pa.Table, since: int) -> pa.Table:
    """``table`` with every ``_ts`` below ``since`` advanced to ``since``."""
    index = table.schema.get_field_index(TS)
    if since <= 0 or table.num_rows == 0:
        return table
    advanced = pc.max_element_wise(table.column(index), pa.scalar(since, pa.uint64()))
    return table.set_column(index, table.schema.field(index), advanced)


def sort_rows(table: pa.Table) -> tuple[pa.Table, bool]:
    """``table`` sorted by every column, or unchanged (False) when a column is not sortable."""
    if any(is_nested(f.type) for f in table.schema):
        return table, False
    try:
        return table.sort_by([(n, "ascending") for n in table.column_names]), True
    except pa.ArrowNotImplementedError:
        return table, False


def already_consolidated(state: ShardState, batch: BatchRef, reader: pa.Schema) -> bool:
    """Whether ``batch`` read alone as ``reader`` is consolidated as it is stored.

    True for a consolidated batch at a single time whose migration to the reader drops nothing
    (dropping a column, at any depth, can make distinct rows equal).
    """
    return (
        batch.consolidated
        and batch.lower == batch.upper - 1
        and not schema_diff(state.live(batch.schema_id), reader)["dropped"]
    )


def time_bounds(table: pa.Table) -> tuple[int, int]:
    """The ``[lower, upper)`` of a non-empty table's ``_ts``."""
    bounds = pc.min_max(table.column(TS))
    return int(bounds["min"].as_py()), int(bounds["max"].as_py()) + 1
