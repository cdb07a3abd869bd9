"""Stored batches and their update columns: the checks an appended batch passes to be stored,
its time bounds, times advanced to ``since``, its rows sorted, whether it is consolidated as
stored (used by appends, compaction and reads)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc

from catalog.consolidate import DIFF, TS, is_nested
from catalog.schema import schema_diff
from catalog.schema.conform import Mismatch, conform
from catalog.shard.state import BatchRef, ShardState, shard_error, update_schema

__all__ = ["advance_times", "already_consolidated", "checked_batch", "sort_rows", "time_bounds"]


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


#: The refusal reason of each kind of schema mismatch.
_MISMATCHES = {"columns": "columns-mismatch", "type": "type-mismatch", "null": "null-in-non-null"}


def checked_batch(
    batch: pa.Table | pa.RecordBatch,
    live: pa.Schema,
    expected_upper: int,
    new_upper: int,
    shard_id: str,
) -> pa.Table:
    """An appended batch checked against its live schema and its frontiers ``[expected_upper,
    new_upper)``, as it is stored (data columns in the schema's order, then ``_ts`` and
    ``_diff``); ShardError naming the rule it breaks."""
    table = batch if isinstance(batch, pa.Table) else pa.Table.from_batches([batch])
    names = table.column_names
    for column in (TS, DIFF):
        if column not in names:
            raise shard_error(
                f"batch for shard {shard_id} has no {column} column",
                shard_id,
                "missing-column",
                column=column,
            )
    data_names = [n for n in names if n not in (TS, DIFF)]
    conformed = conform(data_names, [table.column(n) for n in data_names], live)
    if isinstance(conformed, Mismatch):
        raise shard_error(
            f"batch for shard {shard_id} has {conformed.text}",
            shard_id,
            _MISMATCHES[conformed.kind],
            **conformed.details,
        )
    columns: list[pa.ChunkedArray] = conformed
    times, diffs = table.column(TS), table.column(DIFF)
    for column, name in ((times, TS), (diffs, DIFF)):
        if not pa.types.is_integer(column.type) or column.null_count:
            raise shard_error(
                f"{name} must be a non-null integer column (got {column.type})",
                shard_id,
                "bad-update-column",
                column=name,
            )
    try:
        times = times.cast(pa.uint64())
        diffs = diffs.cast(pa.int64())
    except pa.ArrowInvalid as exc:
        raise shard_error(
            f"{TS}/{DIFF} out of range: {exc}", shard_id, "bad-update-column", column=TS
        ) from exc
    stored = pa.Table.from_arrays([*columns, times, diffs], schema=update_schema(live))
    if stored.num_rows:
        lower, upper = time_bounds(stored)
        if lower < expected_upper or upper > new_upper:
            raise shard_error(
                f"rows at times [{lower}, {upper - 1}] fall outside "
                f"[{expected_upper}, {new_upper})",
                shard_id,
                "ts-out-of-range",
                expected_upper=expected_upper,
                new_upper=new_upper,
                min_ts=lower,
                max_ts=upper - 1,
            )
    return stored
