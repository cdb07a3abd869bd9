"""Floating-point values in consolidation: one rule, the same on both engines.

Consolidation compares floats as values, the way Spark groups them: ``0.0`` and ``-0.0`` are
the same value, and every NaN is the same value (whatever its sign or payload bits). Before
grouping, float values are *normalized*: ``-0.0`` becomes ``0.0`` and any NaN the canonical
quiet NaN, at the top level and inside structs, lists and map values. So a ``+1`` at ``0.0``
and a ``-1`` at ``-0.0`` cancel on either engine, and a consolidated output (a snapshot, a
compacted batch) holds normalized floats. Map keys are not normalized (Spark refuses a map
whose keys collide, and neither engine groups ``0.0`` and ``-0.0`` keys together).
Nulls stay null. float16 columns (which Spark cannot hold) compare by their bits.
"""

from __future__ import annotations

import math

import pyarrow as pa
import pyarrow.compute as pc

from catalog.schema.nested import map_children

__all__ = ["has_floats", "normalize_array", "normalize_floats"]


def _is_normalized_float(dtype: pa.DataType) -> bool:
    return bool(pa.types.is_floating(dtype) and dtype.bit_width in (32, 64))


def has_floats(dtype: pa.DataType) -> bool:
    """Whether ``dtype`` holds float values that :func:`normalize_array` rewrites."""
    if _is_normalized_float(dtype):
        return True
    if pa.types.is_struct(dtype):
        return any(has_floats(f.type) for f in dtype.fields)
    if pa.types.is_map(dtype):
        return has_floats(dtype.item_type)
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        return has_floats(dtype.value_type)
    return False


def normalize_floats(table: pa.Table) -> pa.Table:
    """``table`` with every float value normalized (the same table when it holds none)."""
    for index, field in enumerate(table.schema):
        if not has_floats(field.type):
            continue
        column = table.column(index)
        chunks = [normalize_array(chunk) for chunk in column.chunks]
        table = table.set_column(index, field, pa.chunked_array(chunks, field.type))
    return table


def normalize_array(array: pa.Array) -> pa.Array:
    """``array`` with ``-0.0`` as ``0.0`` and every NaN canonical, nested values included."""
    dtype = array.type
    if not has_floats(dtype):
        return array
    if _is_normalized_float(dtype):
        zeroed = pc.if_else(pc.equal(array, 0), pa.scalar(0.0, dtype), array)
        return pc.if_else(pc.is_nan(zeroed), pa.scalar(math.nan, dtype), zeroed)
    return map_children(array, lambda child, _field: normalize_array(child))
