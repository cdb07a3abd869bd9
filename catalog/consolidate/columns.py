"""Update-table columns: ``_ts``/``_diff``, which types sort, numeric views of key columns."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

TS = "_ts"


DIFF = "_diff"


_FLOAT_BITS = {32: pa.int32(), 64: pa.int64()}


# Below these sizes the simple paths win (and tests exercise every path with small tables by
# lowering them).
RUNS_MIN_ROWS = 4096


PARALLEL_MIN_ROWS = 1 << 20


SAMPLE_ROWS = 4096


# Kept rows are sliced rather than copied when their ranges average at least this many rows.
SLICE_MIN_ROWS = 1024


def repeated(value: int, dtype: pa.DataType, count: int) -> pa.Array:
    """``count`` copies of ``value`` as integer type ``dtype`` (an ``_ts`` or ``_diff`` column);
    NumPy fills them about three times faster than ``pa.repeat`` (24 -> 8 ms for 8M)."""
    return pa.array(np.full(count, value, dtype=dtype.to_pandas_dtype()), dtype)


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


def key_columns(table: pa.Table, keys: Sequence[str] | None) -> list[str]:
    return [n for n in table.column_names if n != DIFF] if keys is None else list(keys)


def is_fixed_width(dtype: pa.DataType) -> bool:
    return not (
        pa.types.is_string(dtype)
        or pa.types.is_large_string(dtype)
        or pa.types.is_binary(dtype)
        or pa.types.is_large_binary(dtype)
    )


def view_type(dtype: pa.DataType) -> pa.DataType | None:
    """The integer type whose values equal exactly when values of ``dtype`` are equal
    (floats: their bits; temporal types: their storage); None when there is none."""
    if pa.types.is_integer(dtype):
        return dtype
    if pa.types.is_floating(dtype):
        return _FLOAT_BITS.get(dtype.bit_width)
    if (
        pa.types.is_timestamp(dtype)
        or pa.types.is_date(dtype)
        or pa.types.is_time(dtype)
        or pa.types.is_duration(dtype)
    ):
        return pa.int64() if dtype.bit_width == 64 else pa.int32()
    return None


def numeric_view(column: pa.ChunkedArray) -> np.ndarray:
    """``column`` (of a type with a :func:`view_type`) as NumPy integers; nulls become 0, so
    a null and a zero are equal here: callers compare validity separately."""
    view = view_type(column.type)
    assert view is not None
    array = column.combine_chunks()
    if not array.type.equals(view):
        array = array.view(view)
    if array.null_count:
        array = array.fill_null(0)
    return np.asarray(array.to_numpy(zero_copy_only=False))


def differs_from(after: pa.Array, before: pa.Array) -> pa.Array:
    """``after[i] != before[i]``, nulls equal to nulls (floats arrive as their bits)."""
    differs = pc.not_equal(after, before)
    if after.null_count or before.null_count:
        differs = pc.if_else(
            pc.is_null(differs), pc.xor(after.is_null(), before.is_null()), differs
        )
    return differs


def bit_pattern(column: pa.ChunkedArray) -> pa.ChunkedArray:
    """A float column reinterpreted as same-width integers (bitwise equality, like hashing)."""
    bits = _FLOAT_BITS[column.type.bit_width]
    return pa.chunked_array([chunk.view(bits) for chunk in column.chunks], bits)
