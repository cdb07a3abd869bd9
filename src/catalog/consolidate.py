"""Consolidation of update tables: sum ``_diff`` over identical rows and drop zero sums.

An update table holds a collection's columns plus ``_diff`` (int64), and usually ``_ts``;
consolidating it keys on every column but ``_diff``. Two algorithms give the same rows:

* :func:`consolidate_sorted`, for keys of sortable flat types (:func:`is_sortable`): sort by
  the keys, mark where a row differs from its predecessor, sum ``_diff`` per run from a
  cumulative sum. Only the first key is compared on every row; later keys are compared only
  where all earlier keys were equal, so unique rows cost one sort and one column gather.
  About 5x faster than hash-grouping many keys, and the output comes sorted (what compaction
  marks ``ordered``).
* :func:`consolidate_hashed`, for any types: ``Table.group_by``. Arrow cannot group on nested
  columns, so each nested column is first replaced by a dense int64 *value id* (equal values,
  equal ids) built bottom-up: primitive leaves are dictionary-encoded, structs combine their
  children's ids, lists become the binary string of their elements' ids; the representative
  row of each group is then taken back from the input by index.

:func:`consolidate` picks the sorted algorithm whenever it applies. Equality is the hash
grouper's: nulls equal nulls, floats compare by bit pattern (``0.0`` and ``-0.0`` are
different rows, a NaN equals a NaN of the same bits).
"""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from catalog.errors import ShardError

__all__ = [
    "DIFF",
    "TS",
    "consolidate",
    "consolidate_hashed",
    "consolidate_sorted",
    "is_nested",
    "is_sortable",
]

TS = "_ts"
DIFF = "_diff"

_FLOAT_BITS = {32: pa.int32(), 64: pa.int64()}


def is_nested(dtype: pa.DataType) -> bool:
    """Whether ``dtype`` needs value ids to be grouped on (nested, dictionary, extension)."""
    return bool(
        pa.types.is_nested(dtype)
        or pa.types.is_dictionary(dtype)
        or isinstance(dtype, pa.ExtensionType)
    )


def is_sortable(dtype: pa.DataType) -> bool:
    """Whether :func:`consolidate_sorted` can key on a column of type ``dtype``."""
    if pa.types.is_floating(dtype):
        return dtype.bit_width in _FLOAT_BITS
    return bool(
        pa.types.is_boolean(dtype)
        or pa.types.is_integer(dtype)
        or pa.types.is_decimal(dtype)
        or pa.types.is_string(dtype)
        or pa.types.is_large_string(dtype)
        or pa.types.is_binary(dtype)
        or pa.types.is_large_binary(dtype)
        or pa.types.is_fixed_size_binary(dtype)
        or pa.types.is_date(dtype)
        or pa.types.is_time(dtype)
        or pa.types.is_timestamp(dtype)
        or pa.types.is_duration(dtype)
    )


def _keys(table: pa.Table, keys: Sequence[str] | None) -> list[str]:
    return [n for n in table.column_names if n != DIFF] if keys is None else list(keys)


def consolidate(table: pa.Table, keys: Sequence[str] | None = None) -> pa.Table:
    """Sum ``_diff`` over identical ``keys`` (default: every column but ``_diff``), drop zeros.

    Works for any column types, nested included; the output keeps the input's schema, with one
    row per distinct key, in no particular order.
    """
    names = _keys(table, keys)
    if all(is_sortable(table.schema.field(k).type) for k in names):
        # Any key order groups equal rows; fixed-width keys first sort and compare fastest.
        fixed = [k for k in names if _is_fixed_width(table.schema.field(k).type)]
        return consolidate_sorted(
            table, fixed + [k for k in names if k not in fixed], ordered=False
        )
    return consolidate_hashed(table, names)


def _is_fixed_width(dtype: pa.DataType) -> bool:
    return not (
        pa.types.is_string(dtype)
        or pa.types.is_large_string(dtype)
        or pa.types.is_binary(dtype)
        or pa.types.is_large_binary(dtype)
    )


# --- by sorting -------------------------------------------------------------------------------


def _differs(after: pa.Array, before: pa.Array) -> pa.Array:
    """``after[i] != before[i]``, nulls equal to nulls (floats arrive as their bits)."""
    differs = pc.not_equal(after, before)
    if after.null_count or before.null_count:
        differs = pc.if_else(
            pc.is_null(differs), pc.xor(after.is_null(), before.is_null()), differs
        )
    return differs


def _bits(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """A float column reinterpreted as same-width integers (bitwise equality, like hashing)."""
    bits = _FLOAT_BITS[column.type.bit_width]
    return pa.chunked_array([chunk.view(bits) for chunk in column.chunks], bits)


def _equal_to_previous(compared: Sequence[pa.ChunkedArray], order: pa.Array) -> pa.Array:
    """For sorted positions ``1..n-1``: whether the row equals the one before (every column).

    The first column is compared in full; each later one only at positions still equal, so
    the gather of later columns shrinks to the duplicates.
    """
    count = len(order)
    first = compared[0].take(order).combine_chunks()
    equal = pc.invert(_differs(first.slice(1), first.slice(0, count - 1)))
    candidates = pc.indices_nonzero(equal)
    positions = candidates
    for column in compared[1:]:
        if not len(positions):
            break
        after = column.take(pc.take(order, pc.add(positions, 1))).combine_chunks()
        before = column.take(pc.take(order, positions)).combine_chunks()
        positions = pc.filter(positions, pc.invert(_differs(after, before)))
    if len(positions) == len(candidates):
        return equal
    # Spread the survivors back over every position: the k-th candidate position is the one
    # where the running count of candidates reaches k.
    still = pc.is_in(candidates, value_set=positions)
    slot = pc.subtract(pc.cumulative_sum(pc.cast(equal, pa.int64())), 1)
    survives = pc.take(still, pc.max_element_wise(slot, 0))
    return pc.and_(equal, survives)


def consolidate_sorted(
    table: pa.Table, keys: Sequence[str] | None = None, *, ordered: bool = True
) -> pa.Table:
    """:func:`consolidate` for keys that are all :func:`is_sortable`, by sorting.

    With ``ordered`` (default) the output is sorted by ``keys`` (in that order); otherwise it
    keeps the input's row order, which copies the kept rows once instead of twice.
    """
    names = _keys(table, keys)
    count = table.num_rows
    if count == 0 or not names:
        return consolidate_hashed(table, names)
    if ordered:
        # Gathering from one chunk is several times faster than from many (10M rows in 200
        # chunks: 0.7 s, against 0.07 s to combine plus 0.16 s to gather).
        table = table.combine_chunks()
    # Floats sort by value, ties by bits, and compare by bits only (NaN is not equal to NaN).
    columns: list[pa.ChunkedArray] = []
    compared: list[pa.ChunkedArray] = []
    for name in names:
        column = table.column(name)
        columns.append(column)
        if pa.types.is_floating(column.type):
            column = _bits(column)
            columns.append(column)
        compared.append(column)
    # Positional names: a collection column may be called anything.
    keyed = pa.Table.from_arrays(columns, names=[f"k{i}" for i in range(len(columns))])
    order = pc.sort_indices(keyed, sort_keys=[(n, "ascending") for n in keyed.column_names])
    if count > 1:
        starts_flags = pa.concat_arrays(
            [pa.array([True]), pc.invert(_equal_to_previous(compared, order))]
        )
    else:
        starts_flags = pa.array([True])
    # A run's sum is the running total at its end minus the one at the previous run's end.
    running = pc.cumulative_sum(table.column(DIFF).take(order).combine_chunks())
    ends_flags = pa.concat_arrays([starts_flags.slice(1), pa.array([True])])
    at_ends = pc.take(running, pc.indices_nonzero(ends_flags))
    sums = pa.concat_arrays([at_ends.slice(0, 1), pc.pairwise_diff(at_ends).slice(1)])
    starts = pc.indices_nonzero(starts_flags)
    nonzero = pc.not_equal(sums, 0)
    rows = pc.take(order, pc.filter(starts, nonzero)).cast(pa.int64())
    diffs = pc.filter(sums, nonzero)
    if ordered or not hasattr(pc, "scatter"):  # scatter: pyarrow 21 and later
        out = table.take(rows)
    else:
        # Mark each kept row at its input position and filter: one sequential copy of the
        # kept rows instead of a combine and a gather.
        placed = pc.scatter(diffs, rows, max_index=count - 1)
        keep = pc.is_valid(placed)
        out, diffs = table.filter(keep), pc.filter(placed, keep)
    index = out.schema.get_field_index(DIFF)
    return out.set_column(index, out.schema.field(index), diffs)


# --- by hashing -------------------------------------------------------------------------------


def _dense_ids(values: pa.Array) -> pa.Array:
    """Dense int64 ids of the distinct values of a non-nested array (null is a value)."""
    encoded = pc.dictionary_encode(values, null_encoding="encode")
    return encoded.indices.cast(pa.int64())


def _pair_ids(left: pa.Array, right: pa.Array) -> pa.Array:
    """Dense ids of the pairs ``(left, right)``; both are dense, so the product cannot overflow."""
    width = (pc.max(right).as_py() or 0) + 1
    return _dense_ids(pc.add(pc.multiply(left, width), right))


def _value_ids(values: pa.Array) -> pa.Array:
    """Dense int64 ids with ``id[i] == id[j]`` exactly when ``values[i] == values[j]``.

    Built bottom-up and vectorized: leaves are dictionary-encoded, a struct pairs its validity
    with each child's ids, a list becomes the binary string of its elements' ids.
    """
    dtype = values.type
    if isinstance(dtype, pa.ExtensionType):
        return _value_ids(values.storage)
    if pa.types.is_dictionary(dtype):
        return _value_ids(values.dictionary_decode())
    if pa.types.is_struct(dtype):
        ids = pc.cast(values.is_null(), pa.int64())
        for child in values.flatten():  # parent nulls merged in, slice offset applied
            ids = _pair_ids(ids, _value_ids(child))
        return _dense_ids(ids)
    if pa.types.is_fixed_size_list(dtype):
        size = dtype.list_size
        children = values.values.slice(values.offset * size, len(values) * size)
        starts = pc.multiply(pc.subtract(pc.cumulative_sum(pa.repeat(1, len(values) + 1)), 1), size)
        return _sequence_ids(values, starts, children)
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype) or pa.types.is_map(dtype):
        return _sequence_ids(values, values.offsets, values.values)
    if pa.types.is_union(dtype) or pa.types.is_nested(dtype):
        raise ShardError(
            f"cannot consolidate rows of type {dtype}", reason="unsupported-type", type=str(dtype)
        )
    return _dense_ids(values)


def _sequence_ids(values: pa.Array, offsets: pa.Array, children: pa.Array) -> pa.Array:
    child_ids = _value_ids(children) if len(children) else pa.array([], pa.int64())
    if child_ids.offset:
        child_ids = pa.concat_arrays([child_ids])
    data = child_ids.buffers()[1] or pa.py_buffer(b"")
    byte_offsets = pc.multiply(offsets.cast(pa.int64()), 8)
    if byte_offsets.offset:
        byte_offsets = pa.concat_arrays([byte_offsets])
    strings = pa.Array.from_buffers(
        pa.large_binary(), len(values), [None, byte_offsets.buffers()[1], data]
    )
    # A null list's offsets may span garbage: every null must get the same id.
    if values.null_count:
        strings = pc.if_else(values.is_valid(), strings, pa.scalar(None, pa.large_binary()))
    return _dense_ids(strings)


def _row_numbers(count: int) -> pa.Array:
    return pc.subtract(pc.cumulative_sum(pa.repeat(pa.scalar(1, pa.int64()), count)), 1)


def consolidate_hashed(table: pa.Table, keys: Sequence[str] | None = None) -> pa.Table:
    """:func:`consolidate` by hash grouping, for any key types (nested ones by value ids)."""
    keys = _keys(table, keys)
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
        columns.append(_value_ids(column.combine_chunks()) if key in nested else column)
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
