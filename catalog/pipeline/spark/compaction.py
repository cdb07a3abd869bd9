"""Compaction on Spark: executors read, migrate, consolidate, sort and write; the driver
commits the references of the batches they wrote (no row passes it)."""

from __future__ import annotations

import functools
import math
import warnings
from typing import TYPE_CHECKING, Any

import structlog

from catalog.consensus import Fence
from catalog.pipeline.spark.expressions import _col, consolidate_frame
from catalog.pipeline.spark.failures import SparkJobError, _raise_resource_error, _spark_errors
from catalog.pipeline.spark.session import _PANDAS_WARNING
from catalog.pipeline.spark.types import _is_sortable
from catalog.pipeline.spark.workers import _WRITTEN_SCHEMA, _raise_worker_error, _write_partition
from catalog.shard import TS, BatchRef, CompactionResult, Shard, blob_prefix, update_schema
from catalog.shard.compact import compaction_inputs

if TYPE_CHECKING:
    from catalog.pipeline.spark.engine import SparkEngine

log = structlog.get_logger(__name__)


# One output batch per this many bytes of input Parquet (files of roughly 128-256 MiB once
# consolidated): the partition count of the one shuffle...
OUTPUT_BYTES = 192 << 20

# ...but at least one per core Spark runs tasks on, while each gets this much input (one
# partition would leave every core but one idle: 28.5 s against 18.0 s for 10M rows on 2).
MIN_OUTPUT_BYTES = 16 << 20


def partitions_for(input_bytes: int, parallelism: int) -> int:
    """The partition count of a compaction of ``input_bytes`` on ``parallelism`` cores."""
    by_size = math.ceil(input_bytes / OUTPUT_BYTES)
    spread = min(parallelism, math.ceil(input_bytes / MIN_OUTPUT_BYTES))
    return max(1, by_size, spread)


def _parallelism(spark: Any) -> int:
    """Cores Spark runs tasks on (a Spark Connect session does not say: its shuffle default)."""
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect has no SparkContext here
        return int(spark.conf.get("spark.sql.shuffle.partitions", "2"))


def compact(engine: SparkEngine, shard: Shard, *, fence: Fence | None = None) -> CompactionResult:
    """``Shard.compact`` on Spark: every batch migrated to the latest schema, times below
    since advanced, consolidated into one partition per :data:`OUTPUT_BYTES` of input,
    sorted in Spark when every column is sortable, written by the workers a row group at a
    time (one batch per partition), then committed with ``Shard.commit_compaction``.

    Outputs of a failed job are orphans that ``Shard.gc_orphans`` removes.
    """
    from pyspark.sql import functions as F

    state, inputs = compaction_inputs(shard)
    if not inputs:
        return CompactionResult(True, 0, None, state)
    target = state.live_schema
    frame = engine.updates_frame(shard, state, inputs, target)
    if state.since > 0:
        frame = frame.withColumn(TS, F.greatest(_col(TS), F.lit(state.since).cast("long")))
    sizes = {b.key: b.size for b in shard.blob.list_info(blob_prefix(shard.shard_id))}
    size = sum(sizes.get(ref.key(shard.shard_id), 0) for ref in inputs)
    parts = partitions_for(size, _parallelism(engine.spark))
    frame = consolidate_frame(frame, target, parts)
    if _is_sortable(target):
        frame = frame.sortWithinPartitions(*[_col(n).asc_nulls_last() for n in [*target.names, TS]])
    writer = functools.partial(
        _write_partition, shard.blob.uri, shard.shard_id, update_schema(target)
    )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=_PANDAS_WARNING, category=FutureWarning)
        try:
            written = frame.mapInArrow(writer, _WRITTEN_SCHEMA).collect()
        except _spark_errors() as exc:
            _raise_worker_error(exc)
            _raise_resource_error(exc)
            raise SparkJobError.of(exc, f"compaction of shard {shard.shard_id}") from exc
    outputs = sorted(
        (
            BatchRef(
                r["name"],
                state.schema_id,
                r["rows"],
                r["lower"],
                r["upper"],
                ordered=r["ordered"],
                consolidated=True,  # groups never straddle partitions
            )
            for r in written
        ),
        key=lambda b: (b.lower, b.name),
    )
    result = shard.commit_compaction(state, inputs, outputs, fence=fence)
    if result.applied:
        log.info(
            "spark_compacted",
            shard=shard.shard_id,
            inputs=len(inputs),
            outputs=len(outputs),
            rows=sum(b.rows for b in outputs),
        )
    return result
