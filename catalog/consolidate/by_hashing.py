"""Consolidation by hash grouping, for any column types: nested columns become dense value ids."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from catalog.consolidate.columns import DIFF, is_nested, key_columns
from catalog.consolidate.floats import normalize_floats
from catalog.consolidate.value_ids import value_ids


def _row_numbers(count: int) -> pa.Array:
    return pa.array(np.arange(count, dtype=np.int64))


def consolidate_hashed(table: pa.Table, keys: Sequence[str] | None = None) -> pa.Table:
    """:func:`consolidate` by hash grouping, for any key types (nested ones by value ids)."""
    keys = key_columns(table, keys)
    table = normalize_floats(table)  # floats compare as values (consolidate.floats)
    if table.num_rows == 0:
        return table
    if not keys:
        total = pc.sum(table.column(DIFF)).as_py() or 0
        out = table.slice(0, 1 if total else 0)
        return out.set_column(
            out.schema.get_field_index(DIFF),
            out.schema.field(DIFF),
            pa.array([total] * out.num_rows, pa.int64()),
        )
    nested = [k for k in keys if is_nested(table.schema.field(k).type)]
    # Positional names: a collection column may be called anything, "_row" included.
    names = [f"k{i}" for i in range(len(keys))]
    if not nested:
        grouped = (
            pa.Table.from_arrays(
                [table.column(k) for k in keys] + [table.column(DIFF)], names=[*names, "diff"]
            )
            .group_by(names, use_threads=True)
            .aggregate([("diff", "sum")])
        )
        grouped = grouped.filter(pc.not_equal(grouped.column("diff_sum"), 0))
        by_name = {k: grouped.column(n) for k, n in zip(keys, names, strict=True)}
        by_name[DIFF] = grouped.column("diff_sum")
        return pa.Table.from_arrays([by_name[f.name] for f in table.schema], schema=table.schema)
    columns: list[pa.Array | pa.ChunkedArray] = []
    for key in keys:
        column = table.column(key)
        columns.append(value_ids(column.combine_chunks()) if key in nested else column)
    grouped = (
        pa.Table.from_arrays(
            [*columns, table.column(DIFF), _row_numbers(table.num_rows)],
            names=[*names, "diff", "row"],
        )
        .group_by(names, use_threads=True)
        .aggregate([("diff", "sum"), ("row", "min")])
    )
    grouped = grouped.filter(pc.not_equal(grouped.column("diff_sum"), 0))
    out = table.take(grouped.column("row_min"))
    index = out.schema.get_field_index(DIFF)
    return out.set_column(index, out.schema.field(index), grouped.column("diff_sum"))
