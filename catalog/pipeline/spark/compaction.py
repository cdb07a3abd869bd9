"""Compaction on Spark: executors read, migrate, consolidate, sort and write; the driver
commits the references of the batches they wrote (no row passes it)."""

from __future__ import annotations

import functools
import math
import os
import uuid
import warnings
from collections.abc import Sequence
from typing import Any, Protocol

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
import structlog

from catalog.blob import BlobStore
from catalog.consensus import Fence
from catalog.pipeline.spark.expressions import consolidate_frame, spark_col, spark_path
from catalog.pipeline.spark.failures import SparkJobError, raise_resource_error, spark_errors
from catalog.pipeline.spark.session import PANDAS_WARNING
from catalog.pipeline.spark.types import is_sortable
from catalog.pipeline.spark.workers import WRITTEN_SCHEMA, raise_worker_error, write_partition
from catalog.shard import (
    TS,
    BatchRef,
    CompactionResult,
    Shard,
    ShardState,
    blob_prefix,
    update_schema,
)
from catalog.shard.compact import compaction_inputs


class CompactingEngine(Protocol):
    """What a compaction asks of the Spark engine (``SparkEngine``, which calls it): its
    session, the updates of batches as one DataFrame, and whether Hadoop reaches the store."""

    @property
    def spark(self) -> Any: ...

    def updates_frame(
        self, shard: Shard, state: ShardState, refs: Sequence[BatchRef], schema: pa.Schema
    ) -> Any: ...

    def hadoop_reaches(self, blob: BlobStore) -> bool: ...


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


def compaction_parallelism(spark: Any) -> int:
    """Cores Spark runs tasks on (a Spark Connect session does not say: its shuffle default)."""
    try:
        return int(spark.sparkContext.defaultParallelism)
    except Exception:  # Spark Connect has no SparkContext here
        return int(spark.conf.get("spark.sql.shuffle.partitions", "2"))


def compact(
    engine: CompactingEngine, shard: Shard, *, fence: Fence | None = None
) -> CompactionResult:
    """``Shard.compact`` on Spark: every batch migrated to the latest schema, times below
    since advanced, consolidated into :func:`partitions_for` partitions (one batch each),
    then committed with ``Shard.commit_compaction``.

    A flat schema is sorted in Spark and written by Spark's own Parquet writer (no row goes
    through Python; the batches are marked ``spark_types`` and readers restore the types). A
    nested one, or any on a store Spark's file system cannot reach (an object store without
    the S3A classes: :meth:`SparkEngine.hadoop_reaches`), is written by the Python workers, a
    row group at a time. Outputs of a failed
    job, and what Spark's writer leaves beside them, are orphans the garbage collection
    removes.
    """

    state, inputs = compaction_inputs(shard)
    if not inputs:
        return CompactionResult(True, 0, None, state)
    # Leased while the executors write: the garbage collection leaves a leased shard alone
    # (files written before the commit are unreferenced until it), and `since` stays put.
    with shard.lease(holder=f"spark-compaction-{os.getpid()}", as_of=state.since):
        return _compact(engine, shard, state, inputs, fence)


def _compact(
    engine: CompactingEngine,
    shard: Shard,
    state: ShardState,
    inputs: list[BatchRef],
    fence: Fence | None,
) -> CompactionResult:
    from pyspark.sql import functions as F

    target = state.live_schema
    frame = engine.updates_frame(shard, state, inputs, target)
    if state.since > 0:
        frame = frame.withColumn(TS, F.greatest(spark_col(TS), F.lit(state.since).cast("long")))
    sizes = {b.key: b.size for b in shard.blob.list_info(blob_prefix(shard.shard_id))}
    size = sum(sizes.get(ref.key(shard.shard_id), 0) for ref in inputs)
    parts = partitions_for(size, compaction_parallelism(engine.spark))
    frame = consolidate_frame(frame, target, parts)
    if is_sortable(target):  # sorted in Spark; the Python writer marks such batches ordered
        frame = frame.sortWithinPartitions(
            *[spark_col(n).asc_nulls_last() for n in [*target.names, TS]]
        )
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=PANDAS_WARNING, category=FutureWarning)
        try:
            if is_sortable(target) and engine.hadoop_reaches(shard.blob):
                outputs = _spark_written(frame, shard, state)
            else:  # nested, or a store only pyarrow reaches (an object store without S3A)
                outputs = _python_written(frame, shard, state)
        except spark_errors() as exc:
            raise_worker_error(exc)
            raise_resource_error(exc)
            raise SparkJobError.of(exc, f"compaction of shard {shard.shard_id}") from exc
    outputs.sort(key=lambda b: (b.lower, b.name))
    result = shard.commit_compaction(state, inputs, outputs, fence=fence)
    if result.applied:
        log.info(
            "spark_compacted",
            shard=shard.shard_id,
            inputs=len(inputs),
            outputs=len(outputs),
            rows=sum(b.rows for b in outputs),
            writer="spark" if outputs and outputs[0].spark_types else "python",
        )
    return result


def _spark_written(frame: Any, shard: Shard, state: ShardState) -> list[BatchRef]:
    """``frame`` written by Spark's Parquet writer into a new directory of the shard's blobs;
    the entries of its files, from their footers (the driver reads no row)."""
    prefix = blob_prefix(shard.shard_id)
    directory = f"{prefix}/c-{uuid.uuid4().hex}"
    frame.write.parquet(spark_path(shard.blob, directory))
    out = []
    for info in shard.blob.list_info(directory):
        base = info.key.rsplit("/", 1)[-1]
        if not base.endswith(".parquet") or base.startswith(("_", ".")):
            continue  # _SUCCESS, checksums: unreferenced, collected later
        path = shard.blob.path(info.key)
        meta = pq.read_metadata(path, filesystem=shard.blob.filesystem)
        if not meta.num_rows:
            continue
        read = functools.partial(
            pq.read_table, path, columns=[TS], filesystem=shard.blob.filesystem
        )
        lower, upper = _time_bounds(meta, read)
        name = info.key[len(prefix) + 1 : -len(".parquet")]
        out.append(
            BatchRef(
                name,
                state.schema_id,
                meta.num_rows,
                lower,
                upper + 1,
                ordered=True,
                consolidated=True,  # groups never straddle partitions
                spark_types=True,
            )
        )
    return out


def _time_bounds(meta: pq.FileMetaData, read: Any) -> tuple[int, int]:
    """The least and greatest ``_ts`` of a file: its row groups' statistics, else its column."""
    index = meta.schema.to_arrow_schema().get_field_index(TS)
    lows, highs = [], []
    for group in range(meta.num_row_groups):
        stats = meta.row_group(group).column(index).statistics
        if stats is None or not stats.has_min_max:
            bounds = pc.min_max(read().column(TS))
            return int(bounds["min"].as_py()), int(bounds["max"].as_py())
        lows.append(int(stats.min))
        highs.append(int(stats.max))
    return min(lows), max(highs)


def _python_written(frame: Any, shard: Shard, state: ShardState) -> list[BatchRef]:
    """``frame`` written by the Python workers (one batch per partition, a row group at a
    time); their entries."""
    writer = functools.partial(
        write_partition, shard.blob.located_uri, shard.shard_id, update_schema(state.live_schema)
    )
    return [
        BatchRef(
            r["name"],
            state.schema_id,
            r["rows"],
            r["lower"],
            r["upper"],
            ordered=r["ordered"],
            consolidated=True,
        )
        for r in frame.mapInArrow(writer, WRITTEN_SCHEMA).collect()
    ]
