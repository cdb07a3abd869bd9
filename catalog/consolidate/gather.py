"""Taking rows out of chunked columns without Arrow concatenating whole columns first."""

from __future__ import annotations

import os
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import Any, TypeAlias, TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from catalog.consolidate import columns
from catalog.consolidate.columns import bit_pattern, differs_from, numeric_view, view_type

_T = TypeVar("_T")


class _Gather:
    """``column.take(indices)`` for chunked columns, chunk by chunk.

    Arrow's take on a chunked array concatenates every chunk first, so even a few indices
    cost a copy of the whole column; this takes from each chunk only its own rows (and
    concatenates first only when most rows are wanted anyway). The split of the indices by
    chunk is worked out once per chunk layout and reused for every column of that layout.
    """

    def __init__(self, indices: np.ndarray) -> None:
        self.indices = indices
        self._plans: dict[tuple[int, ...], tuple[list[tuple[int, np.ndarray]], Any]] = {}

    def _plan(self, lengths: tuple[int, ...]) -> tuple[list[tuple[int, np.ndarray]], Any]:
        plan = self._plans.get(lengths)
        if plan is not None:
            return plan
        indices = self.indices
        starts = np.concatenate([[0], np.cumsum(lengths)])
        which = np.searchsorted(starts, indices, side="right") - 1
        in_order = bool(np.all(which[1:] >= which[:-1]))
        by_chunk = np.arange(len(indices)) if in_order else np.argsort(which, kind="stable")
        ordered = indices[by_chunk]
        counts = np.bincount(which, minlength=len(lengths))
        parts: list[tuple[int, np.ndarray]] = []
        position = 0
        for chunk, count in enumerate(counts.tolist()):
            if count:
                parts.append((chunk, ordered[position : position + count] - starts[chunk]))
                position += count
        inverse = None
        if not in_order:
            inverse = np.empty_like(by_chunk)
            inverse[by_chunk] = np.arange(len(by_chunk))
        plan = self._plans[lengths] = (parts, inverse)
        return plan

    def __call__(self, column: pa.ChunkedArray) -> pa.Array:
        indices = self.indices
        if column.num_chunks <= 1:
            single = column.chunk(0) if column.num_chunks else pa.array([], column.type)
            return single.take(indices)
        if len(indices) * 8 > len(column):
            return column.combine_chunks().take(indices)  # most rows: one copy is cheapest
        parts, inverse = self._plan(tuple(len(c) for c in column.chunks))
        pieces = [column.chunk(chunk).take(local) for chunk, local in parts]
        gathered = pa.concat_arrays(pieces) if pieces else pa.array([], column.type)
        return gathered if inverse is None else gathered.take(inverse)


def gather_column(column: pa.ChunkedArray, indices: np.ndarray) -> pa.Array:
    """``column.take(indices)`` by :class:`_Gather`."""
    return _Gather(indices)(column)


def gather_rows(table: pa.Table, indices: np.ndarray) -> pa.Table:
    """``table.take(indices)`` by :class:`_Gather`, one column at a time."""
    gather = _Gather(indices)
    return pa.Table.from_arrays([gather(c) for c in table.columns], schema=table.schema)


#: A key column as :func:`equal_pairs` compares it: Arrow's (its rows gathered), or its numeric
#: view and validity (NumPy's gather, far cheaper when many pairs are compared), or None when
#: every value is null (every pair is equal in it).
Compared: TypeAlias = pa.ChunkedArray | tuple[np.ndarray, np.ndarray | None] | None


def compared_as(column: pa.ChunkedArray, pairs: int) -> Compared:
    """``column`` as :func:`equal_pairs` compares it best for ``pairs`` pairs: by its numeric
    view once the pairs are a sizeable share of its rows (the view costs a pass over the
    column, a gather of a few rows does not)."""
    if len(column) and column.null_count == len(column):
        return None
    if view_type(column.type) is None or pairs * 16 < len(column):
        return column
    valid = None
    if column.null_count:
        valid = np.asarray(column.is_valid().combine_chunks().to_numpy(zero_copy_only=False))
    return numeric_view(column), valid


def equal_pairs(
    columns: Sequence[pa.ChunkedArray | Compared], left: np.ndarray, right: np.ndarray
) -> np.ndarray:
    """Whether rows ``left[k]`` and ``right[k]`` are equal in every one of ``columns`` (nulls
    equal to nulls, floats bitwise); a column may come as :func:`compared_as` made it.

    Column by column, each comparing only the pairs still equal, so unequal rows cost one
    comparison and equal ones a gather per column.
    """
    equal = np.ones(len(left), dtype=bool)
    still = np.arange(len(left))
    gathers = _Gather(left), _Gather(right)
    for column in columns:
        if not len(still):
            break
        if isinstance(column, pa.ChunkedArray):
            column = compared_as(column, len(still))
        if column is None:
            continue
        if len(still) < len(gathers[0].indices):
            gathers = _Gather(left[still]), _Gather(right[still])
        if isinstance(column, tuple):
            values, valid = column
            rows_left, rows_right = gathers[0].indices, gathers[1].indices
            same = values[rows_left] == values[rows_right]
            if valid is not None:
                same &= valid[rows_left] == valid[rows_right]
        else:
            if pa.types.is_floating(column.type):
                column = bit_pattern(column)
            after, before = gathers[0](column), gathers[1](column)
            differs = differs_from(after, before)
            same = np.asarray(pc.invert(differs).to_numpy(zero_copy_only=False))
        equal[still[~same]] = False
        still = still[same]
    return equal


def select_rows(table: pa.Table, keep: np.ndarray) -> pa.Table:
    """``table.filter(keep)``, zero-copy when the kept rows form few ranges.

    A shard's history often drops rows in blocks (a batch retracting what one before it
    inserted) or none at all; slicing the kept ranges then costs nothing, where a filter
    copies every kept row.
    """
    count = len(keep)
    if not count:
        return table
    changes = np.flatnonzero(keep[1:] != keep[:-1]) + 1
    edges = np.concatenate([[0] if keep[0] else [], changes, [count] if keep[-1] else []])
    edges = edges.astype(np.int64)
    if len(edges) * columns.SLICE_MIN_ROWS > 2 * len(keep):
        return table.filter(keep)
    if not len(edges):
        return table.slice(0, 0)
    starts, stops = edges[0::2], edges[1::2]
    return pa.concat_tables(
        [table.slice(start, stop - start) for start, stop in zip(starts, stops, strict=True)]
    )


def filter_rows(table: pa.Table, keep: np.ndarray) -> pa.Table:
    """:func:`select_rows`; a large table in two halves on two threads (:func:`share_work`),
    which nearly halves a copy."""
    halves = [partial(filter_range, table, keep, *r) for r in split_ranges(table.num_rows, 2)]
    if not halves:
        return select_rows(table, keep)
    parallel = table.num_rows >= columns.PARALLEL_MIN_ROWS
    return pa.concat_tables(share_work(halves, parallel=parallel))


def split_ranges(count: int, parts: int) -> list[tuple[int, int]]:
    cuts = [count * i // parts for i in range(parts + 1)]
    return [(cuts[i], cuts[i + 1]) for i in range(parts) if cuts[i] < cuts[i + 1]]


def filter_range(table: pa.Table, keep: np.ndarray, start: int, stop: int) -> pa.Table:
    return select_rows(table.slice(start, stop - start), keep[start:stop])


def share_work(tasks: Sequence[Callable[[], _T]], *, parallel: bool = True) -> list[_T]:
    """Every task's result, in order; a second thread takes tasks from the front while this
    one takes them from the back (Arrow and NumPy release the GIL in their kernels)."""
    if not parallel or (os.cpu_count() or 1) < 2 or len(tasks) < 2:
        return [task() for task in tasks]
    with ThreadPoolExecutor(1) as pool:
        futures = [pool.submit(task) for task in tasks]
        inline: dict[int, _T] = {}
        for index in reversed(range(len(tasks))):
            if not futures[index].cancel():
                break  # the other thread has come this far
            inline[index] = tasks[index]()
        return [inline[i] if i in inline else futures[i].result() for i in range(len(tasks))]
