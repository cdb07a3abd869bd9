"""Consolidation by hash grouping, for any column types: nested columns become dense value ids."""

from __future__ import annotations

from collections.abc import Sequence

import pyarrow as pa
import pyarrow.compute as pc

from catalog.consolidate.columns import DIFF, is_nested, key_columns
from catalog.consolidate.floats import normalize_floats
from catalog.errors import ShardError


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
