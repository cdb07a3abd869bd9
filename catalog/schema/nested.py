"""Rebuilding nested Arrow arrays: list offsets rebased to a slice, validity kept, children
replaced one by one. The one home of these details for every module that rewrites values
inside structs, lists and maps (migration, float normalization, Spark output restoration)."""

from __future__ import annotations

from collections.abc import Callable

import pyarrow as pa
import pyarrow.compute as pc

__all__ = ["list_bounds", "list_offsets", "map_children", "null_mask"]


def list_bounds(values: pa.Array) -> tuple[int, int]:
    """The range of child values a (possibly sliced) list or map array covers."""
    if len(values) == 0:
        return 0, 0
    offsets = values.offsets
    return int(offsets[0].as_py()), int(offsets[len(offsets) - 1].as_py())


def list_offsets(values: pa.Array) -> pa.Array:
    """The offsets of a list array, rebased to 0 so they index the sliced child values."""
    large = pa.types.is_large_list(values.type)
    offset_type = pa.int64() if large else pa.int32()
    if len(values) == 0:
        return pa.array([0], offset_type)
    offsets = values.offsets
    start = offsets[0].as_py()
    if start == 0 and offsets.offset == 0:
        return offsets
    # A fresh array: from_arrays refuses a validity mask over sliced offsets.
    return pc.subtract(offsets, pa.scalar(start, offset_type))


def null_mask(values: pa.Array) -> pa.Array | None:
    return values.is_null() if values.null_count else None


def map_children(array: pa.Array, child: Callable[[pa.Array, pa.Field], pa.Array]) -> pa.Array:
    """``array`` (a struct, list, large list or map) with each child array replaced by
    ``child(values, field)``: struct fields (their values where the parent is null are the
    parent's nulls, :meth:`pyarrow.StructArray.flatten`), list elements, map items (keys are
    kept). The result keeps the parent's validity and its fields' names and nullability."""
    dtype = array.type
    mask = null_mask(array)
    if pa.types.is_struct(dtype):
        fields = list(dtype)
        children = [child(c, f) for c, f in zip(array.flatten(), fields, strict=True)]
        if not children:
            return array
        return pa.StructArray.from_arrays(children, fields=fields, mask=mask)
    start, end = list_bounds(array)
    offsets = list_offsets(array)
    if pa.types.is_map(dtype):
        keys = array.keys.slice(start, end - start)
        items = child(array.items.slice(start, end - start), dtype.item_field)
        return pa.MapArray.from_arrays(offsets, keys, items, type=dtype, mask=mask)
    values = child(array.values.slice(start, end - start), dtype.value_field)
    kind = pa.LargeListArray if pa.types.is_large_list(dtype) else pa.ListArray
    return kind.from_arrays(offsets, values, type=dtype, mask=mask)
