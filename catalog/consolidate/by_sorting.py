"""Consolidation by sorting on every key column (the output comes sorted)."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from catalog.consolidate.by_hashing import consolidate_hashed
from catalog.consolidate.columns import DIFF, bit_pattern, key_columns
from catalog.consolidate.floats import normalize_floats
from catalog.consolidate.gather import equal_pairs, filter_rows


def _equal_to_previous(compared: Sequence[pa.ChunkedArray], order: np.ndarray) -> np.ndarray:
    """For sorted positions ``1..n-1``: whether the row equals the one before (every column).

    The first column is compared in full; each later one only at positions still equal, so
    the gather of later columns shrinks to the duplicates.
    """
    equal = equal_pairs(compared[:1], order[1:], order[:-1])
    positions = np.flatnonzero(equal)
    rest = equal_pairs(compared[1:], order[positions + 1], order[positions])
    equal[positions[~rest]] = False
    return equal


def sorted_plan(
    table: pa.Table, names: Sequence[str], diffs: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Consolidation by sorting, as row numbers: one representative per distinct row of
    ``table`` (over ``names``), in sorted order, and the sum of ``diffs`` over its rows
    (zeros included)."""
    count = table.num_rows
    # Floats sort by value, ties by bits, and compare by bits only (NaN is not equal to NaN).
    columns: list[pa.ChunkedArray] = []
    compared: list[pa.ChunkedArray] = []
    for name in names:
        column = table.column(name)
        columns.append(column)
        if pa.types.is_floating(column.type):
            columns.append(bit_pattern(column))
        compared.append(column)
    # Positional names: a collection column may be called anything.
    keyed = pa.Table.from_arrays(columns, names=[f"k{i}" for i in range(len(columns))])
    order = np.asarray(
        pc.sort_indices(keyed, sort_keys=[(n, "ascending") for n in keyed.column_names])
    ).astype(np.int64)
    starts_flags = np.ones(count, dtype=bool)
    if count > 1:
        starts_flags[1:] = ~_equal_to_previous(compared, order)
    starts = np.flatnonzero(starts_flags)
    return order[starts], np.add.reduceat(diffs[order], starts)


def diff_values(table: pa.Table) -> np.ndarray:
    column = table.column(DIFF)
    if column.null_count:
        column = column.fill_null(0)
    return np.asarray(column.combine_chunks().to_numpy(zero_copy_only=False), dtype=np.int64)


def with_diffs(table: pa.Table, diffs: np.ndarray) -> pa.Table:
    index = table.schema.get_field_index(DIFF)
    return table.set_column(index, table.schema.field(index), pa.array(diffs, pa.int64()))


def consolidate_sorted(
    table: pa.Table,
    keys: Sequence[str] | None = None,
    *,
    ordered: bool = True,
    normalized: bool = False,
) -> pa.Table:
    """:func:`consolidate` for keys that are all :func:`is_sortable`, by sorting.

    With ``ordered`` (default) the output is sorted by ``keys`` (in that order); otherwise it
    keeps the input's row order, which copies the kept rows once instead of twice.
    ``normalized``: the caller normalized the floats already (consolidate.floats).
    """
    names = key_columns(table, keys)
    if not normalized:
        table = normalize_floats(table)  # floats compare as values (consolidate.floats)
    count = table.num_rows
    if count == 0 or not names:
        return consolidate_hashed(table, names)
    rows, sums = sorted_plan(table, names, diff_values(table))
    nonzero = sums != 0
    rows, sums = rows[nonzero], sums[nonzero]
    if ordered:
        # Gathering from one chunk is several times faster than from many (10M rows in 200
        # chunks: 0.7 s, against 0.07 s to combine plus 0.16 s to gather).
        return with_diffs(table.combine_chunks().take(rows), sums)
    # Mark each kept row at its input position and filter: one sequential copy of the kept
    # rows instead of a combine and a gather.
    keep = np.zeros(count, dtype=bool)
    keep[rows] = True
    placed = np.zeros(count, dtype=np.int64)
    placed[rows] = sums
    return with_diffs(filter_rows(table, keep), placed[keep])
