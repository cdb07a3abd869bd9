"""Spark column expressions: migration of nested columns and consolidation of a frame."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pyarrow as pa

from catalog.blob import BlobStore
from catalog.consolidate.floats import has_floats
from catalog.pipeline.spark.types import contains_map, join_path, spark_type
from catalog.schema import partner_child
from catalog.schema.restore import relaxed
from catalog.shard import (
    DIFF,
    TS,
)


def spark_col(name: str) -> Any:
    from pyspark.sql import functions as F

    return F.col("`" + name.replace("`", "``") + "`")


def null_of(dtype: pa.DataType, path: str) -> Any:
    from pyspark.sql import functions as F

    return F.lit(None).cast(spark_type(dtype, path))


def migrate_expression(column: Any, source: pa.DataType, target: pa.DataType, path: str) -> Any:
    """A Spark expression migrating ``column`` of live type ``source`` to ``target``.

    The Spark twin of ``catalog.schema.migrate``: struct fields matched by name (added ones as
    typed nulls, deleted ones dropped, reader projections reordered), lists and map values
    migrated element-wise with ``transform`` and ``transform_values``, null parents kept null,
    atomic values widened with a cast where Spark's types differ.
    The rules themselves were checked before (shard history, :func:`check_reader`).
    """
    from pyspark.sql import functions as F

    if source.equals(target) or relaxed(source).equals(relaxed(target)):
        return column
    if pa.types.is_struct(source) and pa.types.is_struct(target):
        children = []
        for field in target.fields:
            child_path = join_path(path, field.name)
            declared = partner_child(source, field)  # by id, former name or name
            if declared is None:
                children.append(null_of(field.type, child_path).alias(field.name))
            else:
                child = column.getField(declared.name)
                migrated = migrate_expression(child, declared.type, field.type, child_path)
                children.append(migrated.alias(field.name))
        return F.when(column.isNull(), F.lit(None)).otherwise(F.struct(*children))
    lists = (pa.types.is_list, pa.types.is_large_list)
    if any(f(source) for f in lists) and any(f(target) for f in lists):
        items = join_path(path, "items")
        return F.transform(
            column, lambda e: migrate_expression(e, source.value_type, target.value_type, items)
        )
    if pa.types.is_map(source) and pa.types.is_map(target):
        values = join_path(path, "value")
        return F.transform_values(
            column, lambda _k, v: migrate_expression(v, source.item_type, target.item_type, values)
        )
    if spark_type(source, path) != spark_type(target, path):
        # A lossless widening (catalog.schema.lossless): every value has its exact twin.
        return column.cast(spark_type(target, path))
    return column


def normalize_expression(column: Any, dtype: pa.DataType) -> Any:
    """``column`` with its float values normalized as :mod:`catalog.consolidate.floats` says
    (``-0.0`` as ``0.0``, every NaN canonical; map keys kept), for the places Spark does not
    normalize them itself."""
    from pyspark.sql import functions as F

    if not has_floats(dtype):
        return column
    if pa.types.is_floating(dtype):
        kind = spark_type(dtype, "")
        return (
            F.when(column == 0, F.lit(0.0).cast(kind))
            .when(F.isnan(column), F.lit(float("nan")).cast(kind))
            .otherwise(column)
        )
    if pa.types.is_struct(dtype):
        children = [
            normalize_expression(column.getField(f.name), f.type).alias(f.name) for f in dtype
        ]
        return F.when(column.isNull(), F.lit(None)).otherwise(F.struct(*children))
    if pa.types.is_map(dtype):
        return F.transform_values(column, lambda _k, v: normalize_expression(v, dtype.item_type))
    return F.transform(column, lambda e: normalize_expression(e, dtype.value_type))


def consolidate_frame(frame: Any, schema: pa.Schema, partitions: int | None = None) -> Any:
    """Sum ``_diff`` over identical ``(columns of schema..., _ts)``, drop zeros (Spark).

    Spark cannot group by maps (or structs and arrays holding one): such a column is grouped by
    ``to_json`` of it, which is injective for a fixed type, and kept with ``first``.
    ``partitions``: the result's partition count (the one shuffle is hashed by the grouping
    keys into that many), else Spark's own choice.
    """
    from pyspark.sql import functions as F

    keys, kept = [], []
    for index, field in enumerate(schema):
        if contains_map(field.type):
            # Spark normalizes floats in grouping keys itself (catalog.consolidate.floats),
            # but not inside a JSON string: normalize first.
            value = normalize_expression(spark_col(field.name), field.type)
            keys.append(F.to_json(F.struct(value.alias("v"))).alias(f"__key{index}"))
            kept.append(F.first(value).alias(field.name))
        else:
            keys.append(spark_col(field.name))
    keys.append(spark_col(TS))
    if partitions is not None:
        frame = frame.repartition(partitions, *keys)
    grouped = frame.groupBy(*keys).agg(F.sum(spark_col(DIFF)).alias(DIFF), *kept)
    grouped = grouped.where(spark_col(DIFF) != 0)
    return grouped.select(*[spark_col(f.name) for f in schema], spark_col(TS), spark_col(DIFF))


def spark_path(blob: BlobStore, key: str) -> str:
    """The path Spark opens for blob ``key``: a ``file://`` URI for a local store, else the
    store's URI (``s3://`` spelled ``s3a://``, query parameters dropped) joined with the key."""
    if blob.filesystem.type_name == "local":
        return Path(blob.path(key)).as_uri()
    base = blob.uri.split("?", 1)[0].rstrip("/")
    if base.startswith("s3://"):
        base = "s3a://" + base[len("s3://") :]
    return f"{base}/{key}"
