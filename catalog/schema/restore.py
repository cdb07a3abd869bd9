"""Columns in another engine's types restored to a schema's exact types.

Spark has no unsigned integers, no large variants, microsecond timestamps only, and gives the
fields of a null struct nulls; a table it produced (its Arrow output, or a Parquet file its own
writer wrote) is restored here to exactly the schema the shard stores, values unchanged.
"""

from __future__ import annotations

import decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from catalog.schema.nested import map_children

__all__ = ["fill_hidden_nulls", "relaxed", "restore_batch", "restore_table"]


def relaxed(dtype: pa.DataType) -> pa.DataType:
    """``dtype`` with every nested field nullable (map keys aside): a target casts can reach."""
    if pa.types.is_struct(dtype):
        return pa.struct([pa.field(f.name, relaxed(f.type)) for f in dtype.fields])
    if pa.types.is_large_list(dtype):
        return pa.large_list(pa.field(dtype.value_field.name, relaxed(dtype.value_type)))
    if pa.types.is_list(dtype):
        return pa.list_(pa.field(dtype.value_field.name, relaxed(dtype.value_type)))
    if pa.types.is_map(dtype):
        return pa.map_(dtype.key_type, pa.field(dtype.item_field.name, relaxed(dtype.item_type)))
    return dtype


def _restore_column(
    column: pa.Array | pa.ChunkedArray, dtype: pa.DataType
) -> pa.Array | pa.ChunkedArray:
    if column.type.equals(dtype):
        return column
    loose = relaxed(dtype)
    cast = column.cast(loose)
    if loose.equals(dtype):
        return cast
    # Nullability lives in the type only: a view relabels without touching the data, once
    # the values hidden under null parents are filled.
    if isinstance(cast, pa.ChunkedArray):
        chunks = [_fill_hidden_nulls(chunk, dtype).view(dtype) for chunk in cast.chunks]
        return pa.chunked_array(chunks, type=dtype)
    return _fill_hidden_nulls(cast, dtype).view(dtype)


def _fill_hidden_nulls(array: pa.Array, dtype: pa.DataType) -> pa.Array:
    """``array`` (of ``relaxed(dtype)``) with zeros in the non-nullable struct fields of
    ``dtype`` where their struct is null. Spark gives the fields of a null struct nulls; Arrow
    and Parquet want values there (hidden by the null parent). Any other null stays, and the
    view to ``dtype`` refuses it."""
    if not pa.types.is_nested(dtype):
        return array
    hidden = array.is_null() if pa.types.is_struct(dtype) and array.null_count else None

    def child(values: pa.Array, field: pa.Field) -> pa.Array:
        if pa.types.is_struct(dtype):
            target = dtype.field(field.name)
        else:
            target = dtype.item_field if pa.types.is_map(dtype) else dtype.value_field
        values = _fill_hidden_nulls(values, target.type)
        if hidden is None or target.nullable or not values.null_count:
            return values
        return pc.if_else(hidden, pa.scalar(_zero(target.type), values.type), values)

    return map_children(array, child)


def fill_hidden_nulls(table: pa.Table) -> pa.Table:
    """``table`` with a value (zero, empty, the epoch) in every non-nullable struct field whose
    struct is null: Arrow and Parquet want one there, hidden by the parent, and operations that
    flatten structs (``StructArray.flatten``, a consolidation's hash keys) leave a null. Columns
    without such fields are returned as they are."""
    columns = []
    changed = False
    for field, column in zip(table.schema, table.columns, strict=True):
        if _has_required_in_struct(field.type):
            chunks = [_fill_hidden_nulls(c, field.type) for c in column.chunks]
            column = pa.chunked_array(chunks, type=field.type)
            changed = True
        columns.append(column)
    return pa.Table.from_arrays(columns, schema=table.schema) if changed else table


def _has_required_in_struct(dtype: pa.DataType) -> bool:
    if pa.types.is_struct(dtype):
        return any(not f.nullable or _has_required_in_struct(f.type) for f in dtype)
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        return _has_required_in_struct(dtype.value_type)
    if pa.types.is_map(dtype):
        return _has_required_in_struct(dtype.item_type)
    return False


def _zero(dtype: pa.DataType) -> Any:
    """A Python value of ``dtype``: zero, false, empty, the epoch; structs of those."""
    if pa.types.is_struct(dtype):
        return {f.name: _zero(f.type) for f in dtype}
    if pa.types.is_nested(dtype):
        return []
    if pa.types.is_boolean(dtype):
        return False
    if pa.types.is_string(dtype) or pa.types.is_large_string(dtype):
        return ""
    if pa.types.is_binary(dtype) or pa.types.is_large_binary(dtype):
        return b""
    if pa.types.is_fixed_size_binary(dtype):
        return bytes(dtype.byte_width)
    if pa.types.is_decimal(dtype):
        return decimal.Decimal(0)
    if pa.types.is_integer(dtype) or pa.types.is_floating(dtype):
        return 0
    storage = pa.int32() if dtype.bit_width == 32 else pa.int64()  # dates, times, durations
    return pa.array([0], storage).view(dtype)[0].as_py()


def restore_table(table: pa.Table | pa.RecordBatch, schema: pa.Schema) -> pa.Table:
    """Spark's Arrow output (columns by name) as exactly ``schema``: unsigned integers, large
    types, timestamp units and nested nullability are restored."""
    columns = [_restore_column(table.column(f.name), f.type) for f in schema]
    if isinstance(table, pa.RecordBatch):
        return pa.Table.from_batches([pa.RecordBatch.from_arrays(columns, schema=schema)])
    return pa.Table.from_arrays(columns, schema=schema)


def restore_batch(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    columns = [_restore_column(batch.column(f.name), f.type) for f in schema]
    return pa.RecordBatch.from_arrays(columns, schema=schema)
