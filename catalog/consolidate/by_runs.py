"""Consolidation by runs of one numeric key: singles kept, pairs compared, long runs sorted."""

from __future__ import annotations

from collections.abc import Sequence
from functools import partial

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from catalog.consolidate import columns
from catalog.consolidate.by_sorting import diff_values, sorted_plan, with_diffs
from catalog.consolidate.columns import DIFF, key_columns, numeric_view, view_type
from catalog.consolidate.floats import normalize_floats
from catalog.consolidate.gather import (
    compared_as,
    equal_pairs,
    filter_range,
    gather_column,
    gather_rows,
    share_work,
    split_ranges,
)


def _run_key(table: pa.Table, names: Sequence[str]) -> str | None:
    """The numeric key column with the most distinct values in a sample of rows (None when
    no key has a numeric view, or the best one repeats too often to separate rows)."""
    count = table.num_rows
    sample = np.linspace(0, count - 1, min(count, columns.SAMPLE_ROWS)).astype(np.int64)
    best, best_distinct = None, 0
    for name in names:
        column = table.column(name)
        if view_type(column.type) is None:
            continue
        distinct = pc.count_distinct(gather_column(column, sample), mode="all").as_py()
        if distinct > best_distinct:
            best, best_distinct = name, distinct
    return best if best_distinct * 2 >= len(sample) else None


def _runs(repeats: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """From the sorted positions ``p`` whose value repeats at ``p + 1`` (ascending): where
    the runs of exactly two rows start, and every position within a longer run."""
    if not len(repeats):
        return repeats, repeats
    joined = repeats[1:] == repeats[:-1] + 1  # a run of three or more repeats twice in a row
    alone = np.ones(len(repeats), dtype=bool)
    alone[1:] &= ~joined
    alone[:-1] &= ~joined
    longer = repeats[~alone]
    return repeats[alone], np.union1d(longer, longer + 1)


def consolidate_by_runs(
    table: pa.Table, keys: Sequence[str] | None = None, *, normalized: bool = False
) -> pa.Table | None:
    """:func:`consolidate` for sortable keys, by runs of one numeric key column; None when no
    key column separates the rows well (use :func:`consolidate_sorted`).

    Identical rows have the same value in every column, so after an argsort of one numeric
    key (NumPy's; a timsort when the column is nearly sorted already), rows can only merge
    within a run of equal values:

    * a run of one row is kept as it is (dropped when its diff is zero);
    * a run of two compares the pair on the other columns and merges it when equal;
    * longer runs are consolidated together by :func:`consolidate_sorted`'s algorithm.

    Rows in runs of one are copied out in input order while the pairs are compared, the work
    shared by two threads; the surviving rows of longer runs follow. Retraction pairs, the common
    case of a shard's history, cost one gather per column and leave nothing to copy.
    ``normalized``: the caller normalized the floats already (consolidate.floats).
    """
    names = key_columns(table, keys)
    if not normalized:
        table = normalize_floats(table)  # floats compare as values (consolidate.floats)
    count = table.num_rows
    if count < 2 or not names or table.column(DIFF).null_count:
        return None
    key = _run_key(table, names)
    if key is None:
        return None
    values = numeric_view(table.column(key))
    descents = int(np.count_nonzero(values[1:] < values[:-1]))
    order = np.argsort(values, kind="stable" if descents * 8 < count else "quicksort")
    # Only positions where a run goes on are listed (usually few): no mask over every row.
    ordered_values = values[order]
    repeats = np.flatnonzero(ordered_values[1:] == ordered_values[:-1])  # p and p + 1 share
    del ordered_values
    pair_at, long_members = _runs(repeats)
    long_count = len(long_members)
    if long_count * 2 > count:
        return None  # mostly long runs: one sort of everything is cheaper
    diffs = diff_values(table)
    single_keep = diffs != 0
    single_keep[order[repeats]] = False  # rows in runs of two or more are decided below
    single_keep[order[repeats + 1]] = False
    left, right = order[pair_at], order[pair_at + 1]
    # Nulls became zeros in the view: compare the key column too when it has nulls.
    compared = [
        compared_as(table.column(n), len(left))
        for n in names
        if n != key or table.column(key).null_count
    ]
    # Rows in runs of one are decided already: they are copied out while the pairs are
    # compared, both split in parts that two threads share.
    half = len(left) // 2
    ranges = split_ranges(count, 4)
    results = share_work(
        [
            partial(equal_pairs, compared, left[:half], right[:half]),
            *(partial(filter_range, table, single_keep, *r) for r in ranges),
            partial(equal_pairs, compared, left[half:], right[half:]),
        ],
        parallel=count >= columns.PARALLEL_MIN_ROWS,
    )
    equal = np.concatenate([results[0], results[-1]])
    singles = pa.concat_tables(results[1:-1])
    unequal = ~equal
    rows = [left[equal], left[unequal], right[unequal]]
    sums = [diffs[left[equal]] + diffs[right[equal]], diffs[left[unequal]], diffs[right[unequal]]]
    if long_count:
        members = np.sort(order[long_members])
        subset = gather_rows(table.select(names), members)
        found, found_sums = sorted_plan(subset, names, diffs[members])
        rows.append(members[found])
        sums.append(found_sums)
    survivors, survivor_sums = np.concatenate(rows), np.concatenate(sums)
    kept = survivor_sums != 0
    survivors, survivor_sums = survivors[kept], survivor_sums[kept]
    if not len(survivors):
        return singles
    ascending = np.argsort(survivors)
    extra = with_diffs(gather_rows(table, survivors[ascending]), survivor_sums[ascending])
    return pa.concat_tables([singles, extra])
