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
    ordered_values = values[order]
    # starts[p]: sorted position p begins a run (p == count is a sentinel). Runs are told
    # apart with boolean masks only: no per-run arrays for the (usually many) single rows.
    starts = np.ones(count + 1, dtype=bool)
    np.not_equal(ordered_values[1:], ordered_values[:-1], out=starts[1:count])
    del ordered_values
    single = starts[:-1] & starts[1:]
    pair = starts[:-2] & ~starts[1:-1] & starts[2:]  # a run of exactly two starts at p
    in_long = ~single
    in_long[:-1] &= ~pair
    in_long[1:] &= ~pair
    long_count = int(np.count_nonzero(in_long))
    if long_count * 2 > count:
        return None  # mostly long runs: one sort of everything is cheaper
    diffs = diff_values(table)
    single_keep = diffs != 0
    single_keep[order[~single]] = False
    pair_at = np.flatnonzero(pair)
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
        members = np.sort(order[in_long])
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
