"""Arrow types mapped to Spark types and back, exactly (unsigned integers, ``_ts``)."""

from __future__ import annotations

import decimal
from typing import Any

import pyarrow as pa
import pyarrow.compute as pc

from catalog.errors import (
    ShardError,
)
from catalog.schema.nested import map_children
from catalog.shard import (
    DIFF,
    TS,
)


def _unsupported(dtype: pa.DataType, path: str) -> ShardError:
    return ShardError(
        f"the spark engine cannot process column {path} of type {dtype}: use the arrow engine",
        reason="spark-unsupported-type",
        path=path,
        type=str(dtype),
    )


def spark_type(dtype: pa.DataType, path: str = "") -> Any:
    """The Spark SQL type Spark reads a Parquet column of Arrow type ``dtype`` as.

    Unsigned integers widen (uint64 becomes ``decimal(20,0)``), large variants become the
    plain ones; ShardError (reason ``spark-unsupported-type``) for types Spark cannot read.
    """
    from pyspark.sql import types as T

    simple = {
        pa.bool_(): T.BooleanType(),
        pa.int8(): T.ByteType(),
        pa.int16(): T.ShortType(),
        pa.int32(): T.IntegerType(),
        pa.int64(): T.LongType(),
        pa.uint8(): T.ShortType(),
        pa.uint16(): T.IntegerType(),
        pa.uint32(): T.LongType(),
        pa.uint64(): T.DecimalType(20, 0),
        pa.float32(): T.FloatType(),
        pa.float64(): T.DoubleType(),
        pa.string(): T.StringType(),
        pa.large_string(): T.StringType(),
        pa.binary(): T.BinaryType(),
        pa.large_binary(): T.BinaryType(),
        pa.date32(): T.DateType(),
    }
    if dtype in simple:
        return simple[dtype]
    if pa.types.is_timestamp(dtype) and dtype.unit != "ns":
        return T.TimestampType() if dtype.tz else T.TimestampNTZType()
    if pa.types.is_decimal128(dtype):
        return T.DecimalType(dtype.precision, dtype.scale)
    if pa.types.is_struct(dtype):
        if dtype.num_fields == 0:
            raise _unsupported(dtype, path)
        return T.StructType(
            [
                T.StructField(f.name, spark_type(f.type, _join(path, f.name)), True)
                for f in dtype.fields
            ]
        )
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        return T.ArrayType(spark_type(dtype.value_type, _join(path, "items")), True)
    if pa.types.is_map(dtype):
        return T.MapType(
            spark_type(dtype.key_type, _join(path, "key")),
            spark_type(dtype.item_type, _join(path, "value")),
            True,
        )
    raise _unsupported(dtype, path)


def _join(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def spark_schema(schema: pa.Schema) -> Any:
    """The Spark StructType of an update schema (``_ts`` as a long: see :func:`_read_schema`)."""
    from pyspark.sql import types as T

    fields = [T.StructField(f.name, spark_type(f.type, f.name), True) for f in schema]
    fields += [T.StructField(TS, T.LongType(), True), T.StructField(DIFF, T.LongType(), True)]
    return T.StructType(fields)


def _read_schema(schema: pa.Schema) -> Any:
    """What Spark reads a stored batch of live ``schema`` as: ``_ts`` is a uint64 there."""
    from pyspark.sql import types as T

    fields = [T.StructField(f.name, spark_type(f.type, f.name), True) for f in schema]
    fields += [
        T.StructField(TS, T.DecimalType(20, 0), True),
        T.StructField(DIFF, T.LongType(), True),
    ]
    return T.StructType(fields)


def _relaxed(dtype: pa.DataType) -> pa.DataType:
    """``dtype`` with every nested field nullable (map keys aside): a target casts can reach."""
    if pa.types.is_struct(dtype):
        return pa.struct([pa.field(f.name, _relaxed(f.type)) for f in dtype.fields])
    if pa.types.is_large_list(dtype):
        return pa.large_list(pa.field(dtype.value_field.name, _relaxed(dtype.value_type)))
    if pa.types.is_list(dtype):
        return pa.list_(pa.field(dtype.value_field.name, _relaxed(dtype.value_type)))
    if pa.types.is_map(dtype):
        return pa.map_(dtype.key_type, pa.field(dtype.item_field.name, _relaxed(dtype.item_type)))
    return dtype


def _restore_column(
    column: pa.Array | pa.ChunkedArray, dtype: pa.DataType
) -> pa.Array | pa.ChunkedArray:
    if column.type.equals(dtype):
        return column
    relaxed = _relaxed(dtype)
    cast = column.cast(relaxed)
    if relaxed.equals(dtype):
        return cast
    # Nullability lives in the type only: a view relabels without touching the data, once
    # the values hidden under null parents are filled.
    if isinstance(cast, pa.ChunkedArray):
        chunks = [_fill_hidden_nulls(chunk, dtype).view(dtype) for chunk in cast.chunks]
        return pa.chunked_array(chunks, type=dtype)
    return _fill_hidden_nulls(cast, dtype).view(dtype)


def _fill_hidden_nulls(array: pa.Array, dtype: pa.DataType) -> pa.Array:
    """``array`` (of ``_relaxed(dtype)``) with zeros in the non-nullable struct fields of
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


def _restore_batch(batch: pa.RecordBatch, schema: pa.Schema) -> pa.RecordBatch:
    columns = [_restore_column(batch.column(f.name), f.type) for f in schema]
    return pa.RecordBatch.from_arrays(columns, schema=schema)


def _contains_map(dtype: pa.DataType) -> bool:
    if pa.types.is_map(dtype):
        return True
    if pa.types.is_struct(dtype):
        return any(_contains_map(f.type) for f in dtype.fields)
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        return _contains_map(dtype.value_type)
    return False


def _is_sortable(schema: pa.Schema) -> bool:
    return not any(pa.types.is_nested(f.type) or pa.types.is_dictionary(f.type) for f in schema)
