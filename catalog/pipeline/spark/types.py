"""Arrow types mapped to Spark types and back, exactly (unsigned integers, ``_ts``)."""

from __future__ import annotations

from typing import Any

import pyarrow as pa

from catalog.errors import (
    ShardError,
)
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
                T.StructField(f.name, spark_type(f.type, join_path(path, f.name)), True)
                for f in dtype.fields
            ]
        )
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        return T.ArrayType(spark_type(dtype.value_type, join_path(path, "items")), True)
    if pa.types.is_map(dtype):
        return T.MapType(
            spark_type(dtype.key_type, join_path(path, "key")),
            spark_type(dtype.item_type, join_path(path, "value")),
            True,
        )
    raise _unsupported(dtype, path)


def join_path(path: str, name: str) -> str:
    return f"{path}.{name}" if path else name


def spark_schema(schema: pa.Schema) -> Any:
    """The Spark StructType of an update schema (``_ts`` as a long: see :func:`read_schema`)."""
    from pyspark.sql import types as T

    fields = [T.StructField(f.name, spark_type(f.type, f.name), True) for f in schema]
    fields += [T.StructField(TS, T.LongType(), True), T.StructField(DIFF, T.LongType(), True)]
    return T.StructType(fields)


def read_schema(schema: pa.Schema, spark_written: bool = False) -> Any:
    """What Spark reads a stored batch of live ``schema`` as: ``_ts`` is a uint64 there, an
    int64 in a batch Spark's writer wrote (``BatchRef.spark_types``)."""
    from pyspark.sql import types as T

    fields = [T.StructField(f.name, spark_type(f.type, f.name), True) for f in schema]
    fields += [
        T.StructField(TS, T.LongType() if spark_written else T.DecimalType(20, 0), True),
        T.StructField(DIFF, T.LongType(), True),
    ]
    return T.StructType(fields)


def contains_map(dtype: pa.DataType) -> bool:
    if pa.types.is_map(dtype):
        return True
    if pa.types.is_struct(dtype):
        return any(contains_map(f.type) for f in dtype.fields)
    if pa.types.is_list(dtype) or pa.types.is_large_list(dtype):
        return contains_map(dtype.value_type)
    return False


def is_sortable(schema: pa.Schema) -> bool:
    return not any(pa.types.is_nested(f.type) or pa.types.is_dictionary(f.type) for f in schema)
