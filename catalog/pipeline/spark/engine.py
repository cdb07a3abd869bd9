"""The Spark engine: the pipeline's jobs as DataFrames over the shard's Parquet blobs."""

from __future__ import annotations

import contextlib
import functools
import math
import os
import warnings
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import attrs
import pyarrow as pa
import structlog

from catalog.blob import BlobStore
from catalog.consensus import Fence
from catalog.errors import (
    ShardError,
)
from catalog.pipeline.output import STREAM_ROWS, SnapshotWritten, finish, open_output
from catalog.pipeline.pacing import Pacer
from catalog.pipeline.rewrite import CopyPlan, SourceMoved, copy_shard
from catalog.pipeline.spark.compaction import compact, compaction_parallelism
from catalog.pipeline.spark.config import size_bytes
from catalog.pipeline.spark.expressions import (
    consolidate_frame,
    migrate_expression,
    null_of,
    spark_col,
    spark_path,
)
from catalog.pipeline.spark.failures import SparkJobError, raise_resource_error, spark_errors
from catalog.pipeline.spark.progress import JobProgress
from catalog.pipeline.spark.session import PANDAS_WARNING, SparkSessionProvider, spark_provider
from catalog.pipeline.spark.types import read_schema, spark_schema
from catalog.pipeline.spark.workers import (
    CHUNK_SCHEMA,
    PARTS_SCHEMA,
    SCAN_KEYS_SCHEMA,
    WRITTEN_SCHEMA,
    ipc_partition,
    pickle_transforms,
    raise_worker_error,
    scan_partition,
    transform_partition,
    transform_write_partition,
    write_partition,
    write_snapshot_partition,
)
from catalog.pipeline.transforms import Transform
from catalog.pipeline.updates import copy_schema, estimated_bytes, overlaps
from catalog.retry import Retry
from catalog.schema import partner_child
from catalog.schema.restore import restore_table
from catalog.schema.walk import as_data_type
from catalog.shard import (
    DIFF,
    TS,
    BatchRef,
    CompactionResult,
    Shard,
    ShardState,
    update_schema,
)
from catalog.shard.read import by_writer, snapshot_reader, snapshot_time

log = structlog.get_logger(__name__)


# A Spark snapshot whose blobs vanished under it (compaction) re-reads this often.
_READ_ATTEMPTS = 5


@attrs.define
class SparkEngine:
    """The PySpark engine: the same jobs as DataFrames over the same Parquet blobs."""

    provider: SparkSessionProvider = attrs.field(factory=spark_provider)
    name: str = "spark"
    _s3a: bool | None = attrs.field(default=None, init=False)

    @property
    def spark(self) -> Any:
        return self.provider.session()

    def hadoop_reaches(self, blob: BlobStore) -> bool:
        """Whether Spark's own (Hadoop) file system opens ``blob``'s files. An ``s3://`` store
        needs the S3A classes (hadoop-aws), which the pyspark wheel lacks; without them (or on
        Spark Connect, which cannot tell) the executors read and write through pyarrow."""
        if blob.filesystem.type_name != "s3":
            return True
        if self._s3a is None:
            try:
                jvm = self.spark.sparkContext._jvm
                jvm.java.lang.Class.forName("org.apache.hadoop.fs.s3a.S3AFileSystem")
                self._s3a = True
            except Exception:  # no class, or Spark Connect (no JVM here)
                self._s3a = False
        return self._s3a

    def _scan(self, blob: BlobStore, keys: list[str], struct: Any) -> Any:
        """The Parquet files ``keys`` of ``blob`` as a DataFrame of ``struct``: Spark's own
        scan, or pyarrow on the executors when Spark's file system cannot reach the store."""
        if self.hadoop_reaches(blob):
            try:
                return self.spark.read.schema(struct).parquet(*[spark_path(blob, k) for k in keys])
            except spark_errors() as exc:  # the scan's analysis opens the file system
                raise_resource_error(exc)
                raise
        parts = max(1, min(len(keys), compaction_parallelism(self.spark)))
        listing = self.spark.createDataFrame([(k,) for k in keys], SCAN_KEYS_SCHEMA)
        reader = functools.partial(scan_partition, blob.located_uri, _spark_arrow_schema(struct))
        return listing.repartition(parts).mapInArrow(reader, struct)

    # -- reads ------------------------------------------------------------------------------

    def updates_frame(
        self, shard: Shard, state: ShardState, refs: Sequence[BatchRef], schema: pa.Schema
    ) -> Any:
        """The updates of batches ``refs`` as one DataFrame in ``schema`` (+ ``_ts``, ``_diff``).

        One Parquet scan per schema id, each migrated lazily with :func:`migrate_expression`,
        unioned by name. ``_ts`` is a long.
        """

        frames = []
        for (schema_id, spark_written), group in sorted(by_writer(refs).items()):
            live = state.live(schema_id)
            keys = [r.key(shard.shard_id) for r in group]
            scan = self._scan(shard.blob, keys, read_schema(live, spark_written))
            columns = []
            for field in schema:
                declared = partner_child(as_data_type(live), field)
                if declared is None:
                    columns.append(null_of(field.type, field.name).alias(field.name))
                else:
                    expr = migrate_expression(
                        spark_col(declared.name), declared.type, field.type, field.name
                    )
                    columns.append(expr.alias(field.name))
            columns += [spark_col(TS).cast("long").alias(TS), spark_col(DIFF)]
            frames.append(scan.select(*columns))
        if not frames:
            return self.spark.createDataFrame([], spark_schema(schema))
        return functools.reduce(lambda a, b: a.unionByName(b), frames)

    def snapshot_frame(
        self,
        shard: Shard,
        as_of: int | None = None,
        reader_schema: pa.Schema | None = None,
        *,
        state: ShardState | None = None,
    ) -> tuple[Any, pa.Schema]:
        """The shard as of ``as_of`` as a lazy DataFrame, with the schema of its data columns.

        Same checks as ``Shard.snapshot``: reader fencing (:func:`check_reader`), ``as_of``
        within ``[since, upper)``, finalized shards refused. The DataFrame reads blobs when it
        runs: hold ``shard.lease()`` meanwhile to keep finalization away.
        """
        from pyspark.sql import functions as F

        state = shard.state() if state is None else state
        reader = snapshot_reader(state, reader_schema)
        time = snapshot_time(state, as_of)
        if time is None:
            return self.spark.createDataFrame([], spark_schema(reader)), reader
        refs = [b for b in shard.batches(state) if b.lower <= time]
        frame = self.updates_frame(shard, state, refs, reader)
        frame = frame.where(spark_col(TS) <= time).withColumn(TS, F.lit(time).cast("long"))
        return consolidate_frame(frame, reader), reader

    def snapshot(
        self,
        shard: Shard,
        as_of: int | None = None,
        reader_schema: pa.Schema | None = None,
        *,
        limit: int | None = None,
    ) -> pa.Table:
        """``Shard.snapshot`` computed by Spark: the same rows and exactly the same schema,
        collected into this process (``limit`` is applied by Spark, before the collect)."""
        state = shard.state()

        def attempt() -> pa.Table:
            frame, reader = self.snapshot_frame(shard, as_of, reader_schema, state=state)
            frame = frame if limit is None else frame.limit(limit)
            return restore_table(self._collect(frame), update_schema(reader))

        def moved(exc: Exception) -> bool:
            """Blobs vanished under the read: retry on the newer state, if there is one."""
            nonlocal state
            current = shard.state()
            if current.revision == state.revision:
                return False
            log.info("spark_snapshot_state_moved", shard=shard.shard_id, error=str(exc)[:200])
            state = current
            return True

        retry = Retry(
            retryable=spark_errors(),
            max_attempts=_READ_ATTEMPTS,
            deadline=None,
            base_delay=0.0,
            should_retry=moved,
        )
        try:
            return retry(attempt)
        except spark_errors() as exc:
            if retry.retries < _READ_ATTEMPTS:
                raise SparkJobError.of(exc, f"snapshot of shard {shard.shard_id}") from exc
            raise ShardError(
                f"shard {shard.shard_id} kept changing under a Spark snapshot",
                shard_id=shard.shard_id,
                reason="contended",
            ) from exc

    def _collect(self, frame: Any) -> pa.Table:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=PANDAS_WARNING, category=FutureWarning)
            try:
                return frame.toArrow()
            except spark_errors() as exc:
                raise_worker_error(exc)
                raise_resource_error(exc)
                raise

    def snapshot_chunks(
        self,
        shard: Shard,
        as_of: int | None = None,
        reader_schema: pa.Schema | None = None,
        *,
        limit: int | None = None,
        chunk_rows: int = STREAM_ROWS,
    ) -> Iterator[pa.Table]:
        """The snapshot streamed here in exact types: executors encode each partition as Arrow
        IPC chunks and ``toLocalIterator`` fetches one partition at a time, so neither
        ``spark.driver.maxResultSize`` nor this process bounds the whole result. The shard is
        leased meanwhile (no finalization, and no collection of the blobs being read)."""
        with shard.lease(holder=f"read-stream-{os.getpid()}", as_of=as_of):
            state = shard.state()
            frame, reader = self.snapshot_frame(shard, as_of, reader_schema, state=state)
            frame = frame if limit is None else frame.limit(limit)
            # A partition's chunks are one job's result: keep each well under the limit.
            limit_bytes = size_bytes(self.spark.conf.get("spark.driver.maxResultSize", "1g"))
            size = estimated_bytes(state)
            if limit is not None and state.row_count > limit:
                size = size * limit // state.row_count
            parts = math.ceil(4 * size / limit_bytes) if limit_bytes else 1
            if parts > 1:
                frame = frame.repartition(parts)
            encode = functools.partial(ipc_partition, update_schema(reader), chunk_rows)
            try:
                for row in frame.mapInArrow(encode, CHUNK_SCHEMA).toLocalIterator():
                    yield pa.ipc.open_stream(row["chunk"]).read_all()
            except spark_errors() as exc:
                raise_worker_error(exc)
                raise_resource_error(exc)
                raise SparkJobError.of(exc, f"snapshot of shard {shard.shard_id}") from exc

    def write_snapshot(
        self,
        shard: Shard,
        output: str,
        as_of: int | None = None,
        reader_schema: pa.Schema | None = None,
    ) -> SnapshotWritten:
        """The snapshot written by the executors as Parquet parts in the new directory
        ``output`` (catalog.pipeline.output): no row passes this process."""
        store = open_output(output)
        with shard.lease(holder=f"read-output-{os.getpid()}", as_of=as_of):
            frame, reader = self.snapshot_frame(shard, as_of, reader_schema)
            writer = functools.partial(
                write_snapshot_partition, store.located_uri, update_schema(reader)
            )
            try:
                parts = frame.mapInArrow(writer, PARTS_SCHEMA).collect()
            except spark_errors() as exc:
                raise_resource_error(exc)
                raise SparkJobError.of(exc, f"snapshot of shard {shard.shard_id}") from exc
        return finish(store, output, [p["name"] for p in parts], sum(p["rows"] for p in parts))

    # -- compaction -------------------------------------------------------------------------

    def compact(self, shard: Shard, *, fence: Fence | None = None) -> CompactionResult:
        """``Shard.compact`` on Spark (:func:`catalog.pipeline.spark.compaction.compact`)."""
        return compact(self, shard, fence=fence)

    # -- rewrite ----------------------------------------------------------------------------

    def copy_transformed(
        self,
        source: Shard,
        target: Shard,
        transforms: Sequence[Transform],
        new_schema: pa.Schema,
        *,
        fence: Fence | None,
        pacer: Pacer | None = None,
    ) -> int:
        """The REWRITE copy on the executors: they read the source's updates in
        ``[lower, upper)``, run the transforms and write the target's batch files; the driver
        commits their references in one compare-and-append. The ``by_diff`` delta (transformed
        source minus target, consolidated) runs on Spark too. No row passes the driver.

        ``pacer``: the rows to copy are expected before the job; while it runs its tasks are
        reported (catalog.pipeline.spark.progress), and the rest counted when it ends (a pause
        or a throttle holds the step between jobs, never inside one)."""
        payload = pickle_transforms(transforms)

        def produce(plan: CopyPlan) -> list[BatchRef]:
            rows = sum(
                b.rows
                for b in source.batches(plan.source)
                if overlaps(b, 0 if plan.by_diff else plan.lower, plan.upper)
            )
            if pacer is not None and plan.by_diff:  # a slice counts on from the copy's rows
                pacer.expect(rows)
            base = 0 if pacer is None else pacer.rows_done
            target_schema = plan.target.live_schema
            if not target_schema.equals(new_schema):
                raise ShardError(
                    f"shard {target.shard_id} does not hold the release's new schema",
                    reason="target-schema",
                    shard_id=target.shard_id,
                )
            # Only the action is watched: building the frames runs jobs of its own (listing the
            # files) that say nothing of the copy's rows.
            watched = (
                JobProgress(self.spark, pacer, rows, base).running
                if pacer is not None
                else contextlib.nullcontext
            )
            try:
                if plan.by_diff:
                    written = self._diff_delta_written(
                        source, target, plan, payload, new_schema, watched
                    )
                else:
                    written = self._delta_written(
                        source, target, plan, payload, new_schema, watched
                    )
            except spark_errors() as exc:
                if source.state().revision != plan.source.revision:
                    raise SourceMoved() from exc
                raise_worker_error(exc)
                raise_resource_error(exc)
                raise SparkJobError.of(exc, f"copy into shard {target.shard_id}") from exc
            schema_id = plan.target.schema_id
            refs = [
                BatchRef(r["name"], schema_id, r["rows"], r["lower"], r["upper"]) for r in written
            ]
            if pacer is not None:
                pacer.advance(max(0, base + rows - pacer.rows_done))
            return sorted(refs, key=lambda b: (b.lower, b.name))

        # A slice of fewer batches than cores would leave cores idle: a batch is a task.
        cores = compaction_parallelism(self.spark)
        return copy_shard(source, target, fence, produce, self.name, pacer, slice_batches=cores)

    def _updates_between(self, source: Shard, plan: CopyPlan, lower: int) -> Any:
        """The source's updates with ``_ts`` in ``[lower, plan.upper)``, in its live schema."""
        refs = [b for b in source.batches(plan.source) if overlaps(b, lower, plan.upper)]
        frame = self.updates_frame(source, plan.source, refs, plan.source.live_schema)
        return frame.where((spark_col(TS) >= lower) & (spark_col(TS) < plan.upper))

    def _delta_written(
        self,
        source: Shard,
        target: Shard,
        plan: CopyPlan,
        payload: bytes,
        new_schema: pa.Schema,
        watched: Callable[[], contextlib.AbstractContextManager[Any]],
    ) -> list[Any]:
        frame = self._updates_between(source, plan, plan.lower)
        body = functools.partial(
            transform_write_partition, payload, copy_schema(plan.source.live_schema),
            new_schema, target.blob.located_uri, target.shard_id,
        )  # fmt: skip
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=PANDAS_WARNING, category=FutureWarning)
            written = frame.mapInArrow(body, WRITTEN_SCHEMA)
            with watched():
                return list(written.collect())

    def _diff_delta_written(
        self,
        source: Shard,
        target: Shard,
        plan: CopyPlan,
        payload: bytes,
        new_schema: pa.Schema,
        watched: Callable[[], contextlib.AbstractContextManager[Any]],
    ) -> list[Any]:
        """``transform(source) - target`` at time ``upper - 1``, consolidated (see
        ``CopyPlan.by_diff``), written by the executors."""
        from pyspark.sql import functions as F

        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message=PANDAS_WARNING, category=FutureWarning)
            spark_out = spark_schema(new_schema)
            body = functools.partial(
                transform_partition, payload, copy_schema(plan.source.live_schema),
                new_schema, _spark_arrow_schema(spark_out),
            )  # fmt: skip
            full = self._updates_between(source, plan, 0).mapInArrow(body, spark_out)
            held_refs = [b for b in target.batches(plan.target) if b.lower < plan.lower]
            held = self.updates_frame(target, plan.target, held_refs, new_schema)
            held = held.where(spark_col(TS) < plan.lower).withColumn(DIFF, -spark_col(DIFF))
            both = full.unionByName(held).withColumn(TS, F.lit(plan.upper - 1).cast("long"))
            delta = consolidate_frame(both, new_schema)
            writer = functools.partial(
                write_partition, target.blob.located_uri, target.shard_id, update_schema(new_schema)
            )
            written = delta.mapInArrow(writer, WRITTEN_SCHEMA)
            with watched():
                return list(written.collect())


def _spark_arrow_schema(struct: Any) -> pa.Schema:
    """The Arrow schema Spark expects from mapInArrow for Spark schema ``struct``."""
    from pyspark.sql.pandas.types import to_arrow_schema

    return to_arrow_schema(struct, timezone="UTC")
